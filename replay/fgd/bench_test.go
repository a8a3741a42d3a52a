package fgd

import (
	"context"
	"testing"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/workload"
)

// BenchmarkFGD replays one seed (10,866 pods on 1,213 nodes) per policy.
// Run: go test -run XXX -bench BenchmarkFGD ./replay/fgd/
func BenchmarkFGD(b *testing.B) { benchRuns(b, runOne) }

// BenchmarkFGDViaEngine is BenchmarkFGD through the engine (runEngine): one
// job submitted and one cycle per pod.
// Run: go test -run XXX -bench BenchmarkFGDViaEngine ./replay/fgd/
func BenchmarkFGDViaEngine(b *testing.B) { benchRuns(b, runEngine) }

// benchRuns times run on seed 42 of the openb trace, per policy.
func benchRuns(b *testing.B, run func(context.Context, *prepared, string, int64, float64) (Curve, error)) {
	tracetest.Path(b, workload.OpenbPods)
	tr, err := LoadDefaultTrace()
	if err != nil {
		b.Fatal(err)
	}
	p, err := prepare(tr, 0.95)
	if err != nil {
		b.Fatal(err)
	}
	for _, pol := range []string{"fgd", "berth", "bestfit"} {
		b.Run("policy="+pol, func(b *testing.B) {
			b.ReportAllocs()
			var cv Curve
			for b.Loop() {
				cv, err = run(context.Background(), p, pol, 42, 1.3)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(cv.Columns[130], "alloc%@130")
			b.ReportMetric(float64(cv.Pods)*float64(b.N)/b.Elapsed().Seconds(), "pods/s")
		})
	}
}
