package gang

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDualBelowSound: dualBelow never rules out what the knapsack finds
// (some jm groups hold need in m items), and it rules out most of what
// the knapsack rules out on these inputs.
func TestDualBelowSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var p Placer
	c := &p.cmp
	ruledOut, none := 0, 0
	for iter := range 20000 {
		ng := 2 + rng.IntN(12)
		need := 1 + rng.IntN(60)
		c.gcap, c.goff, c.gid = c.gcap[:0], append(c.goff[:0], 0), c.gid[:0]
		for g := range ng {
			start := len(c.gcap)
			for range 1 + rng.IntN(8) {
				c.gcap = append(c.gcap, int32(min(1+rng.IntN(16), need)))
			}
			sortDesc(c.gcap[start:])
			c.goff = append(c.goff, int32(len(c.gcap)))
			c.gid = append(c.gid, int32(g))
		}
		jm, m := 1+rng.IntN(ng), 1+rng.IntN(8)
		below := p.dualBelow(jm, m, need)
		_, ok := p.knapsack(jm, m, need, false)
		require.True(t, ok)
		holds := c.dpRow[m] >= int64(need)
		require.False(t, below && holds, "iter %d: dualBelow rules out %d groups holding %d in %d items; the knapsack holds %d", iter, jm, need, m, c.dpRow[m])
		if !holds {
			none++
			if below {
				ruledOut++
			}
		}
	}
	t.Logf("knapsack found none: %d; dualBelow ruled out %d of them", none, ruledOut)
	require.Greater(t, ruledOut*2, none, "the bound must rule out most")
}
