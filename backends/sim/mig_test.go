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
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func fracJob(id string, submit time.Duration, members int, g gang.Group) *queue.Job {
	g.Members = members
	return &queue.Job{ID: id, Queue: "q", Submit: t0.Add(submit), RuntimeEstimate: time.Hour,
		Request: gang.Request{Groups: []gang.Group{g}}}
}

func migSim(t testing.TB, layout string) *sim.Sim {
	t.Helper()
	s, err := sim.New(sim.Config{Start: t0, Cluster: topo.Spec{Nodes: []topo.NodeSpec{
		{Name: "m0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: layout}}}})
	require.NoError(t, err)
	return s
}

func h100(t testing.TB, profile string, start uint8) mig.Instance {
	t.Helper()
	m, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)
	p, err := m.Profile(profile)
	require.NoError(t, err)
	return mig.Instance{Profile: p, Start: start}
}

func layout(t testing.TB, s string) mig.Layout {
	t.Helper()
	m, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)
	l, err := mig.ParseLayout(m, s)
	require.NoError(t, err)
	return l
}

// A GPU split into seven 1g instances, one in use: a 3g job needs a
// re-layout of the idle ones. The engine plans it, the Runner applies it to
// the simulator, which carries it out on its own layout, and the 3g job
// runs on the instance the change created.
func TestMIGReconfigurationIsApplied(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refuse=%v", refuse), func(t *testing.T) {
			s := migSim(t, "1g,1g,1g,1g,1g,1g,1g")
			require.NoError(t, s.Submit(fracJob("small", 0, 1, gang.Group{MIGProfile: "1g.10gb"}), 2*time.Hour))
			require.NoError(t, s.Submit(fracJob("big", time.Minute, 1, gang.Group{MIGProfile: "3g.40gb"}), time.Hour))
			if refuse {
				s.RefuseMIG("m0", 0, 1)
				s.FailMIG("m0", -1, 1) // transient: retried by the Runner
			}
			var refused int
			cfg := engine.Config{Policy: queue.StrictPriority(), MIG: engine.MIGConfig{RetryBackoff: 10 * time.Minute}}
			cfg.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
			r, err := backends.NewRunner(backends.RunnerConfig{Engine: cfg, Backend: s, Clock: s, TickInterval: time.Minute,
				Observe: func(c backends.Cycle) {
					refused += len(c.Outcome.RefusedMIG)
					for _, m := range c.MIG {
						// A refusal after a transient failure is unknown
						// first (the failed attempt may have been applied);
						// the simulator's layout then says it failed.
						if m.Err != nil && !m.Unknown {
							refused++
						}
					}
				}})
			require.NoError(t, err)
			require.NoError(t, r.Run(context.Background()))

			require.Empty(t, s.Violations())
			out := s.Outcomes()
			require.True(t, out[0].Finished)
			require.True(t, out[1].Finished, "the 3g job ran")
			assert.Equal(t, int64(142), out[0].Milli, "1g of 7 compute slices")
			assert.Equal(t, int64(428), out[1].Milli, "3g of 7")
			ch := s.MIGChanges()
			require.Len(t, ch, 1)
			assert.Equal(t, layout(t, "1g,1g,1g,1g,1g,1g,1g"), ch[0].From)
			got, ok := s.Layout("m0", 0)
			require.True(t, ok)
			assert.Equal(t, ch[0].To, got, "the simulator's layout is the change's To")
			assert.Equal(t, 1, got.Count(h100(t, "3g.40gb", 0).Profile))
			st := s.Stats()
			assert.Equal(t, 1, st.MIGApplied)
			assert.Equal(t, len(ch[0].Destroy), st.InstancesDestroyed)
			assert.Equal(t, len(ch[0].Create), st.InstancesCreated)
			assert.Equal(t, 2, st.InstanceBinds)
			if refuse {
				assert.Equal(t, 1, refused)
				assert.Equal(t, 1, st.MIGRefused)
				assert.GreaterOrEqual(t, out[1].Start.Sub(out[1].Submit), 10*time.Minute, "no plan during the backoff")
			} else {
				assert.Zero(t, refused)
				assert.Less(t, out[1].Start.Sub(out[1].Submit), 10*time.Minute)
			}
			final := s.State(nil)
			assert.Zero(t, final.BusyGPUs)
			assert.Zero(t, final.BusyMilli)
		})
	}
}

func TestMIGBindChecks(t *testing.T) {
	ctx := context.Background()
	s := migSim(t, "1g@0 1g@1")
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, s.Submit(fracJob(id, 0, 1, gang.Group{MIGProfile: "1g.10gb"}), time.Hour))
	}
	member := func(in mig.Instance, created bool) engine.Member {
		return engine.Member{Node: "m0", GPUs: []int{0}, Fractional: true, Instance: in, Created: created}
	}
	one := member(h100(t, "1g.10gb", 0), false)
	require.NoError(t, s.BindMember(ctx, "a", one))
	require.NoError(t, s.BindMember(ctx, "a", one), "binding again is a no-op")
	require.ErrorIs(t, s.BindMember(ctx, "b", one), backends.ErrRefused, "an instance bound twice")
	require.Len(t, s.Violations(), 1)
	require.ErrorIs(t, s.BindMember(ctx, "b", member(h100(t, "1g.10gb", 4), false)), backends.ErrRefused, "no such instance")
	require.ErrorIs(t, s.BindMember(ctx, "b", member(h100(t, "1g.10gb", 1), true)), backends.ErrRefused, "creating an instance that exists")
	require.ErrorIs(t, s.BindMember(ctx, "b", engine.Member{Node: "m0", GPUs: []int{0}}), backends.ErrRefused, "whole GPU of a MIG node")
	require.ErrorIs(t, s.BindMember(ctx, "b", engine.Member{Node: "m0", GPUs: []int{0}, Fractional: true,
		Share: mig.Share{ID: 1, Milli: 100}}), backends.ErrRefused, "a share on a MIG GPU")
	assert.Len(t, s.Violations(), 5)

	// Created instances appear; a rolled-back bind destroys its own again.
	three := member(h100(t, "3g.40gb", 4), true)
	require.NoError(t, s.BindMember(ctx, "b", three))
	l, _ := s.Layout("m0", 0)
	assert.Equal(t, layout(t, "1g@0 1g@1 3g.40gb@4"), l)
	require.NoError(t, s.UnbindMember(ctx, "b", three))
	l, _ = s.Layout("m0", 0)
	assert.Equal(t, layout(t, "1g@0 1g@1"), l)
	assert.Equal(t, 1, s.Stats().InstancesCreated)
	assert.Equal(t, 1, s.Stats().InstancesDestroyed)
	st := s.State(nil)
	assert.Equal(t, 1, st.BusyGPUs)
	assert.Equal(t, int64(142), st.BusyMilli)
	assert.Equal(t, []int{0}, st.NodeFree)
}

func TestApplyMIGChecks(t *testing.T) {
	ctx := context.Background()
	s := migSim(t, "1g@0 1g@1 1g@2")
	require.NoError(t, s.Submit(fracJob("a", 0, 1, gang.Group{MIGProfile: "1g.10gb"}), time.Hour))
	require.NoError(t, s.BindMember(ctx, "a", engine.Member{Node: "m0", GPUs: []int{0}, Fractional: true, Instance: h100(t, "1g.10gb", 0)}))
	from := layout(t, "1g@0 1g@1 1g@2")
	change := func(destroy []mig.Instance, create []mig.Instance, to string) engine.MIGReconfiguration {
		return engine.MIGReconfiguration{Node: "m0", GPU: 0, From: from, To: layout(t, to), Destroy: destroy, Create: create}
	}

	// Destroying the instance in use: refused, and an engine bug.
	bad := change([]mig.Instance{h100(t, "1g.10gb", 0)}, nil, "1g@1 1g@2")
	require.ErrorIs(t, s.ApplyMIG(ctx, bad), backends.ErrRefused)
	assert.Len(t, s.Violations(), 1)
	// Create that does not lead to To.
	bad = change(nil, []mig.Instance{h100(t, "1g.10gb", 3)}, "1g@0 1g@1 1g@2 1g@4")
	require.ErrorIs(t, s.ApplyMIG(ctx, bad), backends.ErrRefused)
	assert.Len(t, s.Violations(), 2)
	// A stale From: refused, not a violation (a refused bind may have
	// left the engine's plan behind).
	stale := change(nil, nil, "1g@0 1g@1 1g@2")
	stale.From = layout(t, "1g@0")
	require.ErrorIs(t, s.ApplyMIG(ctx, stale), backends.ErrRefused)
	assert.Len(t, s.Violations(), 2)
	// Unknown node, non-MIG GPU index.
	require.ErrorIs(t, s.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "zz"}), backends.ErrRefused)
	require.ErrorIs(t, s.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "m0", GPU: 3}), backends.ErrRefused)
	assert.Len(t, s.Violations(), 3)

	// Injected: a transient failure, then a refusal, then it applies.
	s.FailMIG("m0", 0, 1)
	s.RefuseMIG("m0", -1, 1)
	good := change([]mig.Instance{h100(t, "1g.10gb", 1), h100(t, "1g.10gb", 2)}, []mig.Instance{h100(t, "2g.20gb", 2)}, "1g@0 2g.20gb@2")
	err := s.ApplyMIG(ctx, good)
	require.ErrorIs(t, err, sim.ErrTransient)
	require.NotErrorIs(t, err, backends.ErrRefused)
	require.ErrorIs(t, s.ApplyMIG(ctx, good), backends.ErrRefused)
	require.NoError(t, s.ApplyMIG(ctx, good))
	l, _ := s.Layout("m0", 0)
	assert.Equal(t, good.To, l)
	assert.Len(t, s.MIGChanges(), 1)
	st := s.Stats()
	assert.Equal(t, 1, st.MIGApplied)
	assert.Equal(t, 6, st.MIGRefused)
	assert.Equal(t, 2, st.InstancesDestroyed)
	assert.Equal(t, 1, st.InstancesCreated)
	_, ok := s.Layout("m0", 1)
	assert.False(t, ok)
}

// Fractional pods on free GPUs that become shared (openb's model): many
// shares on one GPU, never more than 1000 milli, and whole-GPU jobs never
// on a GPU with shares.
func TestSharesOnFreeGPUs(t *testing.T) {
	spec := topo.Uniform(nil, nil, 2, 2, "V100")
	spec.ShareFreeGPUs = true
	s, err := sim.New(sim.Config{Cluster: spec, Start: t0})
	require.NoError(t, err)
	for i := range 12 {
		require.NoError(t, s.Submit(fracJob(fmt.Sprintf("f%02d", i), time.Duration(i)*time.Minute, 1, gang.Group{GPUMilli: 250 + 50*(i%3)}), time.Hour))
	}
	require.NoError(t, s.Submit(wholeJob("w", 5*time.Minute, 1, 2), time.Hour))
	var peak int64
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Policy: queue.StrictPriority(), Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}},
		Backend: s, Clock: s,
		Observe: func(backends.Cycle) { peak = max(peak, s.State(nil).BusyMilli) },
	})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Empty(t, s.Violations())
	for _, o := range s.Outcomes() {
		require.True(t, o.Finished, o.ID)
	}
	st := s.Stats()
	assert.Equal(t, 12, st.ShareBinds)
	assert.Greater(t, st.MaxSharesPerGPU, 1)
	assert.LessOrEqual(t, peak, int64(4000))
	assert.Zero(t, s.State(nil).Shares)

	ctx := context.Background()
	s2, err := sim.New(sim.Config{Cluster: spec, Start: t0})
	require.NoError(t, err)
	require.NoError(t, s2.Submit(fracJob("x", 0, 1, gang.Group{GPUMilli: 600}), time.Hour))
	require.NoError(t, s2.Submit(fracJob("y", 0, 1, gang.Group{GPUMilli: 600}), time.Hour))
	require.NoError(t, s2.Submit(wholeJob("z", 0, 1, 1), time.Hour))
	share := func(id mig.ShareID, milli int) engine.Member {
		return engine.Member{Node: "n0", GPUs: []int{0}, Fractional: true, Share: mig.Share{ID: id, GPU: 0, Milli: milli}}
	}
	require.NoError(t, s2.BindMember(ctx, "x", share(1, 600)))
	require.ErrorIs(t, s2.BindMember(ctx, "y", share(2, 600)), backends.ErrRefused, "over 1000 milli")
	require.ErrorIs(t, s2.BindMember(ctx, "y", share(1, 100)), backends.ErrRefused, "a share bound twice")
	require.ErrorIs(t, s2.BindMember(ctx, "z", engine.Member{Node: "n0", GPUs: []int{0}}), backends.ErrRefused, "whole GPU with shares")
	assert.Len(t, s2.Violations(), 3)
	assert.Equal(t, int64(600), s2.State(nil).BusyMilli)
}
