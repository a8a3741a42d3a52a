package gang_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// exactClass reports whether Possible is documented as exact for r: one
// group of whole GPUs without selector or host resources.
func exactClass(r *gang.Request) bool {
	if len(r.Groups) != 1 {
		return false
	}
	g := &r.Groups[0]
	return g.GPUsPerMember > 0 && len(g.Selector) == 0 && g.CPUMilli == 0 && g.MemoryMiB == 0
}

// TestPossibleAgreesWithPlace checks Possible and PossibleWithout against
// Place on random clusters, fills, cordons and hold-backs: a "no" is never
// wrong, and for the exact class a "yes" is never wrong either.
// PossibleWithout is checked against Place on a clone with the held GPUs
// allocated.
func TestPossibleAgreesWithPlace(t *testing.T) {
	no, exactYes := 0, 0
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 17))
		c := small(rng)
		if seed%3 == 0 {
			c = smallShared(rng)
		}
		s := c.NewSnapshot()
		randomFill(rng, s)
		r := randomRequest(rng)
		if seed%3 == 0 && rng.IntN(2) == 0 {
			r = fractionalRequest(rng)
		}

		// A hold-back of random free GPUs, and the snapshot it stands for.
		var h gang.Holdback
		held := s.Clone()
		for _, g := range s.FreeSet().ToArray() {
			if rng.IntN(4) != 0 {
				continue
			}
			id, err := c.NodeOfGPU(g)
			require.NoError(t, err)
			h.Hold(id)
			require.NoError(t, held.Allocate([]uint32{g}))
		}

		for _, tc := range []struct {
			snap     *topo.Snapshot
			possible bool
		}{{s, gang.Possible(s, &r)}, {held, gang.PossibleWithout(s, &r, &h)}} {
			res, err := gang.Place(tc.snap, &r)
			require.NoError(t, err)
			if !tc.possible {
				no++
				require.False(t, res.Found, "seed %d: Possible said no, Place found %v for %+v", seed, res.Members, r)
			} else if exactClass(&r) {
				exactYes++
				require.True(t, res.Found, "seed %d: Possible said yes for the exact class, Place found nothing (%s) for %+v", seed, res.Reason, r)
			}
		}
		h.Reset()
		require.Equal(t, 0, h.Len())
		require.Equal(t, gang.Possible(s, &r), gang.PossibleWithout(s, &r, &h), "an empty hold-back is Possible")
	}
	// The check must have exercised both answers.
	require.Greater(t, no, 100)
	require.Greater(t, exactYes, 100)
}
