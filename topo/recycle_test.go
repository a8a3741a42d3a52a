package topo_test

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestRecycleKeepsOthers clones, writes and recycles snapshots at random
// and checks every live one against a model after each step: a recycled
// snapshot's pages, handed to later copies, never show in a snapshot
// still in use.
func TestRecycleKeepsOthers(t *testing.T) {
	c := b2k(t)
	type live struct {
		s     *topo.Snapshot
		alloc map[uint32]bool
	}
	snaps := []live{{c.NewSnapshot(), map[uint32]bool{}}}
	rng := rand.New(rand.NewPCG(3, 5))
	check := func(l live) {
		t.Helper()
		require.Equal(t, len(l.alloc), l.s.Allocated())
		for g := range l.alloc {
			require.False(t, l.s.IsFree(g), "GPU %d", g)
		}
		require.NoError(t, l.s.Verify())
	}
	for step := range 3000 {
		i := rng.IntN(len(snaps))
		switch op := rng.IntN(10); {
		case op < 3 && len(snaps) < 12:
			snaps = append(snaps, live{snaps[i].s.Clone(), maps.Clone(snaps[i].alloc)})
		case op < 5 && len(snaps) > 1:
			snaps[i].s.Recycle()
			snaps = append(snaps[:i], snaps[i+1:]...)
		default:
			g := uint32(rng.IntN(c.NumGPUs()))
			l := snaps[i]
			if l.alloc[g] {
				require.NoError(t, l.s.Release([]uint32{g}))
				delete(l.alloc, g)
			} else {
				require.NoError(t, l.s.Allocate([]uint32{g}))
				l.alloc[g] = true
			}
		}
		if step%50 == 0 {
			for _, l := range snaps {
				check(l)
			}
		}
	}
	for _, l := range snaps {
		check(l)
	}
}

// TestRecycleKeepsOthersShared is TestRecycleKeepsOthers for shared GPUs:
// recycling snapshots that booked and released shares never changes the
// shares another snapshot shows, and a copy starts from the shares of the
// snapshot it was cloned from.
func TestRecycleKeepsOthersShared(t *testing.T) {
	var spec topo.Spec
	spec.ShareFreeGPUs = true
	for i := range 16 {
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: string(rune('a' + i)), GPUs: 4, GPUModel: "T4"})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	req := mig.Request{Milli: 250}
	type live struct {
		s      *topo.Snapshot
		grants map[uint32][]mig.Grant
	}
	cloneGrants := func(m map[uint32][]mig.Grant) map[uint32][]mig.Grant {
		out := map[uint32][]mig.Grant{}
		for g, gs := range m {
			out[g] = append([]mig.Grant(nil), gs...)
		}
		return out
	}
	snaps := []live{{c.NewSnapshot(), map[uint32][]mig.Grant{}}}
	rng := rand.New(rand.NewPCG(7, 9))
	check := func(l live) {
		t.Helper()
		for g := range uint32(c.NumGPUs()) {
			require.Equal(t, 4-len(l.grants[g]), l.s.SharedFits(g, req), "GPU %d", g)
		}
		require.NoError(t, l.s.Verify())
	}
	for step := range 3000 {
		i := rng.IntN(len(snaps))
		switch op := rng.IntN(10); {
		case op < 3 && len(snaps) < 12:
			snaps = append(snaps, live{snaps[i].s.Clone(), cloneGrants(snaps[i].grants)})
		case op < 5 && len(snaps) > 1:
			snaps[i].s.Recycle()
			snaps = append(snaps[:i], snaps[i+1:]...)
		default:
			g := uint32(rng.IntN(c.NumGPUs()))
			l := snaps[i]
			if n := len(l.grants[g]); n > 0 && (n == 4 || rng.IntN(2) == 0) {
				require.NoError(t, l.s.ReleaseShared(l.grants[g][n-1]))
				l.grants[g] = l.grants[g][:n-1]
			} else {
				gr, err := l.s.AllocateShared(g, req)
				require.NoError(t, err)
				l.grants[g] = append(l.grants[g], gr)
			}
		}
		if step%25 == 0 {
			for _, l := range snaps {
				check(l)
			}
		}
	}
	for _, l := range snaps {
		check(l)
	}
}
