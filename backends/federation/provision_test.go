package federation_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// newFakeAuto is newFake with an autoscaling pool in the simulator: Max
// nodes named prefix0.., 8 GPUs of model, the first min up.
func newFakeAuto(t *testing.T, name string, n int, pool, prefix, model string, gpus, min, max int, lent ...string) *fakeMember {
	t.Helper()
	spec := topo.Uniform(nil, nil, n, 8, "H100")
	shared := make([]string, 0, n)
	for _, nd := range spec.Nodes {
		shared = append(shared, nd.Name)
	}
	s, err := sim.New(sim.Config{Cluster: spec, Start: t0, Autoscale: &sim.Autoscale{
		BootDelay: time.Minute,
		Pools:     []sim.Pool{{Pool: autoscale.Pool{Name: pool, GPUModel: model, GPUsPerNode: gpus, Min: min, Max: max}, NodePrefix: prefix}},
	}})
	require.NoError(t, err)
	f := &fakeMember{Sim: s, name: name, nodes: shared, lent: map[string]bool{}, fail: map[string]int{}}
	for _, l := range lent {
		f.lent[l] = true
	}
	return f
}

// notProvisioner hides a member's Provisioner methods.
type notProvisioner struct {
	backends.Backend
	federation.NodeLender
}

// provFixture: four hosts n0..n3 known to both pools, slurm owning n0 and
// n1, kube n2 and n3 (quotas 50/50); each member has an autoscaling pool
// of its own ("gpu": 8-GPU H100 nodes, kube-c0.. and slurm-c0..; kube's
// up to 4 nodes, none up; slurm's one node up, of 2).
func provFixture(t *testing.T, change func(*federation.Config)) (*federation.Federation, *fakeMember, *fakeMember) {
	t.Helper()
	sl := newFakeAuto(t, "slurm", 4, "gpu", "slurm-c", "H100", 8, 1, 2, "n2", "n3")
	ku := newFakeAuto(t, "kube", 4, "gpu", "kube-c", "H100", 8, 0, 4, "n0", "n1")
	ac := &autoscale.Config{Pools: []autoscale.Pool{
		{Name: federation.AutoscalePool("kube", "gpu"), GPUModel: "H100", GPUsPerNode: 8, Max: 4},
		{Name: federation.AutoscalePool("slurm", "gpu"), GPUModel: "H100", GPUsPerNode: 8, Min: 1, Max: 2},
	}}
	cfg := federation.Config{
		Pools:        []federation.Pool{{Name: "slurm", Backend: sl, Quota: 0.5}, {Name: "kube", Backend: ku, Quota: 0.5}},
		Clock:        sl.Sim,
		DrainTimeout: time.Minute, PollInterval: 10 * time.Second,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Autoscale: ac,
	}
	if change != nil {
		change(&cfg)
	}
	f, err := federation.New(cfg)
	require.NoError(t, err)
	_, err = f.Cluster(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"n0": "slurm", "n1": "slurm", "n2": "kube", "n3": "kube"}, sharedOwners(f))
	return f, sl, ku
}

// sharedOwners is Owners of the shared hosts n0..n3.
func sharedOwners(f *federation.Federation) map[string]string {
	out := map[string]string{}
	for h, o := range f.Owners() {
		if len(h) == 2 && h[0] == 'n' {
			out[h] = o
		}
	}
	return out
}

func booting(t *testing.T, m *fakeMember) int {
	t.Helper()
	st, err := m.Sim.Provisioning(context.Background())
	require.NoError(t, err)
	n := 0
	for _, nd := range st.Nodes {
		if nd.Booting {
			n++
		}
	}
	return n
}

// A short pool borrows the other pool's idle node first (the donor keeps
// half its quota: one of its two nodes), then asks its own system for the
// rest.
func TestScaleUpBorrowsThenProvisions(t *testing.T) {
	f, sl, ku := provFixture(t, nil)
	watch(t, f, sl, ku)
	ctx := context.Background()
	require.NoError(t, f.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 3, Jobs: []string{"infer"}}))
	assert.Equal(t, map[string]string{"n0": "kube", "n1": "slurm", "n2": "kube", "n3": "kube"}, sharedOwners(f))
	// In the systems: slurm lent n0, kube took it.
	st, err := sl.NodeStatus(ctx, "n0")
	require.NoError(t, err)
	assert.False(t, st.Schedulable)
	st, err = ku.NodeStatus(ctx, "n0")
	require.NoError(t, err)
	assert.True(t, st.Schedulable)
	require.NoError(t, f.CheckExclusive(ctx))
	assert.Equal(t, 2, booting(t, ku), "the rest asked of kube's own system")
	assert.Equal(t, 0, booting(t, sl))
	assert.Equal(t, federation.ProvisionStats{Borrowed: 1, ScaledUp: 2}, f.ProvisionStats())
	mv := f.Moves()
	require.Len(t, mv, 1)
	assert.Contains(t, mv[0].Reason, "autoscale: kube/gpu is short of 3 nodes (jobs [infer]): borrowed before scaling up")

	// The merged report: kube's two booting nodes under federation names.
	ps, err := f.Provisioning(ctx)
	require.NoError(t, err)
	var names []string
	for _, n := range ps.Nodes {
		names = append(names, n.Name+" "+n.Pool)
	}
	assert.ElementsMatch(t, []string{"slurm/slurm-c0 slurm/gpu", "kube/kube-c0 kube/gpu", "kube/kube-c1 kube/gpu"}, names)

	// Nothing left to lend (slurm keeps its last node): all asked of kube.
	require.NoError(t, f.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1}))
	assert.Equal(t, "slurm", f.Owners()["n1"])
	assert.Equal(t, 3, booting(t, ku))
	assert.Equal(t, federation.ProvisionStats{Borrowed: 1, ScaledUp: 3}, f.ProvisionStats())
}

// A borrowed node must have the pool's shape: a pool of 4-GPU nodes
// borrows none of the 8-GPU hosts; a model the hosts are not, neither.
func TestScaleUpBorrowsOnlyNodesOfThePoolsShape(t *testing.T) {
	for _, pool := range []autoscale.Pool{
		{Name: "kube/gpu", GPUModel: "H100", GPUsPerNode: 4, Max: 4},
		{Name: "kube/gpu", GPUModel: "A100", GPUsPerNode: 8, Max: 4},
	} {
		f, _, ku := provFixture(t, func(c *federation.Config) {
			c.Autoscale = &autoscale.Config{Pools: []autoscale.Pool{pool}}
		})
		require.NoError(t, f.ScaleUp(context.Background(), autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1}))
		assert.Empty(t, f.Moves(), "%+v", pool)
		assert.Equal(t, 1, booting(t, ku))
	}
	// Without the pool in Config.Autoscale, nothing is borrowed either.
	f, _, ku := provFixture(t, func(c *federation.Config) { c.Autoscale = nil })
	require.NoError(t, f.ScaleUp(context.Background(), autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1}))
	assert.Empty(t, f.Moves())
	assert.Equal(t, 1, booting(t, ku))
}

// A member that cannot provision takes a scale-up only if borrowing
// covers it all; else nothing moves and the scale-up is refused.
func TestScaleUpWithoutProvisionerIsAllOrNothing(t *testing.T) {
	var ku *fakeMember
	f, _, _ := provFixture(t, func(c *federation.Config) {
		ku = c.Pools[1].Backend.(*fakeMember)
		c.Pools[1].Backend = notProvisioner{Backend: ku, NodeLender: ku}
	})
	ctx := context.Background()
	err := f.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 2})
	require.ErrorIs(t, err, backends.ErrRefused)
	assert.Empty(t, f.Moves(), "nothing moved for a scale-up that cannot be covered")
	require.NoError(t, f.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1}))
	assert.Equal(t, "kube", f.Owners()["n0"])
	assert.Equal(t, 0, booting(t, ku))
	assert.Equal(t, federation.ProvisionStats{Borrowed: 1}, f.ProvisionStats())
}

// A borrow whose move fails is rolled back and asked of the member.
func TestScaleUpFailedBorrowProvisionsInstead(t *testing.T) {
	f, sl, ku := provFixture(t, nil)
	sl.fail["lend"] = 1
	ctx := context.Background()
	require.NoError(t, f.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1}))
	assert.Equal(t, "slurm", f.Owners()["n0"])
	require.NoError(t, f.CheckExclusive(ctx))
	assert.Equal(t, 1, booting(t, ku))
	mv := f.Moves()
	require.Len(t, mv, 1)
	assert.ErrorIs(t, mv[0].Err, federation.ErrMove)
	assert.Equal(t, federation.ProvisionStats{ScaledUp: 1}, f.ProvisionStats())
}

func TestScaleUpErrors(t *testing.T) {
	f, _, _ := provFixture(t, nil)
	ctx := context.Background()
	for _, up := range []autoscale.ScaleUp{
		{Pool: "gpu", Nodes: 1},
		{Pool: "nope/gpu", Nodes: 1},
		{Pool: "kube/", Nodes: 1},
		{Pool: "kube/gpu", Nodes: 0},
	} {
		err := f.ScaleUp(ctx, up)
		require.ErrorIs(t, err, backends.ErrRefused, "%+v", up)
		require.ErrorIs(t, err, autoscale.ErrInvalid, "%+v", up)
	}
	// An invalid autoscaling config is refused by New.
	_, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "a", Backend: newFake(t, "a", 1)}},
		Autoscale: &autoscale.Config{Pools: []autoscale.Pool{{Name: "a/gpu", GPUsPerNode: 8, Min: 3, Max: 2}}}})
	require.ErrorIs(t, err, federation.ErrInvalidConfig)
	require.ErrorIs(t, err, autoscale.ErrInvalid)
	// An autoscaling pool not named after a pool of the federation.
	for _, name := range []string{"gpu", "other/gpu", "a/"} {
		_, err = federation.New(federation.Config{Pools: []federation.Pool{{Name: "a", Backend: newFake(t, "a", 1)}},
			Autoscale: &autoscale.Config{Pools: []autoscale.Pool{{Name: name, GPUsPerNode: 8, Max: 2}}}})
		require.ErrorIs(t, err, federation.ErrInvalidConfig, name)
	}
	// The member's own refusal comes back (kube's pool has Max 4).
	require.ErrorIs(t, f.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 6}), backends.ErrRefused)
	assert.Equal(t, "kube", f.Owners()["n0"], "borrowed first, and kept when the member refuses the rest")
}

// A node released while another pool is short goes to that pool
// instead; otherwise the member releases it.
func TestScaleDownLendsToAShortPoolFirst(t *testing.T) {
	short := false
	f, sl, ku := provFixture(t, func(c *federation.Config) {
		c.Demand = func() map[string]federation.PoolDemand {
			if !short {
				return nil
			}
			return map[string]federation.PoolDemand{"kube": {Pool: "kube", ReservedGPUs: 32}}
		}
	})
	watch(t, f, sl, ku)
	ctx := context.Background()
	short = true
	require.NoError(t, f.ScaleDown(ctx, "slurm/n1"))
	assert.Equal(t, "kube", f.Owners()["n1"])
	require.NoError(t, f.CheckExclusive(ctx))
	assert.Equal(t, federation.ProvisionStats{Lent: 1}, f.ProvisionStats())
	assert.Contains(t, f.Moves()[0].Reason, "lent instead of released")

	// Now owned by kube: slurm has nothing to release there.
	require.NoError(t, f.ScaleDown(ctx, "slurm/n1"))
	assert.Equal(t, "kube", f.Owners()["n1"])

	// No pool short: slurm's own node is released by its system.
	short = false
	require.NoError(t, f.ScaleDown(ctx, "slurm/slurm-c0"))
	assert.Equal(t, federation.ProvisionStats{Lent: 1, Released: 1}, f.ProvisionStats())
	st, err := sl.Sim.Provisioning(ctx)
	require.NoError(t, err)
	assert.Empty(t, st.Nodes)
	// A shared host nobody is short of, in no autoscaling pool: slurm's
	// system refuses to release it.
	require.ErrorIs(t, f.ScaleDown(ctx, "slurm/n0"), backends.ErrRefused)
	assert.Equal(t, "slurm", f.Owners()["n0"])
	require.ErrorIs(t, f.ScaleDown(ctx, "nope/n0"), backends.ErrRefused)
}

// Borrow, the pure choice: idle hosts of other pools in host order, a
// donor giving only GPUs beyond its own demand and keeping MinShare of
// its quota; busy, moving, recently moved and unfit hosts are skipped.
func TestBorrowRules(t *testing.T) {
	now := t0.Add(time.Hour)
	cfg := federation.RebalanceConfig{Cooldown: 10 * time.Minute}
	pools := []federation.PoolDemand{{Pool: "a", Quota: 0.5}, {Pool: "b", Quota: 0.5}}
	host := func(name, owner string) federation.HostView {
		return federation.HostView{Host: name, Owner: owner, Pools: []string{"a", "b"}, GPUs: 8}
	}
	hosts := []federation.HostView{host("h3", "a"), host("h1", "a"), host("h2", "a"), host("h4", "a"), host("h5", "b")}
	mv := federation.Borrow(now, cfg, pools, hosts, "b", 5, nil, "why")
	// a owns 32 of the 40 GPUs, its quota is 20 and it keeps 10 (MinShare
	// 0.5): it can give two nodes, in host order.
	require.Len(t, mv, 2)
	assert.Equal(t, []string{"h1", "h2"}, []string{mv[0].Host, mv[1].Host})
	assert.Equal(t, "a", mv[0].From)
	assert.Equal(t, "b", mv[0].To)
	assert.Contains(t, mv[0].Reason, "why: borrowed before scaling up")
	assert.Len(t, federation.Borrow(now, cfg, pools, hosts, "b", 1, nil, "why"), 1)

	// Busy, moving, recently moved, unfit: skipped.
	hs := []federation.HostView{host("h1", "a"), host("h2", "a"), host("h3", "a"), host("h4", "a"), host("h5", "b")}
	hs[0].Busy = true
	hs[1].MovingTo = "b"
	hs[2].LastMove = now.Add(-time.Minute)
	mv = federation.Borrow(now, cfg, pools, hs, "b", 5, func(h federation.HostView) bool { return h.Host != "h4" }, "why")
	assert.Empty(t, mv)
	hs[2].LastMove = now.Add(-time.Hour)
	mv = federation.Borrow(now, cfg, pools, hs, "b", 5, nil, "why")
	require.Len(t, mv, 1, "a owns 24 (h2 is b's, moving there) and keeps 10")
	assert.Equal(t, "h3", mv[0].Host)

	// The donor's own demand: a wants 16 GPUs over the interval, so of its
	// 32 idle only 16 are spare.
	dem := []federation.PoolDemand{{Pool: "a", Quota: 0.2, ReservedGPUs: 16}, {Pool: "b", Quota: 0.8}}
	mv = federation.Borrow(now, cfg, dem, hosts, "b", 5, nil, "why")
	assert.Len(t, mv, 2)
	dem[0].ReservedGPUs = 30
	assert.Empty(t, federation.Borrow(now, cfg, dem, hosts, "b", 5, nil, "why"))
	// A host the borrower does not know, or its own: never.
	only := []federation.HostView{{Host: "x", Owner: "a", Pools: []string{"a"}, GPUs: 8}, host("y", "b")}
	assert.Empty(t, federation.Borrow(now, cfg, pools, only, "b", 5, nil, "why"))
}

func TestLendInsteadRules(t *testing.T) {
	now := t0.Add(time.Hour)
	cfg := federation.RebalanceConfig{Cooldown: 10 * time.Minute}
	hosts := []federation.HostView{
		{Host: "h1", Owner: "a", Pools: []string{"a", "b", "c"}, GPUs: 8},
		{Host: "h2", Owner: "b", Pools: []string{"a", "b"}, GPUs: 8, Busy: true},
	}
	pools := []federation.PoolDemand{{Pool: "a", Quota: 0.4}, {Pool: "b", Quota: 0.3, ReservedGPUs: 8}, {Pool: "c", Quota: 0.3, ReservedGPUs: 16}}
	mv, ok := federation.LendInstead(now, cfg, pools, hosts, "h1")
	require.True(t, ok)
	assert.Equal(t, federation.Move{Host: "h1", From: "a", To: "c", Reason: mv.Reason}, mv, "the pool with the most unmet demand")
	// Below Hysteresis (one node's worth): no.
	pools[1].ReservedGPUs, pools[2].ReservedGPUs = 4, 0
	_, ok = federation.LendInstead(now, cfg, pools, hosts, "h1")
	assert.False(t, ok)
	pools[1].ReservedGPUs = 24
	_, ok = federation.LendInstead(now, cfg, pools, hosts, "h1")
	assert.True(t, ok)
	hosts[0].LastMove = now.Add(-time.Minute)
	_, ok = federation.LendInstead(now, cfg, pools, hosts, "h1")
	assert.False(t, ok, "moved within the cooldown")
	_, ok = federation.LendInstead(now, cfg, pools, hosts, "h2")
	assert.False(t, ok, "busy")
	_, ok = federation.LendInstead(now, cfg, pools, hosts, "nope")
	assert.False(t, ok)
}

// PinAutoscalePools labels each "pool/memberpool" pool with its pool, so
// that the planner keeps a pinned job in its pool (autoscale.Pool.Labels).
func TestPinAutoscalePools(t *testing.T) {
	in := autoscale.Config{Pools: []autoscale.Pool{
		{Name: "kube/h100", GPUsPerNode: 8, Max: 2, Labels: map[string]string{"zone": "a"}},
		{Name: "slurm/h100", GPUsPerNode: 8, Max: 2},
		{Name: "plain", GPUsPerNode: 8, Max: 2},
	}}
	out := federation.PinAutoscalePools(in)
	assert.Equal(t, map[string]string{"zone": "a", federation.LabelPool: "kube"}, out.Pools[0].Labels)
	assert.Equal(t, map[string]string{federation.LabelPool: "slurm"}, out.Pools[1].Labels)
	assert.Nil(t, out.Pools[2].Labels)
	assert.Equal(t, map[string]string{"zone": "a"}, in.Pools[0].Labels, "the input is not changed")
	assert.Nil(t, in.Pools[1].Labels)
	// The planner then keeps a job pinned to kube off slurm's free node.
	d := autoscale.Demand{Job: "infer", Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8,
		Selector: map[string]string{federation.LabelPool: "kube"}}}}}
	plan, err := autoscale.Decide(out, t0, []autoscale.Node{{Name: "slurm/c0", Pool: "slurm/h100", FreeGPUs: 8}}, []autoscale.Demand{d})
	require.NoError(t, err)
	assert.Equal(t, []autoscale.ScaleUp{{Pool: "kube/h100", Nodes: 1, Jobs: []string{"infer"}}}, plan.Up)
}

// provErr is a member whose provisioning report fails with err.
type provErr struct {
	*fakeMember
	err error
}

func (p provErr) Provisioning(context.Context) (backends.ProvisionState, error) {
	return backends.ProvisionState{}, p.err
}

// A member without provisioning configured (its report wraps
// autoscale.ErrInvalid, as backends/kube's does without
// Config.Provisioning) reports no node; any other error fails the report.
func TestProvisioningSkipsMembersWithoutIt(t *testing.T) {
	for _, tc := range []struct {
		err  error
		fail bool
	}{
		{fmt.Errorf("kube: %w: Config.Provisioning has no pools", autoscale.ErrInvalid), false},
		{errors.New("kube: listing nodes: connection refused"), true},
	} {
		f, _, _ := provFixture(t, func(c *federation.Config) {
			c.Pools[1].Backend = provErr{fakeMember: c.Pools[1].Backend.(*fakeMember), err: tc.err}
		})
		st, err := f.Provisioning(context.Background())
		if tc.fail {
			require.ErrorContains(t, err, "pool kube: kube: listing nodes")
			continue
		}
		require.NoError(t, err)
		require.Len(t, st.Nodes, 1)
		assert.Equal(t, "slurm/slurm-c0", st.Nodes[0].Name)
	}
	// With Config.Autoscale, a member with no pool in it is not asked
	// (whatever its report would be).
	f, _, _ := provFixture(t, func(c *federation.Config) {
		c.Pools[0].Backend = provErr{fakeMember: c.Pools[0].Backend.(*fakeMember), err: errors.New("slurm: no PowerPools")}
		c.Autoscale = &autoscale.Config{Pools: []autoscale.Pool{{Name: "kube/gpu", GPUsPerNode: 8, Max: 4}}}
	})
	st, err := f.Provisioning(context.Background())
	require.NoError(t, err)
	assert.Empty(t, st.Nodes)
}
