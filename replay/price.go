package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// Price is the price of placement: an opt-in model in which a gang's run
// lasts longer the more racks and blocks its members span, so that a
// replay reports what a scattered placement costs in job completion time
// (docs/price.md). A run on r racks in b blocks lasts
//
//	runtime x (1 + PerRack x (r - 1) + PerBlock x (b - 1))
//
// The rack is the finest topology level above the node and the block the
// coarsest when the cluster has two levels or more (with one level, every
// run is in one block; with none, in one rack). The zero value prices
// nothing: runs last their runtime.
type Price struct {
	// PerRack is the fraction of its runtime a run gains for each rack it
	// spans beyond the first.
	PerRack float64
	// PerBlock is the fraction gained for each block beyond the first,
	// on top of the racks.
	PerBlock float64
}

// DefaultPrice is the price `berth replay --price on` uses: 10% per extra
// rack and 25% per extra block. They are modelling choices in the range
// of what Tiresias (NSDI'19) and Gandiva (OSDI'18) measured for
// communication-heavy models spread over more machines, not figures
// either paper gives per rack (docs/price.md says what they measured).
func DefaultPrice() Price { return Price{PerRack: 0.10, PerBlock: 0.25} }

// On reports whether the price lengthens any run.
func (p Price) On() bool { return p.PerRack != 0 || p.PerBlock != 0 }

// Factor is the runtime factor of a run on racks racks in blocks blocks
// (each at least 1).
func (p Price) Factor(racks, blocks int) float64 {
	return 1 + p.PerRack*float64(max(racks, 1)-1) + p.PerBlock*float64(max(blocks, 1)-1)
}

func (p Price) validate() error {
	for _, f := range []float64{p.PerRack, p.PerBlock} {
		if math.IsNaN(f) || f < 0 || f > 100 {
			return fmt.Errorf("%w: price factors must be in 0..100, got rack %v, block %v", ErrInvalid, p.PerRack, p.PerBlock)
		}
	}
	return nil
}

// Placement names of Config.Placement.
const (
	// PlacementBerth: berth's placement, each gang of more than one member
	// preferring one domain of the finest level (gang.Request.Preferred):
	// fewest racks, then fewest blocks, then the tightest fit.
	PlacementBerth = "berth"
	// PlacementBlind: a topology-blind scheduler. The engine sees the
	// nodes without any level, in a fixed shuffled order that carries no
	// rack information, and packs members onto the fullest nodes.
	PlacementBlind = "blind"
	// PlacementKueue: a Kueue-like greedy placement (gang.Kueue): the
	// tightest rack that holds the gang, else the roomiest racks first;
	// inside racks the roomiest nodes first.
	PlacementKueue = "kueue"
)

// Placements lists the placements of Config.Placement.
func Placements() []string { return []string{PlacementBerth, PlacementBlind, PlacementKueue} }

// blindSeed seeds the fixed node shuffle of PlacementBlind.
const blindSeed = 0x626c696e64 // "blind"

// placed is how a replay's placement and price apply: the cluster the
// engine and the simulator see, the engine's scorer, the level gangs
// prefer, and the rack and block of each node name (for the price).
type placed struct {
	spec      topo.Spec
	scorer    gang.ScorerSpec
	preferred string
	rack      map[string]int
	block     map[string]int
	price     Price
	// factors holds the last runtime factor of every priced run, by job.
	factors map[string]float64
}

// newPlaced checks cfg's placement and price and builds what they need
// over spec, the replay's true cluster.
func newPlaced(cfg *Config, spec topo.Spec) (*placed, error) {
	if err := cfg.Price.validate(); err != nil {
		return nil, err
	}
	p := &placed{spec: spec, price: cfg.Price}
	switch cfg.Placement {
	case "":
	case PlacementBerth:
		if n := len(spec.Levels); n > 0 {
			p.preferred = spec.Levels[n-1]
		}
	case PlacementKueue:
		p.scorer = gang.ScorerSpec{Name: gang.ScorerKueue}
	case PlacementBlind:
		p.spec = blindSpec(spec)
	default:
		return nil, fmt.Errorf("%w: unknown placement %q (want one of %s)", ErrInvalid, cfg.Placement, strings.Join(Placements(), ", "))
	}
	if !cfg.Price.On() {
		return p, nil
	}
	// Racks and blocks of the true cluster, by the name the simulator
	// knows the node under.
	p.rack, p.block = map[string]int{}, map[string]int{}
	racks, blocks := map[string]int{}, map[string]int{}
	id := func(m map[string]int, k string) int {
		v, ok := m[k]
		if !ok {
			v = len(m)
			m[k] = v
		}
		return v
	}
	for i := range spec.Nodes {
		n := &spec.Nodes[i]
		name := p.spec.Nodes[i].Name // blindSpec keeps the index
		r, b := "", ""
		if k := len(n.Domains); k > 0 {
			r = strings.Join(n.Domains, "/")
			if k >= 2 {
				b = n.Domains[0]
			}
		}
		p.rack[name], p.block[name] = id(racks, r), id(blocks, b)
	}
	p.factors = map[string]float64{}
	return p, nil
}

// blindSpec returns spec without levels and with the nodes renamed so
// that their order (by name, as topology order is for a cluster without
// levels) is a fixed shuffle; node i of the result is node i of spec.
func blindSpec(spec topo.Spec) topo.Spec {
	out := spec
	out.Levels = nil
	out.Nodes = slices.Clone(spec.Nodes)
	n := len(out.Nodes)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	rng := workload.NewSplitMix64(blindSeed)
	for i := n - 1; i > 0; i-- {
		j := int(rng.Draw(uint64(i + 1)))
		perm[i], perm[j] = perm[j], perm[i]
	}
	w := len(fmt.Sprint(n))
	for i := range out.Nodes {
		out.Nodes[i].Domains = nil
		out.Nodes[i].Name = fmt.Sprintf("x%0*d", w, perm[i])
	}
	return out
}

// request applies the placement to a job's request.
func (p *placed) request(r *gang.Request) {
	if p.preferred == "" {
		return
	}
	members := 0
	for _, g := range r.Groups {
		members += g.Members
	}
	if members > 1 {
		r.Preferred = p.preferred
	}
}

// factor is the simulator's runtime factor (sim.Config.RuntimeFactor):
// the price of the racks and blocks of nodes. Nil when nothing is priced.
func (p *placed) factor() func(job string, nodes []string) float64 {
	if !p.price.On() {
		return nil
	}
	var racks, blocks []int
	return func(job string, nodes []string) float64 {
		racks, blocks = racks[:0], blocks[:0]
		for _, n := range nodes {
			if r := p.rack[n]; !slices.Contains(racks, r) {
				racks = append(racks, r)
			}
			if b := p.block[n]; !slices.Contains(blocks, b) {
				blocks = append(blocks, b)
			}
		}
		f := p.price.Factor(len(racks), len(blocks))
		p.factors[job] = f
		return f
	}
}

// PriceStats summarises what the price of placement did to a replay: the
// runs it lengthened (of those it saw: every started run, one entry per
// job, its last run) and their mean factor.
type PriceStats struct {
	Runs      int     // jobs whose (last) run was priced
	Stretched int     // of those, runs on more than one rack
	MeanAll   float64 // mean factor over Runs
	MaxFactor float64
}

func (p *placed) stats() PriceStats {
	var s PriceStats
	if p.factors == nil {
		return s
	}
	fs := make([]float64, 0, len(p.factors))
	for _, f := range p.factors {
		fs = append(fs, f)
	}
	slices.Sort(fs) // a fixed order for the sum
	sum := 0.0
	for _, f := range fs {
		s.Runs++
		sum += f
		if f > 1 {
			s.Stretched++
		}
		s.MaxFactor = max(s.MaxFactor, f)
	}
	if s.Runs > 0 {
		s.MeanAll = sum / float64(s.Runs)
	}
	return s
}
