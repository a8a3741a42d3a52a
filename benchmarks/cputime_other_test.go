//go:build !unix

package benchmarks

import "time"

// cpuTime is not measured here (zero).
func cpuTime() time.Duration { return 0 }
