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

// Every pending job in every View gets an estimated start or a reason why
// none can be given; under conservative backfill with exact estimates the
// estimates are SLURM's conservative promises: a job's estimate never
// moves later, and it starts at or before it. Random seeded workloads:
// jobs arrive over time into two queues whose quotas never bind. In one
// seed of four a sixth of the jobs have neither an estimate nor a limit:
// their ends are unknown, so jobs behind them may get no estimate
// (NoEstimateUnknownEnds), and estimates are not checked in those seeds,
// since they are not exact (estimates there do move later).
func TestEstimatesForEveryPendingJob(t *testing.T) {
	for seed := range uint64(120) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { estimatesForAll(t, seed, engine.BackfillConservative, false) })
	}
}

// Under EASY backfill only the first blocked job is planned: the others
// are told so (not-planned), and the one estimate is kept as well.
func TestEstimatesForEveryPendingJobEASY(t *testing.T) {
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { estimatesForAll(t, seed, engine.BackfillEASY, false) })
	}
}

// With quotas that bind (queues of 12, 8 and 24 GPUs on 24), every pending
// job still gets an estimate or a reason, and a job short of quota names
// the running jobs it waits for. Estimates are not checked here: the
// timeline plans GPUs, not quota, so a job whose queue's quota is taken
// while it waits for its reserved GPUs can start after its estimate (see
// docs/pending.md).
func TestEstimatesForEveryPendingJobWithQuota(t *testing.T) {
	for seed := range uint64(120) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { estimatesForAll(t, seed, engine.BackfillConservative, true) })
	}
}

func estimatesForAll(t *testing.T, seed uint64, mode engine.BackfillMode, quotas bool) {
	rng := rand.New(rand.NewPCG(seed, 53))
	unknown := seed%4 == 3
	gpus := func(n int64) map[queue.ResourceName]queue.Quota {
		return map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(n)}}
	}
	e, err := engine.New(engine.Config{
		Cluster:  topo.Uniform([]string{"rack"}, []int{2}, 3, 4, "H100"),
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "a", Quota: gpus(48)}, {Name: "b", Quota: gpus(48)}}},
		Policy:   queue.StrictPriority(),
		Backfill: engine.BackfillConfig{Mode: mode, Depth: 64, MaxProbes: 1000},
		Start:    t0,
	})
	if quotas {
		e, err = engine.New(engine.Config{
			Cluster: topo.Uniform([]string{"rack"}, []int{2}, 3, 4, "H100"),
			Queues: queue.TreeSpec{Queues: []queue.QueueSpec{
				{Name: "a", Quota: gpus(12)}, {Name: "b", Quota: gpus(8)}, {Name: "c", Quota: gpus(24)},
			}},
			Policy:   queue.StrictPriority(),
			Backfill: engine.BackfillConfig{Mode: engine.BackfillConservative, Depth: 64, MaxProbes: 1000},
			Start:    t0,
		})
	}
	require.NoError(t, err)
	queues, quota := []string{"a", "b"}, map[string]int{"a": 24, "b": 24}
	if quotas {
		queues, quota = []string{"a", "b", "c"}, map[string]int{"a": 12, "b": 8, "c": 24}
	}
	type arrival struct {
		at      time.Time
		j       *queue.Job
		runtime time.Duration
	}
	var arrivals []arrival
	at := t0
	for i := range 15 + rng.IntN(25) {
		per := []int{1, 2, 4}[rng.IntN(3)]
		q := queues[rng.IntN(len(queues))]
		j := &queue.Job{
			ID: fmt.Sprintf("j%02d", i), Queue: q,
			Request: gang.Request{Groups: []gang.Group{{Members: min(1+rng.IntN(3), quota[q]/per), GPUsPerMember: per}}},
		}
		if rng.IntN(3) == 0 {
			j.Request.Required = "rack"
		}
		run := time.Duration(1+rng.IntN(16)) * 7 * time.Minute
		if !unknown || rng.IntN(6) != 0 {
			j.RuntimeEstimate, j.RuntimeLimit = run, run
		}
		at = at.Add(time.Duration(rng.IntN(20)) * time.Minute)
		j.Submit = at
		arrivals = append(arrivals, arrival{at, j, run})
	}
	runtime := map[string]time.Duration{}
	for _, a := range arrivals {
		runtime[a.j.ID] = a.runtime
	}
	promised := map[string]time.Time{}
	ends := map[string]time.Time{}
	why := map[engine.NoEstimate]int{}
	now := t0
	last := map[string]string{}
	for round := 0; round < 1000; round++ {
		for len(arrivals) > 0 && !arrivals[0].at.After(now) {
			require.NoError(t, e.Step(engine.Submitted(now, arrivals[0].j)))
			arrivals = arrivals[1:]
		}
		rd := e.Ready()
		for _, b := range rd.Binds {
			if p, ok := promised[b.Job]; ok && !quotas && !unknown {
				require.False(t, rd.At.After(p), "%s started at %v, estimated %v; %s", b.Job, rd.At.Sub(t0), p.Sub(t0), last[b.Job])
			}
			ends[b.Job] = rd.At.Add(runtime[b.Job])
		}
		ests := e.View().Estimates()
		require.Len(t, ests, len(rd.Pending))
		for i, x := range ests {
			require.Equal(t, rd.Pending[i].Job, x.Job)
			last[x.Job] += fmt.Sprintf("\n%v: %v", rd.At.Sub(t0), rd.Pending[i])
			why[x.Why]++
			if x.Why == engine.EstimateGiven {
				require.False(t, x.Start.IsZero(), "%s: no start and no reason", x.Job)
				if p, ok := promised[x.Job]; ok && !quotas && !unknown {
					require.False(t, x.Start.After(p), "%s estimated %v, now %v", x.Job, p.Sub(t0), x.Start.Sub(t0))
				}
				promised[x.Job] = x.Start
				continue
			}
			require.True(t, x.Start.IsZero(), "%s: a start and a reason %v", x.Job, x.Why)
			switch x.Why {
			case engine.NoEstimateQuota:
				require.True(t, quotas, "%s waits for quota that cannot bind: %v", x.Job, rd.Pending[i])
				require.NotEmpty(t, x.Behind, "%s waits for quota behind no job", x.Job)
			case engine.NoEstimateDepth:
				require.Equal(t, engine.BackfillEASY, mode, "%s: not planned, though every job is", x.Job)
			case engine.NoEstimateUnknownEnds:
				require.True(t, unknown, "%s: unknown ends, but every job has an estimate", x.Job)
			default:
				t.Fatalf("%s: no estimate (%v) under conservative backfill with every job planned: %v", x.Job, x.Why, rd.Pending[i])
			}
		}
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
		// Jump to the next end or arrival; jobs end at their runtime.
		var next time.Time
		for _, at := range ends {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if len(arrivals) > 0 && (next.IsZero() || arrivals[0].at.Before(next)) {
			next = arrivals[0].at
		}
		if next.IsZero() {
			if len(rd.Pending) == 0 {
				break
			}
			next = now // one more cycle for what is left
			require.NoError(t, e.Step(engine.Tick(now)))
			continue
		}
		now = next
		for id, at := range ends {
			if !at.After(now) {
				require.NoError(t, e.Step(engine.Finished(now, id)))
				delete(ends, id)
			}
		}
		if len(arrivals) == 0 || arrivals[0].at.After(now) {
			require.NoError(t, e.Step(engine.Tick(now)))
		}
	}
	require.Empty(t, e.View().Pending, "every job ran")
	t.Logf("estimates by kind (job-cycles): %v", why)
}
