package gang

import (
	"math/bits"
	"slices"

	"github.com/berthsched/berth/topo"
)

// The capacity cache. A single-group search reads the capacities of the
// preferred domains (racks) of its required domain from the counters on
// every decision (fastCaps), and narrow and pruned sort those of each
// parent domain (block) again. The capacities of a block's racks depend
// on the block's counters alone, which topo.Snapshot.DomainStamp covers
// (as for Placer.Memo): the cache keeps them per block, with the block's
// stamp and its racks' positive capacities in descending order, and
// reuses them while the stamp is unchanged, on any snapshot of the
// cluster. After a booking or a release only the blocks it touched are
// read again. It serves the groups whose capacity the counters give (not
// slow, one model or any), keyed by the preferred level, the GPUs per
// member and the model; a few keys are kept, the least recently used
// replaced. Answers are the same with it and without it (the values are
// the ones fastCaps and a sort give).

// capCacheKeys is how many keys (preferred level, GPUs per member, model)
// the cache keeps at once.
const capCacheKeys = 4

// capCache holds the capacities of one key.
type capCache struct {
	lp, per, model int
	used           uint64     // last use (capCaches.tick)
	blk            []capBlock // by domain of level lp-1 (a block)

	// By preferred domain (a rack): its capacity (fastCaps); and, over
	// the range of a block's racks, the block's positive capacities in
	// descending order (npos of them).
	caps, desc []int32
	// hist counts the racks of the blocks with a stamp by their capacity
	// (63 for 63 and more): when every block is current, those of the
	// whole level (chooseCached over the whole cluster reads it).
	hist [64]int32
}

// capBlock is what the cache keeps of one block.
type capBlock struct {
	// The stamp caps hold for, and the one desc holds for (0: none;
	// stamps are never 0).
	stamp, sorted uint64
	rlo, rhi      int32 // the block's range of preferred domains
	npos          int32 // its positive capacities (desc)
	max           int32 // its largest capacity, with caps
}

type capCaches struct {
	c    *topo.Cluster
	tick uint64
	e    [capCacheKeys]capCache
	hits int // blocks read from the cache, for tests
}

// capCacheFor returns the cache entry for single group gi, nil when the
// cache does not serve it: a slow group, a set of models, or no preferred
// level between the required level and the node.
func (p *Placer) capCacheFor(gi *groupInfo) *capCache {
	if p.noCapCache || gi.slow || gi.models.n > 0 || p.lp <= p.lr || p.lp >= p.nl {
		return nil
	}
	cs := &p.ccache
	if cs.c != p.c {
		// Another cluster: every entry is rebuilt (its memory kept).
		cs.c = p.c
		for i := range cs.e {
			cs.e[i].used = 0
		}
	}
	cs.tick++
	var e *capCache
	for i := range cs.e {
		x := &cs.e[i]
		if x.used > 0 && x.lp == p.lp && x.per == gi.per && x.model == gi.model {
			e = x
			break
		}
		if e == nil || x.used < e.used {
			e = x // the least recently used, if none matches
		}
	}
	if e.used == 0 || e.lp != p.lp || e.per != gi.per || e.model != gi.model {
		nb, nr := p.c.NumDomains(p.lp-1), p.c.NumDomains(p.lp)
		e.lp, e.per, e.model = p.lp, gi.per, gi.model
		e.blk = slices.Grow(e.blk[:0], nb)[:nb]
		for b := range nb {
			lo, hi := p.c.Descendants(p.lp-1, b, p.lp)
			e.blk[b] = capBlock{rlo: int32(lo), rhi: int32(hi)}
		}
		e.caps = slices.Grow(e.caps[:0], nr)[:nr]
		e.desc = slices.Grow(e.desc[:0], nr)[:nr]
		e.hist = [64]int32{}
	}
	e.used = cs.tick
	return e
}

// blockCaps returns the capacities of the racks of block b (a domain of
// level p.lp-1) for the group of p.cc, as fastCaps gives them, and their
// range of preferred domains.
func (p *Placer) blockCaps(b int, gi *groupInfo) (caps []int32, lo, hi int) {
	e := p.cc
	bk := &e.blk[b]
	lo, hi = int(bk.rlo), int(bk.rhi)
	if st := p.s.DomainStamp(p.lp-1, b); bk.stamp != st {
		e.uncount(bk)
		p.fastCaps(lo, hi, gi, e.caps[lo:hi])
		bk.stamp = st
		e.count(bk)
	} else {
		p.ccache.hits++
	}
	return e.caps[lo:hi], lo, hi
}

// uncount takes block bk's racks out of the count by capacity, if they
// are in it.
func (e *capCache) uncount(bk *capBlock) {
	if bk.stamp != 0 {
		for _, v := range e.caps[bk.rlo:bk.rhi] {
			e.hist[min(max(v, 0), 63)]--
		}
	}
}

// count puts block bk's racks, just read, into the count by capacity,
// and sets its largest.
func (e *capCache) count(bk *capBlock) {
	m := int32(0)
	for _, v := range e.caps[bk.rlo:bk.rhi] {
		e.hist[min(max(v, 0), 63)]++
		m = max(m, v)
	}
	bk.max = m
}

// blkAt is block b's record, nil when e is nil.
func (e *capCache) blkAt(b int) *capBlock {
	if e == nil {
		return nil
	}
	return &e.blk[b]
}

// blockDesc returns the positive capacities of the racks of block b,
// descending.
func (p *Placer) blockDesc(b int, gi *groupInfo) []int32 {
	e := p.cc
	bk := &e.blk[b]
	lo := int(bk.rlo)
	caps := e.caps[lo:bk.rhi]
	if !p.ccFresh {
		caps, lo, _ = p.blockCaps(b, gi)
	}
	if bk.sorted != bk.stamp {
		var d []int32
		if len(caps) < 256 {
			d = appendLargest(e.desc[lo:lo], caps, 1<<30, len(caps)) // counted
		} else {
			d = e.desc[lo:lo]
			for _, v := range caps {
				if v > 0 {
					d = append(d, v)
				}
			}
			sortDesc(d)
		}
		bk.npos = int32(len(d))
		bk.sorted = bk.stamp
	}
	return e.desc[lo : lo+int(bk.npos)]
}

// cachedCaps is fastCaps for the preferred domains of required domain d
// (lo..hi-1), through the cache: block by block. The blocks of d are then
// fresh (p.ccFresh) until compact returns: blockDesc need not read their
// stamps again.
func (p *Placer) cachedCaps(d, lo int, gi *groupInfo, dst []int32) {
	e := p.cc
	l := p.lp - 1
	blo, bhi := p.span(p.lr, d, l)
	for b := blo; b < bhi; {
		if e.blk[b].stamp == p.s.DomainStamp(l, b) {
			p.ccache.hits++
			b++
			continue
		}
		// A run of blocks to read again (all of them on a new entry):
		// their racks, contiguous, in one read of the counters.
		r := b
		for ; r < bhi; r++ {
			bk := &e.blk[r]
			st := p.s.DomainStamp(l, r)
			if bk.stamp == st {
				break
			}
			e.uncount(bk)
			bk.stamp = st
		}
		p.fastCaps(int(e.blk[b].rlo), int(e.blk[r-1].rhi), gi, e.caps[e.blk[b].rlo:e.blk[r-1].rhi])
		for i := b; i < r; i++ {
			e.count(&e.blk[i])
		}
		b = r
	}
	copy(dst, e.caps[lo:lo+len(dst)])
	p.ccFresh = true
}

// cachedFor reports whether the cache serves group gi now.
func (p *Placer) cachedFor(gi *groupInfo) bool { return p.cc != nil && gi == p.ccGi }

// chooseCached is choose for the preferred domains, whose capacities are
// cached (p.cmp.lpCap), read in place: no list of the domains with
// capacity is built, the picks are domain indices, and, when the
// capacity cache serves gi, blocks whose largest rack is below the
// capacity looked for are skipped. It makes the same picks as choose,
// in the same order (the list choose builds is the domains with
// capacity in index order, so a position there and a domain index order
// them alike). It reports false, doing nothing, when a capacity is 63 or
// more (choose's own path handles those).
func (p *Placer) chooseCached(cl int, cont []int32, gi *groupInfo, need int) (spread, freeChosen int, ok bool) {
	c := &p.cmp
	il := p.lp
	var seen uint64
	var h0, h1 [64]int32                              // counts of even and odd positions, summed below
	blocks := p.cachedFor(gi) && cl < il && p.ccFresh // blocks of the required domain, current
	hcont := cont                                     // the domains to count
	if all := blocks && p.ccFresh && len(cont) == 1 && p.lpSpan(cl, int(cont[0])); all {
		// Every block is current, and cont holds them all: the cache
		// counts them already.
		h0 = p.cc.hist
		for v, n := range h0 {
			if n > 0 {
				seen |= 1 << v
			}
		}
		hcont = nil
	}
	for _, cd := range hcont {
		lo, hi := p.span(cl, int(cd), il)
		vals := c.lpCap[lo-c.lpBase : hi-c.lpBase]
		i := 0
		for ; i+1 < len(vals); i += 2 {
			v0, v1 := min(max(vals[i], 0), 63), min(max(vals[i+1], 0), 63)
			seen |= 1<<v0 | 1<<v1
			h0[v0]++
			h1[v1]++
		}
		if i < len(vals) {
			v := min(max(vals[i], 0), 63)
			seen |= 1 << v
			h0[v]++
		}
	}
	seen &^= 1 // no capacity
	if seen>>63 != 0 {
		return 0, 0, false
	}
	maxCap := 63 - bits.LeadingZeros64(seen|1)
	cnt := p.bucket(maxCap + 1)
	for v := 1; v <= maxCap; v++ {
		cnt[v] = h0[v] + h1[v]
	}
	m, sum, thr, atThr := threshold(cnt, maxCap, need)
	// The picks: every domain above thr, and the first atThr at it.
	p.pick = p.pick[:0]
	if m > 0 {
		p.atLeast(cl, cont, int32(thr), blocks, m-atThr, atThr)
		for _, i := range p.pick {
			cnt[c.lpCap[int(i)-c.lpBase]]--
		}
	}
	// Tighten, smallest pick first (higher index first on ties).
	caps := c.lpCap
	base := int32(c.lpBase)
	slices.SortFunc(p.pick, func(a, b int32) int {
		if ca, cb := caps[a-base], caps[b-base]; ca != cb {
			return int(ca - cb)
		}
		return int(b - a)
	})
	slack := sum - need
	for j := 0; j < len(p.pick) && slack > 0; j++ {
		cj := int(caps[p.pick[j]-base])
		for v := max(cj-slack, 1); v < cj; v++ {
			if cnt[v] == 0 {
				continue
			}
			if u := p.lowestAt(cl, cont, int32(v), blocks); u >= 0 {
				cnt[v]--
				cnt[cj]++
				p.pick[j] = u
				slack -= cj - v
			}
			break
		}
	}
	p.chosen = append(p.chosen[:0], p.pick...)
	p.chosenL = il
	for _, idx := range p.chosen {
		freeChosen += p.free(il, int(idx))
	}
	slices.Sort(p.chosen)
	return m, freeChosen, true
}

// atLeast appends to p.pick, in index order, the preferred domains
// inside cont (level cl) whose cached capacity is above v, and the first
// nAt of those at v; it stops once it has nAbove above and nAt at v (all
// there are). With blocks, the blocks of the capacity cache whose largest
// rack is below v are skipped.
func (p *Placer) atLeast(cl int, cont []int32, v int32, blocks bool, nAbove, nAt int) {
	c := &p.cmp
	caps, base := c.lpCap, c.lpBase
	pick := p.pick // a local: appends in registers
	defer func() { p.pick = pick }()
	for _, cd := range cont {
		if blocks {
			e := p.cc
			blo, bhi := p.span(cl, int(cd), p.lp-1)
			for b := blo; b < bhi; b++ {
				bk := &e.blk[b]
				if bk.max < max(v, 1) {
					continue
				}
				for i := bk.rlo; i < bk.rhi; i++ {
					if cv := caps[int(i)-base]; cv > v || (cv == v && nAt > 0) {
						pick = append(pick, i)
						if cv == v {
							nAt--
						} else {
							nAbove--
						}
						if nAbove == 0 && nAt == 0 {
							return
						}
					}
				}
			}
			continue
		}
		lo, hi := p.span(cl, int(cd), p.lp)
		for i := lo; i < hi; i++ {
			if cv := caps[i-base]; cv > v || (cv == v && nAt > 0) {
				pick = append(pick, int32(i))
				if cv == v {
					nAt--
				} else {
					nAbove--
				}
				if nAbove == 0 && nAt == 0 {
					return
				}
			}
		}
	}
}

// lowestAt is the lowest preferred domain inside cont (level cl) whose
// cached capacity is v and that is not in p.pick, -1 if none.
func (p *Placer) lowestAt(cl int, cont []int32, v int32, blocks bool) int32 {
	c := &p.cmp
	caps, base := c.lpCap, c.lpBase
	for _, cd := range cont {
		if blocks {
			e := p.cc
			blo, bhi := p.span(cl, int(cd), p.lp-1)
			for b := blo; b < bhi; b++ {
				bk := &e.blk[b]
				if bk.max < max(v, 1) {
					continue
				}
				for i := bk.rlo; i < bk.rhi; i++ {
					if caps[int(i)-base] == v && !slices.Contains(p.pick, i) {
						return i
					}
				}
			}
			continue
		}
		lo, hi := p.span(cl, int(cd), p.lp)
		for i := lo; i < hi; i++ {
			if caps[i-base] == v && !slices.Contains(p.pick, int32(i)) {
				return int32(i)
			}
		}
	}
	return -1
}

// lpSpan reports whether domain d of level cl holds every preferred
// domain of the cluster.
func (p *Placer) lpSpan(cl, d int) bool {
	lo, hi := p.span(cl, d, p.lp)
	return lo == 0 && hi == p.c.NumDomains(p.lp)
}
