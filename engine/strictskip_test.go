package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestStrictSkipPassesBlockedJobs is the 120% month's cycle in small
// (docs/scale.md, "The 120% month"): under StrictPriority and EASY, 300
// whole-node jobs wait ahead of one-GPU jobs without a runtime limit, and
// one GPU is free beside the head's reservation. The walk must not visit
// the 299 blocked jobs to reach the first one-GPU job: it skips to it
// (the one-GPU class fits beside every reservation, so each of its jobs
// is a candidate, found by the cursor), binds it, and stops. Its
// decisions and every status PendingAll gives equal those of an engine
// that walks every job (EagerPending).
func TestStrictSkipPassesBlockedJobs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(eager bool) *engine.Engine {
		e, err := engine.New(engine.Config{
			Cluster:      topo.Uniform([]string{"rack"}, []int{1}, 2, 8, "H100"),
			Queues:       queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
			Policy:       queue.StrictPriority(),
			Backfill:     engine.BackfillConfig{Mode: engine.BackfillEASY},
			Start:        t0,
			EagerPending: eager,
		})
		require.NoError(t, err)
		return e
	}
	skipping, full := mk(false), mk(true)
	step := func(ev engine.Event) {
		require.NoError(t, skipping.Step(ev))
		require.NoError(t, full.Step(ev))
	}
	cycle := func() (engine.Ready, engine.Ready) {
		a, b := skipping.Ready(), full.Ready()
		require.Equal(t, fmt.Sprint(b.Binds), fmt.Sprint(a.Binds))
		require.Equal(t, fmt.Sprint(b.Reservations), fmt.Sprint(a.Reservations))
		return a, b
	}
	advance := func(a, b engine.Ready) {
		require.NoError(t, skipping.Advance(a, engine.Outcome{}))
		require.NoError(t, full.Advance(b, engine.Outcome{}))
	}
	// One node holds 7 GPUs for 10 hours, the other 8 for an hour.
	step(engine.Submitted(t0, job("long", 1, 7, 10*time.Hour, t0)))
	step(engine.Submitted(t0, job("short", 1, 8, time.Hour, t0)))
	a, b := cycle()
	require.Len(t, a.Binds, 2)
	advance(a, b)
	at := t0.Add(time.Second)
	for i := range 300 {
		step(engine.Submitted(at, job(fmt.Sprintf("node%03d", i), 1, 8, time.Hour, at.Add(time.Duration(i)*time.Millisecond))))
	}
	for i := range 5 {
		one := job(fmt.Sprintf("one%d", i), 1, 1, 2*time.Hour, at.Add(time.Second+time.Duration(i)*time.Millisecond))
		one.RuntimeLimit = 0 // may start only off the reservation's GPUs
		step(engine.Submitted(at, one))
	}
	step(engine.Tick(at.Add(time.Minute)))
	a, b = cycle()
	require.Len(t, a.Binds, 1)
	require.Equal(t, "one0", a.Binds[0].Job)
	// The walk reached the head (reserved) and the job it bound: the 299
	// whole-node jobs between them were passed, the rest left after its cut.
	require.Len(t, a.Pending, 1, "the skipping walk's statuses")
	require.Equal(t, "node000", a.Pending[0].Job)
	require.Equal(t, 303, a.Unwalked)
	all, ok := skipping.PendingAll()
	require.True(t, ok)
	require.Equal(t, len(b.Pending), len(all))
	for i := range all {
		require.Equal(t, b.Pending[i].Job, all[i].Job)
		require.Equal(t, b.Pending[i].Reason, all[i].Reason, all[i].Job)
		require.Equal(t, b.Pending[i].Start, all[i].Start, all[i].Job)
	}
	advance(a, b)
}
