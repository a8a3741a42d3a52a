package benchmarks

import (
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// BenchmarkLazyStatuses measures what lazy pending statuses (the
// engine's default; engine.Config.EagerPending off) cost when a reader
// asks, on BenchmarkCycle's B12K with 100,000 pending jobs: each
// iteration is one cycle (a running job ends, the clock moves one
// second, Step, Ready, Advance: ms/cycle), then the status of one job the
// walk did not reach, the last in the pending sets
// (Engine.PendingStatuses: ms/one-status), then every status
// (Engine.PendingAll, what the Runner computes for its Observe readers:
// ms/all-statuses). walked/cycle and unwalked/cycle count the jobs the
// walk reached and left. BenchmarkCycle with BERTH_FULL_WALK=1 is the
// eager cycle to compare with (docs/scale.md, "Lazy by default").
func BenchmarkLazyStatuses(b *testing.B) {
	b.Run("cluster=B12K/pending=100000", func(b *testing.B) {
		e, _, jobs := engineBenchSetup(b, B12K(), engineBenchOpts{pending: 100000, queues: 200, lazy: true})
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
		var cycle, one, all time.Duration
		walked, unwalked := 0, 0
		for b.Loop() {
			now = now.Add(time.Second)
			t0 := time.Now()
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
			t1 := time.Now()
			walked += len(rd.Pending)
			unwalked += rd.Unwalked
			var last string
			e.View().EachPending(func(j *queue.Job) bool { last = j.ID; return true })
			t2 := time.Now()
			if sts, ok := e.PendingStatuses(last); !ok || len(sts) != 1 {
				b.Fatalf("PendingStatuses(%s) = %v, %v", last, sts, ok)
			}
			t3 := time.Now()
			if all, ok := e.PendingAll(); !ok || len(all) != len(rd.Pending)+rd.Unwalked {
				b.Fatalf("PendingAll: %d statuses, %v; want %d", len(all), ok, len(rd.Pending)+rd.Unwalked)
			}
			t4 := time.Now()
			cycle += t1.Sub(t0)
			one += t3.Sub(t2)
			all += t4.Sub(t3)
			track(rd)
		}
		n := float64(b.N)
		b.ReportMetric(float64(cycle.Nanoseconds())/1e6/n, "ms/cycle")
		b.ReportMetric(float64(one.Nanoseconds())/1e6/n, "ms/one-status")
		b.ReportMetric(float64(all.Nanoseconds())/1e6/n, "ms/all-statuses")
		b.ReportMetric(float64(walked)/n, "walked/cycle")
		b.ReportMetric(float64(unwalked)/n, "unwalked/cycle")
	})
}
