package federation_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// fixture: four hosts known to both pools; slurm owns them all at first
// (kube's copies start schedulable too, so Cluster must lend them).
func fixture(t *testing.T) (*federation.Federation, *fakeMember, *fakeMember) {
	return fixtureWith(t, nil)
}

// fixtureWith is fixture with a change to the config.
func fixtureWith(t *testing.T, change func(*federation.Config)) (*federation.Federation, *fakeMember, *fakeMember) {
	t.Helper()
	sl, ku := newFake(t, "slurm", 4), newFake(t, "kube", 4)
	cfg := federation.Config{
		Pools: []federation.Pool{
			{Name: "slurm", Backend: sl},
			{Name: "kube", Backend: ku},
		},
		Clock:        sl.Sim,
		DrainTimeout: time.Minute, PollInterval: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if change != nil {
		change(&cfg)
	}
	f, err := federation.New(cfg)
	require.NoError(t, err)
	return f, sl, ku
}

// watch makes every lender call of both members check the invariant.
func watch(t *testing.T, f *federation.Federation, ms ...*fakeMember) *[]string {
	var steps []string
	for _, m := range ms {
		m.after = func(op, node string) {
			steps = append(steps, op+" "+node)
			checking.Store(true)
			defer checking.Store(false)
			if err := f.CheckExclusive(context.Background()); err != nil {
				t.Errorf("after %s %s: %v", op, node, err)
			}
		}
	}
	return &steps
}

func TestClusterMergesAndLends(t *testing.T) {
	f, sl, ku := fixture(t)
	sp, err := f.Cluster(context.Background())
	require.NoError(t, err)
	require.NoError(t, sp.Validate())
	assert.Equal(t, []string{federation.LevelPool}, sp.Levels)
	require.Len(t, sp.Nodes, 8)
	states := map[string]topo.NodeState{}
	for _, n := range sp.Nodes {
		states[n.Name] = n.State
		p, h, ok := federation.SplitNode(n.Name)
		require.True(t, ok)
		assert.Equal(t, p, n.Domains[0])
		assert.Equal(t, p, n.Labels[federation.LabelPool])
		assert.Equal(t, h, n.Labels[federation.LabelHost])
	}
	assert.Equal(t, topo.Ready, states["slurm/n0"])
	assert.Equal(t, topo.Cordoned, states["kube/n0"])
	for _, h := range []string{"n0", "n1", "n2", "n3"} {
		st, err := ku.NodeStatus(context.Background(), h)
		require.NoError(t, err)
		assert.False(t, st.Schedulable, h)
		st, err = sl.NodeStatus(context.Background(), h)
		require.NoError(t, err)
		assert.True(t, st.Schedulable, h)
	}
	require.NoError(t, f.CheckExclusive(context.Background()))
}

func TestClusterKeepsExistingOwner(t *testing.T) {
	sl, ku := newFake(t, "slurm", 2, "n1"), newFake(t, "kube", 2, "n0")
	f, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "kube", Backend: ku}}})
	require.NoError(t, err)
	_, err = f.Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"n0": "slurm", "n1": "kube"}, f.Owners())
	require.NoError(t, f.CheckExclusive(context.Background()))
}

func TestNoLender(t *testing.T) {
	sl := newFake(t, "slurm", 2)
	f, err := federation.New(federation.Config{Pools: []federation.Pool{
		{Name: "slurm", Backend: sl}, {Name: "kube", Backend: plain{sl.Sim}}}})
	require.NoError(t, err)
	_, err = f.Cluster(context.Background())
	require.ErrorIs(t, err, federation.ErrNoLender)
}

// plain hides the NodeLender methods.
type plain struct{ backends.Backend }

func TestInvalidConfig(t *testing.T) {
	sl := newFake(t, "slurm", 1)
	for _, cfg := range []federation.Config{
		{},
		{Pools: []federation.Pool{{Name: "", Backend: sl}}},
		{Pools: []federation.Pool{{Name: "a/b", Backend: sl}}},
		{Pools: []federation.Pool{{Name: "a"}}},
		{Pools: []federation.Pool{{Name: "a", Backend: sl}, {Name: "a", Backend: sl}}},
		{Pools: []federation.Pool{{Name: "a", Backend: sl, Quota: 0.7}, {Name: "b", Backend: sl, Quota: 0.7}}},
		{Pools: []federation.Pool{{Name: "a", Backend: sl, Quota: -1}}},
	} {
		_, err := federation.New(cfg)
		require.ErrorIs(t, err, federation.ErrInvalidConfig)
	}
}

func member(node string, gpus ...int) engine.Member {
	return engine.Member{Node: node, GPUs: gpus}
}

func TestRoutingAndOwnership(t *testing.T) {
	f, sl, _ := fixture(t)
	ctx := context.Background()
	_, err := f.Cluster(ctx)
	require.NoError(t, err)
	require.NoError(t, sl.Submit(&queue.Job{ID: "train", Queue: "q", Submit: t0,
		Request: gang.Request{Groups: []gang.Group{{Members: 2, GPUsPerMember: 8}}}}, time.Hour))
	// kube does not own n0: refused before kube is asked.
	err = f.BindMember(ctx, "x", member("kube/n0", 0))
	require.ErrorIs(t, err, backends.ErrRefused)
	err = f.BindMember(ctx, "x", member("nowhere/n0", 0))
	require.ErrorIs(t, err, backends.ErrRefused)
	err = f.BindMember(ctx, "x", member("n0", 0))
	require.ErrorIs(t, err, backends.ErrRefused)
	// A gang across pools is refused.
	err = f.BindGang(ctx, "train", []engine.Member{member("slurm/n0", 0), member("kube/n1", 0)})
	require.ErrorIs(t, err, backends.ErrRefused)
	// Routed to slurm, under the member's own names.
	evs, err := sl.Next(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	require.NoError(t, f.BindGang(ctx, "train", []engine.Member{member("slurm/n0", all...), member("slurm/n1", all...)}))
	st, err := sl.NodeStatus(ctx, "n0")
	require.NoError(t, err)
	assert.True(t, st.Busy)
	// A busy node is not planned away.
	for _, mv := range f.PlanRound(t0) {
		assert.NotContains(t, []string{"n0", "n1"}, mv.Host)
	}
}

func TestTranslate(t *testing.T) {
	f, _, _ := fixture(t)
	_, err := f.Cluster(context.Background())
	require.NoError(t, err)
	j := &queue.Job{ID: "svc", Queue: "q", Submit: t0, Class: queue.ClassInference,
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, Selector: map[string]string{"a": "b"}}}}}
	evs := f.Translate("kube", []engine.Event{
		engine.Submitted(t0, j),
		engine.NodeChanged(t0, "n0", topo.Ready, nil), // kube does not own n0
		engine.NodeFailed(t0, "n1"),
	})
	assert.Equal(t, map[string]string{"a": "b", federation.LabelPool: "kube"}, evs[0].Job.Request.Groups[0].Selector)
	assert.Equal(t, map[string]string{"a": "b"}, j.Request.Groups[0].Selector, "the member's job is not modified")
	assert.Equal(t, "kube/n0", evs[1].Node.Name)
	assert.Equal(t, topo.Cordoned, evs[1].Node.State)
	assert.Equal(t, "kube", evs[1].Node.Labels[federation.LabelPool])
	assert.Equal(t, "kube/n1", evs[2].NodeName)
}

func TestMoveNode(t *testing.T) {
	f, sl, ku := fixture(t)
	ctx := context.Background()
	_, err := f.Cluster(ctx)
	require.NoError(t, err)
	steps := watch(t, f, sl, ku)
	require.NoError(t, f.MoveNode(ctx, "n3", "kube", "test"))
	assert.Equal(t, []string{"slurm:lend n3", "kube:reclaim n3"}, *steps)
	owner, moving, _ := f.Owner("n3")
	assert.Equal(t, "kube", owner)
	assert.False(t, moving)
	// Binds follow the owner.
	require.ErrorIs(t, f.BindMember(ctx, "x", member("slurm/n3", 0)), backends.ErrRefused)
	// And back.
	require.NoError(t, f.MoveNode(ctx, "n3", "slurm", "back"))
	owner, _, _ = f.Owner("n3")
	assert.Equal(t, "slurm", owner)
	// Not a move: to its own owner, to an unknown pool, an unknown host.
	require.ErrorIs(t, f.MoveNode(ctx, "n3", "slurm", ""), federation.ErrMove)
	require.ErrorIs(t, f.MoveNode(ctx, "n3", "nowhere", ""), federation.ErrMove)
	require.ErrorIs(t, f.MoveNode(ctx, "n9", "kube", ""), federation.ErrUnknownNode)
	require.Len(t, f.Moves(), 2)
}

func TestMoveFailuresRollBack(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(sl, ku *fakeMember)
		wantErr error
		steps   []string
		// leftOut: the node ends unschedulable everywhere (rollback failed
		// too).
		leftOut bool
	}{
		{name: "lend fails", setup: func(sl, _ *fakeMember) { sl.fail["lend"] = 1 },
			wantErr: errInjected, steps: []string{"slurm:lend n3", "slurm:reclaim n3"}},
		{name: "status fails", setup: func(sl, _ *fakeMember) { sl.fail["status"] = 1 },
			wantErr: errInjected, steps: []string{"slurm:lend n3", "slurm:reclaim n3"}},
		{name: "reclaim fails", setup: func(_, ku *fakeMember) { ku.fail["reclaim"] = 1 },
			wantErr: errInjected, steps: []string{"slurm:lend n3", "kube:reclaim n3", "kube:lend n3", "slurm:reclaim n3"}},
		{name: "reclaim fails halfway", setup: func(_, ku *fakeMember) { ku.fail["reclaim"] = 1; ku.partial = true },
			wantErr: errInjected, steps: []string{"slurm:lend n3", "kube:reclaim n3", "kube:lend n3", "slurm:reclaim n3"}},
		{name: "reclaim and re-lend fail", setup: func(_, ku *fakeMember) { ku.fail["reclaim"] = 1; ku.fail["lend"] = 1 },
			wantErr: errInjected, steps: []string{"slurm:lend n3", "kube:reclaim n3", "kube:lend n3"}, leftOut: true},
		{name: "rollback reclaim fails", setup: func(sl, ku *fakeMember) { ku.fail["reclaim"] = 1; sl.fail["reclaim"] = 1 },
			wantErr: errInjected, steps: []string{"slurm:lend n3", "kube:reclaim n3", "kube:lend n3", "slurm:reclaim n3"}, leftOut: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, sl, ku := fixture(t)
			ctx := context.Background()
			_, err := f.Cluster(ctx)
			require.NoError(t, err)
			c.setup(sl, ku)
			steps := watch(t, f, sl, ku)
			err = f.MoveNode(ctx, "n3", "kube", "test")
			require.ErrorIs(t, err, federation.ErrMove)
			require.ErrorIs(t, err, c.wantErr)
			assert.Equal(t, c.steps, *steps)
			owner, moving, _ := f.Owner("n3")
			assert.Equal(t, "slurm", owner)
			assert.False(t, moving)
			s1, err := sl.NodeStatus(ctx, "n3")
			require.NoError(t, err)
			s2, err := ku.NodeStatus(ctx, "n3")
			require.NoError(t, err)
			assert.False(t, s2.Schedulable)
			assert.Equal(t, !c.leftOut, s1.Schedulable)
			require.NoError(t, f.CheckExclusive(ctx))
			recs := f.Moves()
			require.Len(t, recs, 1)
			require.Error(t, recs[0].Err)
		})
	}
}

func TestMoveDrainTimeout(t *testing.T) {
	f, sl, ku := fixture(t)
	ctx := context.Background()
	_, err := f.Cluster(ctx)
	require.NoError(t, err)
	require.NoError(t, sl.Submit(&queue.Job{ID: "long", Queue: "q", Submit: t0,
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}, 10*time.Hour))
	_, err = sl.Next(ctx, time.Time{})
	require.NoError(t, err)
	require.NoError(t, f.BindMember(ctx, "long", member("slurm/n3", 0, 1, 2, 3, 4, 5, 6, 7)))
	steps := watch(t, f, sl, ku)
	err = f.MoveNode(ctx, "n3", "kube", "burst")
	require.ErrorIs(t, err, federation.ErrDrainTimeout)
	assert.Equal(t, []string{"slurm:lend n3", "slurm:reclaim n3"}, *steps)
	owner, _, _ := f.Owner("n3")
	assert.Equal(t, "slurm", owner)
	require.NoError(t, f.CheckExclusive(ctx))
}

// A reclaim under PreemptOnReclaim requeues the jobs on the node in the
// lending system and moves it at once; a failed requeue rolls back; without
// the policy, a reclaim waits for the jobs as MoveNode does.
func TestReclaimPreempts(t *testing.T) {
	busy := func(t *testing.T, preempt bool) (*federation.Federation, *fakeMember, *fakeMember) {
		f, sl, ku := fixtureWith(t, func(c *federation.Config) { c.PreemptOnReclaim = preempt })
		ctx := context.Background()
		_, err := f.Cluster(ctx)
		require.NoError(t, err)
		require.NoError(t, sl.Submit(&queue.Job{ID: "long", Queue: "q", Submit: t0,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}, 10*time.Hour))
		_, err = sl.Next(ctx, time.Time{})
		require.NoError(t, err)
		require.NoError(t, f.BindMember(ctx, "long", member("slurm/n3", 0, 1, 2, 3, 4, 5, 6, 7)))
		return f, sl, ku
	}
	ctx := context.Background()
	t.Run("preempt", func(t *testing.T) {
		f, sl, ku := busy(t, true)
		steps := watch(t, f, sl, ku)
		require.NoError(t, f.Reclaim(ctx, "n3", "kube", "reclaim"))
		assert.Equal(t, []string{"slurm:lend n3", "slurm:requeue long", "kube:reclaim n3"}, *steps)
		owner, _, _ := f.Owner("n3")
		assert.Equal(t, "kube", owner)
		mv := f.Moves()
		require.Len(t, mv, 1)
		assert.NoError(t, mv[0].Err)
		assert.Equal(t, []string{"long"}, mv[0].Preempted)
		require.NoError(t, f.CheckExclusive(ctx))
	})
	t.Run("requeue fails", func(t *testing.T) {
		f, sl, ku := busy(t, true)
		sl.fail["requeue"] = 1
		steps := watch(t, f, sl, ku)
		err := f.Reclaim(ctx, "n3", "kube", "reclaim")
		require.ErrorIs(t, err, federation.ErrMove)
		require.ErrorIs(t, err, errInjected)
		assert.Equal(t, []string{"slurm:lend n3", "slurm:requeue long", "slurm:reclaim n3"}, *steps)
		owner, moving, _ := f.Owner("n3")
		assert.Equal(t, "slurm", owner)
		assert.False(t, moving)
		st, err := sl.NodeStatus(ctx, "n3")
		require.NoError(t, err)
		assert.True(t, st.Busy, "the job still runs")
		require.NoError(t, f.CheckExclusive(ctx))
	})
	t.Run("no policy", func(t *testing.T) {
		f, sl, ku := busy(t, false)
		steps := watch(t, f, sl, ku)
		require.ErrorIs(t, f.Reclaim(ctx, "n3", "kube", "reclaim"), federation.ErrDrainTimeout)
		assert.Equal(t, []string{"slurm:lend n3", "slurm:reclaim n3"}, *steps)
	})
}

// The federation's event stream merges both members' in time order, on
// wall-clock members (backends.Feed).
func TestNextMerges(t *testing.T) {
	a, b := &feedMember{fakeMember: newFake(t, "slurm", 2), feed: backends.NewFeed()}, &feedMember{fakeMember: newFake(t, "kube", 2), feed: backends.NewFeed()}
	f, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: a}, {Name: "kube", Backend: b}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = f.Cluster(ctx)
	require.NoError(t, err)
	j := func(id string) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: t0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}}}}
	}
	require.NoError(t, b.feed.Push(engine.Submitted(t0.Add(2*time.Second), j("k1"))))
	require.NoError(t, a.feed.Push(engine.Submitted(t0.Add(time.Second), j("s1")), engine.Submitted(t0.Add(3*time.Second), j("s2"))))
	var got []engine.Event
	for len(got) < 3 {
		evs, err := f.Next(ctx, time.Now().Add(time.Second))
		require.NoError(t, err)
		got = append(got, evs...)
	}
	for i := 1; i < len(got); i++ {
		assert.False(t, got[i].Time.Before(got[i-1].Time), "events out of order: %v", got)
	}
	pools := map[string]string{}
	for _, ev := range got {
		pools[ev.Job.ID] = ev.Job.Request.Groups[0].Selector[federation.LabelPool]
	}
	assert.Equal(t, map[string]string{"s1": "slurm", "s2": "slurm", "k1": "kube"}, pools)
	// Pending demand is booked per pool.
	a.feed.Close()
	b.feed.Close()
	for {
		_, err := f.Next(ctx, time.Time{})
		if err != nil {
			require.ErrorIs(t, err, backends.ErrClosed)
			break
		}
	}
}

// feedMember replaces the simulator's virtual-clock stream by a Feed.
type feedMember struct {
	*fakeMember
	feed *backends.Feed
}

func (m *feedMember) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	return m.feed.Next(ctx, wake)
}

// Node reports are gated by the books when delivered: a copy its pool does
// not own is never delivered ready; the federation's own report of a move
// makes the new owner's copy ready.
func TestNextGatesNodeReports(t *testing.T) {
	a, b := &feedMember{fakeMember: newFake(t, "slurm", 2), feed: backends.NewFeed()}, &feedMember{fakeMember: newFake(t, "kube", 2), feed: backends.NewFeed()}
	f, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: a}, {Name: "kube", Backend: b}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = f.Cluster(ctx)
	require.NoError(t, err)
	next := func() engine.Event {
		t.Helper()
		for {
			evs, err := f.Next(ctx, time.Now().Add(time.Second))
			require.NoError(t, err)
			if len(evs) > 0 {
				require.Len(t, evs, 1)
				return evs[0]
			}
		}
	}
	require.NoError(t, b.feed.Push(engine.NodeChanged(time.Now(), "n0", topo.Ready, nil)))
	ev := next()
	assert.Equal(t, "kube/n0", ev.Node.Name)
	assert.Equal(t, topo.Cordoned, ev.Node.State)
	require.NoError(t, f.MoveNode(ctx, "n0", "kube", "test"))
	var got []engine.Event
	for len(got) < 2 {
		evs, err := f.Next(ctx, time.Now().Add(time.Second))
		require.NoError(t, err)
		got = append(got, evs...)
	}
	assert.Equal(t, "slurm/n0", got[0].Node.Name)
	assert.Equal(t, topo.Cordoned, got[0].Node.State)
	assert.Equal(t, "kube/n0", got[1].Node.Name)
	assert.Equal(t, topo.Ready, got[1].Node.State)
	assert.Equal(t, "kube", got[1].Node.Labels[federation.LabelPool], "labels kept")
}

// MIGLayout reads the layout from the node's pool (the Runner's truth
// after a MIG change timed out); a pool whose backend cannot say answers
// errors.ErrUnsupported.
func TestMIGLayoutRoutes(t *testing.T) {
	spec := topo.Spec{Nodes: []topo.NodeSpec{{Name: "m0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "3g 2g 1g 1g"}}}
	s, err := sim.New(sim.Config{Cluster: spec, Start: t0})
	require.NoError(t, err)
	sl := newFake(t, "slurm", 2)
	f, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "mig", Backend: s}}})
	require.NoError(t, err)
	ctx := context.Background()
	got, err := f.MIGLayout(ctx, "mig/m0", 0)
	require.NoError(t, err)
	want, _ := s.Layout("m0", 0)
	assert.Equal(t, want, got)
	_, err = f.MIGLayout(ctx, "nope/m0", 0)
	assert.ErrorIs(t, err, backends.ErrRefused)
	_, err = f.MIGLayout(ctx, "slurm/n0", 0)
	assert.ErrorIs(t, err, backends.ErrRefused, "the simulator refuses a GPU that is not in MIG mode")
	f2, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "mig", Backend: plain{s}}}})
	require.NoError(t, err)
	_, err = f2.MIGLayout(ctx, "mig/m0", 0)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}
