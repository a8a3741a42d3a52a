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
// cycles run and the binds of stuck reported refused.
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
			for _, id := range c.Outcome.RefusedBinds {
				if id == "stuck" {
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
	// The job waits with a reason.
	v := r.View()
	require.NotNil(t, v)
	var reason engine.ReasonCode
	for _, p := range v.Pending {
		if p.Job == "stuck" {
			reason = p.Reason
		}
	}
	assert.Equal(t, engine.ReasonBindRefused, reason, "stuck waits, with the reason")
	t.Logf("cycles %d, stuck's binds refused %d times, virtual time %v", cycles, refusals, s.Now().Sub(t0))
	return cycles, refusals
}

// A bind that blocks forever (ignoring its context) costs at most one
// CallTimeout each time the job is tried (a timed-out call is not retried
// in the same cycle), and the job is tried less and less often: the 1,000
// other jobs all finish.
func TestBindBlockingForeverDoesNotHang(t *testing.T) {
	s := newSim(t, 8, 8)
	h := &hangingSim{Sim: s, job: "stuck", release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	_, refusals := neverHangs(t, s, h, 20*time.Millisecond)
	assert.Positive(t, refusals)
	// 3 attempts per try; the backoff doubles from 100 ms to 10 min over
	// ~2h40m of virtual time: a few dozen tries, not one per cycle.
	assert.LessOrEqual(t, refusals, 40, "the backoff grows")
	assert.Equal(t, int64(refusals), h.calls.Load(), "one call per try: a timed-out call is not retried in the cycle")
}

// A bind that fails transiently forever is given up after its attempts,
// reported refused, and tried less and less often.
func TestBindFailingForeverDoesNotHang(t *testing.T) {
	s := newSim(t, 8, 8)
	s.FailBinds("stuck", "", -1)
	cycles, refusals := neverHangs(t, s, s, time.Second)
	assert.Positive(t, refusals)
	assert.LessOrEqual(t, refusals, 40, "the backoff grows")
	assert.Less(t, refusals, cycles)
}
