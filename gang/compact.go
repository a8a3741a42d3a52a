package gang

import (
	"slices"

	"github.com/berthsched/berth/topo"
)

// Hierarchical compactness of single-group gangs.
//
// Inside one domain of the required level, the placement minimises, in
// this order (each a tie-break of the one before):
//
//  1. the domains of the preferred level (choose: exact);
//  2. the domains of every level between the required and the preferred
//     one, coarsest first (narrow): a gang on 3 racks takes them inside
//     one block when one block has 3 racks that hold it, because a gang
//     split across blocks pays the spine for its whole life;
//  3. the domains of every level between the preferred level and the
//     node, coarsest first (refine): a gang that prefers one block takes
//     the fewest racks of it;
//  4. then the tightest fit, as before: the required domain with the least
//     free GPUs, then the preferred domains with the least free GPUs, and
//     inside the chosen domains the nodes with the fewest free GPUs;
//  5. inside a node, GPUs of one GPU-level domain (NVLink island) when one
//     holds the member, else the fewest such domains (pickGPUs).
//
// Nodes themselves are not a level minimised here: packing members onto the
// nodes with the fewest free GPUs is the tightest fit the policy keeps.
//
// Steps 2 and 3 are exact for the first level that has to split (the
// fewest domains over all choices, by a small knapsack over the domains
// of that level, see minGroups) and take the choice above as given for
// the levels below it. With at most one level between the required and
// the preferred level and at most one between the preferred level and the
// node (every standard cluster: block > rack, block > nvlink), the order
// is exact at every level; the brute-force test checks it. The knapsack is
// skipped, keeping the tightest-fit choice, when its table would exceed
// dpBudget cells (gangs over hundreds of racks).

// maxKeyLevels is how many levels besides the preferred one the key
// compares; deeper hierarchies compare the first ones.
const maxKeyLevels = 6

// dpBudget bounds the cells of one knapsack table.
const dpBudget = 1 << 15

type compactScratch struct {
	lpBase int
	lpCap  []int32 // capacity of the preferred domains of the required domain, by index - lpBase
	lpOK   bool    // lpCap is valid
	cont   []int32 // current containers
	gcap   []int32 // item capacities per group, descending
	goff   []int32 // group g's items are gcap[goff[g]:goff[g+1]]
	gid    []int32 // group g's domain index
	dp     []int64
	top    []int32 // group positions, by the sum of their m largest items
	merged []int32
	best   []int32 // per group, the sum of its m largest items
	pre    []int64 // knapsack prefix sums
	mark   []bool
	cand   []int32 // knapsack candidate groups
	dpT    []int16
	sel    []int32
}

// capOf is capacity, read from the cache for preferred domains.
func (p *Placer) capOf(l, i int, gi *groupInfo) int {
	if c := &p.cmp; c.lpOK && l == p.lp {
		return int(c.lpCap[i-c.lpBase])
	}
	return min(p.capacity(l, i, gi), 1<<30)
}

// compact chooses the domains of single-group gang gi inside required
// domain d (whose capacity reaches need) in the order above, fills the
// spreads and free GPUs of k, and leaves the finest chosen domains in
// p.chosen (level p.chosenL).
func (p *Placer) compact(d int, gi *groupInfo, need int, k *key) {
	c := &p.cmp
	c.lpOK = false
	if p.lr+1 == p.lp && p.lp+1 >= p.nl {
		// No level between the required and the preferred one, none
		// between the preferred one and the node: choose alone decides.
		c.cont = append(c.cont[:0], int32(d))
		k.spread, k.freeChosen = p.choose(p.lr, c.cont, p.lp, gi, need)
		return
	}
	// The preferred domains' capacities are read several times: cache them.
	lo, hi := p.span(p.lr, d, p.lp)
	c.lpBase = lo
	c.lpCap = slices.Grow(c.lpCap[:0], hi-lo)[:hi-lo]
	for i := lo; i < hi; i++ {
		c.lpCap[i-lo] = int32(min(p.capacity(p.lp, i, gi), 1<<30))
	}
	c.lpOK = true

	c.cont = append(c.cont[:0], int32(d))
	cl := p.lr
	m, _ := p.choose(cl, c.cont, p.lp, gi, need)
	k.spread = m
	ki := 0
	set := func(n int) {
		if ki < maxKeyLevels {
			k.levels[ki] = int32(n)
			ki++
		}
	}
	for l := p.lr + 1; l < p.lp; l++ {
		set(p.narrow(cl, l, gi, need, m))
		cl = l
		if l+1 < p.lp {
			p.choose(cl, c.cont, p.lp, gi, need)
		}
	}
	if p.lr+1 < p.lp {
		p.choose(cl, c.cont, p.lp, gi, need)
	}
	if p.lp+1 < p.nl {
		p.refine(cl, gi, need, m)
	}
	k.freeChosen = 0
	for _, x := range p.chosen {
		k.freeChosen += p.free(p.lp, int(x))
	}
	for l := p.lp + 1; l < p.nl; l++ {
		c.cont = append(c.cont[:0], p.chosen...)
		n, _ := p.choose(l-1, c.cont, l, gi, need)
		set(n)
	}
	c.lpOK = false
}

// narrow makes the containers (domains of level cl in p.cmp.cont, whose
// picks at the preferred level are p.chosen, m of them) the fewest domains
// of level l, finer than cl and coarser than the preferred level, inside
// them that hold need members in m preferred domains, and returns their
// count. One domain: the one of the current picks if they lie in one, else
// the tightest (least free GPUs, lower index). More: the fewest, by
// greedyGroups and minGroups, else those of the current picks.
func (p *Placer) narrow(cl, l int, gi *groupInfo, need, m int) int {
	c := &p.cmp
	// The domains of level l the current picks span: when one, nothing
	// is fewer, and the picks keep their tightest fit.
	c.sel = c.sel[:0]
	for _, x := range p.chosen {
		if e := p.domainAbove(p.lp, int(x), l); !slices.Contains(c.sel, int32(e)) {
			c.sel = append(c.sel, int32(e))
		}
	}
	if len(c.sel) == 1 {
		c.cont = append(c.cont[:0], c.sel[0])
		return 1
	}
	p.groupItems(cl, l, p.lp, gi, need)
	best, bestFree := -1, 0
	for g := range len(c.gid) {
		if prefix(c.gcap[c.goff[g]:c.goff[g+1]], m) >= need {
			if f := p.free(l, int(c.gid[g])); best < 0 || f < bestFree {
				best, bestFree = g, f
			}
		}
	}
	if best >= 0 {
		c.cont = append(c.cont[:0], c.gid[best])
		return 1
	}
	// kc domains: the fewest if 2, else look for fewer.
	if kc := len(c.sel); kc > 2 {
		lb, j := p.greedyGroups(kc-1, m, need)
		upper := kc
		if j > 0 {
			upper = j // c.sel holds the greedy groups now
		}
		if lb > 0 && upper-1 >= lb {
			if j := p.minGroups(upper-1, m, need); j > 0 {
				upper = j
			}
		}
		c.cont = append(c.cont[:0], c.sel...)
		slices.Sort(c.cont)
		return upper
	}
	c.cont = append(c.cont[:0], c.sel...)
	slices.Sort(c.cont)
	return len(c.cont)
}

// refine replaces the m preferred domains in p.chosen by m preferred
// domains of the containers (level cl, p.cmp.cont) that hold need members
// in the fewest domains of the next finer level, when some hold them in
// fewer than the current ones do.
func (p *Placer) refine(cl int, gi *groupInfo, need, m int) {
	c := &p.cmp
	l := p.lp + 1
	// The domains of level l the current choice needs.
	c.sel = append(c.sel[:0], p.chosen...)
	r0, _ := p.choose(p.lp, c.sel, l, gi, need)
	p.groupItems(cl, p.lp, l, gi, need)
	if m == 1 {
		// One preferred domain: the one needing the fewest, then the
		// tightest (least free GPUs, lower index).
		best, bestR, bestFree := -1, 0, 0
		for g := range len(c.gid) {
			items := c.gcap[c.goff[g]:c.goff[g+1]]
			r := minPrefix(items, need)
			if r == 0 {
				continue
			}
			f := p.free(p.lp, int(c.gid[g]))
			if best < 0 || r < bestR || (r == bestR && f < bestFree) {
				best, bestR, bestFree = g, r, f
			}
		}
		if best >= 0 && bestR < r0 {
			p.chosen = append(p.chosen[:0], c.gid[best])
		} else {
			p.chosen = append(p.chosen[:0], c.sel...)
		}
		p.chosenL = p.lp
		return
	}
	p.chosen = append(p.chosen[:0], c.sel...)
	p.chosenL = p.lp
	if r0 <= m {
		return // one finer domain per preferred domain: the least there is
	}
	if r := p.minItems(m, r0-1, need); r > 0 {
		p.chosen = append(p.chosen[:0], c.sel...)
		slices.Sort(p.chosen)
	}
}

// domainAbove is the domain of level l (coarser than il) above domain x
// of level il.
func (p *Placer) domainAbove(il, x, l int) int {
	if il == p.nl {
		return p.c.DomainOf(topo.NodeID(x), l)
	}
	return p.c.DomainOf(p.c.Domain(il, x).FirstNode, l)
}

// groupItems fills p.cmp's groups: the domains of level gl inside the
// containers (level cl), each with the capacities of its domains of level
// il, clamped to need, descending; groups without capacity are left out.
func (p *Placer) groupItems(cl, gl, il int, gi *groupInfo, need int) {
	c := &p.cmp
	c.gcap, c.goff, c.gid = c.gcap[:0], append(c.goff[:0], 0), c.gid[:0]
	for _, cd := range c.cont {
		glo, ghi := p.span(cl, int(cd), gl)
		for g := glo; g < ghi; g++ {
			start := len(c.gcap)
			lo, hi := p.span(gl, g, il)
			for i := lo; i < hi; i++ {
				if v := p.capOf(il, i, gi); v > 0 {
					c.gcap = append(c.gcap, int32(min(v, need)))
				}
			}
			if len(c.gcap) == start {
				continue
			}
			sortDesc(c.gcap[start:])
			c.goff = append(c.goff, int32(len(c.gcap)))
			c.gid = append(c.gid, int32(g))
		}
	}
}

// prefix is the sum of the first t items (all if fewer).
func prefix(items []int32, t int) int {
	s := 0
	for _, v := range items[:min(t, len(items))] {
		s += int(v)
	}
	return s
}

// minPrefix is the fewest first items whose sum reaches need, 0 if none.
func minPrefix(items []int32, need int) int {
	s := 0
	for i, v := range items {
		if s += int(v); s >= need {
			return i + 1
		}
	}
	return 0
}

// knapsack fills p.cmp.dp with the most capacity that at most j groups and
// at most r of their items hold (j <= jm, r <= rm), each group giving its
// largest items, and p.cmp.dpT with the items candidate group i gives in
// the best answer for (j, r) over candidates 0..i. Only candidates enter:
// for each t <= rm, the jm groups whose t largest items hold the most (an
// answer that uses another group for t items can swap it for one of
// those, not in the answer, without losing capacity). It reports false,
// doing nothing, when the table would exceed dpBudget cells.
func (p *Placer) knapsack(jm, rm int) bool {
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
	cells := (jm + 1) * w
	if cells*len(c.cand) > dpBudget {
		return false
	}
	c.dp = slices.Grow(c.dp[:0], cells)[:cells]
	clear(c.dp)
	c.dpT = slices.Grow(c.dpT[:0], cells*len(c.cand))[:cells*len(c.cand)]
	clear(c.dpT)
	for ci, g := range c.cand {
		n := min(int(c.goff[g+1]-c.goff[g]), rm)
		pre := c.pre[int(g)*w : (int(g)+1)*w]
		t0 := c.dpT[ci*cells : (ci+1)*cells]
		for j := jm; j >= 1; j-- {
			row, prev := c.dp[j*w:(j+1)*w], c.dp[(j-1)*w:j*w]
			for r := rm; r >= 1; r-- {
				best, bt := row[r], 0
				for t := 1; t <= min(n, r); t++ {
					if v := prev[r-t] + pre[t]; v > best {
						best, bt = v, t
					}
				}
				row[r] = best
				t0[j*w+r] = int16(bt)
			}
		}
	}
	return true
}

// pickGroups leaves in p.cmp.sel, ascending, the groups (domain indices)
// of the knapsack's best answer for (j, r).
func (p *Placer) pickGroups(j, r, rm int) {
	c := &p.cmp
	w := rm + 1
	cells := (len(c.dp) / w) * w
	c.sel = c.sel[:0]
	for ci := len(c.cand) - 1; ci >= 0 && j > 0 && r > 0; ci-- {
		if t := int(c.dpT[ci*cells+j*w+r]); t > 0 {
			c.sel = append(c.sel, c.gid[c.cand[ci]])
			j--
			r -= t
		}
	}
	slices.Sort(c.sel)
}

// minGroups returns the fewest groups (at most jm) whose largest m items
// hold need, leaving them in p.cmp.sel; 0 when none or over budget.
func (p *Placer) minGroups(jm, m, need int) int {
	if !p.knapsack(jm, m) {
		return 0
	}
	w := m + 1
	for j := 1; j <= jm; j++ {
		if p.cmp.dp[j*w+m] >= int64(need) {
			p.pickGroups(j, m, m)
			return j
		}
	}
	return 0
}

// minItems returns the fewest items (at most rm) of at most jm groups that
// hold need, leaving the groups in p.cmp.sel; 0 when none or over budget.
func (p *Placer) minItems(jm, rm, need int) int {
	if rm < 1 || !p.knapsack(jm, rm) {
		return 0
	}
	w := rm + 1
	for r := 1; r <= rm; r++ {
		if p.cmp.dp[jm*w+r] >= int64(need) {
			p.pickGroups(jm, r, rm)
			return r
		}
	}
	return 0
}

// greedyGroups bounds minGroups cheaply. No j groups hold need in m items
// while the sum of the j largest per-group bests (the sums of their m
// largest items) is short of need: the first j where it is not is the lower
// bound lb. From lb on, it adds groups by their bests, largest first, until
// their m largest items together hold need, and returns that count j (<=
// jm, leaving the groups in p.cmp.sel), else 0. j == lb is the least.
func (p *Placer) greedyGroups(jm, m, need int) (lb, j int) {
	c := &p.cmp
	ng := len(c.gid)
	c.top = c.top[:0]
	for g := range int32(ng) {
		c.top = append(c.top, g)
	}
	c.best = slices.Grow(c.best[:0], ng)[:ng]
	for g := range ng {
		c.best[g] = int32(min(prefix(c.gcap[c.goff[g]:c.goff[g+1]], m), 1<<30))
	}
	best := func(g int32) int { return int(c.best[g]) }
	slices.SortFunc(c.top, func(a, b int32) int {
		if d := c.best[b] - c.best[a]; d != 0 {
			return int(d)
		}
		return int(a - b)
	})
	sum := 0
	for lb < ng && sum < need {
		sum += best(c.top[lb])
		lb++
	}
	if sum < need {
		return 0, 0
	}
	c.merged = c.merged[:0]
	for i, g := range c.top[:min(jm, ng)] {
		items := c.gcap[c.goff[g]:c.goff[g+1]]
		c.merged = append(c.merged, items[:min(m, len(items))]...)
		if i+1 < lb {
			continue
		}
		sortDesc(c.merged)
		if prefix(c.merged, m) >= need {
			c.sel = c.sel[:0]
			for _, g := range c.top[:i+1] {
				c.sel = append(c.sel, c.gid[g])
			}
			return lb, i + 1
		}
	}
	return lb, 0
}

// sortDesc sorts a short slice (the racks of a block) in descending order.
func sortDesc(a []int32) {
	if len(a) > 32 {
		slices.Sort(a)
		slices.Reverse(a)
		return
	}
	for i := 1; i < len(a); i++ {
		v, j := a[i], i
		for ; j > 0 && a[j-1] < v; j-- {
			a[j] = a[j-1]
		}
		a[j] = v
	}
}
