package fgd

import (
	"context"
	"testing"
	"time"

	"github.com/berthsched/berth/internal/cputime"
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

// BenchmarkFGDEngineVsDirect runs each (policy, seed) of the five policies
// the engine takes and seeds 42 and 43 directly and then through the
// engine, in turn, one run at a time, and reports the process CPU time
// of the engine's runs over the direct runs' ("engine/direct-cpu": issue
// 34 asks at most 1.5 for the experiment's 50 runs). Taking turns run by
// run, on one goroutine, keeps a busy machine's drift out of the ratio
// better than two separate commands do (docs/scale.md).
// Run: go test -run XXX -bench BenchmarkFGDEngineVsDirect ./replay/fgd/
func BenchmarkFGDEngineVsDirect(b *testing.B) {
	p := benchPrepared(b)
	var direct, eng time.Duration
	for b.Loop() {
		for _, pol := range []string{"dotprod", "packing", "bestfit", "fgd", "berth"} {
			for seed := int64(42); seed <= 43; seed++ {
				c0 := cputime.Process()
				if _, err := runOne(context.Background(), p, pol, seed, 1.3); err != nil {
					b.Fatal(err)
				}
				c1 := cputime.Process()
				if _, err := runEngine(context.Background(), p, pol, seed, 1.3); err != nil {
					b.Fatal(err)
				}
				direct, eng = direct+c1-c0, eng+cputime.Process()-c1
			}
		}
	}
	if direct > 0 {
		b.ReportMetric(eng.Seconds()/direct.Seconds(), "engine/direct-cpu")
		b.ReportMetric(eng.Seconds()/float64(b.N), "engine-cpu-s/op")
		b.ReportMetric(direct.Seconds()/float64(b.N), "direct-cpu-s/op")
	}
}

// benchRuns times run on seed 42 of the openb trace, per policy.
func benchRuns(b *testing.B, run func(context.Context, *prepared, string, int64, float64) (Curve, error)) {
	p := benchPrepared(b)
	var err error
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

// benchPrepared is the openb trace prepared as Runs prepares it (the
// benchmark is skipped without the trace).
func benchPrepared(b *testing.B) *prepared {
	tracetest.Path(b, workload.OpenbPods)
	tr, err := LoadDefaultTrace()
	if err != nil {
		b.Fatal(err)
	}
	p, err := prepare(tr, 0.95)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
