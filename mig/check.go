package mig

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
)

// Check verifies every invariant of the pool from scratch: each layout is
// valid, in-use instances exist, share accounting adds up (free + held =
// total, clients, memory, the per-GPU lists), and the index holds exactly
// the GPUs it should. It costs O(GPUs + shares + index size); tests and
// fuzzers call it after every step, production code need not.
func (p *Pool) Check() error {
	var want poolIndex
	var migGPUs [len(modelTable)]int
	seen := make([]bool, p.shares.len())
	for gi := range p.gpus.len() {
		g := uint32(gi)
		st := p.gpus.at(gi)
		if err := st.layout.Validate(); err != nil {
			return fmt.Errorf("GPU %d: %w", g, err)
		}
		if st.mig() {
			migGPUs[st.layout.model]++
			if !st.layout.model.Valid() {
				return fmt.Errorf("GPU %d: MIG mode without a model", g)
			}
			if st.inUse != st.inUseLayout().startBits() {
				return fmt.Errorf("GPU %d: in-use bits %08b name no instance of %v", g, st.inUse, st.layout)
			}
			if st.head >= 0 || st.mode != Exclusive {
				return fmt.Errorf("GPU %d: shares on a MIG GPU", g)
			}
		} else if st.inUse != 0 || !st.layout.IsEmpty() {
			return fmt.Errorf("GPU %d: instances without MIG mode", g)
		}
		var units, clients, mem uint32
		prev := int32(-1)
		for i := st.head; i >= 0; i = p.shares.at(int(i)).next {
			if int(i) >= p.shares.len() || seen[i] {
				return fmt.Errorf("GPU %d: share list broken at %d", g, i)
			}
			seen[i] = true
			r := p.shares.at(int(i))
			if !r.live || r.gpu != g || r.prev != prev {
				return fmt.Errorf("GPU %d: share %d not live, foreign or mislinked", g, i)
			}
			prev = i
			units += uint32(r.units)
			mem += r.memMiB
			clients++
		}
		if uint32(st.free)+units != uint32(st.units) || uint32(st.clients) != clients || st.clients > st.maxClients {
			return fmt.Errorf("GPU %d: share accounting: free %d + held %d != %d, clients %d/%d of %d",
				g, st.free, units, st.units, st.clients, clients, st.maxClients)
		}
		if st.memTotal > 0 && st.memFree+mem != st.memTotal {
			return fmt.Errorf("GPU %d: %v memory: free %d + held %d != %d", g, st.mode, st.memFree, mem, st.memTotal)
		}
		want.update(g, (&gpuState{head: -1}).key(), st.key())
	}
	for i := range p.shares.len() {
		if p.shares.at(i).live && !seen[i] {
			return fmt.Errorf("share %d live but on no GPU list", i)
		}
	}
	if migGPUs != p.migGPUs {
		return fmt.Errorf("MIG GPU counts %v, want %v", p.migGPUs, migGPUs)
	}
	if p.idx == nil {
		return nil // not built yet: nothing to disagree
	}
	for m := range want.idle {
		for pi := range want.idle[m] {
			for k := range want.idle[m][pi] {
				if !sameSet(want.idle[m][pi][k], p.idx.idle[m][pi][k]) {
					return fmt.Errorf("index: idle[%v][%d][%d] differs", Model(m), pi, k)
				}
				if !sameSet(want.create[m][pi][k], p.idx.create[m][pi][k]) {
					return fmt.Errorf("index: create[%v][%d][%d] differs", Model(m), pi, k)
				}
			}
		}
	}
	for lv := range want.share {
		if !sameSet(want.share[lv], p.idx.share[lv]) || want.levelCount[lv] != p.idx.levelCount[lv] {
			return fmt.Errorf("index: share level %d differs", lv)
		}
	}
	if !want.levels.Equals(&p.idx.levels) {
		return fmt.Errorf("index: share levels differ")
	}
	return nil
}

func sameSet(a, b *roaring.Bitmap) bool {
	ea, eb := a == nil || a.IsEmpty(), b == nil || b.IsEmpty()
	if ea || eb {
		return ea == eb
	}
	return a.Equals(b)
}

func (l Layout) startBits() uint8 {
	var s uint8
	for in := range l.All() {
		s |= 1 << in.Start
	}
	return s
}
