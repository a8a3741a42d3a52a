package mig

import (
	"fmt"
	"math/bits"

	"github.com/RoaringBitmap/roaring/v2"
)

// How an allocation is chosen, on one GPU or among many. Candidates are
// ranked by (phase, class, GPU index), lowest first, so the choice is
// deterministic and the tightest fit:
//
//  1. an idle MIG instance of the resolved profile, class = memory slices
//     of its GPU not held by in-use instances;
//  2. a share of a shared GPU (time-slicing / MPS), class = its free milli;
//  3. with MayCreate, a new instance in unallocated memory slices at
//     Layout.BestStart, class = its GPU's unallocated memory slices.
//
// Reusing what exists comes before changing a layout; among equals, the
// fullest GPU wins so that empty GPUs stay whole for large requests. On a
// GPU the idle instance with the lowest start is taken.
const (
	phaseIdle uint8 = iota + 1
	phaseShare
	phaseCreate
)

type choice struct {
	phase uint8
	class int
	gpu   uint32
	prof  Profile
}

func (c choice) less(d choice) bool {
	if c.phase != d.phase {
		return c.phase < d.phase
	}
	if c.class != d.class {
		return c.class < d.class
	}
	return c.gpu < d.gpu
}

// resolved holds a request resolved for every model (profile per model).
type resolved struct {
	r     Request
	prof  [len(modelTable)]Profile // invalid where the model has no fit
	share bool                     // the request can take a share
}

func resolve(r Request) (resolved, error) {
	if err := r.Validate(); err != nil {
		return resolved{}, err
	}
	rs := resolved{r: r, share: r.Profile == "" && r.Milli > 0}
	for m := Model(1); int(m) < len(modelTable); m++ {
		if p, err := m.Resolve(r); err == nil {
			rs.prof[m] = p
		}
	}
	return rs, nil
}

func (p *Pool) resolve(r Request) (*resolved, error) {
	if p.lastSet && p.last.r == r {
		return &p.last, nil
	}
	rs, err := resolve(r)
	if err != nil {
		return nil, err
	}
	p.last, p.lastSet = rs, true
	return &p.last, nil
}

// shareFits reports whether GPU st can take a share for r, and how many
// units and how much pinned memory it would hold.
func (st *gpuState) shareFits(r Request) (units, mem uint32, ok bool) {
	if st.mig() || st.mode == Exclusive || r.Profile != "" || r.Milli <= 0 || st.clients >= st.maxClients {
		return 0, 0, false
	}
	switch st.mode {
	case TimeSlicing:
		units = uint32((r.Milli*int(st.units) + 999) / 1000)
	case MPS:
		units = uint32(r.Milli)
	}
	if st.mode == MPS || st.memTotal > 0 {
		mem = uint32(r.MemoryMiB)
		if mem == 0 {
			mem = uint32(uint64(r.Milli) * uint64(st.memTotal) / 1000)
		}
		if st.memTotal > 0 && mem > st.memFree {
			return 0, 0, false
		}
	}
	return units, mem, units <= uint32(st.free)
}

// candidate is GPU g's best choice for rs, if any.
func (p *Pool) candidate(g uint32, rs *resolved, mode AllocMode) (choice, bool) {
	st := p.gpus.at(int(g))
	if st.mig() {
		pr := rs.prof[st.layout.model]
		if !pr.Valid() {
			return choice{}, false
		}
		k := st.key()
		if k.idleProf&(1<<pr.idx) != 0 {
			return choice{phase: phaseIdle, class: int(k.idleClass), gpu: g, prof: pr}, true
		}
		if mode == MayCreate && k.createProf&(1<<pr.idx) != 0 {
			return choice{phase: phaseCreate, class: int(k.createClass), gpu: g, prof: pr}, true
		}
		return choice{}, false
	}
	if _, _, ok := st.shareFits(rs.r); ok {
		return choice{phase: phaseShare, class: st.freeMilli(), gpu: g}, true
	}
	return choice{}, false
}

// Allocate serves r on GPU g. It returns a Grant, or an error wrapping
// ErrNoFit when g has no room (ErrBadRequest, ErrBadGPU for bad input).
func (p *Pool) Allocate(g uint32, r Request, mode AllocMode) (Grant, error) {
	if _, err := p.gpu(g); err != nil {
		return Grant{}, err
	}
	return p.AllocateInRange(g, g+1, r, mode)
}

// AllocateInRange serves r on the best GPU of [lo, hi) (a node's GPUs are
// such a range), ranked as described at the top of this file. It scans the
// range: meant for a node, not a cluster.
func (p *Pool) AllocateInRange(lo, hi uint32, r Request, mode AllocMode) (Grant, error) {
	rs, err := p.resolve(r)
	if err != nil {
		return Grant{}, err
	}
	if hi > uint32(p.gpus.len()) {
		hi = uint32(p.gpus.len())
	}
	var best choice
	found := false
	for g := lo; g < hi; g++ {
		if c, ok := p.candidate(g, rs, mode); ok && (!found || c.less(best)) {
			best, found = c, true
		}
	}
	if !found {
		return Grant{}, fmt.Errorf("%w: %v on GPUs [%d,%d)", ErrNoFit, r, lo, hi)
	}
	return p.commit(best, rs.r)
}

// AllocateIn serves r on the best GPU of set (nil: the whole pool), ranked
// as described at the top of this file, through the index: the cost grows
// with the number of tightness buckets probed, not with the set's size.
// The caller keeps ownership of set; it is only read.
func (p *Pool) AllocateIn(set *roaring.Bitmap, r Request, mode AllocMode) (Grant, error) {
	rs, err := p.resolve(r)
	if err != nil {
		return Grant{}, err
	}
	if c, ok := p.bestIndexed(set, rs, mode); ok {
		return p.commit(c, rs.r)
	}
	return Grant{}, fmt.Errorf("%w: %v", ErrNoFit, r)
}

func (p *Pool) bestIndexed(set *roaring.Bitmap, rs *resolved, mode AllocMode) (choice, bool) {
	x := p.index()
	// Phases 1 and 3 probe, class by class, every model present.
	mig := func(phase uint8, buckets *[len(modelTable)][maxProfiles][9]*roaring.Bitmap) (choice, bool) {
		for class := 0; class <= 8; class++ {
			var best choice
			found := false
			for m := Model(1); int(m) < len(modelTable); m++ {
				pr := rs.prof[m]
				if p.migGPUs[m] == 0 || !pr.Valid() {
					continue
				}
				if g, ok := firstIn(buckets[m][pr.idx][class], set); ok && (!found || g < best.gpu) {
					best, found = choice{phase: phase, class: class, gpu: g, prof: pr}, true
				}
			}
			if found {
				return best, true
			}
		}
		return choice{}, false
	}
	if c, ok := mig(phaseIdle, &x.idle); ok {
		return c, true
	}
	if rs.share {
		it := x.levels.Iterator()
		it.AdvanceIfNeeded(uint32(rs.r.Milli))
		for it.HasNext() {
			lv := it.Next()
			var best choice
			found := false
			eachIn(x.share[lv], set, func(g uint32) bool {
				if _, _, ok := p.gpus.at(int(g)).shareFits(rs.r); ok {
					best, found = choice{phase: phaseShare, class: int(lv), gpu: g}, true
					return false
				}
				return true
			})
			if found {
				return best, true
			}
		}
	}
	if mode == MayCreate {
		return mig(phaseCreate, &x.create)
	}
	return choice{}, false
}

func (p *Pool) commit(c choice, r Request) (Grant, error) {
	st := *p.gpus.at(int(c.gpu))
	switch c.phase {
	case phaseIdle:
		t := st.layout.model.tables()
		for pl := st.layout.pl & t.profMask[c.prof.idx]; pl != 0; pl &= pl - 1 {
			s := t.placements[bits.TrailingZeros32(pl)].start
			if st.inUse&(1<<s) == 0 {
				st.inUse |= 1 << s
				p.set(c.gpu, st)
				return Grant{GPU: c.gpu, Instance: Instance{Profile: c.prof, Start: s}}, nil
			}
		}
	case phaseCreate:
		nl, in, err := st.layout.Alloc(c.prof)
		if err != nil {
			return Grant{}, err
		}
		st.layout = nl
		st.inUse |= 1 << in.Start
		p.set(c.gpu, st)
		return Grant{GPU: c.gpu, Instance: in, Created: true}, nil
	case phaseShare:
		sh, err := p.takeShare(c.gpu, r)
		return Grant{GPU: c.gpu, Share: sh}, err
	}
	// Unreachable: candidates come from the state just read.
	return Grant{}, fmt.Errorf("%w: internal: no slot behind choice %+v", ErrNoFit, c)
}

// Release gives back what g granted. A grant released twice, or never
// granted, gives an error wrapping ErrNotHeld and changes nothing. A
// released instance stays in the layout, idle; destroying it is a plan's
// business.
func (p *Pool) Release(g Grant) error {
	if g.IsShare() {
		return p.ReleaseShare(g.Share.ID)
	}
	st, err := p.gpu(g.GPU)
	if err != nil {
		return err
	}
	if !st.mig() || !st.layout.Has(g.Instance) || st.inUse&(1<<g.Instance.Start) == 0 {
		return fmt.Errorf("%w: %v on GPU %d", ErrNotHeld, g.Instance, g.GPU)
	}
	ns := *st
	ns.inUse &^= 1 << g.Instance.Start
	p.set(g.GPU, ns)
	return nil
}

func shareID(slot int32, gen uint32) ShareID { return ShareID(uint64(gen)<<32 | uint64(slot+1)) }

func (p *Pool) shareOf(i int32) Share {
	r := p.shares.at(int(i))
	st := p.gpus.at(int(r.gpu))
	s := Share{ID: shareID(i, r.gen), GPU: r.gpu}
	switch st.mode {
	case TimeSlicing:
		s.Replicas = int(r.units)
		s.Milli = int(r.units) * 1000 / int(st.units)
		s.BookedMemoryMiB = int(r.memMiB)
	case MPS:
		s.Milli = int(r.milli)
		s.ActiveThreadPercent = min(100, max(1, (int(r.milli)+9)/10))
		s.PinnedMemoryMiB = int(r.memMiB)
	}
	return s
}

func (p *Pool) takeShare(g uint32, r Request) (Share, error) {
	st := *p.gpus.at(int(g))
	units, mem, ok := st.shareFits(r)
	if !ok {
		return Share{}, fmt.Errorf("%w: %v on GPU %d", ErrNoFit, r, g)
	}
	var i int32
	if p.freeShare >= 0 {
		i = p.freeShare
		p.freeShare = p.shares.at(int(i)).next
	} else {
		i = int32(p.shares.push(p, shareRec{}))
	}
	rec := p.shares.w(p, int(i))
	*rec = shareRec{gpu: g, gen: rec.gen + 1, milli: uint16(r.Milli), units: uint16(units),
		memMiB: mem, prev: -1, next: st.head, live: true}
	if st.head >= 0 {
		p.shares.w(p, int(st.head)).prev = i
	}
	st.head = i
	st.free -= uint16(units)
	st.clients++
	if st.memTotal > 0 {
		st.memFree -= mem
	}
	p.set(g, st)
	return p.shareOf(i), nil
}

// AllocateShare takes a share of shared GPU g for r (r.Milli > 0).
func (p *Pool) AllocateShare(g uint32, r Request) (Share, error) {
	if _, err := p.gpu(g); err != nil {
		return Share{}, err
	}
	if err := r.Validate(); err != nil {
		return Share{}, err
	}
	return p.takeShare(g, r)
}

// ReleaseShare gives back share id. An id not held (released already, or
// never issued) gives an error wrapping ErrNotHeld and changes nothing.
func (p *Pool) ReleaseShare(id ShareID) error {
	slot := int64(uint32(id)) - 1
	if slot < 0 || slot >= int64(p.shares.len()) {
		return fmt.Errorf("%w: share %#x", ErrNotHeld, uint64(id))
	}
	if r := p.shares.at(int(slot)); !r.live || r.gen != uint32(id>>32) {
		return fmt.Errorf("%w: share %#x", ErrNotHeld, uint64(id))
	}
	rec := p.shares.w(p, int(slot))
	st := *p.gpus.at(int(rec.gpu))
	if rec.prev >= 0 {
		p.shares.w(p, int(rec.prev)).next = rec.next
	} else {
		st.head = rec.next
	}
	if rec.next >= 0 {
		p.shares.w(p, int(rec.next)).prev = rec.prev
	}
	st.free += rec.units
	st.clients--
	if st.memTotal > 0 {
		st.memFree += rec.memMiB
	}
	rec.live = false
	rec.prev, rec.next = -1, p.freeShare
	p.freeShare = int32(slot)
	p.set(rec.gpu, st)
	return nil
}

// Claim marks one specific idle instance of GPU g in use, as when a backend
// reports a running workload on it (inventory, restart). Errors: ErrBadGPU,
// ErrNoInstance (not in the layout or not in MIG mode), ErrBusy (already in
// use).
func (p *Pool) Claim(g uint32, in Instance) (Grant, error) {
	st, err := p.gpu(g)
	if err != nil {
		return Grant{}, err
	}
	if !st.mig() || !st.layout.Has(in) {
		return Grant{}, &PlacementError{Instance: in, Err: ErrNoInstance}
	}
	if st.inUse&(1<<in.Start) != 0 {
		return Grant{}, fmt.Errorf("%w: %v on GPU %d already in use", ErrBusy, in, g)
	}
	ns := *st
	ns.inUse |= 1 << in.Start
	p.set(g, ns)
	return Grant{GPU: g, Instance: in}, nil
}
