package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// restoreHistory runs a random history (submissions of whole, elastic,
// fractional and MIG jobs, ends, cancels, checkpoints, ticks, node
// failures and state changes, advance reservations, cycles with random
// refusals) with preemption on and the backfill mode of the seed, on a
// cluster with MIG nodes. It returns the config, the steps, each step's digest, and how
// many journal records the engine had before each step.
func restoreHistory(t *testing.T, seed uint64, n int) (Config, []fuzzStep, []string, []int, *State) {
	return restoreHistoryOf(t, seed, n, true)
}

// restoreHistoryOf is restoreHistory, without MIG nodes, shared GPUs and
// fractional jobs when shared is false.
func restoreHistoryOf(t *testing.T, seed uint64, n int, shared bool) (Config, []fuzzStep, []string, []int, *State) {
	rng := rand.New(rand.NewPCG(seed, seed^0xbe27))
	cfg := fuzzConfig(rng, shared)
	cfg.Preemption.Priority = true
	cfg.Backfill.Mode = BackfillMode(1 + seed%2) // EASY or conservative
	mk := func() Config { c := cfg; c.Policy = fuzzPolicy(seed); return c }
	e, err := New(mk())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnableJournal(); err != nil {
		t.Fatal(err)
	}
	m := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
	var steps []fuzzStep
	var digests []string
	var at []int
	now := fuzzT0
	do := func(st fuzzStep) {
		at = append(at, len(e.jn.recs))
		digests = append(digests, apply(t, e, st, m))
		steps = append(steps, st)
	}
	for i := 0; len(steps) < n; i++ {
		var st fuzzStep
		switch k := rng.IntN(10); {
		case k < 3:
			ev := Submitted(now, fuzzJob(rng, fmt.Sprintf("j%d", i), now, shared))
			st.ev = &ev
		case k == 3:
			if id := pick(rng, e.activeMap()); id != "" {
				ev := Finished(now, id)
				if rng.IntN(3) == 0 {
					ev = FinishedFailed(now, id)
				}
				st.ev = &ev
			}
		case k == 4:
			if rng.IntN(3) == 0 {
				if id := pick(rng, e.jobs); id != "" {
					ev := Cancelled(now, id)
					st.ev = &ev
				}
			} else if id := pick(rng, e.activeMap()); id != "" {
				ev := Checkpointed(now, id)
				st.ev = &ev
			}
		case k == 5:
			now = now.Add(time.Duration(1+rng.IntN(6)) * 10 * time.Minute)
			active := e.activeMap()
			for _, id := range sortedKeys(active) {
				js := active[id]
				if js.j.RuntimeEstimate > 0 && !js.start.Add(js.j.RuntimeEstimate).After(now) && rng.IntN(4) > 0 {
					end := js.start.Add(js.j.RuntimeEstimate)
					if end.Before(e.now) {
						end = e.now
					}
					ev := Finished(end, id)
					do(fuzzStep{ev: &ev})
				}
			}
			ev := Tick(now)
			st.ev = &ev
		case k == 6 && rng.IntN(4) == 0:
			states := []topo.NodeState{topo.Ready, topo.Cordoned, topo.Draining, topo.Ready, topo.Down}
			ev := NodeChanged(now, fmt.Sprintf("n%d", rng.IntN(8)), states[rng.IntN(len(states))], nil)
			st.ev = &ev
		case k == 6 && rng.IntN(3) == 0:
			// An advance reservation set or deleted (site-features.md).
			ev := ReservationSet(now, AdvanceReservation{Name: fmt.Sprintf("r%d", rng.IntN(2)), Start: now.Add(time.Duration(rng.IntN(6)) * 10 * time.Minute),
				Duration: time.Hour, Nodes: []string{fmt.Sprintf("n%d", 1+rng.IntN(7))}, Accounts: []string{"a"}})
			if rng.IntN(3) == 0 {
				ev = ReservationDeleted(now, fmt.Sprintf("r%d", rng.IntN(2)))
			}
			st.ev = &ev
		default:
			st.ready = true
			st.refuse = make([]uint8, 32)
			for i := range st.refuse {
				st.refuse[i] = uint8(rng.IntN(10))
			}
		}
		if st.ev != nil || st.ready {
			do(st)
		}
	}
	full, err := e.Save()
	if err != nil {
		t.Fatal(err)
	}
	return mk(), steps, digests, at, full
}

// TestRestoreSameDecisions: an engine restored from the state saved at a
// random point of a history (through JSON) makes, from there on, the same
// decisions as the engine that never stopped, over 200 stop points (20
// histories x 10 points) with preemption, backfill, elastic, fractional
// and MIG jobs, MIG reconfigurations and refusals.
func TestRestoreSameDecisions(t *testing.T) {
	const histories, points = 20, 10
	checked, kinds := 0, map[string]int{}
	for seed := uint64(1); seed <= histories; seed++ {
		cfg, steps, digests, at, full := restoreHistory(t, seed, 300)
		for _, d := range digests {
			for _, k := range []string{" P(", " R(", " B(", " M(", " V("} {
				if contains(d, k) {
					kinds[k]++
				}
			}
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		for p := 0; p < points; p++ {
			i := rng.IntN(len(steps))
			e2 := restoreJSON(t, cfg, full, at[i], seed)
			m := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
			for id := range e2.jobs {
				m.known[id] = true
			}
			m.lastSeq = e2.seq
			for k := i; k < len(steps); k++ {
				st := fresh(steps[k])
				if d := apply(t, e2, st, m); d != digests[k] {
					t.Fatalf("seed %d, stopped before step %d: step %d differs:\nnever stopped: %s\nrestored:      %s", seed, i, k, digests[k], d)
				}
			}
			checked++
		}
	}
	t.Logf("%d stop points checked; cycles with preemptions %d, resizes %d, binds %d, MIG changes %d, reservations %d",
		checked, kinds[" P("], kinds[" R("], kinds[" B("], kinds[" M("], kinds[" V("])
	if checked < 200 {
		t.Fatalf("only %d stop points", checked)
	}
	for _, k := range []string{" P(", " R(", " B(", " M(", " V("} {
		if kinds[k] == 0 {
			t.Errorf("no cycle with %q: the histories do not cover it", k)
		}
	}
}

// TestCompactSameDecisions: an engine restored from a compacted state
// (the full journal up to a random point replayed, compacted, saved
// through JSON, restored from the snapshot) makes, from there on, the same
// decisions as the engine that never stopped (and so as the one restored
// from the whole journal), over 200 stop points with preemption (grace
// periods and claims), backfill (sticky reservations), elastic jobs,
// quotas, fair share, bind refusals and backoffs, node state changes and
// advance reservations. Each restored engine is compacted again at a
// second point and restored again, so snapshots that follow a tail are
// covered too.
func TestCompactSameDecisions(t *testing.T) {
	const histories, points = 20, 10
	checked, kinds := 0, map[string]int{}
	for seed := uint64(1); seed <= histories; seed++ {
		cfg, steps, digests, at, full := restoreHistoryOf(t, seed, 300, false)
		for _, d := range digests {
			for _, k := range []string{" P(", " R(", " B(", " V("} {
				if contains(d, k) {
					kinds[k]++
				}
			}
		}
		rng := rand.New(rand.NewPCG(seed, 11))
		for p := 0; p < points; p++ {
			i := rng.IntN(len(steps))
			again := i + rng.IntN(len(steps)-i)
			e := compactJSON(t, cfg, restoreJSON(t, cfg, full, at[i], seed), seed)
			m := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
			for id := range e.jobs {
				m.known[id] = true
			}
			m.lastSeq = e.seq
			for k := i; k < len(steps); k++ {
				if k == again {
					e = compactJSON(t, cfg, e, seed)
				}
				st := fresh(steps[k])
				if d := apply(t, e, st, m); d != digests[k] {
					t.Fatalf("seed %d, compacted before step %d (again before %d): step %d differs:\nnever stopped: %s\nrestored:      %s", seed, i, again, k, digests[k], d)
				}
			}
			checked++
		}
	}
	t.Logf("%d stop points checked; cycles with preemptions %d, resizes %d, binds %d, reservations %d",
		checked, kinds[" P("], kinds[" R("], kinds[" B("], kinds[" V("])
	for _, k := range []string{" P(", " R(", " B(", " V("} {
		if kinds[k] == 0 {
			t.Errorf("no cycle with %q: the histories do not cover it", k)
		}
	}
}

// compactJSON compacts e, saves it through JSON and restores it.
func compactJSON(t *testing.T, cfg Config, e *Engine, seed uint64) *Engine {
	t.Helper()
	if err := e.Compact(); err != nil {
		t.Fatalf("seed %d: Compact: %v", seed, err)
	}
	st, err := e.Save()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Records) != 0 || st.Snapshot == nil {
		t.Fatalf("compacted state with %d records, snapshot %v", len(st.Records), st.Snapshot != nil)
	}
	return restoreStateJSON(t, cfg, st, seed)
}

// fresh is st with its own copy of its event's job (the engine owns the
// jobs it is given).
func fresh(st fuzzStep) fuzzStep {
	if st.ev != nil && st.ev.Job != nil {
		cp := *st.ev.Job
		ev := *st.ev
		ev.Job = &cp
		st.ev = &ev
	}
	return st
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestRestoreErrors(t *testing.T) {
	cfg := Config{Start: fuzzT0}
	if _, err := Restore(cfg, nil); err == nil {
		t.Fatal("nil state accepted")
	}
	if _, err := Restore(cfg, &State{Version: 99}); err == nil {
		t.Fatal("version 99 accepted")
	}
	e, _ := New(cfg)
	if _, err := e.Save(); err == nil {
		t.Fatal("Save without the journal")
	}
	_ = e.Step(Tick(fuzzT0))
	if err := e.EnableJournal(); err == nil {
		t.Fatal("EnableJournal after use")
	}
	if _, err := Restore(cfg, &State{Version: StateVersion + 1}); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("a later version: %v", err)
	}
	if _, err := Restore(cfg, &State{Version: 2, Start: fuzzT0, Snapshot: &Snapshot{}}); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("a snapshot in a version 2 state: %v", err)
	}
	for _, v := range []int{1, 2} { // whole journals: still read
		if _, err := Restore(cfg, &State{Version: v, Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Start: fuzzT0}); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	if err := e.Compact(); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("Compact without the journal: %v", err)
	}
	busy, _ := New(Config{Start: fuzzT0, Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Queues: fuzzConfig(rand.New(rand.NewPCG(1, 1)), false).Queues})
	_ = busy.EnableJournal()
	if err := busy.Step(Submitted(fuzzT0, &queue.Job{ID: "x", Queue: "a", Submit: fuzzT0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}})); err != nil {
		t.Fatal(err)
	}
	rd := busy.Ready()
	if err := busy.Compact(); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("Compact before Advance: %v", err)
	}
	if err := busy.Advance(rd, Outcome{}); err != nil {
		t.Fatal(err)
	}
	if err := busy.Compact(); err != nil {
		t.Fatalf("Compact after Advance: %v", err)
	}
	// A count of refused binds out of range (the engine keeps it in 32
	// bits) is refused, not cut.
	for _, n := range []int{-1, 1 << 40} {
		st, err := busy.Save()
		if err != nil || st.Snapshot == nil || len(st.Snapshot.Running) != 1 {
			t.Fatalf("Save after Compact: %v", err)
		}
		st.Snapshot.Running[0].Refusals = n
		if _, err := Restore(Config{Start: fuzzT0, Queues: busy.cfg.Queues}, st); !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%d refusals: %v", n, err)
		}
	}
	mg, _ := New(Config{Start: fuzzT0, Cluster: fuzzConfig(rand.New(rand.NewPCG(1, 1)), true).Cluster})
	_ = mg.EnableJournal()
	if err := mg.Compact(); !errors.Is(err, ErrNotCompactable) {
		t.Fatalf("Compact with MIG nodes: %v", err)
	}
	bad := &State{Version: StateVersion, Start: fuzzT0, Records: []Record{{Event: &SavedEvent{Kind: EventJobFinished, Time: fuzzT0, JobID: "nope"}}}}
	if _, err := Restore(cfg, bad); err == nil {
		t.Fatal("a record the engine rejects was accepted")
	}
}
