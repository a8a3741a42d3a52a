package sim_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// hangingSim is the simulator with the binds of one job hanging: they
// never return on their own and ignore their context (the worst backend),
// until release is closed.
type hangingSim struct {
	*sim.Sim
	job     string
	release chan struct{}
	calls   atomic.Int64
}

func (h *hangingSim) BindMember(ctx context.Context, job string, m engine.Member) error {
	if job == h.job {
		h.calls.Add(1)
		<-h.release
		return errors.New("hung bind released")
	}
	return h.Sim.BindMember(ctx, job, m)
}

// neverHangs runs 1,000 one-GPU jobs of 10 minutes on 8 x 8 GPUs next to
// "stuck", whose binds never succeed (be is the backend, with stuck's
// failure injected), until the 1,000 have finished. It returns the
// cycles run and the binds of stuck reported failed.
func neverHangs(t *testing.T, s *sim.Sim, be backends.Backend, callTimeout time.Duration) (cycles, refusals int) {
	t.Helper()
	const others = 1000
	require.NoError(t, s.Submit(wholeJob("stuck", 0, 1, 1), 10*time.Minute))
	for i := range others {
		require.NoError(t, s.Submit(wholeJob(fmt.Sprintf("j%04d", i), time.Duration(i)*time.Second, 1, 1), 10*time.Minute))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var buf []int
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:      engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}},
		Backend:     be,
		Clock:       s,
		CallTimeout: callTimeout,
		Observe: func(c backends.Cycle) {
			cycles++
			for _, b := range c.Binds {
				if b.Job == "stuck" && b.Err != nil && !b.Unknown {
					refusals++
				}
			}
			if st := s.State(buf); st.Finished == others {
				cancel()
			}
		},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled, "Run ends when the test has seen the 1,000 finish")
	case <-time.After(2 * time.Minute):
		t.Fatal("Run hung")
	}
	finished := 0
	for _, o := range s.Outcomes() {
		if o.ID == "stuck" {
			assert.False(t, o.Started, "stuck never ran")
			continue
		}
		if o.Finished {
			finished++
		}
	}
	assert.Equal(t, others, finished, "every other job finished")
	assert.Empty(t, s.Violations())
	// After MaxBindTries (5) failures the job is held, visible, with
	// its last error.
	v := r.View()
	require.NotNil(t, v)
	var reason engine.ReasonCode
	for _, p := range v.Pending {
		if p.Job == "stuck" {
			reason = p.Reason
		}
	}
	assert.Equal(t, engine.ReasonHeld, reason, "stuck is held, with the reason")
	assert.Contains(t, v.Holds["stuck"], "held: 5 binds failed in a row")
	t.Logf("cycles %d, stuck's binds refused %d times, virtual time %v", cycles, refusals, s.Now().Sub(t0))
	return cycles, refusals
}

// A bind that blocks forever (ignoring its context) delays no other job:
// it runs on its own goroutine, times out into "unknown" (its GPU stays
// booked), and the backend's running list, read a ReconcileInterval
// later, says it does not run: the bind is fenced and failed, tried again
// after the backoff, and held after MaxBindTries. The 1,000 other jobs
// all finish.
func TestBindBlockingForeverDoesNotHang(t *testing.T) {
	s := newSim(t, 8, 8)
	h := &hangingSim{Sim: s, job: "stuck", release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	_, refusals := neverHangs(t, s, h, 20*time.Millisecond)
	assert.Equal(t, 5, refusals, "MaxBindTries, then held")
	assert.Equal(t, int64(5), h.calls.Load(), "one call per try: a timed-out call is not retried")
}

// A bind that fails transiently forever is given up after its attempts,
// reported failed, tried less and less often, and held after
// MaxBindTries.
func TestBindFailingForeverDoesNotHang(t *testing.T) {
	s := newSim(t, 8, 8)
	s.FailBinds("stuck", "", -1)
	cycles, refusals := neverHangs(t, s, s, time.Second)
	assert.Equal(t, 5, refusals, "MaxBindTries, then held")
	assert.Less(t, refusals, cycles)
}

// A job whose binds always fail no longer keeps a simulation going: it
// is held after MaxBindTries and Run returns once nothing else can
// happen, with the job visible and held.
func TestRunEndsWhenOnlyHeldJobsRemain(t *testing.T) {
	s := newSim(t, 1, 8)
	require.NoError(t, s.Submit(wholeJob("ok", 0, 1, 4), time.Hour))
	require.NoError(t, s.Submit(wholeJob("bad", 0, 1, 4), time.Hour))
	s.RefuseBinds("bad", "", -1)
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}},
		Backend: s, Clock: s, MaxBindTries: 3,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not end with only a held job left")
	}
	var held bool
	for _, p := range r.View().Pending {
		held = held || p.Job == "bad" && p.Reason == engine.ReasonHeld
	}
	assert.True(t, held, "bad is held and visible")
	assert.True(t, s.Outcomes()[0].Finished, "ok ran")
}

// slowSim is the simulator with the binds of one job hanging for ever
// (ignoring their context), counting them.
type slowSim struct {
	*sim.Sim
	job     string
	release chan struct{}
	calls   atomic.Int64
}

func (h *slowSim) BindMember(ctx context.Context, job string, m engine.Member) error {
	if job == h.job {
		h.calls.Add(1)
		<-h.release
		return errors.New("released")
	}
	return h.Sim.BindMember(ctx, job, m)
}

// On the simulator's virtual clock a hung call changes no other job's
// start: with one job's binds hanging for ever (wall-clock CallTimeout
// 50 ms), every other job starts at its arrival, as in the same run
// without the hang, and the hung job is held after MaxBindTries instead
// of being tried for ever. (The clock does not move while calls are in
// flight, see backends/binder.go; TestRunnerHungBindDelaysNoOtherJob in
// package backends checks the same on a real clock.)
func TestHungBindDelaysNoOtherJob(t *testing.T) {
	starts := func(hang bool) (map[string]time.Time, int) {
		s := newSim(t, 8, 8)
		var be backends.Backend = s
		if hang {
			h := &slowSim{Sim: s, job: "stuck", release: make(chan struct{})}
			t.Cleanup(func() { close(h.release) })
			be = h
		}
		require.NoError(t, s.Submit(wholeJob("stuck", 0, 1, 1), 10*time.Minute))
		for i := range 300 {
			require.NoError(t, s.Submit(wholeJob(fmt.Sprintf("j%03d", i), time.Duration(i)*20*time.Second, 1, 1+i%2), 10*time.Minute))
		}
		cycles := 0
		r, err := backends.NewRunner(backends.RunnerConfig{
			Engine:      engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}},
			Backend:     be,
			Clock:       s,
			CallTimeout: 50 * time.Millisecond,
			Observe:     func(backends.Cycle) { cycles++ },
		})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, r.Run(ctx))
		out := map[string]time.Time{}
		for _, o := range s.Outcomes() {
			if o.Started {
				out[o.ID] = o.Start
			}
		}
		return out, cycles
	}
	clean, _ := starts(false)
	hung, cycles := starts(true)
	require.Len(t, clean, 301)
	_, ran := hung["stuck"]
	assert.False(t, ran, "stuck never ran")
	for id, at := range clean {
		if id == "stuck" {
			continue
		}
		assert.Equal(t, at, hung[id], "%s starts as without the hang", id)
		assert.Equal(t, t0.Add(20*time.Second*time.Duration(atoi(id[1:]))), at, "%s starts at its arrival (the cluster has room)", id)
	}
	t.Logf("%d cycles with the hang", cycles)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
