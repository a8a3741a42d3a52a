package engine_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/internal/cputime"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// BenchmarkRestore measures a restore from a compacted state with live
// jobs live (running on a cluster of live/25 GPUs as far as it goes, the
// rest pending in three queues under DRS, with estimates, priorities and
// preemptible jobs): bytes is the state's JSON size, restore-s what one
// restore takes (JSON decode and engine.Restore from the snapshot) on
// the wall clock, and restore-cpu-s the CPU time of the process meanwhile
// (every thread, the garbage collector's included: what a loaded machine
// stretches the wall time from).
func BenchmarkRestore(b *testing.B) {
	for _, live := range []int{2000, 100000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			cfg, st := liveState(b, live)
			data, err := json.Marshal(st)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var took, cpu time.Duration
			for b.Loop() {
				t, c := time.Now(), cputime.Process()
				var back engine.State
				if err := json.Unmarshal(data, &back); err != nil {
					b.Fatal(err)
				}
				cfg.Policy = queue.DRS()
				e, err := engine.Restore(cfg, &back)
				if err != nil {
					b.Fatal(err)
				}
				took += time.Since(t)
				cpu += cputime.Process() - c
				if p, r := e.JobIDs(); len(p)+len(r) != live {
					b.Fatalf("%d pending + %d running jobs restored, want %d", len(p), len(r), live)
				}
			}
			b.ReportMetric(took.Seconds()/float64(b.N), "restore-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "restore-cpu-s")
			b.ReportMetric(float64(len(data)), "bytes")
		})
	}
}

// liveState builds an engine with live jobs and returns its config and
// compacted state.
func liveState(b *testing.B, live int) (engine.Config, *engine.State) {
	b.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := max(live/25/8, 4)
	cfg := engine.Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{max(nodes/16, 1)}, 16, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "a"}, {Name: "b"}, {Name: "c"}}},
		Start:   t0, Policy: queue.DRS(),
	}
	cfg.Backfill.Mode = engine.BackfillEASY
	cfg.Preemption.Priority = true
	e, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.EnableJournal(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(live), 3))
	now := t0
	for i := range live {
		run := time.Duration(10+rng.IntN(600)) * time.Minute
		j := &queue.Job{ID: fmt.Sprintf("j%06d", i), Queue: []string{"a", "b", "c"}[rng.IntN(3)], Submit: now,
			Priority: int32(rng.IntN(3)), RuntimeEstimate: run, RuntimeLimit: 2 * run,
			Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(2), GPUsPerMember: []int{1, 2, 4, 8}[rng.IntN(4)]}}}}
		if rng.IntN(2) == 0 {
			j.Preemptible, j.GracePeriod = true, 5*time.Minute
		}
		if err := e.Step(engine.Submitted(now, j)); err != nil {
			b.Fatal(err)
		}
		if i%(live/4) == live/4-1 {
			now = now.Add(time.Minute)
			if err := e.Step(engine.Tick(now)); err != nil {
				b.Fatal(err)
			}
			rd := e.Ready()
			if err := e.Advance(rd, engine.Outcome{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := e.Compact(); err != nil {
		b.Fatal(err)
	}
	st, err := e.Save()
	if err != nil {
		b.Fatal(err)
	}
	return cfg, st
}
