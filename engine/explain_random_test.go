package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// Every pending job of every View has an estimate or a reason, and an
// explanation with a limit and a way out, whatever the engine does: random
// seeded runs with every backfill mode, preemption, elastic and
// fractional jobs, jobs without estimates, quotas in a cohort, node
// cordons and failures.
func TestExplainEveryPendingJob(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { explainRandom(t, seed) })
	}
}

func explainRandom(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 71))
	spec := topo.Uniform([]string{"rack"}, []int{2}, 2, 4, "H100")
	spec.ShareFreeGPUs = true
	gpus := func(n int64) map[queue.ResourceName]queue.Quota {
		return map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(n)}}
	}
	e, err := engine.New(engine.Config{
		Cluster: spec,
		Queues: queue.TreeSpec{
			Cohorts: []queue.CohortSpec{{Name: "co"}},
			Queues:  []queue.QueueSpec{{Name: "a", Cohort: "co", Quota: gpus(8)}, {Name: "b", Cohort: "co", Quota: gpus(8)}},
		},
		Policy:     queue.StrictPriority(),
		Backfill:   engine.BackfillConfig{Mode: engine.BackfillMode(rng.IntN(3)), Depth: 1 + rng.IntN(4)},
		Preemption: engine.PreemptionConfig{Priority: rng.IntN(2) == 0, Reclaim: rng.IntN(2) == 0},
		Start:      t0,
	})
	require.NoError(t, err)
	now := t0
	running := map[string]bool{}
	kinds := map[string]int{}
	for i := range 80 {
		switch k := rng.IntN(10); {
		case k < 5:
			j := &queue.Job{ID: fmt.Sprintf("j%02d", i), Queue: []string{"a", "b"}[rng.IntN(2)], Submit: now,
				Priority: int32(rng.IntN(4)), Preemptible: rng.IntN(2) == 0}
			g := gang.Group{Members: 1 + rng.IntN(3), GPUsPerMember: []int{1, 2, 4}[rng.IntN(3)]}
			switch rng.IntN(6) {
			case 0:
				g = gang.Group{Members: 1, GPUMilli: 250 * (1 + rng.IntN(3))}
			case 1:
				j.Elastic = queue.Elastic{MinMembers: 1, MaxMembers: g.Members}
			case 2:
				j.Request.Required = "rack"
			}
			j.Request.Groups = []gang.Group{g}
			if rng.IntN(5) != 0 {
				j.RuntimeEstimate = time.Duration(1+rng.IntN(6)) * 10 * time.Minute
				j.RuntimeLimit = j.RuntimeEstimate * 2
			}
			if err := e.Step(engine.Submitted(now, j)); err != nil {
				require.ErrorIs(t, err, engine.ErrNeverFits)
			}
		case k < 8:
			for id := range running {
				require.NoError(t, e.Step(engine.Finished(now, id)))
				delete(running, id)
				break
			}
		case k == 8:
			n := fmt.Sprintf("n%d", rng.IntN(4))
			st := []topo.NodeState{topo.Ready, topo.Cordoned}[rng.IntN(2)]
			require.NoError(t, e.Step(engine.NodeChanged(now, n, st, nil)))
		default:
			require.NoError(t, e.Step(engine.Tick(now)))
		}
		rd := e.Ready()
		for _, b := range rd.Binds {
			running[b.Job] = true
		}
		for _, id := range rd.Requeued {
			delete(running, id)
		}
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
		v := e.View()
		ests := v.Estimates()
		xs := v.Explanations()
		require.Len(t, ests, len(v.Pending))
		require.Len(t, xs, len(v.Pending))
		for k, x := range ests {
			require.Equal(t, x.Start.IsZero(), x.Why != engine.EstimateGiven, "%s: %v", x.Job, x)
			require.NotEmpty(t, xs[k].Limit, "%s (%v): no limit", x.Job, v.Pending[k])
			require.NotEmpty(t, xs[k].Unblock, "%s (%v): no way out: %s", x.Job, v.Pending[k], xs[k])
			require.NotEmpty(t, xs[k].Kind)
			kinds[xs[k].Kind+"/"+x.Why.String()]++
		}
		now = now.Add(time.Duration(rng.IntN(15)) * time.Minute)
	}
	t.Logf("explanation kinds / estimates: %v", kinds)
}

// A View built by hand (no bookings, no running jobs, statuses without
// their jobs) and a reason code the estimates do not know are answered,
// not a panic: an unknown reason is "held".
func TestExplainBareView(t *testing.T) {
	v := &engine.View{At: t0, Pending: []engine.PendingStatus{
		{Job: "a", Reason: engine.ReasonCapacity},
		{Job: "b", Reason: engine.ReasonQuota},
		{Job: "c", Reason: engine.ReasonBlocked},
		{Job: "d", Reason: engine.ReasonReservedGPUs},
		{Job: "e", Reason: engine.ReasonReserved, Start: t0.Add(time.Hour)},
		{Job: "f", Reason: engine.ReasonCode(200)},
	}}
	ests := v.Estimates()
	require.Len(t, ests, 6)
	require.Equal(t, engine.NoEstimateDepth, ests[0].Why)
	require.Equal(t, engine.NoEstimateNeverFits, ests[1].Why, "short of quota with nothing running")
	require.Equal(t, []string{"a"}, ests[2].Behind)
	require.Equal(t, t0.Add(time.Hour), ests[4].Start)
	require.Equal(t, engine.NoEstimateHeld, ests[5].Why)
	for _, x := range v.Explanations() {
		require.NotEmpty(t, x.Limit, x.Job)
		require.NotEmpty(t, x.Unblock, x.Job)
	}
	_, ok := v.Explain("nope")
	require.False(t, ok)
}
