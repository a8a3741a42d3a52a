package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Autoscale makes the simulator a backends.Provisioner (node
// autoscaling, docs/autoscaling.md). Every pool's nodes are in the
// simulated cluster from the start, down (as SLURM's cloud nodes are):
// so that the engine knows the shapes they give (a gang larger than the
// nodes up is not refused as never fitting) and their places in the
// topology. A ScaleUp boots nodes that are down: each comes up
// (engine.NodeChanged to Ready) BootDelay later, or, drawn with
// probability FailureRate, never: Provisioning reports it failed at the
// moment it would have come up. A ScaleDown takes an idle node down at
// once (engine.NodeFailed: nothing runs on it). A node is paid for
// while it is booting or up (ProvisionStats).
type Autoscale struct {
	Pools []Pool
	// BootDelay: from ScaleUp to the node up (or its failure).
	BootDelay time.Duration
	// FailureRate in [0, 1): the chance that a node asked for never
	// comes up, drawn per node from a generator seeded with Seed.
	FailureRate float64
	Seed        uint64
}

// Pool is a simulated pool: the planner's pool (its Name, GPUModel,
// GPUsPerNode, Min, Max, CostPerNodeHour, DomainLevel and Domains) and
// how its nodes are named. The pool holds Max nodes, or, with Domains,
// each domain's Room nodes; its first Min nodes are up at the start.
// A node's domain at every level of the cluster above DomainLevel is
// the pool's Name, at DomainLevel and below its Domain's name (the
// pool's Name without Domains).
type Pool struct {
	autoscale.Pool
	// NodePrefix names the nodes: NodePrefix + index from 0. Empty:
	// Name + "-".
	NodePrefix string
}

// ProvisionStats is what the simulated pools cost and did.
type ProvisionStats struct {
	// NodeHours: per pool, the node-hours paid so far (nodes booting or
	// up); Cost sums them times each pool's CostPerNodeHour.
	NodeHours map[string]float64
	Cost      float64
	// ScaleUps counts the ScaleUp calls granted and NodesAsked their
	// nodes; NodesBooted those that came up, BootFailures those that
	// never did; ScaleDowns the nodes released.
	ScaleUps, NodesAsked, NodesBooted, BootFailures, ScaleDowns int
	// MaxUp is the most pool nodes booting or up at once.
	MaxUp int
}

type provState uint8

const (
	provOff provState = iota
	provBooting
	provUp
)

type provNode struct {
	pool  int
	dom   string
	node  int // index in Sim.nodes
	state provState
	since time.Time // paid since (booting or up)
}

type provisioner struct {
	cfg    Autoscale
	rng    *rand.Rand
	nodes  []provNode
	byName map[string]int
	failed []backends.ProvisionFailure // happened, not reported yet
	paid   []time.Duration             // per pool: closed intervals
	stats  ProvisionStats
	live   int  // nodes booting or up
	asked  bool // Provisioning was called: a Runner autoscales
}

// addPools validates a and adds its pools' nodes to spec (down, but for
// each pool's first Min).
func addPools(a *Autoscale, spec *topo.Spec, start time.Time) (*provisioner, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: Autoscale: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if math.IsNaN(a.FailureRate) || a.FailureRate < 0 || a.FailureRate >= 1 {
		return nil, bad("FailureRate must be in [0, 1), got %v", a.FailureRate)
	}
	if a.BootDelay < 0 {
		return nil, bad("BootDelay must not be negative, got %v", a.BootDelay)
	}
	ac := autoscale.Config{}
	for _, p := range a.Pools {
		ac.Pools = append(ac.Pools, p.Pool)
	}
	if _, err := autoscale.Decide(ac, start, nil, nil); err != nil {
		return nil, fmt.Errorf("%w: Autoscale: %w", ErrInvalid, err)
	}
	pv := &provisioner{cfg: *a, rng: rand.New(rand.NewPCG(a.Seed, 0x5eed)), byName: map[string]int{},
		paid: make([]time.Duration, len(a.Pools)), stats: ProvisionStats{NodeHours: map[string]float64{}}}
	for pi, p := range a.Pools {
		lvl := -1
		if p.DomainLevel != "" {
			lvl = slices.Index(spec.Levels, p.DomainLevel)
			if lvl < 0 {
				return nil, bad("pool %s: DomainLevel %q is not a level of the cluster %v", p.Name, p.DomainLevel, spec.Levels)
			}
		}
		prefix := p.NodePrefix
		if prefix == "" {
			prefix = p.Name + "-"
		}
		type slot struct{ dom string }
		var slots []slot
		if len(p.Domains) == 0 {
			for range p.Max {
				slots = append(slots, slot{})
			}
		} else {
			for _, d := range p.Domains {
				for range d.Room {
					slots = append(slots, slot{d.Name})
				}
			}
		}
		for i, sl := range slots {
			ns := topo.NodeSpec{Name: fmt.Sprintf("%s%d", prefix, i), GPUs: p.GPUsPerNode, GPUModel: p.GPUModel, State: topo.Down}
			for l := range spec.Levels {
				switch {
				case lvl < 0 || l < lvl:
					ns.Domains = append(ns.Domains, p.Name)
				default:
					ns.Domains = append(ns.Domains, sl.dom)
				}
			}
			pn := provNode{pool: pi, dom: sl.dom, node: len(spec.Nodes)}
			if i < p.Min {
				ns.State, pn.state, pn.since = topo.Ready, provUp, start
				pv.live++
			}
			pv.byName[ns.Name] = len(pv.nodes)
			pv.nodes = append(pv.nodes, pn)
			spec.Nodes = append(spec.Nodes, ns)
		}
	}
	pv.stats.MaxUp = pv.live
	return pv, nil
}

// AutoscaleConfig returns the planner's config of the simulated pools
// (for RunnerConfig.Autoscale; set its Policy and ScaleDownDelay). The
// zero Config without Config.Autoscale.
func (s *Sim) AutoscaleConfig() autoscale.Config {
	var c autoscale.Config
	if s.prov != nil {
		for _, p := range s.prov.cfg.Pools {
			c.Pools = append(c.Pools, p.Pool)
			last := &c.Pools[len(c.Pools)-1]
			last.Domains = slices.Clone(last.Domains)
		}
	}
	return c
}

// ScaleUp boots up.Nodes nodes of the pool that are down, in up.Domain
// (any domain when empty), first by index: all of them, or none
// (backends.ErrRefused) when the pool lacks that many or would pass its
// Max.
func (s *Sim) ScaleUp(ctx context.Context, up autoscale.ScaleUp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pv := s.prov
	if pv == nil {
		return refused("no autoscaling pools (Config.Autoscale)")
	}
	pi := slices.IndexFunc(pv.cfg.Pools, func(p Pool) bool { return p.Name == up.Pool })
	if pi < 0 || up.Nodes <= 0 {
		return refused("scale-up %+v: unknown pool or no nodes", up)
	}
	live := 0
	var pick []int
	for i := range pv.nodes {
		pn := &pv.nodes[i]
		if pn.pool != pi {
			continue
		}
		if pn.state != provOff {
			live++
		} else if len(pick) < up.Nodes && (up.Domain == "" || pn.dom == up.Domain) {
			pick = append(pick, i)
		}
	}
	if max := pv.cfg.Pools[pi].Max; live+up.Nodes > max {
		return refused("scale-up %+v: pool has %d nodes of Max %d", up, live, max)
	}
	if len(pick) < up.Nodes {
		return refused("scale-up %+v: only %d nodes left to boot there", up, len(pick))
	}
	for _, i := range pick {
		pn := &pv.nodes[i]
		pn.state, pn.since = provBooting, s.now
		kind := evBoot
		if pv.rng.Float64() < pv.cfg.FailureRate {
			kind = evBootFail
		}
		s.push(event{at: s.now.Add(pv.cfg.BootDelay), kind: kind, node: s.nodes[pn.node].name})
	}
	pv.live += len(pick)
	pv.stats.MaxUp = max(pv.stats.MaxUp, pv.live)
	pv.stats.ScaleUps++
	pv.stats.NodesAsked += len(pick)
	return nil
}

// ScaleDown takes an idle pool node down at once; a node that is busy,
// booting, down or of no pool is refused (backends.ErrRefused).
func (s *Sim) ScaleDown(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pv := s.prov
	if pv == nil {
		return refused("no autoscaling pools (Config.Autoscale)")
	}
	i, ok := pv.byName[name]
	if !ok {
		return refused("node %s is of no pool", name)
	}
	pn := &pv.nodes[i]
	n := &s.nodes[pn.node]
	if pn.state != provUp || n.down {
		return refused("node %s is not up", name)
	}
	if n.busy > 0 {
		return refused("node %s is busy", name)
	}
	pv.stop(pn, s.now)
	s.histAdd(n, -1)
	n.down = true
	s.histAdd(n, 1)
	pv.stats.ScaleDowns++
	s.push(event{at: s.now, kind: evRelease, node: name})
	return nil
}

// stop ends what pn is paid for.
func (pv *provisioner) stop(pn *provNode, now time.Time) {
	pv.paid[pn.pool] += now.Sub(pn.since)
	pn.state = provOff
	pv.live--
}

// Provisioning reports the pools' nodes booting or up, and the boots
// that failed since the last call.
func (s *Sim) Provisioning(ctx context.Context) (backends.ProvisionState, error) {
	if err := ctx.Err(); err != nil {
		return backends.ProvisionState{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pv := s.prov
	if pv == nil {
		return backends.ProvisionState{}, nil
	}
	pv.asked = true
	var st backends.ProvisionState
	for _, pn := range pv.nodes {
		if pn.state == provOff {
			continue
		}
		st.Nodes = append(st.Nodes, autoscale.Node{Name: s.nodes[pn.node].name, Pool: pv.cfg.Pools[pn.pool].Name,
			Domain: pn.dom, Booting: pn.state == provBooting})
	}
	st.Failed, pv.failed = pv.failed, nil
	return st, nil
}

// ProvisionStats returns what the pools cost so far (nodes still up are
// paid up to the clock) and did.
func (s *Sim) ProvisionStats() ProvisionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	pv := s.prov
	if pv == nil {
		return ProvisionStats{NodeHours: map[string]float64{}}
	}
	st := pv.stats
	st.NodeHours = map[string]float64{}
	paid := slices.Clone(pv.paid)
	for _, pn := range pv.nodes {
		if pn.state != provOff {
			paid[pn.pool] += s.now.Sub(pn.since)
		}
	}
	for pi, d := range paid {
		p := pv.cfg.Pools[pi]
		h := d.Hours()
		st.NodeHours[p.Name] = h
		st.Cost += h * p.CostPerNodeHour
	}
	return st
}

// fireProv applies a provisioning event.
func (s *Sim) fireProv(e event) (engine.Event, bool) {
	pv := s.prov
	i := pv.byName[e.node]
	pn := &pv.nodes[i]
	n := &s.nodes[pn.node]
	switch e.kind {
	case evBoot:
		if pn.state != provBooting {
			return engine.Event{}, false
		}
		pn.state = provUp
		s.histAdd(n, -1)
		n.down = false
		s.histAdd(n, 1)
		pv.stats.NodesBooted++
		return engine.NodeChanged(s.now, e.node, topo.Ready, s.spec.Nodes[pn.node].Labels), true
	case evBootFail:
		if pn.state != provBooting {
			return engine.Event{}, false
		}
		pv.stop(pn, s.now)
		pv.stats.BootFailures++
		pv.failed = append(pv.failed, backends.ProvisionFailure{At: s.now, Pool: pv.cfg.Pools[pn.pool].Name, Domain: pn.dom,
			Nodes: 1, Reason: fmt.Sprintf("sim: node %s never came up", e.node)})
		return engine.Event{}, false
	case evRelease:
		return engine.NodeFailed(s.now, e.node), true
	}
	return engine.Event{}, false
}

// provPending reports whether pool nodes are up beyond their pool's Min
// while a Runner autoscales: their release is to come, so a simulation
// whose jobs have all finished goes on until then.
func (s *Sim) provPending() bool {
	pv := s.prov
	if pv == nil || !pv.asked {
		return false
	}
	up := make([]int, len(pv.cfg.Pools))
	for _, pn := range pv.nodes {
		if pn.state != provOff {
			up[pn.pool]++
		}
	}
	for pi, p := range pv.cfg.Pools {
		if up[pi] > p.Min {
			return true
		}
	}
	return false
}
