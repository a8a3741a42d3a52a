package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
)

// pendingReason returns the reason View.Pending gives job id, and whether
// it lists it; running reports whether View.Running lists it.
func viewPlace(v *engine.View, id string) (reason engine.ReasonCode, pending, running bool) {
	for _, p := range v.Pending {
		if p.Job == id {
			reason, pending = p.Reason, true
		}
	}
	for _, r := range v.Running() {
		if r.Job == id {
			running = true
		}
	}
	return reason, pending, running
}

// An asynchronous caller's binds are assumed: the GPUs are booked at
// once and the job is pending "binding" until an event reports the
// outcome. Applied: running. Failed: back to pending, retrying after the
// backoff, with the error; after MaxBindTries failures in a row: held,
// until Released. A late answer about an earlier run changes nothing.
func TestAssumedBindLifecycle(t *testing.T) {
	cfg := baseConfig()
	cfg.BindRetryBackoff = time.Minute
	cfg.MaxBindTries = 2
	e, err := engine.New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("a", 1, 8, t0))))
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("b", 1, 8, t0))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 2)
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true}))
	free := e.View().FreeGPUs
	assert.Equal(t, e.View().TotalGPUs-16, free, "assumed binds book their GPUs")
	for _, b := range rd.Binds {
		reason, pending, running := viewPlace(e.View(), b.Job)
		assert.True(t, pending && !running, "%s is listed pending only", b.Job)
		assert.Equal(t, engine.ReasonBinding, reason)
	}
	runA, runB := rd.Binds[0].Run, rd.Binds[1].Run
	require.NotZero(t, runA)
	now := t0.Add(time.Second)

	// a: applied.
	require.NoError(t, e.Step(engine.BindApplied(now, "a", runA)))
	// b: unknown, then failed.
	require.NoError(t, e.Step(engine.BindUnknown(now, "b", runB)))
	_, unknown, ok := e.Binding("b")
	assert.True(t, ok && unknown)
	assert.False(t, e.HasReady(), "applied and unknown binds need no cycle")
	e.Publish()
	_, _, running := viewPlace(e.View(), "a")
	assert.True(t, running, "a runs once applied")
	reason, _, _ := viewPlace(e.View(), "b")
	assert.Equal(t, engine.ReasonBindingUnknown, reason)
	assert.Equal(t, e.View().TotalGPUs-16, e.View().FreeGPUs, "an unknown bind keeps its GPUs")

	require.NoError(t, e.Step(engine.BindFailed(now, "b", runB, "node n3: image pull failed")))
	// The same answer again is about a run b is no longer in: ignored.
	require.NoError(t, e.Step(engine.BindFailed(now, "b", runB, "again")))
	require.NoError(t, e.Step(engine.BindApplied(now, "b", runB)))
	rd = e.Ready()
	assert.Empty(t, rd.Binds, "b waits for its backoff")
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true}))
	reason, pending, running := viewPlace(e.View(), "b")
	assert.True(t, pending && !running)
	assert.Equal(t, engine.ReasonBindRefused, reason)
	assert.Contains(t, e.View().Holds["b"], "image pull failed")
	assert.Contains(t, e.View().Holds["b"], "retrying at")

	// Tried again after the backoff; a second failure holds it.
	now = now.Add(2 * time.Minute)
	require.NoError(t, e.Step(engine.Tick(now)))
	rd = e.Ready()
	require.Len(t, rd.Binds, 1)
	require.Equal(t, "b", rd.Binds[0].Job)
	require.NotEqual(t, runB, rd.Binds[0].Run, "a new run")
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true}))
	require.NoError(t, e.Step(engine.BindFailed(now, "b", rd.Binds[0].Run, "node n3: image pull failed")))
	rd = e.Ready()
	assert.Empty(t, rd.Binds)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	reason, _, _ = viewPlace(e.View(), "b")
	assert.Equal(t, engine.ReasonHeld, reason)
	assert.Contains(t, e.View().Holds["b"], "held: 2 binds failed in a row, the last: node n3: image pull failed")
	why, held := e.Held("b")
	assert.True(t, held)
	assert.Equal(t, "node n3: image pull failed", why)
	_, wake := e.BindRetryAt()
	assert.False(t, wake, "a held job asks for no wake-up")

	// Hours later it is still held; released, it is placed at once.
	now = now.Add(5 * time.Hour)
	require.NoError(t, e.Step(engine.Tick(now)))
	rd = e.Ready()
	assert.Empty(t, rd.Binds)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	require.NoError(t, e.Step(engine.Released(now, "b")))
	rd = e.Ready()
	require.Len(t, rd.Binds, 1)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	_, _, running = viewPlace(e.View(), "b")
	assert.True(t, running, "confirmed by a synchronous Advance")
	assert.ErrorIs(t, e.Step(engine.Released(now, "nobody")), engine.ErrUnknownJob)
}

// Refusals through Advance count towards MaxBindTries too, and the job
// they put back is visible at once (before the next cycle), not only
// after its backoff.
func TestRefusedBindVisibleAndHeld(t *testing.T) {
	cfg := baseConfig()
	cfg.BindRetryBackoff = time.Hour
	cfg.MaxBindTries = 1
	e, err := engine.New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("a", 1, 8, t0))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	require.NoError(t, e.Advance(rd, engine.Outcome{RefusedBinds: []string{"a"}}))
	reason, pending, running := viewPlace(e.View(), "a")
	assert.True(t, pending && !running, "visible right after the refusal")
	assert.Equal(t, engine.ReasonHeld, reason)
	assert.Contains(t, e.View().Holds["a"], "held: 1 binds failed in a row")
}

func TestMaxBindTriesValidated(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxBindTries = -1
	_, err := engine.New(cfg)
	assert.ErrorIs(t, err, engine.ErrInvalidConfig)
}

// An asynchronous caller's preemptions are assumed: the victim keeps its
// GPUs booked, and is not requeued at its deadline, until an event
// reports the outcome. Unknown: still booked. Applied: requeued (at once,
// its deadline having passed) and the preemptor bound. Failed: the victim
// runs on, the preemptor is pending with the failure in Ready.Holds.
func TestAssumedPreemptionLifecycle(t *testing.T) {
	for _, outcome := range []string{"applied", "failed"} {
		t.Run(outcome, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Preemption.Priority = true
			e, err := engine.New(cfg)
			require.NoError(t, err)
			low := gpuJob("low", 8, 8, t0) // the whole cluster
			low.Preemptible, low.GracePeriod = true, time.Minute
			require.NoError(t, e.Step(engine.Submitted(t0, low)))
			rd := e.Ready()
			require.Len(t, rd.Binds, 1)
			require.NoError(t, e.Advance(rd, engine.Outcome{}))
			high := gpuJob("high", 1, 8, t0)
			high.Priority = 10
			at := t0.Add(time.Minute)
			require.NoError(t, e.Step(engine.Submitted(at, high)))
			rd = e.Ready()
			require.Len(t, rd.Preemptions, 1)
			p := rd.Preemptions[0]
			require.Equal(t, "low", p.Victim)
			require.NotZero(t, p.Run)
			require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumePreemptions: true}))
			run, unknown, ok := e.PreemptState("low")
			require.True(t, ok && !unknown && run == p.Run, "assumed")

			// Past the deadline, with no answer: nothing moves.
			late := p.Deadline.Add(time.Minute)
			require.NoError(t, e.Step(engine.PreemptUnknown(late, "low", p.Run)))
			_, unknown, _ = e.PreemptState("low")
			assert.True(t, unknown)
			require.NoError(t, e.Step(engine.Tick(late)))
			rd = e.Ready()
			assert.Empty(t, rd.Requeued, "an unconfirmed victim is not requeued at its deadline")
			assert.Empty(t, rd.Binds, "the preemptor waits: its GPUs are still the victim's")
			require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumePreemptions: true}))
			assert.Equal(t, 0, e.View().FreeGPUs, "the victim keeps its GPUs booked")

			later := late.Add(time.Second)
			if outcome == "applied" {
				require.NoError(t, e.Step(engine.PreemptApplied(later, "low", p.Run)))
				require.True(t, e.HasReady(), "applied past its deadline: a cycle requeues it")
				rd = e.Ready()
				assert.Equal(t, []string{"low"}, rd.Requeued)
				require.Len(t, rd.Binds, 1)
				assert.Equal(t, "high", rd.Binds[0].Job)
				// A second answer about the same run is late: ignored.
				require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumePreemptions: true}))
				require.NoError(t, e.Step(engine.PreemptFailed(later, "low", p.Run, "late")))
				_, _, ok = e.PreemptState("low")
				assert.False(t, ok)
				return
			}
			require.NoError(t, e.Step(engine.PreemptFailed(later, "low", p.Run, "victim refused to stop")))
			_, _, ok = e.PreemptState("low")
			assert.False(t, ok)
			assert.False(t, e.HasReady(), "a failed preemption runs no cycle by itself (the caller backs off)")
			require.NoError(t, e.Step(engine.Tick(later.Add(time.Second))))
			rd = e.Ready()
			assert.Empty(t, rd.Binds)
			assert.Contains(t, rd.Holds["high"], "preemption of low failed: victim refused to stop")
			require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumePreemptions: true}))
			_, _, running := viewPlace(e.View(), "low")
			assert.True(t, running, "the victim runs on")
		})
	}
}

// A bind deferred (its GPUs still being released) frees the job's GPUs
// and puts it back to pending for the base backoff, with the reason and
// no try counted: never held for it.
func TestBindDeferred(t *testing.T) {
	cfg := baseConfig()
	cfg.BindRetryBackoff = time.Minute
	cfg.MaxBindTries = 1
	e, err := engine.New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("a", 1, 8, t0))))
	at := t0
	for i := range 3 {
		rd := e.Ready()
		require.Len(t, rd.Binds, 1, "try %d", i)
		require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true}))
		require.NoError(t, e.Step(engine.BindDeferred(at, "a", rd.Binds[0].Run, "GPU not released yet")))
		reason, pending, _ := viewPlace(func() *engine.View { e.Publish(); return e.View() }(), "a")
		assert.True(t, pending)
		assert.Equal(t, engine.ReasonBindRefused, reason, "waiting, not held")
		retry, ok := e.BindRetryAt()
		require.True(t, ok)
		assert.Equal(t, at.Add(time.Minute), retry, "the base backoff, not growing")
		at = retry
		require.NoError(t, e.Step(engine.Tick(at)))
	}
	_, held := e.Held("a")
	assert.False(t, held)
}
