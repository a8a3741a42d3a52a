package topo

import (
	"fmt"

	"github.com/berthsched/berth/mig"
)

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
	return s.poolW().Apply(pl)
}
