package topo_test

import (
	"maps"
	"math/rand/v2"
	"testing"

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
