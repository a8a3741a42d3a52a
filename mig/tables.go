package mig

import (
	"math/bits"
	"sync"
)

// placement is one (profile, start) pair of a model. A Layout stores its
// instances as a bitmask over the model's placements (at most 32).
type placement struct {
	prof  uint8
	start uint8
	mask  uint8 // memory slices [start, start+size)
}

// tables are derived once per model from the geometry data: pure functions
// of the tables, computed on first use and never changed afterwards (safe
// for concurrent readers).
type tables struct {
	placements []placement
	plIndex    [maxProfiles][8]int8 // (profile, start) -> placement index, -1 if none
	profMask   [maxProfiles]uint32  // placements of each profile
	// layouts lists every valid layout, the empty one first, in a fixed
	// depth-first order (placements in index order).
	layouts []Layout
	counts  [][maxProfiles]uint8 // per layout: instances per profile
	// within[m] lists the indices of the layouts whose memory slices lie in
	// mask m; completions[m] is its length: how many layouts the free slices
	// m still allow, the measure slot allocation keeps high.
	within      [256][]uint16
	completions [256]uint32
	// creatable[u] has bit p set when profile p has a listed placement
	// clear of the used slices u (maxCount not considered).
	creatable [256]uint8
	// largest[f] is the most compute slices of one instance that the free
	// slices f can still hold.
	largest  [256]uint8
	fullMask uint8
}

var (
	tablesOnce [len(modelTable)]sync.Once
	tablesOf   [len(modelTable)]*tables
)

func (m Model) tables() *tables {
	if !m.Valid() {
		return nil
	}
	tablesOnce[m].Do(func() { tablesOf[m] = buildTables(m) })
	return tablesOf[m]
}

func buildTables(m Model) *tables {
	d := m.data()
	t := &tables{fullMask: uint8(1<<d.memorySlices - 1)}
	for p := range t.plIndex {
		for s := range t.plIndex[p] {
			t.plIndex[p][s] = -1
		}
	}
	for pi, p := range d.profiles {
		for _, s := range p.starts {
			t.plIndex[pi][s] = int8(len(t.placements))
			t.profMask[pi] |= 1 << len(t.placements)
			t.placements = append(t.placements, placement{
				prof: uint8(pi), start: s, mask: uint8((1<<p.memSlices - 1) << s),
			})
		}
	}
	// Depth-first enumeration over placements in index order: each
	// placement is either left out or, if it fits, put in.
	var counts [maxProfiles]uint8
	var rec func(k int, l Layout)
	rec = func(k int, l Layout) {
		if k == len(t.placements) {
			t.layouts = append(t.layouts, l)
			t.counts = append(t.counts, counts)
			return
		}
		rec(k+1, l)
		pl := t.placements[k]
		if l.used&pl.mask == 0 && counts[pl.prof] < d.profiles[pl.prof].maxCount {
			counts[pl.prof]++
			rec(k+1, Layout{pl: l.pl | 1<<k, used: l.used | pl.mask, model: m})
			counts[pl.prof]--
		}
	}
	rec(0, Layout{model: m})
	// The recursion emits "leave out" first, so the empty layout is first.
	for mask := 0; mask < 256; mask++ {
		if uint8(mask)&^t.fullMask != 0 {
			continue
		}
		for i, l := range t.layouts {
			if l.used&^uint8(mask) == 0 {
				t.within[mask] = append(t.within[mask], uint16(i))
			}
		}
		t.completions[mask] = uint32(len(t.within[mask]))
	}
	for u := 0; u < 256; u++ {
		for _, pl := range t.placements {
			if uint8(u)&pl.mask == 0 {
				t.creatable[u] |= 1 << pl.prof
				f := t.fullMask &^ uint8(u)
				t.largest[f] = max(t.largest[f], d.profiles[pl.prof].computeSlices)
			}
		}
	}
	return t
}

// countsOf returns the instances per profile of a placement mask.
func (t *tables) countsOf(pl uint32) (c [maxProfiles]uint8) {
	for pl != 0 {
		k := bits.TrailingZeros32(pl)
		pl &= pl - 1
		c[t.placements[k].prof]++
	}
	return c
}
