package queue

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Quota is the quota of one resource at one node of the tree.
type Quota struct {
	// Nominal is the amount the node owns.
	Nominal Amount
	// BorrowingLimit caps how much the node may use beyond its own subtree
	// quota, taken from its cohort. NoLimit (the zero value): no cap; Cap(0):
	// no borrowing.
	BorrowingLimit Limit
	// LendingLimit caps how much of the node's subtree quota its cohort may
	// lend to others; the rest is guaranteed to the node. NoLimit (the zero
	// value): all of it may be lent.
	LendingLimit Limit
}

// QueueSpec declares a leaf queue: jobs are submitted to leaf queues.
type QueueSpec struct {
	Name string
	// Cohort is the parent cohort; empty: a queue on its own that cannot
	// borrow or lend.
	Cohort string
	// Weight is the fair-sharing weight (DRS) and the Fair Tree shares of
	// the mirrored account. Zero means 1; must not be negative.
	Weight float64
	Quota  map[ResourceName]Quota
}

// CohortSpec declares a cohort: a node that pools the lendable quota of its
// children (queues and cohorts) and may hold quota of its own.
type CohortSpec struct {
	Name string
	// Parent is the parent cohort; empty: a root.
	Parent string
	// Weight: as for QueueSpec.
	Weight float64
	Quota  map[ResourceName]Quota
}

// AccountSpec declares a Fair Tree account beyond those that mirror the
// queues and cohorts (every queue and cohort is also an account of the same
// name, with the same parent and Weight as shares).
type AccountSpec struct {
	Name string
	// Parent is an account (possibly a mirrored queue or cohort); empty: a
	// root account.
	Parent string
	// Shares is the account's share among its siblings. Zero means 1; must
	// not be negative.
	Shares float64
}

// TreeSpec declares a whole tree. Names are unique across queues, cohorts
// and accounts.
type TreeSpec struct {
	Cohorts  []CohortSpec
	Queues   []QueueSpec
	Accounts []AccountSpec
	// HalfLife is the half-life of decayed usage (SLURM's
	// PriorityDecayHalfLife); zero: usage never decays.
	HalfLife time.Duration
}

// ErrInvalidTree is wrapped by *SpecError.
var ErrInvalidTree = errors.New("queue: invalid tree spec")

// ErrTreeLimit is wrapped (with ErrInvalidTree) by the *SpecError of a
// TreeSpec over one of the limits below.
var ErrTreeLimit = errors.New("queue: tree over a limit")

// Limits of a TreeSpec, checked by NewTree before it allocates: the
// per-node state is one slot per governed resource, so both counts bound
// the tree's memory.
const (
	// MaxTreeNodes bounds the queues, cohorts and accounts together.
	MaxTreeNodes = 1 << 16
	// MaxResources bounds the distinct resource names the quotas govern.
	MaxResources = 64
	// MaxDepth bounds the cohorts above a queue or cohort (parent links).
	MaxDepth = 16
)

// SpecError names the node and field of a TreeSpec that is invalid.
type SpecError struct {
	Node  string // queue, cohort or account name
	Field string // e.g. "Quota[gpu].LendingLimit"
	Msg   string
	Err   error // ErrTreeLimit for a limit, else nil
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("%v: %q: %s: %s", ErrInvalidTree, e.Node, e.Field, e.Msg)
}

// Unwrap gives ErrInvalidTree, and ErrTreeLimit for a limit.
func (e *SpecError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidTree, e.Err}
	}
	return []error{ErrInvalidTree}
}

const noNode = -1

type nodeKind uint8

const (
	kindCohort nodeKind = iota
	kindQueue
)

// node is a cohort or a queue. Per-resource slices are indexed by the
// tree's dense resource index.
type node struct {
	name     string
	kind     nodeKind
	parent   int32
	children []int32
	weight   float64
	account  int32 // mirrored account

	nominal    []Amount
	borrow     []Amount // valid where hasBorrow
	hasBorrow  []bool
	lend       []Amount // valid where hasLend
	hasLend    []bool
	subtree    []Amount // Kueue's SubtreeQuota
	guaranteed []Amount // the part of subtree that is never lent
	usage      []Amount

	rate    float64 // GPU-milli of running jobs charged here (queues only)
	decayed float64 // decayed GPU-seconds (queues: own; cohorts: sum)
}

type account struct {
	name     string
	parent   int32
	children []int32
	shares   float64
	node     int32   // mirrored node or noNode
	rate     float64 // GPU-milli of running jobs charged to this account
	decayed  float64 // decayed GPU-seconds of its own jobs
}

// Tree is the quota tree: cohorts (nested) and leaf queues with
// per-resource nominal quota, borrowing and lending limits, current usage,
// and decayed GPU-time of queues and Fair Tree accounts.
//
// Quota follows Kueue's hierarchical cohorts: a node's subtree quota is its
// nominal quota plus the lendable part of its children's subtree quotas; a
// node may use its guaranteed (unlendable) part alone, and the rest from the
// pool of its parent, capped by its borrowing limit. A resource that no node
// gives a quota is not governed: it is neither limited nor tracked.
//
// A Tree is owned by one goroutine and is not safe for concurrent use;
// observers read usage through Pending's published Snapshot.
type Tree struct {
	res      []ResourceName // governed resources, sorted
	resIdx   map[ResourceName]int
	nodes    []node
	nodeIdx  map[string]int32
	accounts []account
	acctIdx  map[string]int32
	queues   []int32 // leaf queue node indices, sorted by name
	halfLife time.Duration
	clock    time.Time // decayed usage is accrued up to here
	charged  map[string]*demand
	version  uint64 // bumped on every usage change
	// charges lists the queues whose usage changed (Charge, Adopt,
	// Release) since a policy last took them (see DRS).
	charges changeLog
}

// NewTree builds a tree from spec. It returns a *SpecError (wrapping
// ErrInvalidTree) for duplicate or empty names, unknown parents, cycles,
// negative weights or quotas, and a lending limit above nominal.
func NewTree(spec TreeSpec) (*Tree, error) {
	t := &Tree{
		resIdx:   map[ResourceName]int{},
		nodeIdx:  map[string]int32{},
		acctIdx:  map[string]int32{},
		halfLife: spec.HalfLife,
		charged:  map[string]*demand{},
	}
	if spec.HalfLife < 0 {
		return nil, &SpecError{Field: "HalfLife", Msg: "must not be negative"}
	}
	if n := len(spec.Cohorts) + len(spec.Queues) + len(spec.Accounts); n > MaxTreeNodes {
		return nil, &SpecError{Field: "Queues", Msg: fmt.Sprintf("%d queues, cohorts and accounts, over the limit of %d", n, MaxTreeNodes), Err: ErrTreeLimit}
	}
	// Governed resources: every name that appears in some quota.
	seen := map[ResourceName]bool{}
	checkQuota := func(name string, q map[ResourceName]Quota) error {
		for r, v := range q {
			f := func(s string) string { return fmt.Sprintf("Quota[%s].%s", r, s) }
			if r == "" {
				return &SpecError{Node: name, Field: "Quota", Msg: "empty resource name"}
			}
			if v.Nominal < 0 || v.Nominal > MaxQuantity {
				return &SpecError{Node: name, Field: f("Nominal"), Msg: fmt.Sprintf("must be in 0..%d, got %d", MaxQuantity, v.Nominal)}
			}
			if b, ok := v.BorrowingLimit.Get(); ok && (b < 0 || b > MaxQuantity) {
				return &SpecError{Node: name, Field: f("BorrowingLimit"), Msg: fmt.Sprintf("must be in 0..%d, got %d", MaxQuantity, b)}
			}
			if l, ok := v.LendingLimit.Get(); ok && (l < 0 || l > v.Nominal) {
				return &SpecError{Node: name, Field: f("LendingLimit"), Msg: fmt.Sprintf("must be in 0..Nominal (%d), got %d", v.Nominal, l)}
			}
			seen[r] = true
		}
		return nil
	}
	checkWeight := func(name, field string, w float64) (float64, error) {
		switch {
		case math.IsNaN(w) || w < 0 || math.IsInf(w, 0):
			return 0, &SpecError{Node: name, Field: field, Msg: fmt.Sprintf("must be a finite non-negative number, got %v", w)}
		case w == 0:
			return 1, nil
		}
		return w, nil
	}
	claim := func(name string) error {
		if name == "" {
			return &SpecError{Field: "Name", Msg: "must not be empty"}
		}
		if _, dup := t.nodeIdx[name]; dup {
			return &SpecError{Node: name, Field: "Name", Msg: "duplicate name"}
		}
		if _, dup := t.acctIdx[name]; dup {
			return &SpecError{Node: name, Field: "Name", Msg: "duplicate name"}
		}
		return nil
	}
	type pending struct {
		spec   map[ResourceName]Quota
		parent string
	}
	var specs []pending
	addNode := func(name, parent string, kind nodeKind, w float64, q map[ResourceName]Quota) error {
		if err := claim(name); err != nil {
			return err
		}
		if err := checkQuota(name, q); err != nil {
			return err
		}
		w, err := checkWeight(name, "Weight", w)
		if err != nil {
			return err
		}
		t.nodeIdx[name] = int32(len(t.nodes))
		t.nodes = append(t.nodes, node{name: name, kind: kind, parent: noNode, weight: w, account: int32(len(t.accounts))})
		t.acctIdx[name] = int32(len(t.accounts))
		t.accounts = append(t.accounts, account{name: name, parent: noNode, shares: w, node: int32(len(t.nodes) - 1)})
		specs = append(specs, pending{spec: q, parent: parent})
		return nil
	}
	for _, c := range spec.Cohorts {
		if err := addNode(c.Name, c.Parent, kindCohort, c.Weight, c.Quota); err != nil {
			return nil, err
		}
	}
	for _, q := range spec.Queues {
		if err := addNode(q.Name, q.Cohort, kindQueue, q.Weight, q.Quota); err != nil {
			return nil, err
		}
	}
	// Resources, dense.
	if len(seen) > MaxResources {
		return nil, &SpecError{Field: "Quota", Msg: fmt.Sprintf("%d resources, over the limit of %d", len(seen), MaxResources), Err: ErrTreeLimit}
	}
	for r := range seen {
		t.res = append(t.res, r)
	}
	slices.Sort(t.res)
	for i, r := range t.res {
		t.resIdx[r] = i
	}
	R := len(t.res)
	// Parents and quotas.
	for i := range t.nodes {
		n := &t.nodes[i]
		if p := specs[i].parent; p != "" {
			pi, ok := t.nodeIdx[p]
			field := "Cohort"
			if n.kind == kindCohort {
				field = "Parent"
			}
			if !ok || t.nodes[pi].kind != kindCohort {
				return nil, &SpecError{Node: n.name, Field: field, Msg: fmt.Sprintf("unknown cohort %q", p)}
			}
			n.parent = pi
			t.accounts[n.account].parent = t.nodes[pi].account
		}
		n.nominal = make([]Amount, R)
		n.borrow = make([]Amount, R)
		n.hasBorrow = make([]bool, R)
		n.lend = make([]Amount, R)
		n.hasLend = make([]bool, R)
		n.subtree = make([]Amount, R)
		n.guaranteed = make([]Amount, R)
		n.usage = make([]Amount, R)
		for r, q := range specs[i].spec {
			k := t.resIdx[r]
			n.nominal[k] = q.Nominal
			n.borrow[k], n.hasBorrow[k] = q.BorrowingLimit.Get()
			n.lend[k], n.hasLend[k] = q.LendingLimit.Get()
		}
	}
	// Cycles among cohorts, and depth: a walk up that passes MaxDepth is
	// either in a cycle or too deep.
	for i := range t.nodes {
		steps := 0
		for p := t.nodes[i].parent; p != noNode; p = t.nodes[p].parent {
			if steps++; steps > MaxDepth {
				if t.cycleAbove(i) {
					return nil, &SpecError{Node: t.nodes[i].name, Field: "Parent", Msg: "cohorts form a cycle"}
				}
				return nil, &SpecError{Node: t.nodes[i].name, Field: "Parent", Msg: fmt.Sprintf("more than %d cohorts above it", MaxDepth), Err: ErrTreeLimit}
			}
		}
	}
	// Extra accounts.
	acctParents := make([]string, len(t.accounts))
	for _, a := range spec.Accounts {
		if err := claim(a.Name); err != nil {
			return nil, err
		}
		sh, err := checkWeight(a.Name, "Shares", a.Shares)
		if err != nil {
			return nil, err
		}
		t.acctIdx[a.Name] = int32(len(t.accounts))
		t.accounts = append(t.accounts, account{name: a.Name, parent: noNode, shares: sh, node: noNode})
		acctParents = append(acctParents, a.Parent)
	}
	for i := range t.accounts {
		if p := acctParents[i]; p != "" {
			pi, ok := t.acctIdx[p]
			if !ok {
				return nil, &SpecError{Node: t.accounts[i].name, Field: "Parent", Msg: fmt.Sprintf("unknown account %q", p)}
			}
			t.accounts[i].parent = pi
		}
	}
	for i := range t.accounts {
		steps := 0
		for p := t.accounts[i].parent; p != noNode; p = t.accounts[p].parent {
			if steps++; steps > len(t.accounts) {
				return nil, &SpecError{Node: t.accounts[i].name, Field: "Parent", Msg: "accounts form a cycle"}
			}
		}
	}
	// Children, sorted by name for determinism.
	for i := range t.nodes {
		if p := t.nodes[i].parent; p != noNode {
			t.nodes[p].children = append(t.nodes[p].children, int32(i))
		}
		if t.nodes[i].kind == kindQueue {
			t.queues = append(t.queues, int32(i))
		}
	}
	for i := range t.accounts {
		if p := t.accounts[i].parent; p != noNode {
			t.accounts[p].children = append(t.accounts[p].children, int32(i))
		}
	}
	byNodeName := func(a, b int32) int { return strings.Compare(t.nodes[a].name, t.nodes[b].name) }
	for i := range t.nodes {
		slices.SortFunc(t.nodes[i].children, byNodeName)
	}
	slices.SortFunc(t.queues, byNodeName)
	for i := range t.accounts {
		slices.SortFunc(t.accounts[i].children, func(a, b int32) int {
			return strings.Compare(t.accounts[a].name, t.accounts[b].name)
		})
	}
	// Subtree and guaranteed quotas, bottom up.
	for i := range t.nodes {
		if t.nodes[i].parent == noNode {
			t.computeSubtree(int32(i))
		}
	}
	t.charges = newChangeLog(len(t.nodes))
	return t, nil
}

func (t *Tree) computeSubtree(i int32) {
	n := &t.nodes[i]
	copy(n.subtree, n.nominal)
	for _, c := range n.children {
		t.computeSubtree(c)
		cn := &t.nodes[c]
		for k := range n.subtree {
			n.subtree[k] = n.subtree[k].Add(cn.subtree[k].Sub(cn.guaranteed[k]))
		}
	}
	for k := range n.subtree {
		if n.hasLend[k] {
			n.guaranteed[k] = maxAmount(0, n.subtree[k].Sub(n.lend[k]))
		} else {
			n.guaranteed[k] = 0
		}
	}
}

// Resources returns the governed resource names, sorted. The slice is
// shared; do not modify it.
func (t *Tree) Resources() []ResourceName { return t.res }

// Queues returns the leaf queue names, sorted. It allocates.
func (t *Tree) Queues() []string {
	out := make([]string, len(t.queues))
	for i, q := range t.queues {
		out[i] = t.nodes[q].name
	}
	return out
}

// HasQueue reports whether name is a leaf queue.
func (t *Tree) HasQueue(name string) bool {
	i, ok := t.nodeIdx[name]
	return ok && t.nodes[i].kind == kindQueue
}

// Parent returns the cohort of a queue or the parent of a cohort; "" for a
// root or an unknown name.
func (t *Tree) Parent(name string) string {
	i, ok := t.nodeIdx[name]
	if !ok || t.nodes[i].parent == noNode {
		return ""
	}
	return t.nodes[t.nodes[i].parent].name
}

// ValidateJob checks that the job's queue is a leaf queue of t and its
// account is known, returning a *FieldError wrapping ErrUnknownQueue or
// ErrUnknownAccount. It does not repeat Job.Validate.
func (t *Tree) ValidateJob(j *Job) error {
	if j == nil {
		return ErrNilJob
	}
	if !t.HasQueue(j.Queue) {
		return &FieldError{JobID: j.ID, Field: "Queue", Err: ErrUnknownQueue, Msg: fmt.Sprintf("no leaf queue %q", j.Queue)}
	}
	if _, ok := t.acctIdx[j.AccountName()]; !ok {
		return &FieldError{JobID: j.ID, Field: "Account", Err: ErrUnknownAccount, Msg: fmt.Sprintf("no account %q", j.AccountName())}
	}
	return nil
}

// cycleAbove reports whether the parent links from node i run into a
// cycle (Floyd's tortoise and hare: O(nodes), no allocation).
func (t *Tree) cycleAbove(i int) bool {
	up := func(n int32) int32 {
		if n == noNode {
			return noNode
		}
		return t.nodes[n].parent
	}
	slow, fast := int32(i), up(int32(i))
	for fast != noNode && slow != fast {
		slow, fast = up(slow), up(up(fast))
	}
	return fast != noNode
}
