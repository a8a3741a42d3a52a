package gang

import (
	"fmt"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// Assignment is where one member goes.
//
// It holds no pointers (the GPUs live in the Result, see Result.MemberGPUs),
// so a placement of hundreds of members costs the garbage collector nothing.
type Assignment struct {
	Group int32
	Node  topo.NodeID
	// The member's GPUs are Result.GPUs()[GPULo:GPUHi].
	GPULo, GPUHi int32
}

// Code classifies why a gang was not placed.
type Code uint8

const (
	// Placed: no reason, the gang was placed.
	Placed Code = iota
	// NoCapacity: not enough free capacity (in whole members) in any domain
	// of the required level, or in the cluster.
	NoCapacity
	// NoMatchingNodes: no ready node satisfies the group's GPU model,
	// selector or host resources at all.
	NoMatchingNodes
	// MemberTooLarge: a member asks for more GPUs than any node has.
	MemberTooLarge
	// GroupsConflict: every group fits alone somewhere, but no domain holds
	// all groups together.
	GroupsConflict
)

func (c Code) String() string {
	switch c {
	case Placed:
		return "placed"
	case NoCapacity:
		return "no-capacity"
	case NoMatchingNodes:
		return "no-matching-nodes"
	case MemberTooLarge:
		return "member-too-large"
	case GroupsConflict:
		return "groups-conflict"
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Reason explains a "no" in numbers.
type Reason struct {
	Code  Code
	Group int    // the group that does not fit (-1: the gang as a whole)
	Level string // the level the numbers refer to ("cluster" when none is required)
	// Fit is the most members of Group that fit in any one domain of Level;
	// Need is how many are asked for.
	Fit, Need int
	// Models is the group's set of GPU models when it names several
	// (Group.GPUModels), joined by '|' in the order listed, for the text;
	// empty otherwise.
	Models string
}

func (r Reason) String() string {
	switch r.Code {
	case Placed:
		return "placed"
	case MemberTooLarge:
		return fmt.Sprintf("group %d: a member needs %d GPUs, the largest node has %d", r.Group, r.Need, r.Fit)
	case NoMatchingNodes:
		if r.Models != "" {
			return fmt.Sprintf("group %d: no ready node with a GPU in %s matches its selector and host resources", r.Group, modelsText(r.Models))
		}
		return fmt.Sprintf("group %d: no ready node matches its GPU model, selector and host resources", r.Group)
	case GroupsConflict:
		return fmt.Sprintf("each group fits alone, but no %s holds all groups together", r.Level)
	}
	on := ""
	if r.Models != "" {
		on = " on nodes with a GPU in " + modelsText(r.Models)
	}
	if r.Level == topo.LevelCluster {
		return fmt.Sprintf("group %d: only %d of %d members fit in the cluster%s", r.Group, r.Fit, r.Need, on)
	}
	return fmt.Sprintf("group %d: at most %d of %d members fit in any %s%s", r.Group, r.Fit, r.Need, r.Level, on)
}

// Result is the answer of Place: a placement, or a reason.
type Result struct {
	Found bool
	// Members lists one assignment per member, by group, then by node.
	Members []Assignment
	// Reason says why not, when !Found.
	Reason Reason
	// Domain is the index of the domain of the required level that holds
	// the gang (0, the cluster, when none is required).
	Domain int
	// Spread counts, per level of the cluster (Cluster.Levels), the domains
	// the gang spans; Nodes counts its nodes.
	Spread []int
	Nodes  int
	gpus   []uint32
	hosts  []hostReq // per group; nil when no group asks for host resources
	// hostBuf keeps the memory of hosts between answers (PlaceInto).
	hostBuf []hostReq
	// Fractional / MIG members: one GPU each (a GPU appears once per member
	// sharing it); Apply takes the instances or shares and keeps the grants.
	frac   bool
	mreq   mig.Request
	grants []mig.Grant
}

// Grants returns, after Apply of a fractional or MIG placement, the MIG
// instance or share each member holds (same order as Members). A grant with
// Created set is an instance the backend must create.
func (r *Result) Grants() []mig.Grant { return r.grants }

type hostReq struct{ cpuMilli, memMiB int64 }

// Host returns the host CPU (milli) and memory (MiB) that member i books.
func (r *Result) Host(i int) (cpuMilli, memMiB int64) {
	if r.hosts == nil {
		return 0, 0
	}
	h := r.hosts[r.Members[i].Group]
	return h.cpuMilli, h.memMiB
}

// MemberGPUs returns the GPU indices of member i, ascending. Read-only.
func (r *Result) MemberGPUs(i int) []uint32 {
	m := &r.Members[i]
	return r.gpus[m.GPULo:m.GPUHi:m.GPUHi]
}

// GPUs returns every GPU of the placement, grouped by member. Read-only.
func (r *Result) GPUs() []uint32 { return r.gpus }

// Apply books the placement on s, all or nothing: on error s is unchanged.
// Apply a Result only to the snapshot it was computed on (or a clone with the
// same free GPUs); the error then means the snapshot changed in between.
func (r *Result) Apply(s *topo.Snapshot) error {
	if !r.Found {
		return fmt.Errorf("gang: apply of a result that was not found")
	}
	if r.frac {
		if err := r.applyShared(s); err != nil {
			return err
		}
	} else if err := s.Allocate(r.gpus); err != nil {
		return err
	}
	if r.hosts == nil {
		return nil
	}
	for i := range r.Members {
		cpu, mem := r.Host(i)
		if err := s.AllocateHost(r.Members[i].Node, cpu, mem); err != nil {
			for j := i - 1; j >= 0; j-- {
				cpu, mem := r.Host(j)
				_ = s.ReleaseHost(r.Members[j].Node, cpu, mem) // booked above: cannot fail
			}
			_ = r.releaseGPUs(s) // booked above: cannot fail
			return err
		}
	}
	return nil
}

// Undo releases what Apply booked.
func (r *Result) Undo(s *topo.Snapshot) error {
	if !r.Found {
		return fmt.Errorf("gang: undo of a result that was not found")
	}
	if err := r.releaseGPUs(s); err != nil {
		return err
	}
	if r.hosts == nil {
		return nil
	}
	for i := range r.Members {
		cpu, mem := r.Host(i)
		if err := s.ReleaseHost(r.Members[i].Node, cpu, mem); err != nil {
			return err
		}
	}
	return nil
}

func (r *Result) applyShared(s *topo.Snapshot) error {
	r.grants = make([]mig.Grant, 0, len(r.Members))
	for _, g := range r.gpus {
		gr, err := s.AllocateShared(g, r.mreq)
		if err != nil {
			for j := len(r.grants) - 1; j >= 0; j-- {
				_ = s.ReleaseShared(r.grants[j]) // granted above: cannot fail
			}
			r.grants = nil
			return err
		}
		r.grants = append(r.grants, gr)
	}
	return nil
}

func (r *Result) releaseGPUs(s *topo.Snapshot) error {
	if !r.frac {
		return s.Release(r.gpus)
	}
	if len(r.grants) != len(r.Members) {
		return fmt.Errorf("gang: undo of a fractional placement that was not applied")
	}
	for j := len(r.grants) - 1; j >= 0; j-- {
		if err := s.ReleaseShared(r.grants[j]); err != nil {
			return err
		}
	}
	r.grants = nil
	return nil
}
