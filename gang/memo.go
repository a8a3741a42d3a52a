package gang

import "github.com/berthsched/berth/topo"

// The domain memo (Placer.Memo). The search inside one domain of the
// required level (compact: the preferred domains, the domains of the
// levels between, and the key that ranks the domain) reads nothing but
// the counters of that domain and of the domains inside it, and the free
// GPU counts of its ready nodes, for gangs whose capacity those give (one
// group, no node selector, host resources or fractional GPUs).
// topo.Snapshot.DomainStamp changes with every write to those, on every
// snapshot of the cluster, so an answer kept with the stamp it was
// computed under is the answer while the stamp is unchanged, on any
// snapshot of the cluster.

// memoMax bounds the memo's entries; past it the memo starts over.
const memoMax = 1 << 14

type memoKey struct {
	need, per, model int32
	lr, lp, d        int32
	// models is the set's model mask (groupInfo.mask; a set with an
	// index of 64 or more is slow and never memoised), 0 for one model
	// or any.
	models uint64
}

type memoVal struct {
	stamp   uint64
	k       key
	chosen  []int32
	chosenL int
}

type domainMemo struct {
	c    *topo.Cluster
	m    map[memoKey]*memoVal
	hits int // answers reused, for tests
}

// memoKeyOf returns the memo key of domain d for group gi, false when its
// search reads more than the counters.
func (p *Placer) memoKeyOf(gi *groupInfo, need, d int) (memoKey, bool) {
	if !p.Memo || gi.slow {
		return memoKey{}, false
	}
	return memoKey{need: int32(need), per: int32(gi.per), model: int32(gi.model), lr: int32(p.lr), lp: int32(p.lp), d: int32(d), models: gi.mask}, true
}

// memoGet fills k (all but freeD and d), p.chosen and p.chosenL from the
// memo, if it holds domain d's answer under the domain's current stamp.
func (p *Placer) memoGet(mk memoKey, k *key) bool {
	m := &p.memo
	if m.c != p.c {
		m.c, m.m = p.c, make(map[memoKey]*memoVal)
		return false
	}
	v := m.m[mk]
	if v == nil || v.stamp != p.s.DomainStamp(p.lr, int(mk.d)) {
		return false
	}
	k.spread, k.levels, k.freeChosen = v.k.spread, v.k.levels, v.k.freeChosen
	p.chosen = append(p.chosen[:0], v.chosen...)
	p.chosenL = v.chosenL
	m.hits++
	return true
}

// memoPut keeps the answer compact just gave for domain d.
func (p *Placer) memoPut(mk memoKey, k *key) {
	m := &p.memo
	v := m.m[mk]
	if v == nil {
		if len(m.m) >= memoMax {
			clear(m.m)
		}
		v = new(memoVal)
		m.m[mk] = v
	}
	v.stamp = p.s.DomainStamp(p.lr, int(mk.d))
	v.k = *k
	v.chosen = append(v.chosen[:0], p.chosen...)
	v.chosenL = p.chosenL
}
