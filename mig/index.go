package mig

import (
	"math/bits"

	"github.com/RoaringBitmap/roaring/v2"
)

// idxKey is where one GPU sits in the index. Tightness classes count memory
// slices (0..8): fewer means a tighter fit.
type idxKey struct {
	model       Model
	idleProf    uint8 // profiles with an idle instance (MIG GPUs)
	idleClass   uint8 // memory slices not held by in-use instances
	createProf  uint8 // profiles that can be created in unallocated slices
	createClass uint8 // unallocated memory slices
	shareLevel  int16 // free milli of a shared GPU that can take a share, -1 if none
}

func (st *gpuState) key() idxKey {
	k := idxKey{model: st.layout.model, shareLevel: -1}
	if st.mig() {
		t := st.layout.model.tables()
		for pl := st.layout.pl; pl != 0; pl &= pl - 1 {
			p := t.placements[bits.TrailingZeros32(pl)]
			if st.inUse&(1<<p.start) == 0 {
				k.idleProf |= 1 << p.prof
			}
		}
		k.idleClass = uint8(bits.OnesCount8(t.fullMask &^ st.inUseMask()))
		cp := t.creatable[st.layout.used]
		for b := cp; b != 0; b &= b - 1 {
			pi := bits.TrailingZeros8(b)
			if bits.OnesCount32(st.layout.pl&t.profMask[pi]) >= int(st.layout.model.data().profiles[pi].maxCount) {
				cp &^= 1 << pi
			}
		}
		k.createProf = cp
		k.createClass = uint8(bits.OnesCount8(t.fullMask &^ st.layout.used))
		return k
	}
	if st.mode != Exclusive && st.clients < st.maxClients && st.free > 0 {
		if lv := st.freeMilli(); lv > 0 {
			k.shareLevel = int16(lv)
		}
	}
	return k
}

// poolIndex buckets GPUs by what they can serve and how tightly.
type poolIndex struct {
	idle   [len(modelTable)][maxProfiles][9]*roaring.Bitmap
	create [len(modelTable)][maxProfiles][9]*roaring.Bitmap
	share  [1001]*roaring.Bitmap
	// levels holds the share levels whose bucket is non-empty.
	levels     roaring.Bitmap
	levelCount [1001]int32
}

func addTo(b **roaring.Bitmap, g uint32) {
	if *b == nil {
		*b = roaring.New()
	}
	(*b).Add(g)
}

func (x *poolIndex) update(g uint32, o, n idxKey) {
	if o == n {
		return
	}
	sameIdle := o.model == n.model && o.idleClass == n.idleClass
	for b := o.idleProf; b != 0; b &= b - 1 {
		pi := bits.TrailingZeros8(b)
		if !sameIdle || n.idleProf&(1<<pi) == 0 {
			x.idle[o.model][pi][o.idleClass].Remove(g)
		}
	}
	for b := n.idleProf; b != 0; b &= b - 1 {
		pi := bits.TrailingZeros8(b)
		if !sameIdle || o.idleProf&(1<<pi) == 0 {
			addTo(&x.idle[n.model][pi][n.idleClass], g)
		}
	}
	sameCreate := o.model == n.model && o.createClass == n.createClass
	for b := o.createProf; b != 0; b &= b - 1 {
		pi := bits.TrailingZeros8(b)
		if !sameCreate || n.createProf&(1<<pi) == 0 {
			x.create[o.model][pi][o.createClass].Remove(g)
		}
	}
	for b := n.createProf; b != 0; b &= b - 1 {
		pi := bits.TrailingZeros8(b)
		if !sameCreate || o.createProf&(1<<pi) == 0 {
			addTo(&x.create[n.model][pi][n.createClass], g)
		}
	}
	if o.shareLevel != n.shareLevel {
		if o.shareLevel >= 0 {
			x.share[o.shareLevel].Remove(g)
			if x.levelCount[o.shareLevel]--; x.levelCount[o.shareLevel] == 0 {
				x.levels.Remove(uint32(o.shareLevel))
			}
		}
		if n.shareLevel >= 0 {
			addTo(&x.share[n.shareLevel], g)
			if x.levelCount[n.shareLevel]++; x.levelCount[n.shareLevel] == 1 {
				x.levels.Add(uint32(n.shareLevel))
			}
		}
	}
}

// index returns the pool's index, building it on first use. Clones start
// without one, so a what-if copy that only allocates on given GPUs (as
// placement does) never pays for it.
func (p *Pool) index() *poolIndex {
	if p.idx == nil {
		x := new(poolIndex)
		empty := (&gpuState{head: -1}).key()
		for g := range p.gpus.len() {
			x.update(uint32(g), empty, p.gpus.at(g).key())
		}
		p.idx = x
	}
	return p.idx
}

// firstIn returns the smallest GPU of b that is also in set (nil set: all).
// It walks the smaller of the two and probes the other.
func firstIn(b, set *roaring.Bitmap) (uint32, bool) {
	if b == nil || b.IsEmpty() {
		return 0, false
	}
	if set == nil {
		return b.Minimum(), true
	}
	walk, probe := b, set
	if set.GetCardinality() < b.GetCardinality() {
		walk, probe = set, b
	}
	it := walk.Iterator()
	for it.HasNext() {
		if g := it.Next(); probe.Contains(g) {
			return g, true
		}
	}
	return 0, false
}

// eachIn calls fn on the GPUs of b ∩ set in ascending order until fn
// returns false.
func eachIn(b, set *roaring.Bitmap, fn func(uint32) bool) {
	if b == nil || b.IsEmpty() {
		return
	}
	walk, probe := b, set
	if set != nil && set.GetCardinality() < b.GetCardinality() {
		walk, probe = set, b
	}
	it := walk.Iterator()
	for it.HasNext() {
		g := it.Next()
		if probe != nil && !probe.Contains(g) {
			continue
		}
		if !fn(g) {
			return
		}
	}
}
