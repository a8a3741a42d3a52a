package gang

import (
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
	used           uint64 // last use (capCaches.tick)
	// By domain of level lp-1 (a block): the stamp caps hold for, and the
	// one desc holds for (0: none; stamps are never 0), and the count of
	// positive capacities.
	stamp, sorted []uint64
	npos          []int32
	// By preferred domain (a rack): its capacity (fastCaps); and, over
	// the range of a block's racks, the block's positive capacities in
	// descending order (npos of them).
	caps, desc []int32
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
		*cs = capCaches{c: p.c}
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
		e.stamp = slices.Grow(e.stamp[:0], nb)[:nb]
		e.sorted = slices.Grow(e.sorted[:0], nb)[:nb]
		e.npos = slices.Grow(e.npos[:0], nb)[:nb]
		e.caps = slices.Grow(e.caps[:0], nr)[:nr]
		e.desc = slices.Grow(e.desc[:0], nr)[:nr]
		clear(e.stamp)
		clear(e.sorted)
	}
	e.used = cs.tick
	return e
}

// blockCaps returns the capacities of the racks of block b (a domain of
// level p.lp-1) for the group of p.cc, as fastCaps gives them, and their
// range of preferred domains.
func (p *Placer) blockCaps(b int, gi *groupInfo) (caps []int32, lo, hi int) {
	e := p.cc
	lo, hi = p.c.Descendants(p.lp-1, b, p.lp)
	if st := p.s.DomainStamp(p.lp-1, b); e.stamp[b] != st {
		p.fastCaps(lo, hi, gi, e.caps[lo:hi])
		e.stamp[b] = st
	} else {
		p.ccache.hits++
	}
	return e.caps[lo:hi], lo, hi
}

// blockDesc returns the positive capacities of the racks of block b,
// descending.
func (p *Placer) blockDesc(b int, gi *groupInfo) []int32 {
	e := p.cc
	caps, lo, _ := p.blockCaps(b, gi)
	if e.sorted[b] != e.stamp[b] {
		d := e.desc[lo:lo]
		for _, v := range caps {
			if v > 0 {
				d = append(d, v)
			}
		}
		sortDesc(d)
		e.npos[b] = int32(len(d))
		e.sorted[b] = e.stamp[b]
	}
	return e.desc[lo : lo+int(e.npos[b])]
}

// cachedCaps is fastCaps for the preferred domains of required domain d
// (lo..hi-1), through the cache: block by block.
func (p *Placer) cachedCaps(d, lo int, gi *groupInfo, dst []int32) {
	blo, bhi := p.span(p.lr, d, p.lp-1)
	for b := blo; b < bhi; b++ {
		caps, rlo, _ := p.blockCaps(b, gi)
		copy(dst[rlo-lo:], caps)
	}
}

// cachedFor reports whether the cache serves group gi now.
func (p *Placer) cachedFor(gi *groupInfo) bool { return p.cc != nil && gi == p.ccGi }
