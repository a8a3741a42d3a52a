package benchmarks

import (
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/internal/cputime"
	"github.com/berthsched/berth/queue"
)

// BenchmarkLazyStatuses measures what lazy pending statuses (the
// engine's default; engine.Config.EagerPending off) save per cycle and
// cost when a reader asks, on BenchmarkCycle's B12K with 100,000 pending
// jobs. Each iteration is one cycle (a running job ends, the clock moves
// one second, Step, Ready, Advance), as in BenchmarkCycle. walk=lazy:
// the default; after each cycle, the status of one job the walk did not
// reach, the last in the pending sets (Engine.PendingStatuses), then
// every status (Engine.PendingAll, what the Runner computes for its
// readers). walk=eager: EagerPending, every job walked and explained in
// the cycle (BenchmarkCycle with BERTH_FULL_WALK=1). Metrics, per
// iteration: ms/cycle, ms/one-status and ms/all-statuses in wall time,
// and the same in process CPU time (cpu-ms/..., getrusage: on a loaded
// machine the wall time counts the waits for a core too); walked/cycle
// and unwalked/cycle count the jobs a walk reached and left.
func BenchmarkLazyStatuses(b *testing.B) {
	for _, lazy := range []bool{true, false} {
		name := "cluster=B12K/pending=100000/walk=lazy"
		if !lazy {
			name = "cluster=B12K/pending=100000/walk=eager"
		}
		b.Run(name, func(b *testing.B) { lazyStatusesBench(b, lazy) })
	}
}

func lazyStatusesBench(b *testing.B, lazy bool) {
	e, _, jobs := engineBenchSetup(b, B12K(), engineBenchOpts{pending: 100000, queues: 200, lazy: lazy})
	var ends []engineBenchEnd
	track := func(rd engine.Ready) {
		for _, bd := range rd.Binds {
			ends = append(ends, engineBenchEnd{rd.At.Add(jobs[bd.Job].RuntimeEstimate), bd.Job})
		}
		sortEnds(ends)
	}
	for id, j := range jobs {
		if len(id) > 4 && id[:4] == "run-" {
			ends = append(ends, engineBenchEnd{j.Submit.Add(j.RuntimeEstimate), id})
		}
	}
	rd := e.Ready()
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		b.Fatal(err)
	}
	track(rd)
	now := e.Now()
	var cycle, one, all, cpuCycle, cpuOne, cpuAll time.Duration
	walked, unwalked := 0, 0
	for b.Loop() {
		now = now.Add(time.Second)
		t0, c0 := time.Now(), cputime.Process()
		ev := engine.Tick(now)
		if len(ends) > 0 {
			ev = engine.Finished(now, ends[0].id)
			ends = ends[1:]
		}
		if err := e.Step(ev); err != nil {
			b.Fatal(err)
		}
		rd := e.Ready()
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			b.Fatal(err)
		}
		t1, c1 := time.Now(), cputime.Process()
		cycle += t1.Sub(t0)
		cpuCycle += c1 - c0
		walked += len(rd.Pending)
		unwalked += rd.Unwalked
		if lazy {
			var last string
			e.View().EachPending(func(j *queue.Job) bool { last = j.ID; return true })
			t2, c2 := time.Now(), cputime.Process()
			if sts, ok := e.PendingStatuses(last); !ok || len(sts) != 1 {
				b.Fatalf("PendingStatuses(%s) = %v, %v", last, sts, ok)
			}
			t3, c3 := time.Now(), cputime.Process()
			if all, ok := e.PendingAll(); !ok || len(all) != len(rd.Pending)+rd.Unwalked {
				b.Fatalf("PendingAll: %d statuses, %v; want %d", len(all), ok, len(rd.Pending)+rd.Unwalked)
			}
			t4, c4 := time.Now(), cputime.Process()
			one += t3.Sub(t2)
			all += t4.Sub(t3)
			cpuOne += c3 - c2
			cpuAll += c4 - c3
		}
		track(rd)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 / n }
	b.ReportMetric(ms(cycle), "ms/cycle")
	b.ReportMetric(ms(cpuCycle), "cpu-ms/cycle")
	if lazy {
		b.ReportMetric(ms(one), "ms/one-status")
		b.ReportMetric(ms(cpuOne), "cpu-ms/one-status")
		b.ReportMetric(ms(all), "ms/all-statuses")
		b.ReportMetric(ms(cpuAll), "cpu-ms/all-statuses")
	}
	b.ReportMetric(float64(walked)/n, "walked/cycle")
	b.ReportMetric(float64(unwalked)/n, "unwalked/cycle")
}
