package sim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func wholeJob(id string, submit time.Duration, members, per int) *queue.Job {
	return &queue.Job{
		ID: id, Queue: "q", Submit: t0.Add(submit),
		Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}},
	}
}

func newSim(t testing.TB, nodes, gpus int) *sim.Sim {
	t.Helper()
	s, err := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, nodes, gpus, "H100"), Start: t0})
	require.NoError(t, err)
	return s
}

func run(t testing.TB, s *sim.Sim, cfg engine.Config, observe func(backends.Cycle)) {
	t.Helper()
	cfg.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	r, err := backends.NewRunner(backends.RunnerConfig{Engine: cfg, Backend: s, Clock: s, Observe: observe})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
}

func TestRunsEveryJobForItsRuntime(t *testing.T) {
	s := newSim(t, 2, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 1, 4), time.Hour))
	require.NoError(t, s.Submit(wholeJob("b", 0, 2, 4), 2*time.Hour)) // waits for a
	require.NoError(t, s.Submit(wholeJob("c", time.Minute, 1, 2), 30*time.Minute))
	run(t, s, engine.Config{Policy: queue.StrictPriority()}, nil)

	out := s.Outcomes()
	require.Len(t, out, 3)
	for _, o := range out {
		assert.True(t, o.Finished, o.ID)
		assert.Empty(t, s.Violations())
	}
	assert.Equal(t, t0, out[0].Start)
	assert.Equal(t, t0.Add(time.Hour), out[0].End)
	assert.Equal(t, t0.Add(time.Hour), out[1].Start, "b needs both nodes")
	assert.Equal(t, t0.Add(3*time.Hour), out[1].End)
	// c waits behind b in strict order (no backfill).
	assert.Equal(t, t0.Add(3*time.Hour), out[2].Start)
	assert.Equal(t, 8, out[1].GPUs)
	st := s.State(nil)
	assert.Equal(t, 0, st.BusyGPUs)
	assert.Equal(t, []int{4, 4}, st.NodeFree)
}

func TestNodeFailureRequeuesAndRecovers(t *testing.T) {
	s := newSim(t, 2, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 2, 4), time.Hour))
	require.NoError(t, s.FailNode(t0.Add(10*time.Minute), "n1"))
	require.NoError(t, s.RecoverNode(t0.Add(20*time.Minute), "n1"))
	run(t, s, engine.Config{Policy: queue.StrictPriority()}, nil)

	out := s.Outcomes()
	require.Len(t, out, 1)
	assert.True(t, out[0].Finished)
	assert.Equal(t, 1, out[0].Interrupted)
	assert.Equal(t, 10*time.Minute, out[0].LostRun)
	assert.Equal(t, t0.Add(20*time.Minute), out[0].Start, "reruns once the node is back")
	assert.Equal(t, t0.Add(80*time.Minute), out[0].End)
}

func TestRefusedBindIsRetriedElsewhereOrLater(t *testing.T) {
	s := newSim(t, 2, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 1, 4), time.Hour))
	s.RefuseBinds("a", "", 2) // the first two tries fail whole
	var refusals int
	run(t, s, engine.Config{Policy: queue.StrictPriority(), BindRetryBackoff: time.Minute}, func(c backends.Cycle) {
		for _, b := range c.Binds {
			if b.Err != nil {
				refusals++
			}
		}
	})
	out := s.Outcomes()
	assert.Equal(t, 2, refusals)
	assert.True(t, out[0].Finished)
	assert.Equal(t, t0.Add(3*time.Minute), out[0].Start, "backoffs of a minute, then two (it doubles with each refusal)")
	assert.Empty(t, s.Violations())
}

func TestDoubleBookingIsAViolation(t *testing.T) {
	s := newSim(t, 1, 2)
	require.NoError(t, s.Submit(wholeJob("a", 0, 1, 2), time.Hour))
	require.NoError(t, s.Submit(wholeJob("b", 0, 1, 2), time.Hour))
	ctx := context.Background()
	_, err := s.Next(ctx, time.Time{})
	require.NoError(t, err)
	m := engine.Member{Node: "n0", GPUs: []int{0, 1}}
	require.NoError(t, s.BindMember(ctx, "a", m))
	require.NoError(t, s.BindMember(ctx, "a", m), "binding again is a no-op")
	err = s.BindMember(ctx, "b", m)
	require.ErrorIs(t, err, backends.ErrRefused)
	assert.Len(t, s.Violations(), 1)
	require.ErrorIs(t, s.BindMember(ctx, "b", engine.Member{Node: "n0", GPUs: []int{7}}), backends.ErrRefused)
	require.ErrorIs(t, s.BindMember(ctx, "zz", m), backends.ErrRefused)
	require.ErrorIs(t, s.BindMember(ctx, "b", engine.Member{Node: "nope", GPUs: []int{0}}), backends.ErrRefused)
	require.ErrorIs(t, s.Preempt(ctx, engine.Preemption{Victim: "b"}), backends.ErrRefused)
}

func TestRollbackForgetsTheRun(t *testing.T) {
	s := newSim(t, 2, 2)
	require.NoError(t, s.Submit(wholeJob("a", 0, 2, 2), time.Hour))
	ctx := context.Background()
	_, err := s.Next(ctx, time.Time{})
	require.NoError(t, err)
	m := engine.Member{Node: "n0", GPUs: []int{0, 1}}
	require.NoError(t, s.BindMember(ctx, "a", m))
	require.NoError(t, s.UnbindMember(ctx, "a", m))
	require.NoError(t, s.UnbindMember(ctx, "a", m), "unbinding an unbound member is a no-op")
	o := s.Outcomes()[0]
	assert.False(t, o.Started)
	// The cancelled completion is never delivered.
	_, err = s.Next(ctx, time.Time{})
	require.ErrorIs(t, err, backends.ErrClosed)
}

func TestSubmitErrors(t *testing.T) {
	s := newSim(t, 1, 1)
	require.ErrorIs(t, s.Submit(nil, time.Second), sim.ErrInvalid)
	require.ErrorIs(t, s.Submit(wholeJob("a", 0, 1, 1), 0), sim.ErrInvalid)
	require.NoError(t, s.Submit(wholeJob("a", time.Hour, 1, 1), time.Second))
	require.ErrorIs(t, s.Submit(wholeJob("a", time.Hour, 1, 1), time.Second), sim.ErrDuplicateJob)
	require.ErrorIs(t, s.FailNode(t0, "zz"), sim.ErrInvalid)
	_, err := sim.New(sim.Config{})
	require.ErrorIs(t, err, sim.ErrInvalid)
	evs, err := s.Next(context.Background(), t0.Add(time.Minute))
	require.NoError(t, err)
	assert.Empty(t, evs, "wake before the first event")
	assert.Equal(t, t0.Add(time.Minute), s.Now())
	require.ErrorIs(t, s.Submit(wholeJob("b", 0, 1, 1), time.Second), sim.ErrInvalid, "before the clock")
}

// The same workload replays to the same outcomes, whatever the order of
// the Runner's parallel binds.
func TestDeterministic(t *testing.T) {
	once := func() []sim.Outcome {
		s := newSim(t, 8, 8)
		for i := range 200 {
			n := 1 + i%3
			require.NoError(t, s.Submit(wholeJob(fmt.Sprintf("j%03d", i), time.Duration(i)*time.Minute, n, 1<<(i%4)), time.Duration(30+i%50)*time.Minute))
		}
		run(t, s, engine.Config{Policy: queue.StrictPriority(), Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}}, nil)
		require.Empty(t, s.Violations())
		return s.Outcomes()
	}
	a, b := once(), once()
	require.Equal(t, a, b)
	for _, o := range a {
		require.True(t, o.Finished, o.ID)
	}
}

// Summary's FreeHist is the histogram of State's NodeFree at every cycle,
// through starts, ends, a node failure and its recovery.
func TestSummaryHistogramMatchesState(t *testing.T) {
	s := newSim(t, 4, 8)
	for i := range 40 {
		members, per := 1+i%2, []int{1, 2, 3, 8}[i%4]
		require.NoError(t, s.Submit(wholeJob(fmt.Sprintf("j%02d", i), time.Duration(i)*time.Minute, members, per), time.Duration(10+i%7*13)*time.Minute))
	}
	require.NoError(t, s.FailNode(t0.Add(15*time.Minute), "n2"))
	require.NoError(t, s.RecoverNode(t0.Add(50*time.Minute), "n2"))
	require.NoError(t, s.FailNode(t0.Add(30*time.Second), "n3")) // idle then
	require.NoError(t, s.RecoverNode(t0.Add(40*time.Minute), "n3"))
	cycles, busy := 0, 0
	run(t, s, engine.Config{Policy: queue.StrictPriority(), Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}}, func(backends.Cycle) {
		st := s.State(nil)
		want := make([]int, 9)
		for _, f := range st.NodeFree {
			want[f]++
		}
		got := s.Summary(nil).FreeHist
		got = append(got, make([]int, max(0, 9-len(got)))...)
		require.Equal(t, want, got, "cycle %d", cycles)
		cycles++
		busy += st.BusyGPUs
	})
	assert.Greater(t, cycles, 20)
	assert.Greater(t, busy, 0, "GPUs were busy during the run")
	assert.Empty(t, s.Violations())
}
