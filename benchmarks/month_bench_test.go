package benchmarks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/workload"
)

// BenchmarkMonth replays the standard month's jobs (MonthConfig: the same
// 3,414,000 jobs, sizes, runtimes and queues) on B12K with EASY backfill,
// as BenchmarkReplay does, at a higher offered load than the month's 0.9:
// load=95 and load=120 set the generator's Load knob to 0.95 and 1.2,
// which only compresses the arrivals (the jobs of 30 days at 0.9 arrive
// in 28.4 days at 0.95, in 22.5 days at 1.2). The month at 0.9 never
// queues (about zero wait); at 0.95 jobs wait, and at 1.2 the backlog
// grows until the arrivals stop, then drains.
//
// It reports jobs, cycles (engine cycles run), mean-backlog (pending
// jobs, submitted and not started, time-weighted over the replay) and
// max-backlog (the most a cycle saw), wall-s (the replay's wall time; the
// jobs are generated as the replay reads them, workload.SyntheticJobs, so
// it includes their generation), peak-heap-MiB (the largest live heap,
// HeapInuse's equivalent in runtime/metrics, sampled every 10 ms during
// the replay), util and avg-wait-s.
//
// BERTH_MONTH_HEAPPROFILE=file writes a heap profile of the live heap
// when the last job has finished (before the metrics are computed).
//
// Like BenchmarkReplay it runs only when BERTH_MONTH_DAYS is set
// (BERTH_MONTH_DAYS=30 is the month, a smaller value the jobs of its first
// days at the same rate), so the one-pass benchmark run of hack/test.sh
// skips it:
//
//	BERTH_MONTH_DAYS=30 go test ./benchmarks -run '^$' -bench 'BenchmarkMonth' -benchtime 1x -timeout 2h
func BenchmarkMonth(b *testing.B) {
	for _, load := range []int{95, 120} {
		b.Run(fmt.Sprintf("load=%d/cluster=B12K", load), func(b *testing.B) { monthBench(b, float64(load)/100) })
	}
}

func monthBench(b *testing.B, load float64) {
	mc, days := monthFromEnv(b)
	mc.Load = load
	// The jobs are generated as the replay reads them (three passes over
	// the seeded streams), not held: a month is 3.4 million jobs.
	gen, err := workload.NewSyntheticJobs(mc)
	if err != nil {
		b.Fatal(err)
	}
	njobs := gen.Len()
	cfg := replay.Config{Workload: "month", Source: gen, Spec: B12K().Spec(), Policy: "easy", EstimateFactor: 1}
	if path := os.Getenv("BERTH_MONTH_HEAPPROFILE"); path != "" {
		// A heap profile of what is live when the last job has finished
		// (after a collection), before the metrics: the simulator's
		// records of every job are all there.
		done := false
		cfg.Progress = func(finished int) {
			if done || finished < njobs {
				return
			}
			done = true
			runtime.GC()
			f, err := os.Create(path)
			if err != nil {
				b.Error(err)
				return
			}
			defer f.Close()
			if err := pprof.WriteHeapProfile(f); err != nil {
				b.Error(err)
			}
		}
	}
	b.ReportAllocs()
	var r replay.Result
	peak := newHeapPeak()
	for b.Loop() {
		peak.start()
		r, err = replay.Run(context.Background(), cfg)
		peak.stop()
		if err != nil {
			b.Fatal(err)
		}
	}
	if len(r.Violations) > 0 {
		b.Fatalf("simulator violations: %v", r.Violations[0])
	}
	if r.Result.Finished != njobs {
		b.Fatalf("%d of %d jobs finished", r.Result.Finished, njobs)
	}
	b.ReportMetric(days, "days")
	b.ReportMetric(float64(njobs), "jobs")
	b.ReportMetric(float64(r.Cycles), "cycles")
	b.ReportMetric(r.MeanPending, "mean-backlog")
	b.ReportMetric(float64(r.MaxPending), "max-backlog")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "wall-s")
	b.ReportMetric(float64(peak.max)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(r.Result.Utilization, "util")
	b.ReportMetric(r.Result.AvgWait.Seconds(), "avg-wait-s")
}

// heapPeak samples the live heap (heap objects plus the unused part of
// in-use spans: runtime.MemStats.HeapInuse, without stopping the world)
// every 10 ms between start and stop, and keeps the largest value.
type heapPeak struct {
	max  uint64
	done chan struct{}
	wg   sync.WaitGroup
	s    []metrics.Sample
}

func newHeapPeak() *heapPeak {
	return &heapPeak{s: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}}
}

func (h *heapPeak) read() {
	metrics.Read(h.s)
	var n uint64
	for _, s := range h.s {
		if s.Value.Kind() == metrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	h.max = max(h.max, n)
}

func (h *heapPeak) start() {
	h.done = make(chan struct{})
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				h.read()
				return
			case <-t.C:
				h.read()
			}
		}
	}()
}

func (h *heapPeak) stop() {
	close(h.done)
	h.wg.Wait()
}

// monthFromEnv is the standard month's workload for the BERTH_MONTH_DAYS
// gate shared by the month benchmarks: it skips b when the variable is
// unset and fails it when the value is not a number of days in (0, 30].
func monthFromEnv(b *testing.B) (workload.SyntheticConfig, float64) {
	b.Helper()
	v := os.Getenv("BERTH_MONTH_DAYS")
	if v == "" {
		b.Skip("the month takes minutes and GiBs: set BERTH_MONTH_DAYS=30 (or fewer days) to run it")
	}
	days, err := strconv.ParseFloat(v, 64)
	if err != nil {
		b.Fatalf("BERTH_MONTH_DAYS=%q: %v", v, err)
	}
	mc, err := MonthConfig(days)
	if err != nil {
		b.Fatal(err)
	}
	return mc, days
}
