package sim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// FuzzReplay drives the engine against the simulator with random jobs,
// node failures (each recovered later) and refused or failing binds, and
// checks after the run: no GPU was ever booked twice, every job finished
// exactly once, no job started before its submission or ran shorter than
// its runtime, and the cluster is empty at the end.
func FuzzReplay(f *testing.F) {
	f.Add([]byte{3, 4, 1, 0, 9, 2, 8, 30, 1, 1, 200, 7, 3, 5})
	f.Add([]byte{1, 8, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4})
	f.Add([]byte{2, 2, 0, 2, 255, 0, 17, 40, 99, 3, 12, 12, 12, 200, 150})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		nodes, gpus := 1+next()%4, 1+next()%8
		cfg := engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "a"}, {Name: "b"}}},
			Backfill:         engine.BackfillConfig{Mode: engine.BackfillMode(next() % 3)},
			BindRetryBackoff: time.Minute,
		}
		switch next() % 3 {
		case 0:
			cfg.Policy = queue.StrictPriority()
		case 1:
			cfg.Policy = queue.DRS()
		}
		s, err := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, nodes, gpus, "H100"), Start: t0})
		require.NoError(t, err)
		runtimes := map[string]time.Duration{}
		for i := 0; len(data) >= 3 && i < 24; i++ {
			members := 1 + next()%nodes
			per := 1 + next()%gpus
			id := fmt.Sprintf("j%02d", i)
			j := wholeJob(id, time.Duration(next()%16)*10*time.Minute, members, per)
			j.Queue = []string{"a", "b"}[i%2]
			j.Request = gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}}
			rt := time.Duration(1+next()%90) * time.Minute
			j.RuntimeEstimate = rt * time.Duration(1+next()%2)
			require.NoError(t, s.Submit(j, rt))
			runtimes[id] = rt
			switch next() % 8 {
			case 0:
				s.RefuseBinds(id, fmt.Sprintf("n%d", next()%nodes), 1+next()%2)
			case 1:
				s.FailBinds(id, "", 1+next()%4)
			case 2:
				n := fmt.Sprintf("n%d", next()%nodes)
				at := t0.Add(time.Duration(next()%200) * time.Minute)
				require.NoError(t, s.FailNode(at, n))
				require.NoError(t, s.RecoverNode(at.Add(time.Duration(1+next()%60)*time.Minute), n))
			}
		}
		r, err := backends.NewRunner(backends.RunnerConfig{Engine: cfg, Backend: s, Clock: s, Parallelism: 4})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, r.Run(ctx))

		require.Empty(t, s.Violations())
		for _, o := range s.Outcomes() {
			require.True(t, o.Finished, "%s never finished: %+v", o.ID, o)
			require.False(t, o.Start.Before(o.Submit), o.ID)
			require.Equal(t, runtimes[o.ID], o.End.Sub(o.Start), o.ID)
		}
		st := s.State(nil)
		require.Zero(t, st.BusyGPUs)
		require.Zero(t, st.Running)
		require.Equal(t, len(runtimes), st.Finished)
	})
}

// FuzzReplayShared drives the engine against the simulator on a cluster
// with H100 nodes in MIG mode (various starting layouts), GPUs shared on
// demand and plain nodes, with whole-GPU, fractional and MIG-profile jobs,
// refused and failing binds and MIG changes. After the run: no violation
// (no instance or share booked twice, no bind on a missing instance, no
// change destroying an instance in use, never over 1000 milli on a GPU),
// every job finished exactly once for its runtime, the cluster is empty
// and every MIG layout is valid.
func FuzzReplayShared(f *testing.F) {
	f.Add([]byte{1, 1, 0, 3, 2, 0, 5, 9, 1, 2, 40, 3, 0, 7, 7, 1, 2, 3, 4, 5})
	f.Add([]byte{2, 2, 1, 0, 1, 0, 200, 1, 3, 2, 9, 4, 4, 4, 4, 2, 1, 0, 250, 250})
	f.Add([]byte{0, 1, 2, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	layouts := []string{"", "1g,1g,1g,1g,1g,1g,1g", "3g,2g,1g,1g", "4g.40gb,3g.40gb", "7g"}
	profiles := []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		spec := topo.Spec{ShareFreeGPUs: true}
		migNodes, plainNodes := 1+next()%2, 1+next()%2
		for i := range migNodes {
			spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: fmt.Sprintf("m%d", i), GPUs: 1 + next()%2,
				GPUModel: "H100-80GB", MIG: true, MIGLayout: layouts[next()%len(layouts)]})
		}
		for i := range plainNodes {
			spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: fmt.Sprintf("n%d", i), GPUs: 2, GPUModel: "H100-80GB"})
		}
		cfg := engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
			Policy:           queue.StrictPriority(),
			Backfill:         engine.BackfillConfig{Mode: engine.BackfillMode(next() % 2)},
			BindRetryBackoff: time.Minute,
			MIG:              engine.MIGConfig{RetryBackoff: 5 * time.Minute},
		}
		s, err := sim.New(sim.Config{Cluster: spec, Start: t0})
		require.NoError(t, err)
		runtimes := map[string]time.Duration{}
		for i := 0; len(data) >= 3 && i < 16; i++ {
			id := fmt.Sprintf("j%02d", i)
			var g gang.Group
			members := 1
			switch next() % 3 {
			case 0:
				members, g.GPUsPerMember = 1+next()%plainNodes, 1+next()%2
			case 1:
				members, g.GPUMilli = 1+next()%2, 1+next()%999
			case 2:
				g.MIGProfile = profiles[next()%len(profiles)]
			}
			j := fracJob(id, time.Duration(next()%12)*10*time.Minute, members, g)
			rt := time.Duration(1+next()%90) * time.Minute
			j.RuntimeEstimate = rt
			require.NoError(t, s.Submit(j, rt))
			runtimes[id] = rt
			switch next() % 6 {
			case 0:
				s.RefuseBinds(id, "", 1)
			case 1:
				s.FailBinds(id, "", 1+next()%4)
			case 2:
				s.RefuseMIG(fmt.Sprintf("m%d", next()%migNodes), -1, 1)
			case 3:
				s.FailMIG(fmt.Sprintf("m%d", next()%migNodes), -1, 1+next()%4)
			}
		}
		r, err := backends.NewRunner(backends.RunnerConfig{Engine: cfg, Backend: s, Clock: s, Parallelism: 4, TickInterval: time.Minute})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, r.Run(ctx))

		require.Empty(t, s.Violations())
		for _, o := range s.Outcomes() {
			require.True(t, o.Finished, "%s never finished: %+v", o.ID, o)
			require.False(t, o.Start.Before(o.Submit), o.ID)
			require.Equal(t, runtimes[o.ID], o.End.Sub(o.Start), o.ID)
		}
		st := s.State(nil)
		require.Zero(t, st.BusyGPUs)
		require.Zero(t, st.BusyMilli)
		require.Zero(t, st.Shares)
		require.Equal(t, len(runtimes), st.Finished)
		for _, n := range spec.Nodes[:migNodes] {
			for g := range n.GPUs {
				l, ok := s.Layout(n.Name, g)
				require.True(t, ok)
				require.NoError(t, l.Validate())
			}
		}
	})
}
