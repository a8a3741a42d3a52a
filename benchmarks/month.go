package benchmarks

import (
	"fmt"
	"math"

	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// MonthJobsPerDay is the arrival rate of the standard month: the jobs of
// ITP cluster04's size and runtime distributions (workload.ITPSizes,
// workload.ITPRuntimeQuantiles, untruncated) that offer B12K's 98,304 GPUs
// a load of 0.9 (about 3.03 GPUs x 33,900 s per job on average).
// TestMonthWorkload checks the arrival window it gives.
const MonthJobsPerDay = 113800

// MonthConfig returns the synthetic workload of the standard month, or of
// its first days at the same rate (days in (0, 30]; 30 is the month,
// 3,414,000 jobs): workload.Synthetic with seed 42 (its streams are the
// standard SplitMix64), B12K's GPUs, load 0.9, 64 queues with Zipf skew 1,
// exact estimates, and ITP cluster04's size and runtime distributions
// without the one-day cut of DefaultSynthetic (a month has room for the
// trace's two-week tail). Nothing is read from disk: the distributions
// are tables in package workload, so the month runs without the trace.
func MonthConfig(days float64) (workload.SyntheticConfig, error) {
	if math.IsNaN(days) || days <= 0 || days > 30 {
		return workload.SyntheticConfig{}, fmt.Errorf("benchmarks: month days must be in (0, 30], got %v", days)
	}
	sh := B12K()
	c := workload.DefaultSynthetic()
	c.Seed = 42
	c.Jobs = int(math.Round(days * MonthJobsPerDay))
	c.ClusterGPUs = sh.Fanout[0] * sh.Fanout[1] * sh.NodesPerLeaf * sh.GPUsPerNode
	c.Load = 0.9
	c.Queues = 64
	c.MaxRuntime = 0
	return c, nil
}

// Spec returns the topology of a shape (every GPU model "H100"), for
// replays that take a topo.Spec.
func (sh ClusterShape) Spec() topo.Spec {
	return topo.Uniform(sh.Levels, sh.Fanout, sh.NodesPerLeaf, sh.GPUsPerNode, "H100")
}
