package federation_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// ten 8-GPU hosts, 6 owned by training, 4 by inference.
func hosts(busy ...string) []federation.HostView {
	var out []federation.HostView
	for i := range 10 {
		h := federation.HostView{Host: fmt.Sprintf("h%d", i), Owner: "train", Pools: []string{"train", "infer"}, GPUs: 8}
		if i >= 6 {
			h.Owner = "infer"
		}
		for _, b := range busy {
			if b == h.Host {
				h.Busy = true
			}
		}
		out = append(out, h)
	}
	return out
}

func demand(trainH, inferH float64) []federation.PoolDemand {
	return []federation.PoolDemand{
		{Pool: "train", Quota: 0.6, PendingGPUHours: trainH},
		{Pool: "infer", Quota: 0.4, PendingGPUHours: inferH},
	}
}

func TestPlanDemand(t *testing.T) {
	cfg := federation.RebalanceConfig{}
	// Inference wants 4 hours x 8 GPUs over 15 min = 128 GPUs; its own 4
	// nodes are busy; training has 3 idle nodes and no demand.
	mv := federation.Plan(t0, cfg, demand(0, 32), hosts("h0", "h1", "h2", "h6", "h7", "h8", "h9"))
	require.Len(t, mv, 2, "MaxMoves bounds the round")
	assert.Equal(t, "h3", mv[0].Host)
	assert.Equal(t, "h4", mv[1].Host)
	for _, m := range mv {
		assert.Equal(t, "train", m.From)
		assert.Equal(t, "infer", m.To)
		assert.Contains(t, m.Reason, "demand: infer wants")
	}
	// Deterministic: the same inputs (in another order) give the same plan.
	hs := hosts("h0", "h1", "h2", "h6", "h7", "h8", "h9")
	for i, j := 0, len(hs)-1; i < j; i, j = i+1, j-1 {
		hs[i], hs[j] = hs[j], hs[i]
	}
	assert.Equal(t, mv, federation.Plan(t0, cfg, demand(0, 32), hs))
}

func TestPlanHysteresis(t *testing.T) {
	// 1 GPU-hour over 15 min = 4 GPUs unmet: under one node's worth.
	assert.Empty(t, federation.Plan(t0, federation.RebalanceConfig{}, demand(0, 1), hosts("h6", "h7", "h8", "h9")))
	// 2 GPU-hours = 8 GPUs: one node's worth moves.
	assert.Len(t, federation.Plan(t0, federation.RebalanceConfig{MaxMoves: 5}, demand(0, 2), hosts("h6", "h7", "h8", "h9")), 1)
	// Training has demand for its idle GPUs: nothing spare to give.
	assert.Empty(t, federation.Plan(t0, federation.RebalanceConfig{}, demand(12, 32), hosts("h6", "h7", "h8", "h9")))
}

func TestPlanMinShareAndCooldown(t *testing.T) {
	// Everything idle on the training side, huge inference demand: the
	// donor keeps MinShare (0.5) of its 48-GPU quota, so 3 of its 6 nodes
	// may go, one round at a time.
	cfg := federation.RebalanceConfig{MaxMoves: 10}
	mv := federation.Plan(t0, cfg, demand(0, 1000), hosts("h6", "h7", "h8", "h9"))
	assert.Len(t, mv, 3)
	// A node that just moved is not moved again within the cooldown.
	hs := hosts("h6", "h7", "h8", "h9")
	for i := range hs {
		hs[i].LastMove = t0.Add(-10 * time.Minute)
	}
	assert.Empty(t, federation.Plan(t0, cfg, demand(0, 1000), hs))
	assert.Len(t, federation.Plan(t0.Add(30*time.Minute), cfg, demand(0, 1000), hs), 3)
}

func TestPlanReturnsTowardQuota(t *testing.T) {
	// After a burst inference owns 6 nodes; no demand anywhere: one idle
	// nodes go back, at most MaxMoves a round, until 60/40.
	hs := hosts()
	for i := 3; i < 6; i++ {
		hs[i].Owner = "infer"
	}
	mv := federation.Plan(t0, federation.RebalanceConfig{MaxMoves: 5}, demand(0, 0), hs)
	require.Len(t, mv, 3)
	assert.Len(t, federation.Plan(t0, federation.RebalanceConfig{}, demand(0, 0), hs), 2)
	for _, m := range mv {
		assert.Equal(t, "infer", m.From)
		assert.Equal(t, "train", m.To)
		assert.Contains(t, m.Reason, "quota:")
	}
	// At the quota: nothing.
	assert.Empty(t, federation.Plan(t0, federation.RebalanceConfig{}, demand(0, 0), hosts()))
}

// It cannot oscillate: replaying rounds on a demand that flips every
// round moves each node at most once per cooldown.
func TestPlanNoOscillation(t *testing.T) {
	cfg := federation.RebalanceConfig{}.WithDefaults()
	hs := hosts()
	now := t0
	last := map[string]time.Time{}
	for r := range 12 {
		d := demand(1000, 0)
		if r%2 == 0 {
			d = demand(0, 1000)
		}
		for _, m := range federation.Plan(now, cfg, d, hs) {
			if prev, ok := last[m.Host]; ok {
				assert.GreaterOrEqual(t, now.Sub(prev), cfg.Cooldown, "round %d: %s moved again", r, m.Host)
			}
			last[m.Host] = now
			for i := range hs {
				if hs[i].Host == m.Host {
					hs[i].Owner, hs[i].LastMove = m.To, now
				}
			}
		}
		now = now.Add(cfg.Interval)
	}
}

// Rebalance plans from the federation's own books (pending jobs booked
// from the event stream) and applies the moves through the lenders.
func TestRebalanceRound(t *testing.T) {
	sl, ku := newFake(t, "slurm", 5), newFake(t, "kube", 5)
	f, err := federation.New(federation.Config{
		Pools:  []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "kube", Backend: ku}},
		Clock:  sl.Sim,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = f.Cluster(ctx)
	require.NoError(t, err)
	watch(t, f, sl, ku)
	// kube owns nothing and gets a burst of inference demand.
	j := &queue.Job{ID: "svc", Queue: "q", Submit: t0, Class: queue.ClassInference, RuntimeEstimate: 2 * time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: 4, GPUsPerMember: 4}}}}
	f.Account(f.Translate("kube", []engine.Event{engine.Submitted(t0, j)}))
	done, err := f.Rebalance(ctx)
	require.NoError(t, err)
	require.Len(t, done, 2)
	for _, m := range done {
		owner, _, _ := f.Owner(m.Host)
		assert.Equal(t, "kube", owner)
	}
	require.NoError(t, f.CheckExclusive(ctx))
}

// A pool under its quota with unmet demand reclaims nodes from a pool over
// its own even when that pool has demand too: idle nodes first, then busy
// ones, drained.
func TestPlanReclaim(t *testing.T) {
	// Training borrowed h6..h8 (9 nodes, over its 6-node quota); all its
	// nodes are busy but h7; it has pending work. Inference (h9, busy)
	// has a burst.
	hs := hosts("h0", "h1", "h2", "h3", "h4", "h5", "h6", "h8", "h9")
	for i := 6; i < 9; i++ {
		hs[i].Owner = "train"
	}
	mv := federation.Plan(t0, federation.RebalanceConfig{}, demand(100, 100), hs)
	require.Len(t, mv, 2)
	assert.Equal(t, federation.Move{Host: "h7", From: "train", To: "infer", Reason: mv[0].Reason}, mv[0])
	assert.Contains(t, mv[0].Reason, "reclaim: infer owns 8 of its 32-GPU quota")
	assert.Equal(t, "h0", mv[1].Host)
	assert.True(t, mv[1].Drain)
	assert.Contains(t, mv[1].Reason, "drained")
	// Next round: h0 is still draining toward inference; it counts as
	// inference's and is not planned again. One more node is owed.
	hs[7].Owner, hs[7].LastMove = "infer", t0
	hs[0].MovingTo = "infer"
	mv = federation.Plan(t0.Add(15*time.Minute), federation.RebalanceConfig{}, demand(100, 100), hs)
	require.Len(t, mv, 1)
	assert.Equal(t, "h1", mv[0].Host)
	assert.True(t, mv[0].Drain)
	// Training at its quota: nothing more to reclaim, and it has no spare.
	hs[1].MovingTo = "infer"
	assert.Empty(t, federation.Plan(t0.Add(30*time.Minute), federation.RebalanceConfig{}, demand(100, 100), hs))
}

// Reservations of the engine's View count as their pool's demand when due
// within the horizon.
func TestReservedDemand(t *testing.T) {
	f, _, _ := fixture(t)
	_, err := f.Cluster(context.Background())
	require.NoError(t, err)
	j := func(id string) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: t0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}
	}
	f.Account(f.Translate("kube", []engine.Event{engine.Submitted(t0, j("soon")), engine.Submitted(t0, j("late"))}))
	v := &engine.View{Reservations: []engine.Reservation{
		{Job: "soon", Start: t0.Add(5 * time.Minute), GPUs: roaring.BitmapOf(0, 1, 2, 3)},
		{Job: "late", Start: t0.Add(time.Hour), GPUs: roaring.BitmapOf(4, 5)},
		{Job: "unknown", Start: t0, GPUs: roaring.BitmapOf(6)},
	}}
	assert.Equal(t, map[string]federation.PoolDemand{"kube": {Pool: "kube", ReservedGPUs: 4}}, f.ReservedDemand(v, t0, 15*time.Minute))
	assert.Nil(t, f.ReservedDemand(nil, t0, time.Minute))
}

// The rebalancer's drain moves are reclaims: under PreemptOnReclaim the
// busy node's job is requeued and the node moves in the same round.
func TestRebalanceReclaimPreempts(t *testing.T) {
	f, sl, ku := fixtureWith(t, func(c *federation.Config) { c.PreemptOnReclaim = true })
	ctx := context.Background()
	_, err := f.Cluster(ctx) // slurm owns all four hosts: over its 60% quota
	require.NoError(t, err)
	for i := range 4 {
		id := "train" + string(rune('0'+i))
		require.NoError(t, sl.Submit(&queue.Job{ID: id, Queue: "q", Submit: t0,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}, 10*time.Hour))
		_, err = sl.Next(ctx, time.Time{})
		require.NoError(t, err)
		require.NoError(t, f.BindMember(ctx, id, member("slurm/n"+string(rune('0'+i)), 0, 1, 2, 3, 4, 5, 6, 7)))
	}
	steps := watch(t, f, sl, ku)
	j := &queue.Job{ID: "svc", Queue: "q", Submit: t0, Class: queue.ClassInference, RuntimeEstimate: 2 * time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: 2, GPUsPerMember: 8}}}}
	f.Account(f.Translate("kube", []engine.Event{engine.Submitted(t0, j)}))
	done, err := f.Rebalance(ctx)
	require.NoError(t, err)
	assert.Empty(t, done, "busy nodes move in the background")
	f.Wait()
	var preempted []string
	moved := 0
	for _, mv := range f.Moves() {
		require.NoError(t, mv.Err)
		assert.Contains(t, mv.Reason, "reclaim")
		preempted = append(preempted, mv.Preempted...)
		owner, _, _ := f.Owner(mv.Host)
		assert.Equal(t, "kube", owner)
		moved++
	}
	// One node: slurm keeps its 60% quota (19.2 of 32 GPUs; 24 left).
	assert.Equal(t, 1, moved, "steps: %v", *steps)
	assert.Len(t, preempted, moved)
	require.NoError(t, f.CheckExclusive(ctx))
}
