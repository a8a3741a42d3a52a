package gang

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand"
	"slices"
	"strings"

	"github.com/berthsched/berth/topo"
)

// Scorer ranks the nodes that can hold a member of a gang: the extension
// point of node choice, in the spirit of a kube-scheduler Score plugin with
// its PreScore and NormalizeScore folded in.
//
// A Placer with a Scorer (Placer.Scorer) still chooses the domains of a
// gang as Place does (required domain, fewest preferred
// domains, tightest fit), then collects the nodes of those domains that
// hold at least one member (the filter). When more than one node passes,
// it calls Score once and takes nodes from the highest score down, each
// holding as many members as fit there, until the gang is placed; ties go
// to the lower Placer.Ties rank, else the lower node ID. A single node is
// taken without scoring (as the kube-scheduler does), so a Scorer that
// draws random numbers draws only for real choices. Each group of a
// multi-group gang is scored in turn, largest members first, on the nodes
// the groups before it left room on (Score still reads the snapshot as it
// stands); if a later group no longer fits, the gang is packed as without
// a Scorer.
//
// Score must be a deterministic function of the snapshot and the group
// (Random draws from the stream it is given, never from a global one) and
// must not change s. It may keep caches; a Scorer belongs, like its Placer,
// to one goroutine.
type Scorer interface {
	// Score writes the score of nodes[i] for one member of g into
	// scores[i]. nodes holds at least two nodes, each of which holds a
	// member of g on s now, in ascending ID order; len(scores) ==
	// len(nodes), all 0 on entry. The highest score wins; any int64 order
	// is allowed.
	Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64)
}

// ShareChooser is implemented by Scorers that also choose the GPU of a
// fractional member (GPUMilli): the GPU their score assumed. The Placer
// asks it for each node that takes exactly one fractional member, whether
// or not Score ran; other placements use the default choice (GPUs already
// shared first, the fullest first, then the lowest free one).
type ShareChooser interface {
	// ShareGPU returns the local index (0-based on node n) of the GPU that
	// takes one member of g on node n, or -1 for the default choice.
	ShareGPU(s *topo.Snapshot, g *Group, n topo.NodeID) int
}

// MaxScore is the highest score of the published policies
// (kube-scheduler's MaxNodeScore). Random, DotProd, GpuClustering,
// GpuPacking, BestFit and FGD score in [0, MaxScore]; Berth's scores are
// wider keys.
const MaxScore = 100

// FullMilli is one whole GPU in thousandths.
const FullMilli = 1000

// Scorer names accepted by NewScorer, in the order of the FGD experiment
// (docs/fgd.md), then berth's own.
const (
	ScorerRandom     = "random"
	ScorerDotProd    = "dotprod"
	ScorerClustering = "clustering"
	ScorerPacking    = "packing"
	ScorerBestFit    = "bestfit"
	ScorerFGD        = "fgd"
	ScorerBerth      = "berth"
)

// ScorerNames lists the names NewScorer accepts.
func ScorerNames() []string {
	return []string{ScorerRandom, ScorerDotProd, ScorerClustering, ScorerPacking, ScorerBestFit, ScorerFGD, ScorerBerth, ScorerKueue}
}

// MaxTargetShapes bounds ScorerSpec.Target: FGD and Berth visit every
// shape for every node they score.
const MaxTargetShapes = 1024

// ErrBadScorer is returned by NewScorer for an unknown name or a spec that
// lacks what its scorer needs.
var ErrBadScorer = errors.New("gang: invalid scorer")

// ScorerSpec selects a scorer of this package by name, with the data it
// needs, as plain values (it round-trips through JSON). The zero value
// selects no scorer: Place's default packing.
type ScorerSpec struct {
	// Name is one of ScorerNames, or empty for none.
	Name string `json:"name,omitempty"`
	// Target is the typical workload FGD and Berth measure fragmentation
	// against (NewTarget(...).Shapes). Required for them, ignored by the
	// others.
	Target []Shape `json:"target,omitempty"`
	// Seed seeds Random's own stream (math/rand v1). Ignored by the others.
	Seed int64 `json:"seed,omitempty"`
}

// NewScorer returns the scorer spec names; nil (and no error) for an empty
// name. Errors wrap ErrBadScorer.
func NewScorer(spec ScorerSpec) (Scorer, error) {
	// The target is checked whichever scorer reads it: a NaN or infinite
	// weight turns every score into NaN.
	if len(spec.Target) > MaxTargetShapes {
		return nil, fmt.Errorf("%w: %d target shapes, over the limit of %d", ErrBadScorer, len(spec.Target), MaxTargetShapes)
	}
	for i, sh := range spec.Target {
		if sh.GPUs < 0 || sh.Milli < 0 || sh.Milli > FullMilli || sh.CPUMilli < 0 || sh.MemoryMiB < 0 || sh.Count < 0 {
			return nil, fmt.Errorf("%w: target shape %d: %+v", ErrBadScorer, i, sh)
		}
		if !(sh.Weight >= 0) || math.IsInf(sh.Weight, 0) {
			return nil, fmt.Errorf("%w: target shape %d: Weight must be a finite non-negative number, got %v", ErrBadScorer, i, sh.Weight)
		}
	}
	needTarget := func() error {
		if len(spec.Target) == 0 {
			return fmt.Errorf("%w: %q needs a target workload (ScorerSpec.Target)", ErrBadScorer, spec.Name)
		}
		return nil
	}
	switch spec.Name {
	case "":
		return nil, nil
	case ScorerRandom:
		return &Random{Rand: rand.New(rand.NewSource(spec.Seed))}, nil
	case ScorerDotProd:
		return DotProd{}, nil
	case ScorerClustering:
		return NewGpuClustering(), nil
	case ScorerPacking:
		return GpuPacking{}, nil
	case ScorerBestFit:
		return BestFit{}, nil
	case ScorerFGD:
		if err := needTarget(); err != nil {
			return nil, err
		}
		return NewFGD(Target{Shapes: slices.Clone(spec.Target)}), nil
	case ScorerBerth:
		if err := needTarget(); err != nil {
			return nil, err
		}
		return NewBerth(Target{Shapes: slices.Clone(spec.Target)}), nil
	case ScorerKueue:
		return &Kueue{}, nil
	}
	return nil, fmt.Errorf("%w: unknown scorer %q (want one of %s)", ErrBadScorer, spec.Name, strings.Join(ScorerNames(), ", "))
}

// member is what the scorers read of a group: one member asks for gpus
// devices of milli thousandths each, plus host resources. A MIG-profile
// member counts as asking for no GPU (the published scorers model plain
// and shared GPUs only).
type member struct {
	gpus, milli int
	cpu, mem    int64
	model       string   // the one allowed model, "" for any or a set
	models      []string // the group's GPUModels when it has several
}

func memberOf(g *Group) member {
	m := member{cpu: g.CPUMilli, mem: g.MemoryMiB, model: g.GPUModel}
	switch len(g.GPUModels) {
	case 0:
	case 1:
		m.model = g.GPUModels[0]
	default:
		m.model, m.models = "", g.GPUModels
	}
	switch {
	case g.GPUsPerMember > 0:
		m.gpus, m.milli = g.GPUsPerMember, FullMilli
	case g.GPUMilli > 0:
		m.gpus, m.milli = 1, g.GPUMilli
	}
	return m
}

func (m member) usesGPU() bool { return m.gpus > 0 && m.milli > 0 }
func (m member) shared() bool  { return m.gpus == 1 && m.milli > 0 && m.milli < FullMilli }

// demand is the member's GPU demand in thousandths.
func (m member) demand() int64 {
	if !m.usesGPU() {
		return 0
	}
	return int64(m.gpus) * int64(m.milli)
}

// NodeGPUMilli appends to dst the free thousandths of each GPU of node n
// on s, in local order: 1000 for a free GPU, the pool's free milli for a
// GPU that is shared or in MIG mode, 0 for a GPU booked whole. It is what
// the scorers of this package read of a node's GPUs.
func NodeGPUMilli(s *topo.Snapshot, n topo.NodeID, dst []int16) []int16 {
	first, cnt := s.Cluster().NodeGPUs(n)
	mask := s.NodeFreeMask(n)
	for i := range uint32(cnt) {
		switch g := first + i; {
		case mask&(1<<i) != 0:
			dst = append(dst, FullMilli)
		case s.IsSharedGPU(g):
			dst = append(dst, int16(s.SharedFreeMilli(g)))
		default:
			dst = append(dst, 0)
		}
	}
	return dst
}

// nodeFreeMilli is the sum of NodeGPUMilli of node n (F_n), without the
// list.
func nodeFreeMilli(s *topo.Snapshot, n topo.NodeID) int64 {
	first, cnt := s.Cluster().NodeGPUs(n)
	mask := s.NodeFreeMask(n)
	sum := int64(bits.OnesCount64(mask)) * FullMilli
	// The GPUs shared (IsSharedGPU) that are not free, in local order.
	for m := s.NodeSharedMask(n) &^ mask & (1<<uint(cnt) - 1); m != 0; m &= m - 1 {
		sum += int64(s.SharedFreeMilli(first + uint32(bits.TrailingZeros64(m))))
	}
	return sum
}

// collectScored collects the nodes of the chosen domains (of required
// domain d) that hold a member of group gi, with how many each holds, and
// returns the sum.
func (p *Placer) collectScored(d int, gi *groupInfo) int {
	p.snodes, p.scaps = p.snodes[:0], p.scaps[:0]
	total := 0
	visit := func(n topo.NodeID) {
		if c := p.nodeCap(n, gi); c > 0 {
			p.snodes = append(p.snodes, n)
			p.scaps = append(p.scaps, int32(c))
			total += c
		}
	}
	// Only the nodes the index leaves in (a bound of nodeCap > 0), in the
	// same ascending order.
	var rows [4]int
	p.ix.sync(p.s)
	nr, ok := p.ix.query(gi, &rows)
	if !ok || p.noIndex {
		p.nodeRanges(d, visit)
		return total
	}
	one := gi.g.Members == 1 && len(gi.g.Selector) == 0
	exact := one && exactOne(gi)
	scan := func(lo, hi int) { // one node range, as nodeRanges walks them
		if one {
			total += p.collectOne(lo, hi, rows[:nr], gi, exact)
		} else {
			p.ix.each(lo, hi, rows[:nr], visit)
		}
	}
	if p.lp < 0 {
		scan(p.span(p.lr, d, p.nl))
		return total
	}
	for _, c := range p.best {
		scan(p.span(p.bestL, int(c), p.nl))
	}
	return total
}

// chooseScored takes need members of group gi from the collected nodes in
// the order of p.Scorer (see Scorer).
func (p *Placer) chooseScored(gi *groupInfo, need int) {
	p.rankScored(gi.g, need)
	for i, n := range p.snodes {
		if p.scaps[i] > 0 {
			p.takes = append(p.takes, take{group: 0, node: n, n: p.scaps[i]})
		}
	}
}

// rankScored takes need members of group g from the collected nodes
// (p.snodes, each holding p.scaps[i]) in the order of p.Scorer, leaving
// in p.scaps[i] the members node i takes.
func (p *Placer) rankScored(g *Group, need int) {
	nn := len(p.snodes)
	if nn == 0 {
		return
	}
	if nn == 1 {
		p.scaps[0] = int32(min(int(p.scaps[0]), need))
		return
	}
	p.sscores = slices.Grow(p.sscores[:0], nn)[:nn]
	clear(p.sscores)
	p.Scorer.Score(p.s, g, p.snodes, p.sscores)
	tie := func(i int32) int32 {
		if n := p.snodes[i]; int(n) < len(p.Ties) {
			return p.Ties[n]
		}
		return int32(p.snodes[i])
	}
	better := func(i, j int32) bool {
		if p.sscores[i] != p.sscores[j] {
			return p.sscores[i] > p.sscores[j]
		}
		return tie(i) < tie(j)
	}
	// The usual case: the best node holds the whole gang (one member).
	best := int32(0)
	for i := int32(1); i < int32(nn); i++ {
		if better(i, best) {
			best = i
		}
	}
	if int(p.scaps[best]) >= need {
		clear(p.scaps)
		p.scaps[best] = int32(need)
		return
	}
	p.sorder = p.sorder[:0]
	for i := range int32(nn) {
		p.sorder = append(p.sorder, i)
	}
	slices.SortFunc(p.sorder, func(a, b int32) int {
		switch {
		case better(a, b):
			return -1
		case better(b, a):
			return 1
		}
		return 0
	})
	// Take from the best down; the caller emits in node order (the spread
	// and the members are read in ascending node order).
	rem := need
	for _, i := range p.sorder {
		if rem == 0 {
			p.scaps[i] = 0
			continue
		}
		c := min(int(p.scaps[i]), rem)
		p.scaps[i] = int32(c)
		rem -= c
	}
}

// chosenShare returns the GPU (global index) a ShareChooser picks for the
// single fractional member of take t, or false for the default choice.
func (p *Placer) chosenShare(res *Result, t take) (uint32, bool) {
	sc, ok := p.Scorer.(ShareChooser)
	if !ok || t.n != 1 {
		return 0, false
	}
	gi := &p.groups[t.group]
	g := sc.ShareGPU(p.s, gi.g, t.node)
	first, cnt := p.c.NodeGPUs(t.node)
	if g < 0 || g >= cnt {
		return 0, false
	}
	gpu := first + uint32(g)
	if p.isTaken(res, gpu) || p.s.SharedFits(gpu, gi.mreq) == 0 {
		return 0, false
	}
	return gpu, true
}
