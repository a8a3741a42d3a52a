//go:build unix

package cputime

import (
	"syscall"
	"time"
)

// Process is the process's user and system CPU time so far (every
// thread's, the garbage collector's included); zero if it cannot be read.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
