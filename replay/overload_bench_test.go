package replay

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// benchmarkOverload is BenchmarkReplay's overload case (issue 18, Build
// 6): the itp04 trace with EASY backfill on 2 nodes, where the backlog
// grows to 15,000 jobs, against the same trace on 64 nodes. The cost per
// job (ns/job) should stay within 2x between them. It does since cycles
// stop their walk once nothing more can start (engine.Config.LazyPending,
// which replays turn on): before, every cycle walked the whole backlog
// and the whole trace took over 20 minutes on 2 nodes (docs/scale.md).
//
// By default it replays the first 3,000 jobs (seconds; hack/test.sh runs
// every benchmark once); BERTH_OVERLOAD_JOBS=N replays the first N, and
// BERTH_OVERLOAD_JOBS=all the whole trace (about a second each).
func benchmarkOverload(b *testing.B) {
	jobs := replayTrace(b, "itp")
	n := 3000
	switch v := os.Getenv("BERTH_OVERLOAD_JOBS"); v {
	case "":
	case "all":
		n = len(jobs)
	default:
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("BERTH_OVERLOAD_JOBS=%q: want a positive count or all", v)
		}
	}
	jobs = jobs[:min(n, len(jobs))]
	for _, nodes := range []int{2, 64} {
		b.Run(fmt.Sprintf("trace=itp04/nodes=%d", nodes), func(b *testing.B) {
			racks := 1
			if nodes%8 == 0 {
				racks = nodes / 8
			}
			cfg := Config{Workload: "itp04", Jobs: jobs, Cluster: Cluster{Nodes: nodes, GPUsPerNode: 8, Racks: racks}, Policy: "easy", EstimateFactor: 1}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(context.Background(), cfg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(jobs)*b.N), "ns/job")
			b.ReportMetric(float64(len(jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
