package benchmarks

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/workload"
)

func TestStandardFills(t *testing.T) {
	for _, tc := range []struct {
		fill       Fill
		used, jobs int
		sum        string
	}{
		{Random60, 9836, 2661, "7faf8a5b6c63b8e1"},
		{Skewed60, 9834, 2631, "087ce5aac2fce05f"},
	} {
		c, err := B2K().Build()
		require.NoError(t, err)
		s := c.NewSnapshot()
		st, err := ApplyFill(s, B2K(), tc.fill)
		require.NoError(t, err)
		assert.Equal(t, tc.used, st.Used, tc.fill)
		assert.Equal(t, tc.jobs, st.Jobs, tc.fill)
		assert.Equal(t, tc.sum, fmt.Sprintf("%016x", st.Checksum), tc.fill)
		require.NoError(t, s.Verify())
	}
}

// TestMonthWorkload checks the month's rate on its first day: the
// arrival window of MonthJobsPerDay jobs is one day (Synthetic sets it
// from the jobs' GPU-seconds and the load), within the sampling error of
// the heavy-tailed runtimes.
func TestMonthWorkload(t *testing.T) {
	c, err := MonthConfig(1)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := workload.Synthetic(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != MonthJobsPerDay {
		t.Fatalf("%d jobs, want %d", len(jobs), MonthJobsPerDay)
	}
	if w := jobs[len(jobs)-1].Submit; w < 20*time.Hour || w > 28*time.Hour {
		t.Fatalf("one day's jobs arrive over %v", w)
	}
	for _, d := range []float64{0, -1, 31, math.NaN()} {
		if _, err := MonthConfig(d); err == nil {
			t.Fatalf("MonthConfig(%v) accepted", d)
		}
	}
}
