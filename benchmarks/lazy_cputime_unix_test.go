//go:build unix

package benchmarks

import (
	"syscall"
	"time"
)

// lazyCPUTime is the process's user and system CPU time so far
// (BenchmarkLazyStatuses reports it beside wall time: on a loaded machine
// the wall time counts the waits for a core too).
func lazyCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
