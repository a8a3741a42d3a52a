package topo_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestDomainCapacities checks the batch read against DomainCapacity, one
// domain at a time, on clusters of one and of two GPU models with nodes of
// 2 to 8 GPUs, randomly booked and cordoned: every level, random ranges
// (across counter pages too), members of 1 to 9 GPUs, every model.
func TestDomainCapacities(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	for _, models := range [][]string{{"H100"}, {"H100", "A100"}} {
		spec := topo.Spec{Levels: []string{"block", "rack"}}
		for i := range 1200 {
			spec.Nodes = append(spec.Nodes, topo.NodeSpec{
				Name:     fmt.Sprintf("n%d", i),
				Domains:  []string{fmt.Sprintf("b%d", i/300), fmt.Sprintf("r%d", i/4)},
				GPUs:     []int{2, 4, 8}[rng.IntN(3)],
				GPUModel: models[rng.IntN(len(models))],
			})
		}
		c, err := topo.New(spec)
		require.NoError(t, err)
		s := c.NewSnapshot()
		for g := range uint32(c.NumGPUs()) {
			if rng.IntN(3) == 0 {
				require.NoError(t, s.Allocate([]uint32{g}))
			}
		}
		for n := range topo.NodeID(c.NumNodes()) {
			if rng.IntN(10) == 0 {
				require.NoError(t, s.SetNodeState(n, topo.Cordoned))
			}
		}
		dst := make([]int32, 400)
		for range 2000 {
			l := rng.IntN(len(c.Levels()))
			nd := c.NumDomains(l)
			lo := rng.IntN(nd)
			hi := lo + 1 + rng.IntN(min(nd-lo, len(dst)))
			per, model := 1+rng.IntN(9), rng.IntN(len(models)+1)-1
			s.DomainCapacities(l, lo, hi, per, model, dst)
			for d := lo; d < hi; d++ {
				require.Equal(t, s.DomainCapacity(l, d, per, model), int(dst[d-lo]), "level %d domain %d per %d model %d", l, d, per, model)
			}
		}
	}
}

// TestAvailableWithin compares Snapshot.AvailableWithin with a node by
// node reading of the two snapshots, over clones written at random
// (bookings, releases, node states, host resources): most pairs share
// pages, some differ in one GPU or one node.
func TestAvailableWithin(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 37))
	spec := topo.Spec{Levels: []string{"rack"}}
	for i := range 300 {
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: fmt.Sprintf("n%d", i), Domains: []string{fmt.Sprintf("r%d", i/16)},
			GPUs: 4, GPUModel: "H100", CPUMilli: 8000, MemoryMiB: 1 << 16})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	within := func(s, o *topo.Snapshot) bool {
		for n := range topo.NodeID(c.NumNodes()) {
			if s.NodeState(n) != topo.Ready {
				continue
			}
			sc, sm := s.NodeHostFree(n)
			oc, om := o.NodeHostFree(n)
			if o.NodeState(n) != topo.Ready || s.NodeFreeMask(n)&^o.NodeFreeMask(n) != 0 || sc > oc || sm > om {
				return false
			}
		}
		return true
	}
	snaps := []*topo.Snapshot{c.NewSnapshot()}
	yes, no := 0, 0
	for range 3000 {
		s := snaps[rng.IntN(len(snaps))]
		switch op := rng.IntN(10); {
		case op < 2 && len(snaps) < 6:
			snaps = append(snaps, s.Clone())
		case op < 3:
			id := topo.NodeID(rng.IntN(c.NumNodes()))
			st := topo.Ready
			if s.NodeState(id) == topo.Ready {
				st = topo.Cordoned
			}
			require.NoError(t, s.SetNodeState(id, st))
		case op < 4:
			id := topo.NodeID(rng.IntN(c.NumNodes()))
			if rng.IntN(2) == 0 {
				_ = s.AllocateHost(id, 1000, 1024)
			} else {
				_ = s.ReleaseHost(id, 1000, 1024)
			}
		default:
			g := uint32(rng.IntN(c.NumGPUs()))
			if s.IsFree(g) {
				require.NoError(t, s.Allocate([]uint32{g}))
			} else {
				_ = s.Release([]uint32{g})
			}
		}
		a, b := snaps[rng.IntN(len(snaps))], snaps[rng.IntN(len(snaps))]
		want := within(a, b)
		require.Equal(t, want, a.AvailableWithin(b))
		if want {
			yes++
		} else {
			no++
		}
	}
	require.Greater(t, yes, 300)
	require.Greater(t, no, 300)
	// One difference at a time: host resources, a node state, one GPU.
	base := c.NewSnapshot()
	for _, write := range []func(s *topo.Snapshot) error{
		func(s *topo.Snapshot) error { return s.AllocateHost(7, 500, 0) },
		func(s *topo.Snapshot) error { return s.AllocateHost(7, 0, 512) },
		func(s *topo.Snapshot) error { return s.SetNodeState(7, topo.Down) },
		func(s *topo.Snapshot) error { return s.Allocate([]uint32{29}) },
	} {
		less := base.Clone()
		require.NoError(t, write(less))
		require.True(t, less.AvailableWithin(base))
		require.False(t, base.AvailableWithin(less))
	}
}
