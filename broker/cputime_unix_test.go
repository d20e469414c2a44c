//go:build unix

package broker

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used,
// so benchmarks can report it beside wall time on a shared, busy machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
