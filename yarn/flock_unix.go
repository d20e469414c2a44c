//go:build unix

package yarn

import (
	"errors"
	"os"
	"syscall"
)

// errWouldBlock is flock's answer while another process holds the lock.
var errWouldBlock = errors.New("lock held by another process")

// flock takes an exclusive advisory lock on f without waiting.
func flock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errWouldBlock
	}
	return err
}

// funlock releases it.
func funlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
