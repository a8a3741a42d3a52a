package engine_test

import (
	"errors"
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

// When every job ends exactly at its estimate, backfill never delays a
// reservation: a job starts no later than the first start it was promised,
// and its promised start never moves later. Random gangs (some needing one
// rack or one block) arrive at once on a small cluster; the clock jumps
// from one expected end to the next, EASY and conservative.
func TestReservationsHoldWhenEstimatesHold(t *testing.T) {
	for _, mode := range []engine.BackfillMode{engine.BackfillEASY, engine.BackfillConservative} {
		for seed := range uint64(120) {
			t.Run(fmt.Sprintf("%v/%d", mode, seed), func(t *testing.T) {
				reservationsHold(t, mode, seed)
			})
		}
	}
}

func reservationsHold(t *testing.T, mode engine.BackfillMode, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	e, err := engine.New(engine.Config{
		Cluster:  topo.Uniform([]string{"block", "rack"}, []int{2, 2}, 2, 4, "H100"),
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
		Policy:   queue.StrictPriority(),
		Backfill: engine.BackfillConfig{Mode: mode, Depth: 64, MaxProbes: 1000},
		Start:    t0,
	})
	require.NoError(t, err)
	n := 10 + rng.IntN(20)
	est := map[string]time.Duration{}
	for i := range n {
		per := []int{1, 2, 4}[rng.IntN(3)]
		j := &queue.Job{
			ID: fmt.Sprintf("j%02d", i), Queue: "q", Submit: t0, Priority: int32(rng.IntN(5)),
			Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(4), GPUsPerMember: per}}},
		}
		switch rng.IntN(3) {
		case 0:
			j.Request.Required = "rack"
		case 1:
			j.Request.Required = "block"
		}
		j.RuntimeEstimate = time.Duration(1+rng.IntN(8)) * 15 * time.Minute
		j.RuntimeLimit = j.RuntimeEstimate
		if err := e.Step(engine.Submitted(t0, j)); errors.Is(err, engine.ErrNeverFits) {
			continue // rejected at submission: it could never run
		} else {
			require.NoError(t, err)
		}
		est[j.ID] = j.RuntimeEstimate
	}
	promised := map[string]time.Time{}
	ends := map[string]time.Time{}
	now := t0
	for round := 0; round < 500 && len(est) > 0; round++ {
		rd := e.Ready()
		for _, b := range rd.Binds {
			if p, ok := promised[b.Job]; ok {
				require.False(t, rd.At.After(p), "%s started at %v, promised %v", b.Job, rd.At.Sub(t0), p.Sub(t0))
			}
			ends[b.Job] = rd.At.Add(est[b.Job])
			delete(est, b.Job)
		}
		for _, r := range rd.Reservations {
			if p, ok := promised[r.Job]; ok {
				require.False(t, r.Start.After(p), "%s promised %v, now %v", r.Job, p.Sub(t0), r.Start.Sub(t0))
			}
			promised[r.Job] = r.Start
		}
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
		// Jump to the next expected end; those jobs finish on time.
		var next time.Time
		for _, at := range ends {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if next.IsZero() {
			break // what is left can never run (larger than any block)
		}
		now = next
		for id, at := range ends {
			if !at.After(now) {
				require.NoError(t, e.Step(engine.Finished(now, id)))
				delete(ends, id)
			}
		}
	}
}

// The same promise with the shape of the replays that broke it: jobs
// arrive over time, and some have an estimate but no runtime limit (a job
// without a limit may not start in a hole before an earlier reservation
// on the same GPUs, so it must not be planned into one either).
func TestReservationsHoldWithArrivalsAndNoLimits(t *testing.T) {
	for _, mode := range []engine.BackfillMode{engine.BackfillEASY, engine.BackfillConservative} {
		for seed := range uint64(150) {
			t.Run(fmt.Sprintf("%v/%d", mode, seed), func(t *testing.T) {
				reservationsHoldArrivals(t, mode, seed)
			})

		}
	}
}

func reservationsHoldArrivals(t *testing.T, mode engine.BackfillMode, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 29))
	e, err := engine.New(engine.Config{
		Cluster:  topo.Uniform([]string{"rack"}, []int{2}, 3, 4, "H100"),
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
		Policy:   queue.StrictPriority(),
		Backfill: engine.BackfillConfig{Mode: mode},
		Start:    t0,
	})
	require.NoError(t, err)
	type arrival struct {
		at time.Time
		j  *queue.Job
	}
	var arrivals []arrival
	est := map[string]time.Duration{}
	at := t0
	for i := range 15 + rng.IntN(25) {
		per := []int{1, 2, 4}[rng.IntN(3)]
		j := &queue.Job{
			ID: fmt.Sprintf("j%02d", i), Queue: "q",
			Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(3), GPUsPerMember: per}}},
		}
		if rng.IntN(3) == 0 {
			j.Request.Required = "rack"
		}
		j.RuntimeEstimate = time.Duration(1+rng.IntN(16)) * 7 * time.Minute
		if rng.IntN(2) == 0 {
			j.RuntimeLimit = j.RuntimeEstimate + time.Duration(rng.IntN(3))*10*time.Minute
		}
		at = at.Add(time.Duration(rng.IntN(20)) * time.Minute)
		j.Submit = at
		est[j.ID] = j.RuntimeEstimate
		arrivals = append(arrivals, arrival{at, j})
	}
	promised := map[string]time.Time{}
	ends := map[string]time.Time{}
	now := t0
	for round := 0; round < 1000 && len(est) > 0; round++ {
		for len(arrivals) > 0 && !arrivals[0].at.After(now) {
			require.NoError(t, e.Step(engine.Submitted(now, arrivals[0].j)))
			arrivals = arrivals[1:]
		}
		rd := e.Ready()
		for _, b := range rd.Binds {
			if p, ok := promised[b.Job]; ok {
				require.False(t, rd.At.After(p), "%s started at %v, promised %v", b.Job, rd.At.Sub(t0), p.Sub(t0))
			}
			ends[b.Job] = rd.At.Add(est[b.Job])
			delete(est, b.Job)
		}
		for _, r := range rd.Reservations {
			if p, ok := promised[r.Job]; ok {
				require.False(t, r.Start.After(p), "%s promised %v, now %v", r.Job, p.Sub(t0), r.Start.Sub(t0))
			}
			promised[r.Job] = r.Start
		}
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
		// Jump to the next expected end or arrival; jobs finish on time.
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
			break
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
	require.Empty(t, est, "every job ran")
}
