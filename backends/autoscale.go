package backends

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Node autoscaling in the Runner (docs/autoscaling.md, "Node
// autoscaling"): every RunnerConfig.AutoscaleInterval the Runner reads
// the backend's pools (Provisioner.Provisioning), fills each node's free
// GPUs, idleness and reservations from the engine, takes as demand the
// pending jobs that wait for capacity, plans with autoscale.Decide and
// applies the plan through the Provisioner, on a goroutine like a bind:
// the scheduling loop never waits on it (on a virtual clock, like binds,
// a round ends before the clock moves). One round is in flight at a time.

// ErrNotProvisioner: RunnerConfig.Autoscale is set and the backend does
// not implement Provisioner. NewRunner's error wraps it and
// ErrInvalidConfig.
var ErrNotProvisioner = errors.New("backends: RunnerConfig.Autoscale needs a backend that implements Provisioner")

// DefaultAutoscaleInterval is RunnerConfig.AutoscaleInterval when zero.
const DefaultAutoscaleInterval = time.Minute

// The backoff of a pool whose provisioning failed: AutoscaleBackoff after
// the first failure, doubling with each failure in a row, at most
// AutoscaleBackoffMax. A node of the pool seen up resets it.
const (
	AutoscaleBackoff    = time.Minute
	AutoscaleBackoffMax = 30 * time.Minute
)

// AutoscaleStats counts what node autoscaling did (Runner.AutoscaleStats).
type AutoscaleStats struct {
	// Rounds: plans made.
	Rounds int
	// ScaleUps: ScaleUp calls that succeeded; NodesRequested the nodes
	// they asked for.
	ScaleUps, NodesRequested int
	// ScaleDowns: nodes released (ScaleDown calls that succeeded).
	ScaleDowns int
	// Failures: ScaleUp and ScaleDown calls that failed, and
	// provisionings the backend reported failed (each backs its pool off).
	Failures int
	// Errors: rounds that could not plan (Provisioning failed, or the
	// plan's input was invalid).
	Errors int
	// Unserved: the demand the last plan could not serve.
	Unserved []autoscale.Unserved
	// Backoff: each pool backing off, until when.
	Backoff map[string]time.Time
}

// autoState is the Runner's node autoscaling. mu guards it: the round's
// goroutine and AutoscaleStats read it; the loop writes it.
type autoState struct {
	mu       sync.Mutex
	cfg      autoscale.Config
	prov     Provisioner
	interval time.Duration
	next     time.Time // the next round is due
	busy     bool      // a round is in flight
	active   bool      // the last round left work for later (virtual clock: wake for it)
	demand   bool      // a cycle since the last round left jobs waiting for capacity
	idle     map[string]time.Time
	upSeen   map[string]bool
	fails    map[string]int // pool -> failures in a row
	backoff  map[string]time.Time
	stats    AutoscaleStats
	cordoned map[string]bool // nodes cordoned for a scale-down in flight
}

// autoRound is what a round's goroutine sends back.
type autoRound struct {
	plan  autoscale.Plan
	nodes []autoscale.Node
	down  []string // resScaledDown: the nodes released
	fail  []string // resScaledDown: the nodes whose ScaleDown failed
}

func newAutoState(cfg RunnerConfig) (*autoState, error) {
	if cfg.Autoscale == nil {
		return nil, nil
	}
	prov, ok := cfg.Backend.(Provisioner)
	if !ok {
		return nil, fmt.Errorf("%w: %w (%T)", ErrInvalidConfig, ErrNotProvisioner, cfg.Backend)
	}
	if cfg.AutoscaleInterval < 0 {
		return nil, fmt.Errorf("%w: AutoscaleInterval must not be negative, got %v", ErrInvalidConfig, cfg.AutoscaleInterval)
	}
	ac := *cfg.Autoscale
	ac.Pools = slices.Clone(ac.Pools)
	// The config alone must be valid (no nodes, no demand).
	if _, err := autoscale.Decide(ac, time.Time{}, nil, nil); err != nil {
		return nil, fmt.Errorf("%w: Autoscale: %w", ErrInvalidConfig, err)
	}
	iv := cfg.AutoscaleInterval
	if iv == 0 {
		iv = DefaultAutoscaleInterval
	}
	return &autoState{cfg: ac, prov: prov, interval: iv, idle: map[string]time.Time{}, upSeen: map[string]bool{},
		fails: map[string]int{}, backoff: map[string]time.Time{}, cordoned: map[string]bool{}}, nil
}

// AutoscaleStats returns what node autoscaling did so far (zero without
// RunnerConfig.Autoscale). Safe from any goroutine.
func (r *Runner) AutoscaleStats() AutoscaleStats {
	a := r.auto
	if a == nil {
		return AutoscaleStats{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Unserved = slices.Clone(s.Unserved)
	s.Backoff = maps.Clone(a.backoff)
	return s
}

// autoWake is when the loop must wake for the next round (zero: none).
// On a virtual clock only while the last round left work (nodes
// booting, idle nodes waiting for their delay, a plan that changed
// something): a simulation whose demand no plan can serve ends.
func (r *Runner) autoWake() time.Time {
	a := r.auto
	if a == nil || a.busy {
		return time.Time{}
	}
	if r.as.virtual && !a.active && !a.demand {
		return time.Time{}
	}
	return a.next
}

// noteDemand records, after a cycle, whether jobs wait for capacity.
func (r *Runner) noteDemand(rd *engine.Ready) {
	if r.auto == nil || r.auto.demand {
		return
	}
	for i := range rd.Pending {
		if demandStatus(rd.Pending[i].Reason) {
			r.auto.demand = true
			return
		}
	}
}

// demandStatus reports whether a pending job waits for capacity: no
// placement on the free GPUs (ReasonCapacity), or a reservation for
// later GPUs (ReasonReserved): both would start on new nodes.
func demandStatus(c engine.ReasonCode) bool {
	return c == engine.ReasonCapacity || c == engine.ReasonReserved
}

// maybeAutoscale starts a round when one is due and none is in flight.
func (r *Runner) maybeAutoscale(ctx context.Context, eng *engine.Engine) {
	a := r.auto
	if a == nil || a.busy {
		return
	}
	now := r.clock.Now()
	if now.Before(a.next) {
		return
	}
	a.busy, a.demand = true, false
	a.next = now.Add(a.interval)
	loads := map[string]engine.NodeLoad{}
	for _, l := range eng.NodeLoads() {
		loads[l.Name] = l
		if l.State == topo.Ready && l.Idle() {
			if _, ok := a.idle[l.Name]; !ok {
				a.idle[l.Name] = now
			}
		} else {
			delete(a.idle, l.Name)
		}
	}
	for name := range a.idle {
		if _, ok := loads[name]; !ok {
			delete(a.idle, name)
		}
	}
	var demand []autoscale.Demand
	if v := eng.View(); v != nil {
		for _, ps := range v.Pending {
			if !demandStatus(ps.Reason) {
				continue
			}
			if req, ok := ps.Request(); ok {
				demand = append(demand, autoscale.Demand{Job: ps.Job, Request: req})
			}
		}
	}
	idle := maps.Clone(a.idle)
	labels := selectorLabels(eng, demand)
	r.goOp(ctx, []string{"\x00autoscale"}, func(ctx context.Context) result {
		return result{kind: resAutoscale, auto: r.autoRound(ctx, now, loads, labels, idle, demand)}
	})
}

// selectorLabels returns, for every node of the engine, its labels of the
// keys the demand's node selectors name (nil: no selector), so that the
// nodes no pool holds are told apart by them (staticNodes).
func selectorLabels(eng *engine.Engine, demand []autoscale.Demand) map[string]map[string]string {
	keys := map[string]bool{}
	for _, d := range demand {
		for _, g := range d.Request.Groups {
			for k := range g.Selector {
				keys[k] = true
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	c := eng.Cluster()
	out := map[string]map[string]string{}
	for id := range c.NumNodes() {
		n := c.Node(topo.NodeID(id))
		l := make(map[string]string, len(keys))
		for k := range keys {
			l[k] = n.Labels[k] // "": the node has no such label
		}
		out[n.Name] = l
	}
	return out
}

// autoRound reads the pools, plans and applies the scale-ups (on the
// round's goroutine). The scale-downs are the loop's: it cordons the
// nodes in the engine first.
func (r *Runner) autoRound(ctx context.Context, now time.Time, loads map[string]engine.NodeLoad, labels map[string]map[string]string, idle map[string]time.Time, demand []autoscale.Demand) *autoRound {
	a := r.auto
	var st ProvisionState
	if err := r.call(ctx, func(ctx context.Context) (err error) { st, err = a.prov.Provisioning(ctx); return err }); err != nil {
		r.log.Warn("autoscale: reading the pools failed", "err", err)
		a.mu.Lock()
		a.stats.Errors++
		a.mu.Unlock()
		return nil
	}
	a.mu.Lock()
	for _, f := range st.Failed {
		a.failedLocked(f.Pool, now)
		r.log.Warn("autoscale: provisioning failed", "pool", f.Pool, "domain", f.Domain, "nodes", f.Nodes, "reason", f.Reason)
	}
	for _, n := range st.Nodes {
		if !n.Booting && !a.upSeen[n.Name] {
			a.upSeen[n.Name] = true
			delete(a.fails, n.Pool) // the pool provisions again
		}
	}
	cfg := a.cfg
	cfg.Pools = slices.Clone(a.cfg.Pools)
	cordoned := maps.Clone(a.cordoned)
	a.mu.Unlock()

	// Domains' Room is configured as nodes in all: what is left is planned.
	inDom := map[[2]string]int{}
	nodes := make([]autoscale.Node, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		inDom[[2]string{n.Pool, n.Domain}]++
		l, known := loads[n.Name]
		switch {
		case cordoned[n.Name]:
			n.FreeGPUs, n.IdleSince, n.Reserved = 0, time.Time{}, false
		case n.Booting || !known || l.State == topo.Down:
			// Not in the engine yet, or not ready there (a node whose
			// ready event has not come): capacity on the way.
			n.Booting, n.FreeGPUs, n.IdleSince, n.Reserved = true, 0, time.Time{}, false
		case l.State != topo.Ready:
			n.FreeGPUs, n.IdleSince, n.Reserved = 0, time.Time{}, l.Reserved
		default:
			n.FreeGPUs, n.IdleSince, n.Reserved = l.FreeGPUs, idle[n.Name], l.Reserved
		}
		nodes = append(nodes, n)
	}
	nodes = append(nodes, staticNodes(loads, labels, inPool(st.Nodes), &cfg)...)
	a.mu.Lock()
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		if t, ok := a.backoff[p.Name]; ok && t.After(p.BackoffUntil) {
			p.BackoffUntil = t
		}
		if len(p.Domains) > 0 {
			p.Domains = slices.Clone(p.Domains)
			for j := range p.Domains {
				p.Domains[j].Room = max(0, p.Domains[j].Room-inDom[[2]string{p.Name, p.Domains[j].Name}])
			}
		}
	}
	a.mu.Unlock()
	plan, err := autoscale.Decide(cfg, now, nodes, demand)
	if err != nil {
		r.log.Error("autoscale: planning failed", "err", err)
		a.mu.Lock()
		a.stats.Errors++
		a.mu.Unlock()
		return nil
	}
	for _, up := range plan.Up {
		err := r.retry(ctx, func(ctx context.Context) error { return a.prov.ScaleUp(ctx, up) })
		a.mu.Lock()
		if err != nil {
			a.failedLocked(up.Pool, now)
			r.log.Warn("autoscale: scale-up failed", "pool", up.Pool, "domain", up.Domain, "nodes", up.Nodes, "err", err)
		} else {
			a.stats.ScaleUps++
			a.stats.NodesRequested += up.Nodes
			r.log.Info("autoscale: scale-up", "pool", up.Pool, "domain", up.Domain, "nodes", up.Nodes, "jobs", up.Jobs)
		}
		a.mu.Unlock()
	}
	return &autoRound{plan: plan, nodes: nodes}
}

// poolMin is the configured Min of pool.
func (a *autoState) poolMin(pool string) int {
	for _, p := range a.cfg.Pools {
		if p.Name == pool {
			return p.Min
		}
	}
	return 0
}

func inPool(ns []autoscale.Node) map[string]bool {
	m := make(map[string]bool, len(ns))
	for _, n := range ns {
		m[n.Name] = true
	}
	return m
}

// staticPrefix names the pools of the nodes no pool holds.
// (a user pool must not be named so).
const staticPrefix = "static:"

// staticNodes gives the planner the nodes of the engine that no pool
// holds (a fixed part of the cluster), so that their free GPUs count as
// capacity: in pools of their own, one per GPU model and count (and per
// value of the labels the demand's node selectors name: labels, the
// pool's Labels, so that a job pinned by a selector counts only the
// nodes it may use), that can neither grow nor shrink (Min = Max =
// their nodes) and whose one domain is of no level (a gang that requires
// a domain is not planned onto them: where they lie is not known to the
// planner).
func staticNodes(loads map[string]engine.NodeLoad, labels map[string]map[string]string, pooled map[string]bool, cfg *autoscale.Config) []autoscale.Node {
	names := make([]string, 0, len(loads))
	for name := range loads {
		if !pooled[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []autoscale.Node
	idx := map[string]int{}
	for _, name := range names {
		l := loads[name]
		if l.GPUs == 0 || l.State == topo.Down {
			continue // no capacity (a pool's node not provisioned, say)
		}
		pool := fmt.Sprintf("%s%s/%d", staticPrefix, l.GPUModel, l.GPUs)
		nl := labels[name]
		for _, k := range slices.Sorted(maps.Keys(nl)) {
			pool += fmt.Sprintf(",%s=%s", k, nl[k])
		}
		i, ok := idx[pool]
		if !ok {
			i = len(cfg.Pools)
			idx[pool] = i
			cfg.Pools = append(cfg.Pools, autoscale.Pool{Name: pool, GPUModel: l.GPUModel, GPUsPerNode: l.GPUs,
				DomainLevel: staticPrefix, Domains: []autoscale.Domain{{Name: "all"}}, Labels: maps.Clone(nl)})
		}
		cfg.Pools[i].Min++
		cfg.Pools[i].Max++
		n := autoscale.Node{Name: name, Pool: pool, Domain: "all", Reserved: l.Reserved}
		if l.State == topo.Ready {
			n.FreeGPUs = l.FreeGPUs
		}
		out = append(out, n)
	}
	return out
}

// failedLocked backs pool off after a failure at now.
func (a *autoState) failedLocked(pool string, now time.Time) {
	a.stats.Failures++
	a.fails[pool]++
	d := AutoscaleBackoff
	for i := 1; i < a.fails[pool] && d < AutoscaleBackoffMax; i++ {
		d *= 2
	}
	d = min(d, AutoscaleBackoffMax)
	if t := now.Add(d); t.After(a.backoff[pool]) {
		a.backoff[pool] = t
	}
}

// settleAutoscale handles a round's result on the loop: the nodes to
// release are cordoned in the engine (those still idle and not reserved)
// and released on a goroutine; a release that failed is uncordoned.
func (r *Runner) settleAutoscale(ctx context.Context, eng *engine.Engine, x result) error {
	a := r.auto
	now := r.stepTime(eng)
	if x.kind == resScaledDown {
		a.mu.Lock()
		a.stats.ScaleDowns += len(x.auto.down)
		a.stats.Failures += len(x.auto.fail)
		for _, n := range x.auto.down {
			delete(a.cordoned, n)
			delete(a.idle, n)
		}
		for _, n := range x.auto.fail {
			delete(a.cordoned, n)
		}
		a.mu.Unlock()
		a.busy = false
		for _, n := range x.auto.fail {
			if id, ok := eng.Cluster().NodeByName(n); ok && eng.Cluster().Node(id).Name == n {
				if err := r.step(eng, engine.NodeChanged(now, n, topo.Ready, eng.Cluster().Node(id).Labels)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	rd := x.auto
	a.mu.Lock()
	if rd != nil {
		a.stats.Rounds++
		a.stats.Unserved = rd.plan.Unserved
	}
	a.mu.Unlock()
	if rd == nil {
		a.busy, a.active = false, true
		return nil
	}
	// Work left for a later round: nodes booting, idle nodes waiting for
	// their delay, or a plan that changed something.
	a.active = len(rd.plan.Up)+len(rd.plan.Down) > 0 || len(a.backoff) > 0 && len(rd.plan.Unserved) > 0
	count := map[string]int{}
	for _, n := range rd.nodes {
		count[n.Pool]++
	}
	for _, n := range rd.nodes {
		if n.Booting || !n.IdleSince.IsZero() && count[n.Pool] > a.poolMin(n.Pool) {
			a.active = true
		}
	}
	// Back-offs past are forgotten.
	a.mu.Lock()
	for p, t := range a.backoff {
		if !t.After(now) {
			delete(a.backoff, p)
		}
	}
	a.mu.Unlock()
	if len(rd.plan.Down) == 0 {
		a.busy = false
		return nil
	}
	loads := map[string]engine.NodeLoad{}
	for _, l := range eng.NodeLoads() {
		loads[l.Name] = l
	}
	var down []string
	for _, n := range rd.plan.Down {
		l, ok := loads[n]
		if !ok || l.State != topo.Ready || !l.Idle() || l.Reserved {
			continue // work came since the plan: kept
		}
		id, _ := eng.Cluster().NodeByName(n)
		if err := r.step(eng, engine.NodeChanged(now, n, topo.Cordoned, eng.Cluster().Node(id).Labels)); err != nil {
			return err
		}
		down = append(down, n)
	}
	if len(down) == 0 {
		a.busy = false
		return nil
	}
	a.mu.Lock()
	for _, n := range down {
		a.cordoned[n] = true
	}
	a.mu.Unlock()
	r.goOp(ctx, []string{"\x00autoscale"}, func(ctx context.Context) result {
		out := &autoRound{}
		for _, n := range down {
			if err := r.retry(ctx, func(ctx context.Context) error { return a.prov.ScaleDown(ctx, n) }); err != nil {
				r.log.Warn("autoscale: scale-down failed", "node", n, "err", err)
				out.fail = append(out.fail, n)
			} else {
				r.log.Info("autoscale: scale-down", "node", n)
				out.down = append(out.down, n)
			}
		}
		return result{kind: resScaledDown, auto: out}
	})
	return nil
}
