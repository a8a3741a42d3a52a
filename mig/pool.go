package mig

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// AllocMode says whether an allocation may change a MIG layout.
type AllocMode uint8

const (
	// ExistingOnly uses idle instances and shares only; no layout changes.
	ExistingOnly AllocMode = iota
	// MayCreate may also create an instance in memory slices no instance
	// holds (Grant.Created tells the caller to actuate it). Creating a GPU
	// instance needs no reset and leaves running instances alone.
	MayCreate
)

// GPUConfig is the static set-up of one GPU of a Pool.
type GPUConfig struct {
	// Model is the MIG geometry; NoModel for a GPU that cannot do MIG.
	Model Model
	// MIG: the GPU is in MIG mode. Requires a Model.
	MIG bool
	// Layout: the instances present (all idle) when MIG is on. Its model
	// must be Model; the zero Layout means none. Must be empty when MIG is
	// off.
	Layout Layout
	// Sharing applies when MIG is off. Sharing MIG instances is not
	// modelled.
	Sharing Sharing
}

// Validate checks the configuration on its own.
func (c GPUConfig) Validate() error {
	if c.Model != NoModel && !c.Model.Valid() {
		return fmt.Errorf("%w: %v", ErrUnknownModel, c.Model)
	}
	if c.MIG && c.Model == NoModel {
		return fmt.Errorf("%w: MIG mode without a MIG-capable model", ErrBadConfig)
	}
	if c.Layout != (Layout{}) {
		if c.Layout.model != c.Model {
			return fmt.Errorf("%w: layout of %v on a %v", ErrModelMismatch, c.Layout.model, c.Model)
		}
		if err := c.Layout.Validate(); err != nil {
			return err
		}
		if !c.MIG && !c.Layout.IsEmpty() {
			return fmt.Errorf("%w: instances without MIG mode", ErrBadConfig)
		}
	}
	if c.MIG && c.Sharing.Mode != Exclusive {
		return fmt.Errorf("%w: sharing MIG instances is not modelled", ErrBadConfig)
	}
	return c.Sharing.Validate()
}

// Grant is what one allocation got: a MIG instance now in use, or a share.
type Grant struct {
	GPU uint32
	// Instance is the MIG instance now in use (zero for a share).
	Instance Instance
	// Created: the instance did not exist and was created for this grant;
	// the backend must create it before use (MayCreate only).
	Created bool
	// Share is the share held (zero ID for a MIG grant).
	Share Share
}

// IsShare reports a share grant (as opposed to a MIG instance).
func (g Grant) IsShare() bool { return g.Share.ID != 0 }

const flagMIG uint8 = 1

// gpuState is the per-GPU state: 32 bytes.
type gpuState struct {
	layout Layout // instances present; layout.model is the GPU's model
	inUse  uint8  // start bits of the instances in use
	flags  uint8
	mode   ShareMode
	// units/free: time-slicing replicas, or MPS milli (units = 1000).
	units, free         uint16
	clients, maxClients uint16
	memTotal, memFree   uint32 // MPS pinned / time-slicing booked memory budget, MiB
	head                int32  // first share record, -1 when none
}

func (st *gpuState) mig() bool { return st.flags&flagMIG != 0 }

func (st *gpuState) busy() bool { return st.inUse != 0 || st.head >= 0 }

// inUseMask is the memory slices held by in-use instances.
func (st *gpuState) inUseMask() uint8 {
	if st.inUse == 0 {
		return 0
	}
	t := st.layout.model.tables()
	var m uint8
	for pl := st.layout.pl; pl != 0; pl &= pl - 1 {
		p := t.placements[bits.TrailingZeros32(pl)]
		if st.inUse&(1<<p.start) != 0 {
			m |= p.mask
		}
	}
	return m
}

// Pool is the MIG and sharing state of N GPUs with dense indices 0..N-1, the
// index space of the topology model. It allocates MIG instances and shares
// for fractional requests, releases them, plans reconfiguration (Plan) and
// applies plans (Apply).
//
// A Pool is single-owner: not safe for concurrent use. Per GPU it keeps 32
// bytes; an index of roaring bitmaps (GPUs with an idle instance of each
// profile, GPUs where each profile can be created, shared GPUs by free
// milli, each bucketed by how tight the GPU is) makes a tightest-fit choice
// over a large set cost a few bitmap probes instead of a scan.
type Pool struct {
	gpus      paged[gpuState]
	shares    paged[shareRec]
	tok       atomic.Uint64  // the token of the pages this pool owns (cow.go)
	toks      *atomic.Uint64 // the token counter, shared with every clone
	freeShare int32
	idx       *poolIndex // nil until an indexed allocation needs it (see index)
	// migGPUs counts GPUs in MIG mode per model, so queries skip absent
	// models.
	migGPUs [len(modelTable)]int
	// last caches the most recent resolution: schedulers ask the same
	// request many times in a row.
	last    resolved
	lastSet bool
}

// NewPool returns a pool of n GPUs, each without a model, MIG off and
// exclusive (nothing to allocate until Configure).
func NewPool(n int) *Pool {
	p := &Pool{freeShare: -1, toks: new(atomic.Uint64)}
	p.tok.Store(p.toks.Add(1))
	p.Grow(n)
	return p
}

// Grow appends GPUs up to n in total (unconfigured); it never shrinks.
func (p *Pool) Grow(n int) {
	for p.gpus.len() < n {
		p.gpus.push(p, gpuState{head: -1})
	}
}

// Len is the number of GPUs.
func (p *Pool) Len() int { return p.gpus.len() }

func (p *Pool) gpu(g uint32) (*gpuState, error) {
	if int64(g) >= int64(p.gpus.len()) {
		return nil, fmt.Errorf("%w: %d of %d", ErrBadGPU, g, p.gpus.len())
	}
	return p.gpus.at(int(g)), nil
}

// Configure sets up GPU g. It is refused with ErrBusy while the GPU holds
// in-use instances or shares.
func (p *Pool) Configure(g uint32, c GPUConfig) error {
	st, err := p.gpu(g)
	if err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if st.busy() {
		return fmt.Errorf("%w: GPU %d", ErrBusy, g)
	}
	ns := gpuState{layout: c.Layout, head: -1}
	ns.layout.model = c.Model
	if c.MIG {
		ns.flags |= flagMIG
	} else {
		ns.mode = c.Sharing.Mode
		switch c.Sharing.Mode {
		case TimeSlicing:
			ns.units, ns.free = uint16(c.Sharing.Replicas), uint16(c.Sharing.Replicas)
			ns.maxClients = uint16(c.Sharing.Replicas)
			ns.memTotal, ns.memFree = uint32(c.Sharing.MemoryMiB), uint32(c.Sharing.MemoryMiB)
		case MPS:
			ns.units, ns.free = 1000, 1000
			ns.maxClients = uint16(c.Sharing.Replicas)
			ns.memTotal, ns.memFree = uint32(c.Sharing.MemoryMiB), uint32(c.Sharing.MemoryMiB)
		}
	}
	p.set(g, ns)
	return nil
}

// set replaces GPU g's state and keeps the index in step.
func (p *Pool) set(g uint32, ns gpuState) {
	st := p.gpus.w(p, int(g))
	ok, nk := st.key(), ns.key()
	if st.mig() {
		p.migGPUs[st.layout.model]--
	}
	if ns.mig() {
		p.migGPUs[ns.layout.model]++
	}
	*st = ns
	if p.idx != nil {
		p.idx.update(g, ok, nk)
	}
}

// GPUInfo describes one GPU of a pool.
type GPUInfo struct {
	Model   Model
	MIG     bool
	Layout  Layout // instances present
	InUse   Layout // the instances in use, a sub-layout of Layout
	Sharing Sharing
	// FreeMilli: on a shared GPU, the compute not held by shares; on a MIG
	// GPU, the memory slices not held by in-use instances, in thousandths
	// of the GPU; on an exclusive GPU 1000 when idle.
	FreeMilli int
	Shares    int // shares held
}

// GPU describes GPU g.
func (p *Pool) GPU(g uint32) (GPUInfo, error) {
	st, err := p.gpu(g)
	if err != nil {
		return GPUInfo{}, err
	}
	info := GPUInfo{Model: st.layout.model, MIG: st.mig(), Layout: st.layout, InUse: st.inUseLayout(), FreeMilli: st.infoMilli()}
	switch {
	case st.mig():
	case st.mode == Exclusive:
		info.Sharing = Sharing{Mode: Exclusive}
	default:
		info.Sharing = Sharing{Mode: st.mode, Replicas: int(st.maxClients), MemoryMiB: int(st.memTotal)}
	}
	for i := st.head; i >= 0; i = p.shares.at(int(i)).next {
		info.Shares++
	}
	return info, nil
}

func (st *gpuState) inUseLayout() Layout {
	l := Layout{model: st.layout.model}
	if st.inUse == 0 {
		return l
	}
	t := st.layout.model.tables()
	for pl := st.layout.pl; pl != 0; pl &= pl - 1 {
		k := bits.TrailingZeros32(pl)
		if st.inUse&(1<<t.placements[k].start) != 0 {
			l.pl |= 1 << k
			l.used |= t.placements[k].mask
		}
	}
	return l
}

// FreeMilli is GPU(g).FreeMilli, without the rest of GPUInfo (0 for a
// bad index).
func (p *Pool) FreeMilli(g uint32) int {
	if int64(g) >= int64(p.gpus.len()) {
		return 0
	}
	return p.gpus.at(int(g)).infoMilli()
}

// infoMilli is GPUInfo.FreeMilli.
func (st *gpuState) infoMilli() int {
	switch {
	case st.mig():
		n := st.layout.model.MemorySlices()
		return (n - bits.OnesCount8(st.inUseMask())) * 1000 / n
	case st.mode == Exclusive:
		return 1000
	}
	return st.freeMilli()
}

func (st *gpuState) freeMilli() int {
	if st.units == 0 {
		return 0
	}
	return int(st.free) * 1000 / int(st.units)
}

// Layout is GPU g's layout (the zero Layout for a bad index).
func (p *Pool) Layout(g uint32) Layout {
	if st, err := p.gpu(g); err == nil {
		return st.layout
	}
	return Layout{}
}

// Idle reports whether GPU g holds no in-use instance and no share (false
// for a bad index).
func (p *Pool) Idle(g uint32) bool {
	st, err := p.gpu(g)
	return err == nil && !st.busy()
}

// Shares returns the shares held on GPU g, newest first.
func (p *Pool) Shares(g uint32) []Share {
	st, err := p.gpu(g)
	if err != nil {
		return nil
	}
	var out []Share
	for i := st.head; i >= 0; i = p.shares.at(int(i)).next {
		out = append(out, p.shareOf(i))
	}
	return out
}

// Clone returns an independent copy (for what-if work). The copy shares
// the pool's pages until either side writes one (cow.go): a clone costs
// a page table, not the pool. Clone may be called by several readers of
// one pool at once.
func (p *Pool) Clone() *Pool {
	p.tok.Store(p.toks.Add(1)) // p no longer owns the pages it now shares
	c := &Pool{
		gpus:      p.gpus.clone(),
		shares:    p.shares.clone(),
		freeShare: p.freeShare,
		toks:      p.toks,
		migGPUs:   p.migGPUs,
	}
	c.tok.Store(p.toks.Add(1))
	return c
}
