package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berthsched/berth/topo"
)

// restoreHistory runs a random history (submissions of whole, elastic,
// fractional and MIG jobs, ends, cancels, checkpoints, ticks, node
// failures and state changes, advance reservations, cycles with random
// refusals) with preemption on and the backfill mode of the seed, on a
// cluster with MIG nodes. It returns the config, the steps, each step's digest, and how
// many journal records the engine had before each step.
func restoreHistory(t *testing.T, seed uint64, n int) (Config, []fuzzStep, []string, []int, *State) {
	rng := rand.New(rand.NewPCG(seed, seed^0xbe27))
	cfg := fuzzConfig(rng, true)
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
			ev := Submitted(now, fuzzJob(rng, fmt.Sprintf("j%d", i), now, true))
			st.ev = &ev
		case k == 3:
			if id := pick(rng, e.active); id != "" {
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
			} else if id := pick(rng, e.active); id != "" {
				ev := Checkpointed(now, id)
				st.ev = &ev
			}
		case k == 5:
			now = now.Add(time.Duration(1+rng.IntN(6)) * 10 * time.Minute)
			for _, id := range sortedKeys(e.active) {
				js := e.active[id]
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
				st := steps[k]
				if st.ev != nil && st.ev.Job != nil {
					cp := *st.ev.Job
					ev := *st.ev
					ev.Job = &cp
					st.ev = &ev
				}
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
	bad := &State{Version: StateVersion, Start: fuzzT0, Records: []Record{{Event: &SavedEvent{Kind: EventJobFinished, Time: fuzzT0, JobID: "nope"}}}}
	if _, err := Restore(cfg, bad); err == nil {
		t.Fatal("a record the engine rejects was accepted")
	}
}
