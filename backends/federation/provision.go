package federation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
)

// Node autoscaling over the pools: the federation is a
// backends.Provisioner (RunnerConfig.Autoscale; docs/autoscaling.md and
// docs/backends/federation.md, "Node autoscaling"). A pool that is short
// first borrows idle nodes of the other pools, then asks its own system
// for the rest; a pool that releases an idle node first lends it to a
// pool that is short, then releases it.

// AutoscalePool is the name of a member's autoscaling pool in the
// federation: "pool/memberpool" (the member's autoscale.Pool.Name
// under the federation's pool name), as node names are "pool/node". The
// pools of RunnerConfig.Autoscale (and Config.Autoscale) are named so.
func AutoscalePool(pool, memberPool string) string { return pool + "/" + memberPool }

// PinAutoscalePools returns c with every pool named "pool/memberpool"
// declaring the label LabelPool=pool (autoscale.Pool.Labels; the pools'
// other labels kept), so that the planner does not plan a job pinned to
// one pool on another pool's nodes, nor count their free GPUs for it.
// Give the result to both RunnerConfig.Autoscale and Config.Autoscale.
func PinAutoscalePools(c autoscale.Config) autoscale.Config {
	c.Pools = slices.Clone(c.Pools)
	for i := range c.Pools {
		p := &c.Pools[i]
		pool, _, ok := strings.Cut(p.Name, "/")
		if !ok {
			continue
		}
		l := make(map[string]string, len(p.Labels)+1)
		for k, v := range p.Labels {
			l[k] = v
		}
		l[LabelPool] = pool
		p.Labels = l
	}
	return c
}

// ProvisionStats counts what the federation's node autoscaling did
// (Federation.ProvisionStats).
type ProvisionStats struct {
	// Borrowed: nodes a scale-up moved from another pool (no new node
	// paid for); ScaledUp: nodes a scale-up asked of the members'
	// systems, for what borrowing did not cover.
	Borrowed, ScaledUp int
	// Lent: idle nodes a scale-down moved to a pool that was short
	// instead of releasing them; Released: nodes the members released.
	Lent, Released int
}

// ProvisionStats returns what node autoscaling did so far.
func (f *Federation) ProvisionStats() ProvisionStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prov
}

// provisioner returns the member of an autoscaling pool named
// "pool/memberpool", and the member's pool name.
func (f *Federation) provisioner(name string) (*member, string, error) {
	p, mp, ok := strings.Cut(name, "/")
	m := f.byName[p]
	if !ok || m == nil || mp == "" {
		return nil, "", fmt.Errorf("%w: %w: autoscaling pool %q is not pool/memberpool of a pool of the federation", backends.ErrRefused, autoscale.ErrInvalid, name)
	}
	return m, mp, nil
}

// Provisioning merges the members' reports (those that are
// backends.Provisioner): every node under its federation name
// ("pool/node") in its autoscaling pool's ("pool/memberpool"), and the
// failed provisionings likewise. With Config.Autoscale, only the
// members with a pool in it are asked (a backends/slurm without power
// pools is not). A member whose report is an error wrapping
// autoscale.ErrInvalid has no provisioning configured (a backends/kube
// without Config.Provisioning): it reports no node, and its pools only
// borrow. Any other error fails the report.
func (f *Federation) Provisioning(ctx context.Context) (backends.ProvisionState, error) {
	var out backends.ProvisionState
	for _, m := range f.members {
		p, ok := m.Backend.(backends.Provisioner)
		if !ok || f.cfg.Autoscale != nil && !slices.ContainsFunc(f.cfg.Autoscale.Pools, func(ap autoscale.Pool) bool {
			return strings.HasPrefix(ap.Name, m.Name+"/")
		}) {
			continue
		}
		st, err := p.Provisioning(ctx)
		if errors.Is(err, autoscale.ErrInvalid) {
			continue
		}
		if err != nil {
			return backends.ProvisionState{}, fmt.Errorf("federation: pool %s: %w", m.Name, err)
		}
		for _, n := range st.Nodes {
			n.Name = NodeName(m.Name, n.Name)
			n.Pool = AutoscalePool(m.Name, n.Pool)
			out.Nodes = append(out.Nodes, n)
		}
		for _, fl := range st.Failed {
			fl.Pool = AutoscalePool(m.Name, fl.Pool)
			out.Failed = append(out.Failed, fl)
		}
	}
	return out, nil
}

// ScaleUp covers a scale-up of up.Nodes nodes of up.Pool
// ("pool/memberpool") first with idle nodes other pools can lend (Borrow:
// shared hosts of the shape of the pool's Config.Autoscale entry and, with
// up.Domain, in that domain; each donor keeps its own demand and MinShare
// of its quota), moved to the pool as a rebalance moves them (MoveNode),
// and asks the member's own system (its backends.Provisioner) for the
// rest. A pool whose member cannot provision gets a scale-up only if
// borrowing covers all of it: otherwise nothing is moved and the
// scale-up is refused (backends.ErrRefused). A borrow whose move fails
// (rolled back) is asked of the member instead. Nodes borrowed stay
// when the member's scale-up then fails (the error is returned: the
// Runner backs the pool off); they are the pool's idle nodes, which the
// rebalancer's quota drift may move back.
func (f *Federation) ScaleUp(ctx context.Context, up autoscale.ScaleUp) error {
	mem, mp, err := f.provisioner(up.Pool)
	if err != nil {
		return err
	}
	if up.Nodes <= 0 {
		return fmt.Errorf("%w: %w: scale-up of %d nodes of %s", backends.ErrRefused, autoscale.ErrInvalid, up.Nodes, up.Pool)
	}
	prov, _ := mem.Backend.(backends.Provisioner)
	moves := f.borrowPlan(up, mem.Name)
	if len(moves) < up.Nodes && prov == nil {
		return fmt.Errorf("%w: pool %s cannot provision nodes and can borrow only %d of the %d asked for %s", backends.ErrRefused, mem.Name, len(moves), up.Nodes, up.Pool)
	}
	borrowed := 0
	var errs []error
	for _, mv := range moves {
		if err := f.MoveNode(ctx, mv.Host, mv.To, mv.Reason); err != nil {
			errs = append(errs, err)
			continue
		}
		borrowed++
	}
	rest := up.Nodes - borrowed
	f.mu.Lock()
	f.prov.Borrowed += borrowed
	f.mu.Unlock()
	if rest == 0 {
		return nil
	}
	if prov == nil {
		return fmt.Errorf("%w: pool %s borrowed %d of the %d nodes asked for %s and cannot provision the rest: %w", backends.ErrRefused, mem.Name, borrowed, up.Nodes, up.Pool, errors.Join(errs...))
	}
	if err := prov.ScaleUp(ctx, autoscale.ScaleUp{Pool: mp, Domain: up.Domain, Nodes: rest, Jobs: up.Jobs}); err != nil {
		return fmt.Errorf("federation: pool %s: scale-up of %d nodes of %s (after %d borrowed): %w", mem.Name, rest, mp, borrowed, err)
	}
	f.cfg.Logger.Info("federation: scale-up", "pool", up.Pool, "borrowed", borrowed, "provisioned", rest, "jobs", up.Jobs)
	f.mu.Lock()
	f.prov.ScaledUp += rest
	f.mu.Unlock()
	return nil
}

// borrowPlan picks the moves that cover up from the federation's books.
func (f *Federation) borrowPlan(up autoscale.ScaleUp, to string) []Move {
	var pool *autoscale.Pool
	if f.cfg.Autoscale != nil {
		if i := slices.IndexFunc(f.cfg.Autoscale.Pools, func(p autoscale.Pool) bool { return p.Name == up.Pool }); i >= 0 {
			pool = &f.cfg.Autoscale.Pools[i]
		}
	}
	if pool == nil {
		return nil // no shape known: nothing to match a borrowed node with
	}
	pools, hosts := f.view()
	f.mu.Lock()
	ok := map[string]bool{}
	for _, hv := range hosts {
		h := f.hosts[hv.Host]
		if h == nil || !slices.Contains(h.pools, to) {
			continue
		}
		if h.gpus != pool.GPUsPerNode || pool.GPUModel != "" && h.model[to] != pool.GPUModel {
			continue
		}
		if up.Domain != "" && pool.DomainLevel != "" && h.domains[to][pool.DomainLevel] != up.Domain {
			continue
		}
		ok[hv.Host] = true
	}
	f.mu.Unlock()
	return Borrow(f.cfg.Clock.Now(), f.cfg.Rebalance, pools, hosts, to, up.Nodes,
		func(h HostView) bool { return ok[h.Host] },
		fmt.Sprintf("autoscale: %s is short of %d nodes (jobs %v)", up.Pool, up.Nodes, up.Jobs))
}

// Borrow picks, for a scale-up of n nodes of pool to, the idle shared
// hosts other pools can lend it at now, in host order: hosts to may
// schedule on, that fit (the scale-up's shape and domain), idle, not
// moving, not moved within Cooldown; a donor gives only idle GPUs beyond
// its own demand (pending GPU-hours over the interval and reservations)
// and keeps MinShare of its quota, as a rebalance's demand move does. It
// is pure and deterministic, like Plan; why is the start of each move's
// reason.
func Borrow(now time.Time, cfg RebalanceConfig, pools []PoolDemand, hosts []HostView, to string, n int, fits func(HostView) bool, why string) []Move {
	cfg = cfg.WithDefaults()
	books, _, hs, _ := makeBooks(cfg, pools, hosts)
	var out []Move
	for _, h := range hs {
		if len(out) >= n {
			break
		}
		don := books[h.Owner]
		g := float64(h.GPUs)
		if don == nil || h.Owner == to || h.Busy || h.MovingTo != "" || !slices.Contains(h.Pools, to) ||
			!h.LastMove.IsZero() && now.Sub(h.LastMove) < cfg.Cooldown || fits != nil && !fits(h) {
			continue
		}
		if g > don.spare() || don.owned-g < cfg.MinShare*don.target {
			continue
		}
		out = append(out, Move{Host: h.Host, From: h.Owner, To: to,
			Reason: fmt.Sprintf("%s: borrowed before scaling up; %s has %.0f idle GPUs beyond its demand of %.1f and keeps %.0f of its %.0f-GPU quota",
				why, h.Owner, don.spare(), don.need, don.owned-g, don.target)})
		don.owned -= g
		don.idle -= g
	}
	return out
}

// LendInstead decides whether an idle host that its owner is about to
// release (a scale-down) should rather go to a pool that is short: the
// pool that knows it with the most unmet demand (GPUs wanted over the
// interval beyond its idle ones and nodes coming, at least Hysteresis
// nodes' worth). The host must be idle, not moving and not moved within
// Cooldown. Pure and deterministic, like Plan.
func LendInstead(now time.Time, cfg RebalanceConfig, pools []PoolDemand, hosts []HostView, host string) (Move, bool) {
	cfg = cfg.WithDefaults()
	books, names, hs, nodeGPUs := makeBooks(cfg, pools, hosts)
	i := slices.IndexFunc(hs, func(h HostView) bool { return h.Host == host })
	if i < 0 {
		return Move{}, false
	}
	h := hs[i]
	if h.Busy || h.MovingTo != "" || !h.LastMove.IsZero() && now.Sub(h.LastMove) < cfg.Cooldown {
		return Move{}, false
	}
	var recv *poolBook
	for _, n := range names {
		b := books[n]
		if n == h.Owner || !slices.Contains(h.Pools, n) || b.unmet() < cfg.Hysteresis*nodeGPUs || b.unmet() <= 0 {
			continue
		}
		if recv == nil || b.unmet() > recv.unmet() {
			recv = b
		}
	}
	if recv == nil {
		return Move{}, false
	}
	return Move{Host: h.Host, From: h.Owner, To: recv.d.Pool,
		Reason: fmt.Sprintf("autoscale: %s releases idle %s; %s wants %.1f GPUs over the next %v and has %.0f idle: lent instead of released",
			h.Owner, h.Host, recv.d.Pool, recv.need, cfg.Interval, recv.idle)}, true
}

// ScaleDown releases node ("pool/node"), an idle node of a pool's
// autoscaling pool, unless another pool is short: a shared host that a
// pool with unmet demand knows is moved to it instead (LendInstead), as a
// rebalance would; the node's copy in its pool is then cordoned, as a
// released node would be. Otherwise the member's own system releases it
// (its backends.Provisioner; a member that is not one refuses,
// backends.ErrRefused). A node whose host another pool owns by now (it
// moved since the plan) has nothing to release: nil.
func (f *Federation) ScaleDown(ctx context.Context, node string) error {
	mem, n, err := f.route(node)
	if err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	f.mu.Lock()
	h := f.hosts[n]
	var owner string
	shared := false
	if h != nil {
		owner, shared = h.owner, len(h.pools) > 1
	}
	f.mu.Unlock()
	if h != nil && owner != mem.Name {
		f.cfg.Logger.Info("federation: scale-down of a node another pool owns now: nothing to release", "node", node, "owner", owner)
		return nil
	}
	if shared {
		pools, hosts := f.view()
		if mv, ok := LendInstead(f.cfg.Clock.Now(), f.cfg.Rebalance, pools, hosts, n); ok {
			if err := f.MoveNode(ctx, mv.Host, mv.To, mv.Reason); err == nil {
				f.mu.Lock()
				f.prov.Lent++
				f.mu.Unlock()
				return nil
			}
			// Rolled back: release it as asked.
		}
	}
	prov, ok := mem.Backend.(backends.Provisioner)
	if !ok {
		return fmt.Errorf("%w: pool %s cannot release nodes (its backend is not a Provisioner)", backends.ErrRefused, mem.Name)
	}
	if err := prov.ScaleDown(ctx, n); err != nil {
		return err
	}
	f.mu.Lock()
	f.prov.Released++
	f.mu.Unlock()
	return nil
}

var _ backends.Provisioner = (*Federation)(nil)
