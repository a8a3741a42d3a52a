package topo

import (
	"fmt"

	"github.com/berthsched/berth/mig"
)

// The shared side of a snapshot: GPUs in MIG mode, GPUs shared by
// time-slicing or MPS, and (with Spec.ShareFreeGPUs) free GPUs turned into
// shared ones for as long as they hold shares. Such GPUs are booked in the
// whole-GPU state, so whole-GPU members never take them; what is inside is
// the business of a mig.Pool kept in the snapshot.

// Pool returns the snapshot's MIG / sharing state, nil when the cluster has
// neither. It is a read-only view (the snapshot changes only through its
// own methods), valid until the next write to s.
func (s *Snapshot) Pool() mig.PoolReader { return s.pool.ReadOnly() }

func (s *Snapshot) poolW() *mig.Pool {
	s.ver++
	if s.poolTok != s.tok {
		s.pool = s.pool.Clone()
		s.poolTok = s.tok
	}
	return s.pool
}

// SharedFits returns how many grants of r GPU g can give now, one after the
// other: MIG instances (existing idle ones or ones that can be created) or
// shares, or, for a free GPU under Spec.ShareFreeGPUs, the shares of r a
// fresh time-sliced GPU holds. Zero on nodes that are not ready.
func (s *Snapshot) SharedFits(g uint32, r mig.Request) int {
	c := s.c
	if s.pool == nil || int(g) >= len(c.gpuNode) {
		return 0
	}
	id := c.gpuNode[g]
	if s.NodeState(id) != Ready {
		return 0
	}
	n := &c.nodes[id]
	bit := uint64(1) << (g - n.base)
	p := s.nodes[int(id)>>pageShift]
	switch {
	case n.gpuCfg != nil || p.auto[int(id)&(pageSize-1)]&bit != 0:
		return s.pool.FitCount(g, r, mig.MayCreate)
	case c.shareFree && p.free[int(id)&(pageSize-1)]&bit != 0 && r.Profile == "" && r.Milli > 0:
		return 1000 / r.Milli
	}
	return 0
}

// SharedFreeMilli is Pool().GPU(g).FreeMilli, without the rest of the
// GPU's description: on a shared GPU the compute not held by shares, on a
// GPU in MIG mode the memory slices not in use, in thousandths. 0 for a
// bad index or a cluster without a pool.
func (s *Snapshot) SharedFreeMilli(g uint32) int {
	if s.pool == nil {
		return 0
	}
	return s.pool.FreeMilli(g)
}

// NodeSharedMask returns the GPUs of node id that are in MIG mode or
// currently shared, as a mask (bit i is GPU FirstGPU+i): IsSharedGPU of
// each, in one read.
func (s *Snapshot) NodeSharedMask(id NodeID) uint64 {
	n := &s.c.nodes[id]
	if n.gpuCfg != nil {
		if n.gpus >= 64 {
			return ^uint64(0)
		}
		return 1<<uint(n.gpus) - 1
	}
	return s.nodes[int(id)>>pageShift].auto[int(id)&(pageSize-1)]
}

// IsSharedGPU reports whether GPU g is in MIG mode or currently shared.
func (s *Snapshot) IsSharedGPU(g uint32) bool {
	c := s.c
	if int(g) >= len(c.gpuNode) {
		return false
	}
	id := c.gpuNode[g]
	n := &c.nodes[id]
	return n.gpuCfg != nil || s.nodes[int(id)>>pageShift].auto[int(id)&(pageSize-1)]&(1<<(g-n.base)) != 0
}

// AllocateShared takes one MIG instance or share of GPU g for r. Under
// Spec.ShareFreeGPUs a free GPU becomes shared (time-sliced, exact
// thousandths) and is booked whole until its last share is released. The
// grant says whether an instance was created (the backend must create it).
func (s *Snapshot) AllocateShared(g uint32, r mig.Request) (mig.Grant, error) {
	c := s.c
	if s.pool == nil {
		return mig.Grant{}, fmt.Errorf("%w: the cluster has no MIG or shared GPUs", ErrNotShared)
	}
	if int(g) >= len(c.gpuNode) {
		return mig.Grant{}, fmt.Errorf("%w: %d", ErrUnknownGPU, g)
	}
	id := c.gpuNode[g]
	n := &c.nodes[id]
	if st := s.NodeState(id); st != Ready {
		return mig.Grant{}, fmt.Errorf("%w: node %q is %v", ErrNodeNotReady, n.name, st)
	}
	bit := uint64(1) << (g - n.base)
	slot := int(id) & (pageSize - 1)
	p := s.nodes[int(id)>>pageShift]
	if n.gpuCfg != nil || p.auto[slot]&bit != 0 {
		s.touch(id)
		return s.poolW().Allocate(g, r, mig.MayCreate)
	}
	if !c.shareFree || p.free[slot]&bit == 0 {
		return mig.Grant{}, fmt.Errorf("%w: GPU %d on node %q is booked whole", ErrNotShared, g, n.name)
	}
	if r.Profile != "" {
		return mig.Grant{}, fmt.Errorf("%w: GPU %d on node %q is not in MIG mode", ErrNotShared, g, n.name)
	}
	s.touch(id)
	pool := s.poolW()
	if err := pool.Configure(g, mig.GPUConfig{Sharing: mig.Sharing{Mode: mig.TimeSlicing, Replicas: 1000}}); err != nil {
		return mig.Grant{}, err
	}
	gr, err := pool.Allocate(g, r, mig.MayCreate)
	if err != nil {
		_ = pool.Configure(g, mig.GPUConfig{}) // idle: cannot fail
		return mig.Grant{}, err
	}
	s.flip(id, bit, true)
	s.nodePageW(id).auto[slot] |= bit
	return gr, nil
}

// ReleaseShared gives back what AllocateShared granted. A GPU that became
// shared under Spec.ShareFreeGPUs is free again once its last share is
// gone.
func (s *Snapshot) ReleaseShared(gr mig.Grant) error {
	c := s.c
	if s.pool == nil || int(gr.GPU) >= len(c.gpuNode) {
		return fmt.Errorf("%w: %d", ErrUnknownGPU, gr.GPU)
	}
	id := c.gpuNode[gr.GPU]
	s.touch(id)
	pool := s.poolW()
	if err := pool.Release(gr); err != nil {
		return err
	}
	bit := uint64(1) << (gr.GPU - c.nodes[id].base)
	slot := int(id) & (pageSize - 1)
	if s.nodes[int(id)>>pageShift].auto[slot]&bit != 0 && pool.Idle(gr.GPU) {
		_ = pool.Configure(gr.GPU, mig.GPUConfig{}) // idle: cannot fail
		s.nodePageW(id).auto[slot] &^= bit
		s.flip(id, bit, false)
	}
	return nil
}

// verifyShared checks node id's shared GPUs against the pool: GPUs made
// shared on demand are booked and busy; no other GPU of a plain node holds
// anything in the pool.
func (s *Snapshot) verifyShared(id NodeID) error {
	n := &s.c.nodes[id]
	auto := s.nodes[int(id)>>pageShift].auto[int(id)&(pageSize-1)]
	if s.pool == nil || n.gpuCfg != nil {
		if auto != 0 {
			return fmt.Errorf("node %q: on-demand shared GPUs %#x on a node without them", n.name, auto)
		}
		return nil
	}
	free := s.NodeFreeMask(id)
	for i := range int(n.gpus) {
		g := n.base + uint32(i)
		busy := !s.pool.Idle(g)
		isAuto := auto&(1<<i) != 0
		if busy != isAuto {
			return fmt.Errorf("node %q GPU %d: pool busy %v, shared on demand %v", n.name, g, busy, isAuto)
		}
		if isAuto && free&(1<<i) != 0 {
			return fmt.Errorf("node %q GPU %d: shared on demand but not booked", n.name, g)
		}
	}
	return nil
}

// What the engine needs beyond placement: carrying MIG layouts and held
// instances over when it rebuilds the cluster (a node joins), and applying
// a confirmed reconfiguration plan to the snapshot's pool.

// migGPU returns the node of g when g is a GPU in MIG mode.
func (s *Snapshot) migGPU(g uint32) (*nodeInfo, error) {
	c := s.c
	if s.pool == nil || int(g) >= len(c.gpuNode) {
		return nil, fmt.Errorf("%w: %d", ErrUnknownGPU, g)
	}
	n := &c.nodes[c.gpuNode[g]]
	if n.gpuCfg == nil || !n.gpuCfg.MIG {
		return nil, fmt.Errorf("%w: GPU %d on node %q is not in MIG mode", ErrNotShared, g, n.name)
	}
	return n, nil
}

// SetMIGLayout replaces the layout of GPU g, which must be in MIG mode and
// idle (no instance in use): the instances of l are present and idle.
// Errors: ErrUnknownGPU, ErrNotShared, and the pool's (mig.ErrBusy,
// mig.ErrModelMismatch, validity errors).
func (s *Snapshot) SetMIGLayout(g uint32, l mig.Layout) error {
	n, err := s.migGPU(g)
	if err != nil {
		return err
	}
	if l.Model() != n.gpuCfg.Model {
		return fmt.Errorf("%w: layout of %v on a %v", mig.ErrModelMismatch, l.Model(), n.gpuCfg.Model)
	}
	s.touchGPU(g)
	return s.poolW().Configure(g, mig.GPUConfig{Model: n.gpuCfg.Model, MIG: true, Layout: l})
}

// ClaimInstance marks the existing idle instance in of GPU g (in MIG mode)
// in use, as a running job found on it holds it. The grant has Created
// false. Errors: ErrUnknownGPU, ErrNotShared, and the pool's
// (mig.ErrNoInstance, mig.ErrBusy).
func (s *Snapshot) ClaimInstance(g uint32, in mig.Instance) (mig.Grant, error) {
	if _, err := s.migGPU(g); err != nil {
		return mig.Grant{}, err
	}
	s.touchGPU(g)
	return s.poolW().Claim(g, in)
}

// ApplyMIGPlan carries out a reconfiguration plan on the snapshot's pool,
// all or nothing (mig.Pool.Apply). Every change must be on a GPU in MIG
// mode and must not switch MIG mode (the cluster's MIG nodes are fixed by
// their NodeSpec). Errors: ErrUnknownGPU, ErrNotShared, and the pool's
// (mig.ErrStalePlan, ...).
func (s *Snapshot) ApplyMIGPlan(pl mig.Plan) error {
	for _, ch := range pl.Changes {
		if _, err := s.migGPU(ch.GPU); err != nil {
			return err
		}
		if ch.EnableMIG {
			return fmt.Errorf("%w: GPU %d: switching MIG mode is not supported here", ErrNotShared, ch.GPU)
		}
	}
	for _, ch := range pl.Changes {
		s.touchGPU(ch.GPU)
	}
	return s.poolW().Apply(pl)
}
