package replay

import (
	"context"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// BenchmarkReplay replays whole workloads through engine + Runner + sim:
// trace=itp04 is the 15,802-job ITP cluster04 trace on 64 nodes x 8 GPUs
// (the performance target: policy=easy under 10 s, goal 2 s), trace=nasa
// the 18,066 replayable jobs of the NASA iPSC log on 16 x 8,
// trace=synthetic the default workload of `berth replay`, trace=synthetic-mig
// its mix with fractional jobs on MIG nodes (DefaultSyntheticMIG), and
// trace=openb the openb pods in time on the openb node list with GPUs
// shared on demand. Conservative backfill on the whole ITP trace takes
// minutes and is left out, as it is on synthetic-mig (tens of seconds: the
// engine's reservation timeline copies the MIG pool per shared release).
// Metrics: jobs/s replayed, utilization (in GPU milli), mean wait, and for
// fractional workloads the MIG changes applied and share binds.
func BenchmarkReplay(b *testing.B) {
	type wl struct {
		name     string
		jobs     func(b *testing.B) []workload.Job
		cluster  Cluster
		policies []string
		spec     func(b *testing.B) topo.Spec // nil: cluster
	}
	migJobs, migSpec, err := SyntheticMIG(DefaultSyntheticMIG())
	if err != nil {
		b.Fatal(err)
	}
	wls := []wl{
		{"itp04", func(b *testing.B) []workload.Job { return replayTrace(b, workload.KindITP) },
			Cluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}, []string{"fifo", "easy", "fairshare"}, nil},
		{"nasa", func(b *testing.B) []workload.Job { return replayTrace(b, workload.KindSWF) },
			Cluster{Nodes: 16, GPUsPerNode: 8, Racks: 2}, []string{"fifo", "easy", "conservative", "fairshare"}, nil},
		{"synthetic", func(b *testing.B) []workload.Job { return replaySynthetic(b, 2000, 512) },
			Cluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}, DefaultPolicies(), nil},
		{"synthetic-mig", func(*testing.B) []workload.Job { return migJobs }, Cluster{},
			[]string{"fifo", "easy", "fairshare"}, func(*testing.B) topo.Spec { return migSpec }},
		{"openb", func(b *testing.B) []workload.Job { j, _ := replayOpenb(b); return j }, Cluster{},
			[]string{"easy"}, func(b *testing.B) topo.Spec { _, sp := replayOpenb(b); return sp }},
	}
	benchmarkOverload(b)
	for _, w := range wls {
		for _, p := range w.policies {
			b.Run("trace="+w.name+"/policy="+p, func(b *testing.B) {
				jobs := w.jobs(b)
				cfg := Config{Workload: w.name, Jobs: jobs, Cluster: w.cluster, Policy: p, EstimateFactor: 1}
				if w.spec != nil {
					cfg.Spec = w.spec(b)
				}
				b.ReportAllocs()
				var r Result
				for b.Loop() {
					var err error
					if r, err = Run(context.Background(), cfg); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(r.Result.Utilization, "util")
				b.ReportMetric(r.Result.AvgWait.Seconds(), "avg-wait-s")
				if r.Fractional > 0 {
					b.ReportMetric(float64(r.Sim.MIGApplied), "mig-changes")
					b.ReportMetric(float64(r.Sim.ShareBinds), "share-binds")
				}
			})
		}
	}
}
