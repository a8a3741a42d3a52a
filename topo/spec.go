package topo

import (
	"errors"
	"fmt"

	"github.com/berthsched/berth/mig"
)

// NodeState says whether a node takes new work.
type NodeState uint8

const (
	// Ready nodes are allocatable.
	Ready NodeState = iota
	// Cordoned nodes keep their running work but take no new work.
	Cordoned
	// Draining nodes keep their running work until it ends and take no new work.
	Draining
	// Down nodes are gone: their GPUs are not allocatable. Work on them is
	// the caller's to requeue; the GPUs it held stay booked until released.
	Down
	numStates
)

func (s NodeState) String() string {
	switch s {
	case Ready:
		return "ready"
	case Cordoned:
		return "cordoned"
	case Draining:
		return "draining"
	case Down:
		return "down"
	}
	return fmt.Sprintf("NodeState(%d)", uint8(s))
}

// ParseNodeState is the inverse of NodeState.String.
func ParseNodeState(s string) (NodeState, error) {
	for st := Ready; st < numStates; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrBadState, s)
}

// MaxGPUsPerNode bounds the GPUs of one node. Real nodes have 4 to 16; the
// bound lets a node's free GPUs be one machine word.
const MaxGPUsPerNode = 64

// Limits of a Spec, checked by Validate (and so New) first, before
// anything is allocated. MaxNodes is 524,288 GPUs at 8 a node, five times
// the largest clusters built today.
const (
	// MaxNodes bounds Spec.Nodes.
	MaxNodes = 1 << 16
	// MaxLevels bounds Spec.Levels and, apart, Spec.GPULevels.
	MaxLevels = 16
)

// Reserved level names: "cluster" is the implicit root level (one domain
// holding everything) and "node" is the node level itself.
const (
	LevelCluster = "cluster"
	LevelNode    = "node"
)

// Spec declares a cluster. It is plain data: build it by hand, from a
// backend's inventory or from a file, then pass it to New.
type Spec struct {
	// Levels are the topology levels above the node, coarsest first, e.g.
	// {"block", "rack"} or {"block", "nvlink"}.
	Levels []string
	// GPULevels are optional levels below the node, coarsest first, e.g.
	// {"nvlink-island"} or {"numa"}.
	GPULevels []string
	// Nodes in any order. Node IDs are assigned in topology order (see New).
	Nodes []NodeSpec
	// ShareFreeGPUs lets fractional members (a share of one GPU) take any
	// free GPU of a node that is not itself configured for MIG or sharing:
	// the GPU is then time-sliced with exact thousandths accounting until
	// its last share leaves, and whole-GPU members cannot take it meanwhile.
	// This is the GPU-share model of the openb trace (Alibaba's
	// gpushare scheduler).
	ShareFreeGPUs bool
}

// NodeSpec declares one node.
type NodeSpec struct {
	Name string
	// Domains names the node's domain at each level of Spec.Levels. A
	// domain is identified by its whole path, so rack "r1" under block "b0"
	// and rack "r1" under block "b1" are different racks.
	Domains []string
	// GPUs is the number of GPUs, 1..MaxGPUsPerNode.
	GPUs         int
	GPUModel     string
	GPUMemoryMiB int64
	// CPUMilli and MemoryMiB are the node's allocatable host resources.
	// Zero means "not tracked": host requests then always fit.
	CPUMilli  int64
	MemoryMiB int64
	Labels    map[string]string
	State     NodeState
	// MIG puts every GPU of the node in MIG mode: GPUModel must be a model
	// package mig knows (e.g. "H100-80GB"). MIGLayout optionally names the
	// instances present on each GPU, in mig.ParseLayout syntax ("3g 2g 1g
	// 1g"); empty means none yet (placement may create them).
	MIG       bool
	MIGLayout string
	// Sharing shares every GPU of the node (not in MIG mode) by
	// time-slicing or MPS. GPUs in MIG mode or shared are never handed out
	// whole: fractional and MIG members take them (see Snapshot.AllocateShared).
	Sharing mig.Sharing
	// GPUDomains gives, for each level of Spec.GPULevels, the group of each
	// GPU of the node (len GPUs; small non-negative integers, local to the
	// node), e.g. {{0,0,0,0,1,1,1,1}} for two NVLink islands of four.
	GPUDomains [][]int
}

// Errors of New. They come wrapped in a *SpecError that names the place.
var (
	ErrDuplicateNode  = errors.New("topo: duplicate node name")
	ErrDuplicateLevel = errors.New("topo: duplicate level name")
	ErrReservedLevel  = errors.New("topo: reserved level name")
	ErrEmptyName      = errors.New("topo: empty name")
	ErrMissingDomain  = errors.New("topo: missing domain")
	ErrBadGPUCount    = errors.New("topo: GPU count out of range")
	ErrBadResource    = errors.New("topo: negative resource")
	ErrBadState       = errors.New("topo: unknown node state")
	ErrBadGPUDomains  = errors.New("topo: bad GPU domains")
	ErrBadSharing     = errors.New("topo: bad MIG or sharing configuration")
	ErrSpecLimit      = errors.New("topo: spec over a limit (MaxNodes, MaxLevels, MaxGPUsPerNode)")
)

// Errors of lookups and of Snapshot operations.
var (
	ErrUnknownLevel   = errors.New("topo: unknown level")
	ErrUnknownNode    = errors.New("topo: unknown node")
	ErrUnknownGPU     = errors.New("topo: unknown GPU")
	ErrAllocated      = errors.New("topo: GPU already allocated")
	ErrNotAllocated   = errors.New("topo: GPU not allocated")
	ErrNodeNotReady   = errors.New("topo: node not ready")
	ErrInsufficient   = errors.New("topo: insufficient host resources")
	ErrOverRelease    = errors.New("topo: host resources released beyond capacity")
	ErrDuplicateInSet = errors.New("topo: GPU listed twice")
	ErrSharedGPU      = errors.New("topo: GPU is in MIG mode or shared")
	ErrNotShared      = errors.New("topo: GPU cannot take a share")
)

// SpecError says which part of a Spec is invalid.
type SpecError struct {
	Node  int    // index into Spec.Nodes, -1 for spec-level fields
	Name  string // node or level name involved
	Field string
	Err   error // one of the sentinels above
	Msg   string
}

func (e *SpecError) Error() string {
	where := e.Field
	if e.Node >= 0 {
		where = fmt.Sprintf("node %d (%q) %s", e.Node, e.Name, e.Field)
	} else if e.Name != "" {
		where = fmt.Sprintf("%s %q", e.Field, e.Name)
	}
	if e.Msg == "" {
		return fmt.Sprintf("%v: %s", e.Err, where)
	}
	return fmt.Sprintf("%v: %s: %s", e.Err, where, e.Msg)
}

func (e *SpecError) Unwrap() error { return e.Err }

// Validate checks the spec without building it.
func (s *Spec) Validate() error {
	if len(s.Nodes) > MaxNodes {
		return &SpecError{Node: -1, Field: "Nodes", Err: ErrSpecLimit, Msg: fmt.Sprintf("%d nodes, over the limit of %d", len(s.Nodes), MaxNodes)}
	}
	for _, lv := range []struct {
		field string
		names []string
	}{{"Levels", s.Levels}, {"GPULevels", s.GPULevels}} {
		if len(lv.names) > MaxLevels {
			return &SpecError{Node: -1, Field: lv.field, Err: ErrSpecLimit, Msg: fmt.Sprintf("%d levels, over the limit of %d", len(lv.names), MaxLevels)}
		}
	}
	seen := make(map[string]bool, len(s.Levels)+len(s.GPULevels))
	for _, lv := range [][]string{s.Levels, s.GPULevels} {
		for _, l := range lv {
			switch {
			case l == "":
				return &SpecError{Node: -1, Field: "level", Err: ErrEmptyName}
			case l == LevelCluster || l == LevelNode:
				return &SpecError{Node: -1, Name: l, Field: "level", Err: ErrReservedLevel}
			case seen[l]:
				return &SpecError{Node: -1, Name: l, Field: "level", Err: ErrDuplicateLevel}
			}
			seen[l] = true
		}
	}
	names := make(map[string]int, len(s.Nodes))
	for i := range s.Nodes {
		n := &s.Nodes[i]
		bad := func(field string, err error, msg string, args ...any) error {
			return &SpecError{Node: i, Name: n.Name, Field: field, Err: err, Msg: fmt.Sprintf(msg, args...)}
		}
		if n.Name == "" {
			return bad("Name", ErrEmptyName, "")
		}
		if j, dup := names[n.Name]; dup {
			return bad("Name", ErrDuplicateNode, "also node %d", j)
		}
		names[n.Name] = i
		if len(n.Domains) != len(s.Levels) {
			return bad("Domains", ErrMissingDomain, "%d domains for %d levels %v", len(n.Domains), len(s.Levels), s.Levels)
		}
		for l, d := range n.Domains {
			if d == "" {
				return bad("Domains", ErrMissingDomain, "no domain at level %q", s.Levels[l])
			}
		}
		if n.GPUs <= 0 || n.GPUs > MaxGPUsPerNode {
			return bad("GPUs", ErrBadGPUCount, "%d not in 1..%d", n.GPUs, MaxGPUsPerNode)
		}
		if n.GPUMemoryMiB < 0 {
			return bad("GPUMemoryMiB", ErrBadResource, "%d", n.GPUMemoryMiB)
		}
		if n.CPUMilli < 0 {
			return bad("CPUMilli", ErrBadResource, "%d", n.CPUMilli)
		}
		if n.MemoryMiB < 0 {
			return bad("MemoryMiB", ErrBadResource, "%d", n.MemoryMiB)
		}
		if n.State >= numStates {
			return bad("State", ErrBadState, "%d", n.State)
		}
		if _, empty := n.Labels[""]; empty {
			return bad("Labels", ErrEmptyName, "a label with an empty key")
		}
		if _, err := n.gpuConfig(); err != nil {
			return bad("MIG", ErrBadSharing, "%v", err)
		}
		if len(n.GPUDomains) != len(s.GPULevels) {
			return bad("GPUDomains", ErrBadGPUDomains, "%d entries for %d GPU levels", len(n.GPUDomains), len(s.GPULevels))
		}
		for l, groups := range n.GPUDomains {
			if len(groups) != n.GPUs {
				return bad("GPUDomains", ErrBadGPUDomains, "level %q: %d entries for %d GPUs", s.GPULevels[l], len(groups), n.GPUs)
			}
			for _, g := range groups {
				if g < 0 || g >= MaxGPUsPerNode {
					return bad("GPUDomains", ErrBadGPUDomains, "level %q: group %d out of range", s.GPULevels[l], g)
				}
			}
		}
	}
	return nil
}

// gpuConfig returns the mig configuration of the node's GPUs, nil for
// plain exclusive GPUs.
func (n *NodeSpec) gpuConfig() (*mig.GPUConfig, error) {
	if !n.MIG && n.MIGLayout == "" && n.Sharing.Mode == mig.Exclusive {
		return nil, nil
	}
	if n.MIG || n.MIGLayout != "" {
		if !n.MIG {
			return nil, fmt.Errorf("MIGLayout %q without MIG", n.MIGLayout)
		}
		if n.Sharing.Mode != mig.Exclusive {
			return nil, fmt.Errorf("MIG and %v sharing together", n.Sharing.Mode)
		}
		m, err := mig.LookupModel(n.GPUModel)
		if err != nil {
			return nil, err
		}
		cfg := &mig.GPUConfig{Model: m, MIG: true, Layout: mig.EmptyLayout(m)}
		if n.MIGLayout != "" {
			if cfg.Layout, err = mig.ParseLayout(m, n.MIGLayout); err != nil {
				return nil, err
			}
		}
		return cfg, cfg.Validate()
	}
	cfg := &mig.GPUConfig{Sharing: n.Sharing}
	if m, err := mig.LookupModel(n.GPUModel); err == nil {
		cfg.Model = m
	}
	return cfg, cfg.Validate()
}
