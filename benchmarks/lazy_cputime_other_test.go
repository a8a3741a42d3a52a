//go:build !unix

package benchmarks

import "time"

// lazyCPUTime is zero where getrusage is not available.
func lazyCPUTime() time.Duration { return 0 }
