//go:build !unix

package cputime

import "time"

// Process is not measured on this platform: zero.
func Process() time.Duration { return 0 }
