package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// A cycle that resumes the last walk (only submissions and ticks since)
// decides exactly what a full cycle decides: two engines, one never
// resuming, see the same arrivals, ends and ticks, under every backfill
// mode and ordering policy, with and without runtime limits and quota;
// their Readies (reasons, numbers and estimates included) must be equal,
// and the resuming engine must have resumed.
func TestResumeMatchesFullCycle(t *testing.T) {
	policies := map[string]func() queue.Policy{
		"priority": queue.StrictPriority,
		"drs":      queue.DRS,
		"fairtree": queue.FairTree,
	}
	total := 0
	for _, mode := range []BackfillMode{BackfillNone, BackfillEASY, BackfillConservative} {
		for _, pol := range []string{"priority", "drs", "fairtree"} {
			for seed := range uint64(6) {
				t.Run(fmt.Sprintf("%v/%s/%d", mode, pol, seed), func(t *testing.T) {
					total += resumeMatches(t, mode, policies[pol], seed)
				})
			}
		}
	}
	require.Positive(t, total, "no cycle resumed")
	t.Logf("resumed %d cycles", total)
}

func resumeMatches(t *testing.T, mode BackfillMode, policy func() queue.Policy, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 77))
	quota := seed%2 == 1
	mk := func(noResume bool) *Engine {
		qs := []queue.QueueSpec{{Name: "a", Cohort: "org"}, {Name: "b", Cohort: "org"}}
		if quota {
			for i := range qs {
				qs[i].Quota = map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(12)}}
			}
		}
		e, err := New(Config{
			Cluster:  topo.Uniform([]string{"rack"}, []int{2}, 3, 4, "H100"),
			Queues:   queue.TreeSpec{Cohorts: []queue.CohortSpec{{Name: "org"}}, Queues: qs},
			Policy:   policy(),
			Backfill: BackfillConfig{Mode: mode, Depth: 3},
			Start:    fuzzT0,
		})
		require.NoError(t, err)
		e.noResume = noResume
		return e
	}
	es := [2]*Engine{mk(false), mk(true)}
	now := fuzzT0
	running := map[string]time.Time{}
	est := map[string]time.Duration{}
	for i := range 120 {
		var evs []Event
		switch r := rng.IntN(10); {
		case r < 6:
			per := []int{1, 2, 4}[rng.IntN(3)]
			j := &queue.Job{
				ID: fmt.Sprintf("j%03d", i), Queue: []string{"a", "b"}[rng.IntN(2)], Submit: now, Priority: int32(rng.IntN(3)),
				Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(3), GPUsPerMember: per}}},
			}
			if rng.IntN(3) == 0 {
				j.Request.Required = "rack"
			}
			j.RuntimeEstimate = time.Duration(1+rng.IntN(12)) * 10 * time.Minute
			if seed%3 == 0 {
				j.RuntimeLimit = j.RuntimeEstimate + time.Duration(rng.IntN(3))*10*time.Minute
			}
			est[j.ID] = j.RuntimeEstimate
			evs = append(evs, Submitted(now, j))
		case r < 8:
			now = now.Add(time.Duration(1+rng.IntN(10)) * time.Minute)
			for _, id := range sortedKeys(running) {
				if !running[id].After(now) {
					evs = append(evs, Finished(now, id))
					delete(running, id)
				}
			}
			evs = append(evs, Tick(now))
		}
		for k, e := range es {
			for _, ev := range evs {
				if ev.Job != nil && k == 1 {
					cp := *ev.Job
					ev.Job = &cp
				}
				require.NoError(t, e.Step(ev))
			}
		}
		rd0, rd1 := es[0].Ready(), es[1].Ready()
		require.Equal(t, digest(rd1), digest(rd0), "step %d", i)
		for _, b := range rd0.Binds {
			running[b.Job] = now.Add(est[b.Job])
		}
		for _, e := range es {
			require.NoError(t, e.Advance(e.lastReady(rd0, rd1), Outcome{}))
		}
	}
	require.Zero(t, es[1].resumed)
	return es[0].resumed
}

// lastReady picks, of two Readies with the same decisions, the one this
// engine returned (Advance checks the sequence number only).
func (e *Engine) lastReady(a, b Ready) Ready {
	if a.Seq == e.seq {
		return a
	}
	return b
}
