//go:build !unix

package broker

import "time"

// processCPU is not measured on this platform.
func processCPU() time.Duration { return -1 }
