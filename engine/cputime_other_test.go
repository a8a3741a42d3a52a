//go:build !unix

package engine_test

import "time"

// cpuTime is not measured here (zero).
func cpuTime() time.Duration { return 0 }
