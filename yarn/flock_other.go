//go:build !unix

package yarn

import (
	"errors"
	"os"
)

// errWouldBlock is flock's answer while another process holds the lock.
var errWouldBlock = errors.New("lock held by another process")

// flock fails: the exclude file's advisory lock needs a Unix system (the
// RM runs on one), and writing without it could lose another writer's
// entries.
func flock(*os.File) error {
	return errors.New("advisory file locks (flock) need a Unix system")
}

func funlock(*os.File) error { return nil }
