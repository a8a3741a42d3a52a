//go:build !unix

package fgd

import "time"

// cpuTime is not measured here (zero).
func cpuTime() time.Duration { return 0 }
