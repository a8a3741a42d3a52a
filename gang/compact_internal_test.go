package gang

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// randomGroups fills c with ng groups of 1 to maxItems items each, item
// values from val (clamped to need), sorted descending, group g's domain
// index gid(g).
func randomGroups(c *compactScratch, rng *rand.Rand, ng, need, maxItems int, val func() int, gid func(g int) int32) {
	c.gcap, c.goff, c.gid = c.gcap[:0], append(c.goff[:0], 0), c.gid[:0]
	for g := range ng {
		start := len(c.gcap)
		for range 1 + rng.IntN(maxItems) {
			c.gcap = append(c.gcap, int32(min(val(), need)))
		}
		sortDesc(c.gcap[start:])
		c.goff = append(c.goff, int32(len(c.gcap)))
		c.gid = append(c.gid, gid(g))
	}
}

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
		randomGroups(c, rng, ng, need, 8, func() int { return 1 + rng.IntN(16) }, func(g int) int32 { return int32(g) })
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

// TestKnapsackSame: the knapsack's candidates, answer and every cell of
// its table that pickGroups may read are those of the plain version it
// replaced (knapsackRef, kept here), on random groups, with and without
// stop; and appendLargest keeps the same items as a full sort.
func TestKnapsackSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var p, q Placer
	for iter := range 20000 {
		ng := 1 + rng.IntN(20)
		need := 1 + rng.IntN(80)
		c := &p.cmp
		randomGroups(c, rng, ng, need, 9, func() int { return 1 + rng.IntN(1+rng.IntN(20)) }, func(g int) int32 { return int32(3*g + 1) })
		d := &q.cmp
		d.gcap, d.goff, d.gid = append(d.gcap[:0], c.gcap...), append(d.goff[:0], c.goff...), append(d.gid[:0], c.gid...)
		jm, rm, stop := 1+rng.IntN(ng), 1+rng.IntN(9), rng.IntN(2) == 0
		j1, ok1 := p.knapsack(jm, rm, need, stop)
		j2, ok2 := q.knapsackRef(jm, rm, need, stop)
		require.Equal(t, ok2, ok1, "iter %d", iter)
		require.Equal(t, j2, j1, "iter %d", iter)
		if !ok1 {
			continue
		}
		require.Equal(t, d.cand, c.cand, "iter %d: candidates", iter)
		require.Equal(t, d.dpRow, c.dpRow, "iter %d: answer", iter)
		w := rm + 1
		for ci := range c.cand {
			for j := 1; j <= j1; j++ {
				for r := 1; r <= rm; r++ {
					require.Equal(t, d.dpT[ci*d.cells+j*w+r], c.dpT[ci*c.cells+j*w+r], "iter %d: cell %d %d %d", iter, ci, j, r)
				}
			}
		}
		for r := 1; r <= rm; r++ {
			p.pickGroups(j1, r, rm)
			q.pickGroups(j1, r, rm)
			require.Equal(t, d.sel, c.sel, "iter %d: groups for %d items", iter, r)
		}
		// appendLargest against a full sort.
		vals := make([]int32, rng.IntN(300))
		for i := range vals {
			vals[i] = int32(rng.IntN(1 + rng.IntN(100)))
		}
		clamp, keep := int32(1+rng.IntN(90)), 1+rng.IntN(12)
		var want []int32
		for _, v := range vals {
			if v > 0 {
				want = append(want, min(v, clamp))
			}
		}
		sortDesc(want)
		want = want[:min(keep, len(want))]
		got := appendLargest([]int32{-7}, vals, clamp, keep)
		require.Equal(t, append([]int32{-7}, want...), got, "iter %d: appendLargest", iter)
	}
}

// knapsackRef is knapsack as it was before its candidates were picked in
// one pass and its first row read from the prefix sums.
func (p *Placer) knapsackRef(jm, rm, need int, stop bool) (int, bool) {
	c := &p.cmp
	ng := len(c.gid)
	w := rm + 1
	// prefix sums, pre[g*w+t]
	c.pre = slices.Grow(c.pre[:0], ng*w)[:ng*w]
	for g := range ng {
		items := c.gcap[c.goff[g]:c.goff[g+1]]
		row := c.pre[g*w : (g+1)*w]
		row[0] = 0
		for t := 1; t <= rm; t++ {
			row[t] = row[t-1]
			if t <= len(items) {
				row[t] += int64(items[t-1])
			}
		}
	}
	c.mark = slices.Grow(c.mark[:0], ng)[:ng]
	clear(c.mark)
	for t := 1; t <= rm; t++ {
		c.top = c.top[:0] // the jm best for t, best first
		for g := range int32(ng) {
			v := c.pre[int(g)*w+t]
			if len(c.top) == jm && v <= c.pre[int(c.top[jm-1])*w+t] {
				continue
			}
			i := len(c.top)
			if i < jm {
				c.top = append(c.top, g)
			} else {
				i--
			}
			for ; i > 0 && c.pre[int(c.top[i-1])*w+t] < v; i-- {
				c.top[i] = c.top[i-1]
			}
			c.top[i] = g
		}
		for _, g := range c.top {
			c.mark[g] = true
		}
	}
	c.cand = c.cand[:0]
	for g := range int32(ng) {
		if c.mark[g] {
			c.cand = append(c.cand, g)
		}
	}
	nc := len(c.cand)
	c.cells = (jm + 1) * w
	if c.cells*nc > dpBudget {
		return 0, false
	}
	// Two tables, for j-1 and j: row i holds the best, by r, over
	// candidates 0..i-1 (row 0: none, all 0). Every cell of dpT that
	// pickGroups reads (j up to the last computed, r >= 1) is written.
	lw := (nc + 1) * w
	c.dp = slices.Grow(c.dp[:0], 2*lw)[:2*lw]
	prev, cur := c.dp[:lw], c.dp[lw:]
	clear(prev) // j = 0: nothing
	clear(cur[:w])
	c.dpT = slices.Grow(c.dpT[:0], c.cells*nc)[:c.cells*nc]
	c.dpRow = prev[nc*w : (nc+1)*w]
	for j := 1; j <= jm; j++ {
		for ci, g := range c.cand {
			n := min(int(c.goff[g+1]-c.goff[g]), rm)
			pre := c.pre[int(g)*w : (int(g)+1)*w]
			a := prev[ci*w : (ci+1)*w]      // j-1, candidates before ci
			b := cur[ci*w : (ci+1)*w]       // j, candidates before ci
			out := cur[(ci+1)*w : (ci+2)*w] // j, candidates up to ci
			t0 := c.dpT[ci*c.cells+j*w : ci*c.cells+(j+1)*w]
			out[0] = 0
			for r := 1; r <= rm; r++ {
				// Ties keep the fewer items of ci (strictly greater wins).
				best, bt := b[r], 0
				for t := 1; t <= min(n, r); t++ {
					if v := a[r-t] + pre[t]; v > best {
						best, bt = v, t
					}
				}
				out[r] = best
				t0[r] = int16(bt)
			}
		}
		c.dpRow = cur[nc*w : (nc+1)*w]
		if stop && c.dpRow[rm] >= int64(need) {
			return j, true
		}
		prev, cur = cur, prev
	}
	return jm, true
}

// TestMinGroupsWitness: minGroups given a witness (a size wj of a set of
// groups known to hold need, so that the knapsack runs with wj groups at
// most and dualBelow is skipped) returns the same count and the same
// groups as without one, for every wj from the answer's count to jm, on
// random groups with many ties; and witness's answers are sound (some set
// of that many groups holds need).
func TestMinGroupsWitness(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	var p Placer
	c := &p.cmp
	found, witnessed := 0, 0
	for iter := range 20000 {
		ng := 1 + rng.IntN(24)
		need := 1 + rng.IntN(60)
		randomGroups(c, rng, ng, need, 9, func() int { return 1 + rng.IntN(1+rng.IntN(12)) }, func(g int) int32 { return int32(2*g + 1) })
		jm, m := 1+rng.IntN(ng), 1+rng.IntN(9)
		j0 := p.minGroups(jm, m, need, 0)
		sel0 := slices.Clone(c.sel)
		if j0 == 0 {
			continue
		}
		found++
		for wj := j0; wj <= jm; wj++ {
			j1 := p.minGroups(jm, m, need, wj)
			require.Equal(t, j0, j1, "iter %d: wj %d", iter, wj)
			require.Equal(t, sel0, c.sel, "iter %d: wj %d: groups", iter, wj)
		}
		lb := 1 + rng.IntN(j0)
		if w := p.witness(m, need, lb, jm); w > 0 {
			witnessed++
			require.LessOrEqual(t, j0, w, "iter %d: witness %d, yet the fewest groups are %d", iter, w, j0)
			require.LessOrEqual(t, w, jm, "iter %d", iter)
		}
	}
	t.Logf("answers: %d, witnessed: %d", found, witnessed)
	require.Greater(t, witnessed*4, found, "witness must find most answers it can")
}

// TestWitnessSameAnswers places gangs of many members of whole nodes that
// prefer racks, with no required level, on a cluster of blocks of racks
// filled at random (B12K's shape, smaller), with a Placer that uses
// witness and one that does not: every result must be equal. It requires
// the knapsack to run with witness's count often, so that the check has
// teeth.
func TestWitnessSameAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 43))
	spec := topo.Spec{Levels: []string{"block", "rack"}}
	for i := range 48 * 12 * 16 {
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{
			Name:    fmt.Sprintf("n%d", i),
			Domains: []string{fmt.Sprintf("b%d", i/(12*16)), fmt.Sprintf("r%d", i/16)},
			GPUs:    8,
		})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	with, without := &Placer{}, &Placer{noWitness: true}
	placed, found := 0, 0
	gpus := make([]uint32, 0, 8)
	for iter := range 150 {
		s := c.NewSnapshot()
		// Jobs of 1, 2, 4 or 8 GPUs on random nodes that have room, to a
		// share of the GPUs (as benchmarks' random60 fill does).
		target := c.NumGPUs() * (55 + rng.IntN(10)) / 100
		for used := 0; used < target; {
			n := topo.NodeID(rng.IntN(c.NumNodes()))
			size := []int{1, 2, 4, 8}[rng.IntN(4)]
			if s.NodeAvailable(n) < size {
				continue
			}
			first, k := c.NodeGPUs(n)
			gpus = gpus[:0]
			for g := first; g < first+uint32(k) && len(gpus) < size; g++ {
				if s.IsFree(g) {
					gpus = append(gpus, g)
				}
			}
			require.NoError(t, s.Allocate(gpus))
			used += size
		}
		for range 12 {
			r := Request{Groups: []Group{{Members: 24 + rng.IntN(16), GPUsPerMember: 8}}, Preferred: "rack"}
			want, err := without.Place(s, &r)
			require.NoError(t, err)
			got, err := with.Place(s, &r)
			require.NoError(t, err)
			require.Equal(t, want, got, "iter %d: %+v", iter, r)
			placed++
			if want.Found {
				found++
			}
		}
	}
	t.Logf("placements %d, found %d, knapsacks run with the witness's count %d", placed, found, with.witnessed)
	require.Zero(t, without.witnessed)
	require.Greater(t, with.witnessed, placed/100, "knapsacks run with the witness's count")
}
