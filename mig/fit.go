package mig

import "math/bits"

// FitCount returns how many grants of r GPU g can give now, one after the
// other: idle instances of r's profile (plus, with MayCreate, the instances
// that can still be created in free memory slices), or shares. It does not
// change the pool. Unknown GPUs and invalid requests fit zero times.
//
// Placement uses it to count members per node without trial allocations.
func (p *Pool) FitCount(g uint32, r Request, mode AllocMode) int {
	st, err := p.gpu(g)
	if err != nil {
		return 0
	}
	rs, err := p.resolve(r)
	if err != nil {
		return 0
	}
	if st.mig() {
		pr := rs.prof[st.layout.model]
		if !pr.Valid() {
			return 0
		}
		t := st.layout.model.tables()
		n := 0
		for pl := st.layout.pl & t.profMask[pr.idx]; pl != 0; pl &= pl - 1 {
			if st.inUse&(1<<t.placements[bits.TrailingZeros32(pl)].start) == 0 {
				n++
			}
		}
		if mode == MayCreate {
			// Instances that could still be created (BestStart and Place,
			// not Alloc: a failed Alloc formats an error, and this loop
			// ends on one for every GPU it counts).
			for l := st.layout; ; n++ {
				s, ok := l.BestStart(pr)
				if !ok {
					break
				}
				nl, err := l.Place(Instance{Profile: pr, Start: uint8(s)})
				if err != nil {
					break
				}
				l = nl
			}
		}
		return n
	}
	units, mem, ok := st.shareFits(rs.r)
	if !ok || units == 0 {
		return 0
	}
	n := min(int(st.free)/int(units), int(st.maxClients)-int(st.clients))
	if st.memTotal > 0 && mem > 0 {
		n = min(n, int(st.memFree/mem))
	}
	return n
}
