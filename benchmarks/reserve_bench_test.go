package benchmarks

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// BenchmarkReserve times conservative backfill planning exact
// reservations from scratch: B2K after random60 (as BenchmarkCycle books
// it), 1,000 pending jobs of 24 or 32 whole nodes that must share a
// block (more than any block has free, so none starts), strict priority,
// conservative backfill with depth 1,000. Each timed cycle follows one
// running job finishing (so no walk is resumed) and plans every
// reservation again on the timeline; reservations/cycle reports how many
// it made (the jobs the timeline can place before the jobs it cannot
// bound are all of them).
func BenchmarkReserve(b *testing.B) {
	b.Run("cluster=B2K/pending=1000", func(b *testing.B) {
		e, jobs := reserveBenchSetup(b)
		var ends []engineBenchEnd
		for id, j := range jobs {
			if j.RuntimeEstimate > 0 && id[:4] == "run-" {
				ends = append(ends, engineBenchEnd{j.Submit.Add(j.RuntimeEstimate), id})
			}
		}
		sortEnds(ends)
		reserveBench(b, e, func(i int, now time.Time) engine.Event { return engine.Finished(now, ends[i].id) })
	})
}

// BenchmarkReserveSteady is BenchmarkReserve's input in a steady state:
// each timed cycle follows the submission of a one-GPU job of ten
// minutes (so no walk is resumed, and nothing is freed), and every
// blocked job's reservation search runs again. There a search skips the
// probes its last one proved to fail, up to the first affected point
// (engine/resmemo.go).
func BenchmarkReserveSteady(b *testing.B) {
	b.Run("cluster=B2K/pending=1000", func(b *testing.B) {
		e, _ := reserveBenchSetup(b)
		reserveBench(b, e, func(i int, now time.Time) engine.Event { return engine.Submitted(now, smallJob(i, now)) })
	})
}

// reserveBenchSetup is BenchmarkReserve's engine and jobs.
func reserveBenchSetup(b *testing.B) (*engine.Engine, map[string]*queue.Job) {
	const pending = 1000
	e, _, jobs := engineBenchSetup(b, B2K(), engineBenchOpts{
		pending: pending, queues: 20, full: true, policy: queue.StrictPriority(),
		backfill: engine.BackfillConfig{Mode: engine.BackfillConservative, Depth: pending},
	})
	return e, jobs
}

// smallJob is BenchmarkReserveSteady's i-th submission.
func smallJob(i int, now time.Time) *queue.Job {
	return &queue.Job{ID: fmt.Sprintf("small-%06d", i), Queue: engineBenchQueue(i % 20), Submit: now,
		Request:         gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}},
		RuntimeEstimate: 10 * time.Minute, RuntimeLimit: 10 * time.Minute}
}

// reserveBench runs the first cycle, then times one cycle after each
// event (event(i, now): the i-th, one second after the last).
func reserveBench(b *testing.B, e *engine.Engine, event func(i int, now time.Time) engine.Event) {
	rd := e.Ready()
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		b.Fatal(err)
	}
	if len(rd.Binds) > 0 {
		b.Fatalf("%d blocked jobs started: not the standard work", len(rd.Binds))
	}
	now := e.Now()
	reserved, binds := 0, 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Second)
		if err := e.Step(event(i, now)); err != nil {
			b.Fatal(err)
		}
		rd := e.Ready()
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			b.Fatal(err)
		}
		reserved += len(rd.Reservations)
		binds += len(rd.Binds)
	}
	n := float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/n, "ms/cycle")
	b.ReportMetric(float64(reserved)/n, "reservations/cycle")
	b.ReportMetric(float64(binds)/n, "binds/cycle")
	b.ReportMetric(float64(len(e.View().Pending)), "pending")
}

// TestReserveCachesOff: on BenchmarkReserve's input, conservative
// backfill plans the same reservations with the engine's caches (the
// incremental hold-back of reservehold.go and the reservation memos of
// resmemo.go among them) as without, over the first cycle, three cycles
// after jobs end and three after submissions (BenchmarkReserveSteady's,
// where the memos spare probes).
func TestReserveCachesOff(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of reservation planning")
	}
	var runs [2][]string
	for k, off := range []bool{false, true} {
		e, _, jobs := engineBenchSetup(t, B2K(), engineBenchOpts{
			pending: 1000, queues: 20, full: true, policy: queue.StrictPriority(), noCaches: off,
			backfill: engine.BackfillConfig{Mode: engine.BackfillConservative, Depth: 1000},
		})
		var ends []engineBenchEnd
		for id, j := range jobs {
			if id[:4] == "run-" || id[:4] == "top-" {
				ends = append(ends, engineBenchEnd{j.Submit.Add(j.RuntimeEstimate), id})
			}
		}
		sortEnds(ends)
		for c := range 7 {
			switch {
			case c >= 4:
				now := e.Now().Add(time.Second)
				if err := e.Step(engine.Submitted(now, smallJob(c, now))); err != nil {
					t.Fatal(err)
				}
			case c > 0:
				if err := e.Step(engine.Finished(e.Now().Add(time.Second), ends[c-1].id)); err != nil {
					t.Fatal(err)
				}
			}
			rd := e.Ready()
			if err := e.Advance(rd, engine.Outcome{}); err != nil {
				t.Fatal(err)
			}
			for _, r := range rd.Reservations {
				runs[k] = append(runs[k], fmt.Sprintf("%d %s %v %v", c, r.Job, r.Start, r.GPUs.ToArray()))
			}
			for _, p := range rd.Pending {
				runs[k] = append(runs[k], fmt.Sprintf("%d %s %v %v", c, p.Job, p.Reason, p.Start))
			}
		}
	}
	if len(runs[0]) == 0 || !slices.Equal(runs[0], runs[1]) {
		t.Fatalf("reservations differ with caches off (%d vs %d lines)", len(runs[0]), len(runs[1]))
	}
}
