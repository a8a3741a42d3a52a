package benchmarks

import (
	"context"
	"testing"

	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/workload"
)

// BenchmarkReplay/trace=month/cluster=B12K replays the standard month
// (MonthConfig) on B12K (12,288 nodes of 8 GPUs, blocks of 12 racks of 16
// nodes) with EASY backfill through the engine, Runner and simulator, as
// `berth replay` does. The whole month is 3.4 million jobs: it needs
// several GiB of memory and takes minutes at best, so it runs only when
// BERTH_MONTH_DAYS is set: BERTH_MONTH_DAYS=30 is the month, a smaller
// value the first days at the same rate (e.g. 0.25 for six hours). The
// "benchmarks once" pass of hack/test.sh skips it.
//
//	BERTH_MONTH_DAYS=30 go test ./benchmarks -run '^$' -bench 'BenchmarkReplay/trace=month' -benchtime 1x -timeout 2h
func BenchmarkReplay(b *testing.B) {
	b.Run("trace=month/cluster=B12K", func(b *testing.B) {
		mc, days := monthFromEnv(b)
		jobs, err := workload.Synthetic(mc)
		if err != nil {
			b.Fatal(err)
		}
		cfg := replay.Config{Workload: "month", Jobs: jobs, Spec: B12K().Spec(), Policy: "easy", EstimateFactor: 1}
		b.ReportAllocs()
		var r replay.Result
		for b.Loop() {
			if r, err = replay.Run(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(days, "days")
		b.ReportMetric(float64(len(jobs)), "jobs")
		b.ReportMetric(float64(len(jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		b.ReportMetric(r.Result.Utilization, "util")
		b.ReportMetric(r.Result.AvgWait.Seconds(), "avg-wait-s")
		if len(r.Violations) > 0 {
			b.Fatalf("simulator violations: %v", r.Violations[0])
		}
	})
}
