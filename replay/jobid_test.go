package replay

import (
	"fmt"
	"testing"
)

// TestJobID checks the replay's job IDs against the format they had,
// "j%0*d".
func TestJobID(t *testing.T) {
	for _, width := range []int{0, 1, 2, 5, 7, 10, 23, 24, 30} {
		for _, i := range []int{0, 1, 9, 10, 99, 12345, 3413999, 1<<31 - 1, -1, -42} {
			if got, want := jobID(i, width), "j"+fmt.Sprintf("%0*d", width, i); got != want {
				t.Errorf("jobID(%d, %d) = %q, want %q", i, width, got, want)
			}
		}
	}
}
