package topo_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestDomainStamp clones, writes (bookings, releases, node states) and
// recycles snapshots at random, and checks every pair of live snapshots:
// a domain with equal stamps in both has equal counters in both, it and
// every domain inside it. It also requires both outcomes to occur often
// (equal stamps, and stamps that differ), so that the check has teeth.
func TestDomainStamp(t *testing.T) {
	c := b2k(t)
	nl := len(c.Levels())
	snaps := []*topo.Snapshot{c.NewSnapshot(), c.NewSnapshot()}
	rng := rand.New(rand.NewPCG(7, 11))
	same := func(a, b *topo.Snapshot, l, d int) bool {
		for fl := l; fl < nl; fl++ {
			lo, hi := d, d+1
			if fl > l {
				lo, hi = c.Descendants(l, d, fl)
			}
			for x := lo; x < hi; x++ {
				if a.DomainFree(fl, x) != b.DomainFree(fl, x) || a.DomainWholeNodes(fl, x) != b.DomainWholeNodes(fl, x) ||
					!slices.Equal(a.DomainHistogram(fl, x, -1), b.DomainHistogram(fl, x, -1)) {
					return false
				}
			}
		}
		return true
	}
	equal, differ := 0, 0
	for step := range 4000 {
		i := rng.IntN(len(snaps))
		s := snaps[i]
		switch op := rng.IntN(12); {
		case op < 2 && len(snaps) < 8:
			snaps = append(snaps, s.Clone())
		case op < 3 && len(snaps) > 2:
			s.Recycle()
			snaps = slices.Delete(snaps, i, i+1)
		case op < 4:
			id := topo.NodeID(rng.IntN(c.NumNodes()))
			st := topo.Ready
			if s.NodeState(id) == topo.Ready {
				st = topo.Down
			}
			require.NoError(t, s.SetNodeState(id, st))
		default:
			g := uint32(rng.IntN(c.NumGPUs()))
			if s.IsFree(g) {
				require.NoError(t, s.Allocate([]uint32{g}))
			} else {
				_ = s.Release([]uint32{g}) // refused for some states
			}
		}
		if step%40 != 0 {
			continue
		}
		for a := range snaps {
			for b := a + 1; b < len(snaps); b++ {
				for l := range nl {
					for d := range c.NumDomains(l) {
						if snaps[a].DomainStamp(l, d) != snaps[b].DomainStamp(l, d) {
							differ++
							continue
						}
						equal++
						require.True(t, same(snaps[a], snaps[b], l, d), "step %d: level %d domain %d: equal stamps, different counters", step, l, d)
					}
				}
			}
		}
	}
	require.Greater(t, equal, 1000)
	require.Greater(t, differ, 1000)
	t.Logf("pairs with equal stamps %d, with different stamps %d", equal, differ)
}
