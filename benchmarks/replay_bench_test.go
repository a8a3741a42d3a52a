package benchmarks

import (
	"context"
	"testing"

	"github.com/berthsched/berth/benchmarks/workload"
)

// BenchmarkReplay replays whole workloads through engine + Runner + sim:
// trace=itp04 is the 15,802-job ITP cluster04 trace on 64 nodes x 8 GPUs
// (the performance target: policy=easy under 10 s, goal 2 s), trace=nasa
// the 18,066 replayable jobs of the NASA iPSC log on 16 x 8, and
// trace=synthetic the default workload of `berth replay`. Conservative
// backfill on the whole ITP trace takes minutes and is left out. Metrics:
// jobs/s replayed, utilization, mean wait.
func BenchmarkReplay(b *testing.B) {
	type wl struct {
		name     string
		jobs     func(b *testing.B) []workload.Job
		cluster  ReplayCluster
		policies []string
	}
	wls := []wl{
		{"itp04", func(b *testing.B) []workload.Job { return replayTrace(b, workload.ITPCluster04) },
			ReplayCluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}, []string{"fifo", "easy", "fairshare"}},
		{"nasa", func(b *testing.B) []workload.Job { return replayTrace(b, workload.SWFNASA) },
			ReplayCluster{Nodes: 16, GPUsPerNode: 8, Racks: 2}, []string{"fifo", "easy", "conservative", "fairshare"}},
		{"synthetic", func(b *testing.B) []workload.Job { return replaySynthetic(b, 2000, 512) },
			ReplayCluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}, DefaultReplayPolicies},
	}
	for _, w := range wls {
		for _, p := range w.policies {
			b.Run("trace="+w.name+"/policy="+p, func(b *testing.B) {
				jobs := w.jobs(b)
				cfg := ReplayConfig{Workload: w.name, Jobs: jobs, Cluster: w.cluster, Policy: p, EstimateFactor: 1}
				b.ReportAllocs()
				var r ReplayResult
				for b.Loop() {
					var err error
					if r, err = Replay(context.Background(), cfg); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(r.Result.Utilization, "util")
				b.ReportMetric(r.Result.AvgWait.Seconds(), "avg-wait-s")
			})
		}
	}
}
