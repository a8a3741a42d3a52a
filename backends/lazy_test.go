package backends_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// TestRunnerCompletesLazyStatuses: under a backlog the engine's walk stops
// early (its default), and the Runner hands Observe every pending job's
// status, and a View whose explanations and estimates cover every job,
// exactly as with every job walked (engine.Config.EagerPending), cycle
// for cycle; with ObserveWalkedOnly, Observe sees the cut (Unwalked).
func TestRunnerCompletesLazyStatuses(t *testing.T) {
	for _, mode := range []engine.BackfillMode{engine.BackfillNone, engine.BackfillEASY, engine.BackfillConservative} {
		t.Run(mode.String(), func(t *testing.T) {
			lazy, _ := runBacklog(t, mode, false, false, false)
			eager, _ := runBacklog(t, mode, true, false, false)
			sameCycles(t, "lazy", lazy, "eager", eager)
			walked, cuts := runBacklog(t, mode, false, true, false)
			if cuts == 0 {
				t.Fatal("no cycle stopped its walk early: the comparison checks nothing")
			}
			differ := false
			for i := range min(len(walked), len(eager)) {
				differ = differ || walked[i] != eager[i]
			}
			if !differ {
				t.Fatal("the walked jobs' statuses alone read as every job's: the comparison checks nothing")
			}
			t.Logf("%d cycles, %d cut", len(lazy), cuts)
		})
	}
}

// TestRunnerInlineDecidesAlike: with RunnerConfig.Inline (every call on
// the Runner's goroutine, as replay.Run makes them on the simulator) the
// Runner binds the same jobs on the same GPUs at the same times, and
// Observe reads the same statuses, explanations and estimates, cycle for
// cycle, as with its calls on goroutines.
func TestRunnerInlineDecidesAlike(t *testing.T) {
	for _, mode := range []engine.BackfillMode{engine.BackfillNone, engine.BackfillEASY, engine.BackfillConservative} {
		t.Run(mode.String(), func(t *testing.T) {
			async, _ := runBacklog(t, mode, false, false, false)
			inline, _ := runBacklog(t, mode, false, false, true)
			sameCycles(t, "goroutines", async, "inline", inline)
			if binds := strings.Count(strings.Join(async, ""), " bind "); binds < 24 {
				t.Fatalf("%d binds observed, want every job's (24): the comparison checks little", binds)
			}
		})
	}
}

// sameCycles fails t unless runs a and b observed the same cycles.
func sameCycles(t *testing.T, na string, a []string, nb string, b []string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d cycles %s, %d %s", len(a), na, len(b), nb)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("cycle %d:\n%s: %s\n%s: %s", i, na, a[i], nb, b[i])
		}
	}
}

// runBacklog replays 24 jobs of 8 GPUs (and some of 16) on 3 nodes of 8
// and returns, per cycle, what Observe read: the binds decided, every
// status and the View's explanations and estimates; and how many cycles
// Observe saw cut. inline sets RunnerConfig.Inline.
func runBacklog(t *testing.T, mode engine.BackfillMode, eager, walkedOnly, inline bool) (cycles []string, cuts int) {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, 3, 8, "H100"), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 24 {
		members := 1 + i%3/2
		run := time.Duration(30+10*(i%5)) * time.Minute
		j := &queue.Job{ID: fmt.Sprintf("j%02d", i), Queue: "team", Submit: start.Add(time.Duration(i) * time.Minute),
			RuntimeEstimate: run, RuntimeLimit: 2 * run,
			Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: 8}}}}
		if err := s.Submit(j, run); err != nil {
			t.Fatal(err)
		}
	}
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:       queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
			Backfill:     engine.BackfillConfig{Mode: mode, Depth: 2},
			EagerPending: eager,
		},
		Backend: s, Clock: s, ObserveWalkedOnly: walkedOnly, Inline: inline,
		Observe: func(c backends.Cycle) {
			if c.Ready.Unwalked > 0 {
				cuts++
			}
			var b strings.Builder
			fmt.Fprintf(&b, "at %v unwalked %d:", c.Ready.At.Sub(start), c.Ready.Unwalked)
			for _, bd := range c.Ready.Binds {
				fmt.Fprintf(&b, " bind %s %v", bd.Job, bd.Members)
			}
			for _, br := range c.Binds {
				fmt.Fprintf(&b, " bound %s %v", br.Job, br.Err)
			}
			for _, p := range c.Ready.Pending {
				fmt.Fprintf(&b, " %s", p)
			}
			fmt.Fprintf(&b, " | view %d %d:", len(c.View.Pending), c.View.Unwalked)
			for _, x := range c.View.Explanations() {
				fmt.Fprintf(&b, " %s", x)
			}
			for _, x := range c.View.Estimates() {
				fmt.Fprintf(&b, " %s", x)
			}
			cycles = append(cycles, b.String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cycles, cuts
}
