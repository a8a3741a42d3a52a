package federation_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// stepClock is a virtual clock whose Sleep moves time on by d at once
// (so a rebalancer loop runs through virtual minutes in a few
// milliseconds); at each Sleep it calls onSleep with the time the sleep
// began, and once the time reaches stop it cancels the run.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	stop    time.Time
	cancel  context.CancelFunc
	onSleep func(at time.Time, d time.Duration)
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	at := c.now
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook(at, d)
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	past := !c.now.Before(c.stop)
	c.mu.Unlock()
	if past {
		c.cancel()
	}
	return ctx.Err()
}

var _ backends.Clock = (*stepClock)(nil)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func inferenceJob(id string, members int) *queue.Job {
	return &queue.Job{ID: id, Queue: "q", Submit: t0, Class: queue.ClassInference, RuntimeEstimate: time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: 8}}}}
}

// The scenario of issue 35: inference (kube) owns no node and gets work it
// cannot place while training (slurm) has idle nodes. The rebalancer does
// not wait for its 15-minute round: it sees the short pool at its first
// check, EarlyInterval (1 minute) after it started, and moves nodes then.
// Until then the pending job's reason names the time of that rebalance.
func TestShortPoolRebalancesEarly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := &stepClock{now: t0, stop: t0.Add(14 * time.Minute), cancel: cancel}
	ku := &observing{fakeMember: newFake(t, "kube", 4)}
	sl := newFake(t, "slurm", 4)
	f, err := federation.New(federation.Config{
		Pools:        []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "kube", Backend: ku}},
		Clock:        clk,
		DrainTimeout: time.Minute, PollInterval: 10 * time.Second,
		Logger: discard,
	})
	require.NoError(t, err)
	_, err = f.Cluster(ctx)
	require.NoError(t, err)
	watch(t, f, sl, ku.fakeMember)
	f.Account(f.Translate("kube", []engine.Event{engine.Submitted(t0, inferenceJob("svc", 1))}))

	// The engine's cycle, seen while the rebalancer sleeps before its
	// first check: the kube pod's reason gains the rebalance's time.
	var reason string
	clk.onSleep = func(at time.Time, d time.Duration) {
		if reason == "" {
			f.Observe(backends.Cycle{Ready: engine.Ready{Pending: []engine.PendingStatus{
				{Job: "svc", Reason: engine.ReasonCapacity, Place: gang.Reason{Code: gang.NoCapacity, Group: 0, Level: "cluster", Fit: 0, Need: 1}}}}})
			reason = ku.cycles[len(ku.cycles)-1].Ready.Pending[0].String()
		}
	}
	err = f.RunRebalancer(ctx)
	require.ErrorIs(t, err, context.Canceled)

	early := t0.Add(time.Minute)
	assert.Contains(t, reason, "capacity: ")
	assert.Contains(t, reason, "waiting for the next rebalance at "+early.Format(time.RFC3339))
	moves := f.Moves()
	require.NotEmpty(t, moves, "the short pool got no node before the 15-minute round")
	for _, mv := range moves {
		require.NoError(t, mv.Err)
		assert.Equal(t, "kube", mv.To)
		assert.Less(t, mv.At.Sub(t0), 15*time.Minute, "moved at %v", mv.At)
		assert.GreaterOrEqual(t, mv.At.Sub(t0), time.Minute, "an early round waits EarlyInterval")
	}
	owner, _, _ := f.Owner(moves[0].Host)
	assert.Equal(t, "kube", owner)
	require.NoError(t, f.CheckExclusive(context.Background()))
}

// Early rounds are bounded: with a pool that stays short (far more demand
// than nodes), rounds that move nodes are at least EarlyInterval apart,
// and each moves at most MaxMoves nodes.
func TestEarlyRoundsAreBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := &stepClock{now: t0, stop: t0.Add(14 * time.Minute), cancel: cancel}
	sl, ku := newFake(t, "slurm", 10), newFake(t, "kube", 10)
	f, err := federation.New(federation.Config{
		Pools:     []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "kube", Backend: ku}},
		Clock:     clk,
		Rebalance: federation.RebalanceConfig{MaxMoves: 1, EarlyInterval: 3 * time.Minute},
		Logger:    discard,
	})
	require.NoError(t, err)
	_, err = f.Cluster(ctx)
	require.NoError(t, err)
	f.Account(f.Translate("kube", []engine.Event{engine.Submitted(t0, inferenceJob("burst", 10))}))
	require.ErrorIs(t, f.RunRebalancer(ctx), context.Canceled)
	moves := f.Moves()
	require.Len(t, moves, 4, "one node at 3, 6, 9 and 12 minutes")
	prev := t0
	for _, mv := range moves {
		require.NoError(t, mv.Err)
		assert.GreaterOrEqual(t, mv.At.Sub(prev), 3*time.Minute)
		prev = mv.At
	}
}

// Without a short pool nothing moves before the period, and a job's
// reason names the periodic round; EarlyInterval < 0 turns early rounds
// off.
func TestNoEarlyRoundWithoutShortPool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early time.Duration
		lent  bool // slurm's nodes are all busy: kube is short but nothing is idle to lend
	}{{"early rounds off", -1, false}, {"no idle node to lend", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clk := &stepClock{now: t0, stop: t0.Add(14 * time.Minute), cancel: cancel}
			ku := &observing{fakeMember: newFake(t, "kube", 2)}
			sl := newFake(t, "slurm", 2)
			f, err := federation.New(federation.Config{
				Pools:     []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "kube", Backend: ku}},
				Clock:     clk,
				Rebalance: federation.RebalanceConfig{EarlyInterval: tc.early},
				Logger:    discard,
			})
			require.NoError(t, err)
			_, err = f.Cluster(ctx)
			require.NoError(t, err)
			if tc.lent {
				for i, n := range []string{"slurm/n0", "slurm/n1"} {
					id := "train" + string(rune('0'+i))
					require.NoError(t, sl.Submit(&queue.Job{ID: id, Queue: "q", Submit: t0,
						Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}, 10*time.Hour))
					_, err = sl.Next(ctx, time.Time{})
					require.NoError(t, err)
					require.NoError(t, f.BindMember(ctx, id, member(n, 0, 1, 2, 3, 4, 5, 6, 7)))
				}
			}
			f.Account(f.Translate("kube", []engine.Event{engine.Submitted(t0, inferenceJob("svc", 1))}))
			var reason string
			clk.onSleep = func(time.Time, time.Duration) {
				if reason == "" {
					f.Observe(backends.Cycle{Ready: engine.Ready{Pending: []engine.PendingStatus{{Job: "svc", Reason: engine.ReasonCapacity}}}})
					reason = ku.cycles[0].Ready.Pending[0].String()
				}
			}
			require.True(t, errors.Is(f.RunRebalancer(ctx), context.Canceled))
			assert.Empty(t, f.Moves())
			assert.Contains(t, reason, "waiting for the next rebalance at "+t0.Add(15*time.Minute).Format(time.RFC3339))
		})
	}
}
