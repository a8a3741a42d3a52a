package gang

import (
	"math/bits"
	"slices"

	"github.com/berthsched/berth/topo"
)

// Hierarchical compactness of a gang's domains: of single-group gangs,
// and of the relaxed single group that stands for a multi-group gang
// (compactMulti).
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
	dp     []int64 // knapsack tables (see knapsack)
	dpRow  []int64 // the knapsack's answer, by r, for the last j
	cells  int     // dpT cells per candidate
	top    []int32 // group positions, by the sum of their m largest items
	merged []int32
	lpTmp  []int32  // one model's capacities, for a set of models
	lbCap  []int32  // pruned's capacities of one domain
	dh     []int    // dual's largest h
	dn     []int32  // and their item counts
	best   []int32  // per group, the sum of its m largest items
	keys   []uint64 // greedyGroups' sort keys
	pre    []int64  // knapsack prefix sums
	mark   []bool
	cand   []int32 // knapsack candidate groups
	dpT    []int16
	topv   []int64 // knapsack's best groups by item count: their sums
	topg   []int32 // and the groups
	nt     []int32 // how many, per item count
	thr    []int64 // the least of them once there are jm
	sel    []int32
}

// capOf is capacity, read from the cache for preferred domains.
func (p *Placer) capOf(l, i int, gi *groupInfo) int {
	if c := &p.cmp; c.lpOK && l == p.lp {
		return int(c.lpCap[i-c.lpBase])
	}
	return min(p.capacity(l, i, gi), 1<<30)
}

// fastCaps writes into dst the capacities for group gi (not slow) of the
// preferred domains lo..hi-1 (below the node level), clamped to 1<<30:
// one pass over the counters per model.
func (p *Placer) fastCaps(lo, hi int, gi *groupInfo, dst []int32) {
	c := &p.cmp
	if gi.models.n == 0 {
		p.s.DomainCapacities(p.lp, lo, hi, gi.per, gi.model, dst)
	} else {
		// A set of models: the sum of each model's capacities.
		clear(dst)
		c.lpTmp = slices.Grow(c.lpTmp[:0], hi-lo)[:hi-lo]
		for _, m := range p.modelsOf(gi) {
			p.s.DomainCapacities(p.lp, lo, hi, gi.per, int(m), c.lpTmp)
			for i, v := range c.lpTmp {
				dst[i] += v
			}
		}
	}
	// A capacity is at most the free GPUs, so the clamp is needed only
	// past 1<<30 of them.
	if p.s.Free() > 1<<30 {
		for i, v := range dst {
			dst[i] = min(v, 1<<30)
		}
	}
}

// compact chooses the domains of single-group gang gi inside required
// domain d (whose capacity reaches need) in the order above, fills the
// spreads and free GPUs of k, and leaves the finest chosen domains in
// p.chosen (level p.chosenL).
func (p *Placer) compact(d int, gi *groupInfo, need int, k *key) {
	c := &p.cmp
	// The preferred domains' capacities are read once by choose, several
	// times past it: cache them.
	lo, hi := p.span(p.lr, d, p.lp)
	c.lpBase = lo
	c.lpCap = slices.Grow(c.lpCap[:0], hi-lo)[:hi-lo]
	if p.cachedFor(gi) {
		p.cachedCaps(d, lo, gi, c.lpCap)
	} else if p.lp < p.nl && !gi.slow {
		p.fastCaps(lo, hi, gi, c.lpCap)
	} else {
		for i := lo; i < hi; i++ {
			c.lpCap[i-lo] = int32(min(p.capacity(p.lp, i, gi), 1<<30))
		}
	}
	c.lpOK = true
	defer func() { c.lpOK, p.ccFresh = false, false }()

	if p.lr+1 == p.lp && p.lp+1 >= p.nl {
		// No level between the required and the preferred one, none
		// between the preferred one and the node: choose alone decides.
		c.cont = append(c.cont[:0], int32(d))
		k.spread, k.freeChosen = p.choose(p.lr, c.cont, p.lp, gi, need)
		return
	}
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
	p.groupItems(cl, l, p.lp, gi, need, m)
	c.best = slices.Grow(c.best[:0], len(c.gid))[:len(c.gid)]
	best, bestFree := -1, 0
	for g := range len(c.gid) {
		s := prefix(c.gcap[c.goff[g]:c.goff[g+1]], m)
		c.best[g] = int32(min(s, 1<<30)) // for greedyGroups
		if s >= need {
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
			wj := 0
			if !p.noWitness {
				wj = p.witness(m, need, lb, upper-1)
			}
			if j := p.minGroups(upper-1, m, need, wj); j > 0 {
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
	p.groupItems(cl, p.lp, l, gi, need, 0)
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
// With keep > 0 a group keeps its keep largest capacities only (narrow
// reads no more than the m largest of a group).
func (p *Placer) groupItems(cl, gl, il int, gi *groupInfo, need, keep int) {
	c := &p.cmp
	c.gcap, c.goff, c.gid = c.gcap[:0], append(c.goff[:0], 0), c.gid[:0]
	cached := c.lpOK && il == p.lp
	need32 := int32(min(need, 1<<30)) // capOf is at most 1<<30
	blocks := cached && keep > 0 && gl == p.lp-1 && p.cachedFor(gi)
	var e *capCache
	if blocks && p.ccFresh {
		e = p.cc // the blocks are current: their sorted lists read in place
	}
	for _, cd := range c.cont {
		glo, ghi := p.span(cl, int(cd), gl)
		for g := glo; g < ghi; g++ {
			start := len(c.gcap)
			if blocks {
				// The keep largest from the cache's descending list.
				var d []int32
				if bk := e.blkAt(g); bk != nil && bk.sorted == bk.stamp {
					d = e.desc[bk.rlo : bk.rlo+bk.npos]
				} else {
					d = p.blockDesc(g, gi)
				}
				if len(d) == 0 {
					continue
				}
				gcap := c.gcap
				for _, v := range d[:min(keep, len(d))] {
					gcap = append(gcap, min(v, need32))
				}
				c.gcap = gcap
				c.goff = append(c.goff, int32(len(c.gcap)))
				c.gid = append(c.gid, int32(g))
				continue
			}
			lo, hi := p.span(gl, g, il)
			if cached && keep > 0 {
				// The keep largest, descending.
				c.gcap = appendLargest(c.gcap, c.lpCap[lo-c.lpBase:hi-c.lpBase], need32, keep)
				if len(c.gcap) == start {
					continue
				}
				c.goff = append(c.goff, int32(len(c.gcap)))
				c.gid = append(c.gid, int32(g))
				continue
			}
			if cached {
				gcap := c.gcap // a local: appends in registers
				for _, v := range c.lpCap[lo-c.lpBase : hi-c.lpBase] {
					if v > 0 {
						gcap = append(gcap, min(v, need32))
					}
				}
				c.gcap = gcap
			} else {
				for i := lo; i < hi; i++ {
					if v := p.capOf(il, i, gi); v > 0 {
						c.gcap = append(c.gcap, int32(min(v, need)))
					}
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

// appendLargest appends to dst the keep largest of the positive values
// of vals, each clamped to clamp, in descending order: the same values as
// the first keep after a full sort. With keep over 4, values below 64
// (rack capacities, say) are counted, one bit per value seen; otherwise
// they are inserted into a list of at most keep.
func appendLargest(dst, vals []int32, clamp int32, keep int) []int32 {
	if len(vals) < 256 && keep > 4 {
		var cnt [64]uint8
		var seen uint64
		small := true
		for _, v := range vals {
			v = max(min(v, clamp), 0)
			if v >= 64 {
				small = false
				break
			}
			cnt[v]++
			seen |= 1 << v
		}
		if small {
			seen &^= 1 // zero: no capacity
			for k := keep; seen != 0 && k > 0; {
				v := 63 - bits.LeadingZeros64(seen)
				seen &^= 1 << v
				n := min(int(cnt[v]), k)
				for range n {
					dst = append(dst, int32(v))
				}
				k -= n
			}
			return dst
		}
	}
	start := len(dst)
	for _, v := range vals {
		if v <= 0 {
			continue
		}
		v = min(v, clamp)
		i := len(dst)
		if i-start < keep {
			dst = append(dst, v)
		} else if v > dst[i-1] {
			i--
		} else {
			continue
		}
		for ; i > start && dst[i-1] < v; i-- {
			dst[i] = dst[i-1]
		}
		dst[i] = v
	}
	return dst
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

// knapsack computes the most capacity that at most j groups and at most r
// of their items hold (j <= jm, r <= rm), each group giving its largest
// items, and fills p.cmp.dpT with the items candidate group i gives in the
// best answer for (j, r) over candidates 0..i. Only candidates enter: for
// each t <= rm, the jm groups whose t largest items hold the most (an
// answer that uses another group for t items can swap it for one of
// those, not in the answer, without losing capacity). It computes j = 1,
// 2, ... in turn, each from the one before, up to jm or, with stop set,
// the first j whose best for (j, rm) reaches need (minGroups needs no
// more), and returns that last j, leaving its best, by r, in
// p.cmp.dpRow. It reports false, doing nothing, when the table would
// exceed dpBudget cells.
func (p *Placer) knapsack(jm, rm, need int, stop bool) (int, bool) {
	c := &p.cmp
	ng := len(c.gid)
	w := rm + 1
	// For each t <= rm, the jm groups whose t largest items hold the most
	// (ties: the lower group), from one pass over the groups: topv and
	// topg hold them by t, best first, nt how many so far.
	c.topv = slices.Grow(c.topv[:0], w*jm)[:w*jm]
	c.topg = slices.Grow(c.topg[:0], w*jm)[:w*jm]
	c.nt = slices.Grow(c.nt[:0], w)[:w]
	clear(c.nt)
	// thr[t]: the last of the jm once there are jm, else -1 (every sum
	// is at least 0, so a group enters while there are fewer).
	c.thr = slices.Grow(c.thr[:0], w)[:w]
	for t := range c.thr {
		c.thr[t] = -1
	}
	topv, topg, nt, thr := c.topv, c.topg, c.nt, c.thr
	gcap, goff := c.gcap, c.goff
	for g := range ng {
		items := gcap[goff[g]:goff[g+1]]
		v := int64(0)
		for t := 1; t <= rm; t++ {
			if t <= len(items) {
				v += int64(items[t-1])
			}
			if v <= thr[t] {
				continue
			}
			k, base := int(nt[t]), t*jm
			i := k
			if k < jm {
				nt[t]++
			} else {
				i--
			}
			for ; i > 0 && topv[base+i-1] < v; i-- {
				topv[base+i], topg[base+i] = topv[base+i-1], topg[base+i-1]
			}
			topv[base+i], topg[base+i] = v, int32(g)
			if nt[t] == int32(jm) {
				thr[t] = topv[base+jm-1]
			}
		}
	}
	c.mark = slices.Grow(c.mark[:0], ng)[:ng]
	clear(c.mark)
	for t := 1; t <= rm; t++ {
		for _, g := range topg[t*jm : t*jm+int(nt[t])] {
			c.mark[g] = true
		}
	}
	// The candidates, ascending, and their prefix sums, pre[ci*w+t].
	c.cand = c.cand[:0]
	for g := range int32(ng) {
		if c.mark[g] {
			c.cand = append(c.cand, g)
		}
	}
	c.pre = slices.Grow(c.pre[:0], len(c.cand)*w)[:len(c.cand)*w]
	for ci, g := range c.cand {
		items := gcap[goff[g]:goff[g+1]]
		row := c.pre[ci*w : (ci+1)*w]
		row[0] = 0
		for t := 1; t <= rm; t++ {
			row[t] = row[t-1]
			if t <= len(items) {
				row[t] += int64(items[t-1])
			}
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
			pre := c.pre[ci*w : (ci+1)*w]
			a := prev[ci*w : (ci+1)*w]      // j-1, candidates before ci
			b := cur[ci*w : (ci+1)*w]       // j, candidates before ci
			out := cur[(ci+1)*w : (ci+2)*w] // j, candidates up to ci
			t0 := c.dpT[ci*c.cells+j*w : ci*c.cells+(j+1)*w]
			// out[r] is the best of b[r] (ci gives nothing) and a[r-t] +
			// pre[t] (ci gives t items), t ascending for each r: ties
			// keep the fewer items of ci (strictly greater wins).
			if j == 1 {
				// a is all 0 and ci's items are positive, so pre rises
				// with t: the last t that beats b[r] is min(n, r), when
				// pre there does.
				out[0], t0[0] = 0, 0
				for r := 1; r <= rm; r++ {
					if k := min(n, r); pre[k] > b[r] {
						out[r], t0[r] = pre[k], int16(k)
					} else {
						out[r], t0[r] = b[r], 0
					}
				}
				continue
			}
			copy(out, b)
			out[0] = 0
			clear(t0)
			dpStep(out, a, pre, t0, n)
		}
		c.dpRow = cur[nc*w : (nc+1)*w]
		if stop && c.dpRow[rm] >= int64(need) {
			return j, true
		}
		prev, cur = cur, prev
	}
	return jm, true
}

// dpStep is one row of the knapsack: for t = 1..n items of a candidate
// whose prefix sums are pre, out[r] becomes a[r-t] + pre[t] where that is
// strictly greater, and t0[r] that t. out, a and t0 have the same length.
func dpStep(out, a, pre []int64, t0 []int16, n int) {
	for t := 1; t <= n; t++ {
		pt, o := pre[t], out[t:]
		tt, x := t0[t:len(out)], a[:len(o)]
		for i := range o {
			if v := x[i] + pt; v > o[i] {
				o[i], tt[i] = v, int16(t)
			}
		}
	}
}

// pickGroups leaves in p.cmp.sel, ascending, the groups (domain indices)
// of the knapsack's best answer for (j, r).
func (p *Placer) pickGroups(j, r, rm int) {
	c := &p.cmp
	w := rm + 1
	c.sel = c.sel[:0]
	for ci := len(c.cand) - 1; ci >= 0 && j > 0 && r > 0; ci-- {
		if t := int(c.dpT[ci*c.cells+j*w+r]); t > 0 {
			c.sel = append(c.sel, c.gid[c.cand[ci]])
			j--
			r -= t
		}
	}
	slices.Sort(c.sel)
}

// minGroups returns the fewest groups (at most jm) whose largest m items
// hold need, leaving them in p.cmp.sel; 0 when none or over budget. wj,
// when in 1..jm, is the size of a set of groups whose m largest items
// hold need (witness's): some answer exists, so dualBelow is skipped, and
// when wj < jm and the table for jm fits dpBudget whatever its
// candidates, the knapsack runs with wj groups at most. It picks the
// same groups: its table for wj holds the same best answers for every j
// <= wj (the candidate argument of knapsack), so it stops at the same j
// <= wj; and the answer pickGroups reads is, among the best answers, the
// one that gives the fewest items to the last candidate, then to the one
// before, and so on (a group left out counting 0). That answer of the
// table for jm uses candidates for wj only: were group g, giving t
// items, not among the wj best for t, one of those wj groups h (not in
// the answer, which has at most j <= wj groups) would give at least as
// much for t items, so exactly as much (the answer is best), and h has
// the lower index (ties go to the lower group): the answer with h in
// place of g would give 0 items to g and the same to the candidates
// above g, and pickGroups would have taken it.
func (p *Placer) minGroups(jm, m, need, wj int) int {
	if wj > 0 && wj <= jm {
		if wj < jm && (jm+1)*(m+1)*len(p.cmp.gid) <= dpBudget {
			jm = wj
			p.witnessed++
		}
	} else if p.dualBelow(jm, m, need) {
		return 0 // the knapsack would find none
	}
	j, ok := p.knapsack(jm, m, need, true)
	if !ok || p.cmp.dpRow[m] < int64(need) {
		return 0
	}
	p.pickGroups(j, m, m)
	return j
}

// witness returns j = min(lb+1, jm) when the j groups whose m/j largest
// items hold the most hold need with them (m/j items from each of j
// groups: m items at most); 0 when they do not (or j is over 8). lb is a
// lower bound on the groups that hold need (greedyGroups'). One pass: j =
// lb is not tried (the knapsack finds it; two passes cost more where
// neither finds an answer).
func (p *Placer) witness(m, need, lb, jm int) int {
	c := &p.cmp
	if j := min(lb+1, jm); j >= 1 && j <= min(m, 8) {
		t := m / j
		var top [8]int // the j largest sums of t items, descending
		for g := range len(c.gid) {
			items := c.gcap[c.goff[g]:c.goff[g+1]]
			v := 0
			for _, x := range items[:min(t, len(items))] {
				v += int(x)
			}
			if v <= top[j-1] {
				continue
			}
			i := j - 1
			for ; i > 0 && top[i-1] < v; i-- {
				top[i] = top[i-1]
			}
			top[i] = v
		}
		sum := 0
		for _, v := range top[:j] {
			sum += v
		}
		if sum >= need {
			return j
		}
	}
	return 0
}

// dualBelow reports that no jm groups hold need in m items, by a bound
// much cheaper than the knapsack: for any lam >= 0, what j groups hold in
// m items is at most lam*m plus the sum of the j largest h(g, lam), where
// h(g, lam) is the sum of (item - lam) over the items of g above lam
// among its m largest (the item count's constraint taken into the sum, a
// Lagrangian relaxation). That bound is convex in lam; a few lam are
// tried, by bisection on its slope. False means no answer, not that some
// jm groups hold need.
func (p *Placer) dualBelow(jm, m, need int) bool {
	c := &p.cmp
	hi := 0
	for g := range len(c.gid) {
		if c.goff[g+1] > c.goff[g] {
			hi = max(hi, int(c.gcap[c.goff[g]]))
		}
	}
	for lo := 0; lo <= hi; {
		lam := (lo + hi) / 2
		v, slope := p.dual(jm, m, lam)
		if v < need {
			return true
		}
		if slope < 0 {
			lo = lam + 1
		} else {
			hi = lam - 1
		}
	}
	return false
}

// dual is the bound of dualBelow at lam, and its slope there (m less the
// items above lam of the j groups it sums).
func (p *Placer) dual(jm, m, lam int) (bound, slope int) {
	c := &p.cmp
	c.dh, c.dn = c.dh[:0], c.dn[:0] // the jm largest h, descending, and their counts
	for g := range len(c.gid) {
		items := c.gcap[c.goff[g]:c.goff[g+1]]
		h, n := 0, 0
		for _, v := range items[:min(m, len(items))] {
			if int(v) <= lam {
				break
			}
			h += int(v) - lam
			n++
		}
		if h == 0 || (len(c.dh) == jm && h <= c.dh[jm-1]) {
			continue
		}
		i := len(c.dh)
		if i < jm {
			c.dh, c.dn = append(c.dh, 0), append(c.dn, 0)
		} else {
			i--
		}
		for ; i > 0 && c.dh[i-1] < h; i-- {
			c.dh[i], c.dn[i] = c.dh[i-1], c.dn[i-1]
		}
		c.dh[i], c.dn[i] = h, int32(n)
	}
	bound, slope = lam*m, m
	for i := range c.dh {
		bound += c.dh[i]
		slope -= int(c.dn[i])
	}
	return bound, slope
}

// minItems returns the fewest items (at most rm) of at most jm groups that
// hold need, leaving the groups in p.cmp.sel; 0 when none or over budget.
func (p *Placer) minItems(jm, rm, need int) int {
	if rm < 1 {
		return 0
	}
	if _, ok := p.knapsack(jm, rm, need, false); !ok {
		return 0
	}
	for r := 1; r <= rm; r++ {
		if p.cmp.dpRow[r] >= int64(need) {
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
// p.cmp.best holds the bests (narrow fills it), clamped to 1<<30.
func (p *Placer) greedyGroups(jm, m, need int) (lb, j int) {
	c := &p.cmp
	ng := len(c.gid)
	// By best, largest first, then by position.
	maxB := int32(0)
	for _, b := range c.best[:ng] {
		maxB = max(maxB, b)
	}
	if maxB < 4096 {
		// Counted: the groups of each best in position order.
		start := p.bucket(int(maxB) + 2)
		for _, b := range c.best[:ng] {
			start[maxB-b+1]++
		}
		for i := 1; i < len(start); i++ {
			start[i] += start[i-1]
		}
		c.top = slices.Grow(c.top[:0], ng)[:ng]
		for g, b := range c.best[:ng] {
			c.top[start[maxB-b]] = int32(g)
			start[maxB-b]++
		}
	} else {
		// One key each, sorted.
		c.keys = c.keys[:0]
		for g, b := range c.best[:ng] {
			c.keys = append(c.keys, uint64(1<<30-b)<<32|uint64(g))
		}
		slices.Sort(c.keys)
		c.top = c.top[:0]
		for _, k := range c.keys {
			c.top = append(c.top, int32(uint32(k)))
		}
	}
	best := func(g int32) int { return int(c.best[g]) }
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
