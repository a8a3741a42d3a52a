package federation

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// RebalanceConfig tunes the rebalancer. Zero fields take the defaults
// (WithDefaults).
type RebalanceConfig struct {
	// Interval between rounds; default 15 minutes. It is also the horizon
	// of demand: pending GPU-hours are turned into GPUs by dividing by it.
	Interval time.Duration
	// Hysteresis is how much unmet demand, in nodes' worth of GPUs, a pool
	// must have before a node moves to it, and how far (in nodes) a pool
	// must be from its quota before an idle node is moved back; default 1.
	Hysteresis float64
	// MaxMoves bounds the nodes moved per round; default 2.
	MaxMoves int
	// MinShare is the fraction of its quota a pool always keeps; default
	// 0.5.
	MinShare float64
	// Cooldown: a node that moved is not moved again for this long;
	// default 2 intervals. With Hysteresis and MaxMoves it keeps the
	// rebalancer from oscillating.
	Cooldown time.Duration
	// EarlyInterval is how often RunRebalancer checks, between its
	// rounds, whether a pool is short: a pool with pending demand it has
	// no idle GPUs for while another pool has idle nodes Plan would lend
	// it (a reclaim or demand move of an idle node). It then runs the
	// round at once instead of waiting for Interval. Since it checks no
	// more often, rounds are always at least EarlyInterval apart (with
	// MaxMoves per round and Cooldown per node, this bounds the moves an
	// early round makes). Default 1 minute; negative: no early rounds
	// (every Interval only); not below Interval/60, nor above Interval.
	EarlyInterval time.Duration
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c RebalanceConfig) WithDefaults() RebalanceConfig {
	if c.Interval <= 0 {
		c.Interval = 15 * time.Minute
	}
	if c.Hysteresis <= 0 {
		c.Hysteresis = 1
	}
	if c.MaxMoves <= 0 {
		c.MaxMoves = 2
	}
	if c.MinShare <= 0 {
		c.MinShare = 0.5
	}
	if c.Cooldown <= 0 {
		c.Cooldown = 2 * c.Interval
	}
	switch {
	case c.EarlyInterval < 0:
	case c.EarlyInterval == 0:
		c.EarlyInterval = min(time.Minute, c.Interval)
	case c.EarlyInterval < c.Interval/60:
		c.EarlyInterval = c.Interval / 60
	case c.EarlyInterval > c.Interval:
		c.EarlyInterval = c.Interval
	}
	return c
}

// PoolDemand is one pool's side of a rebalancing round.
type PoolDemand struct {
	Pool string
	// Quota is the pool's target share of all GPUs (0..1).
	Quota float64
	// PendingGPUHours: GPUs x estimated runtime of the pool's pending
	// jobs (a job without an estimate counts its time limit, one hour
	// without either).
	PendingGPUHours float64
	// ReservedGPUs: GPUs the pool's scheduler holds for reserved starts
	// (backfill or preemption reservations), or the replicas an inference
	// pool wants and does not run.
	ReservedGPUs float64
}

// HostView is one physical node as the rebalancer sees it.
type HostView struct {
	Host string
	// Owner is the pool that may schedule on it now.
	Owner string
	// Pools are the pools that know the node (it can move among them).
	Pools []string
	GPUs  int
	// Busy: something runs on it in its owner's system.
	Busy bool
	// LastMove is when it last moved (zero: never).
	LastMove time.Time
	// MovingTo names the pool a draining node is moving to (a Drain move
	// of an earlier round, waiting for its jobs to end); it counts as that
	// pool's and is not moved again.
	MovingTo string
}

// moveKind is the rule of Plan that decided a move.
type moveKind uint8

const (
	moveReclaim moveKind = iota + 1 // a pool under its quota takes a node back
	moveDemand                      // the pool with the most unmet demand takes an idle node
	moveQuota                       // no unmet demand: an idle node drifts back toward the quotas
)

// Move is one node handed from one pool to another, with why.
type Move struct {
	Host   string
	From   string
	To     string
	Reason string
	// Drain: the node is busy; it is lent (drained) now and moves when
	// its jobs have ended. Only a pool below its quota reclaims a busy
	// node, and only from a pool above its own.
	Drain bool
}

type poolBook struct {
	d      PoolDemand
	owned  float64 // GPUs owned
	idle   float64 // GPUs of owned idle nodes
	need   float64 // GPUs wanted over the next interval
	target float64 // quota in GPUs
	coming float64 // GPUs of nodes draining toward the pool
}

func (p *poolBook) unmet() float64 { return math.Max(0, p.need-p.idle-p.coming) }
func (p *poolBook) spare() float64 { return math.Max(0, p.idle-p.need) }

// Plan decides one rebalancing round at now. It is pure and
// deterministic: the same inputs give the same moves, so a round can be
// replayed from its log. Only idle nodes move at once; a busy one is
// emptied by its own scheduler first (Drain).
//
// Reclaims come first: a pool under its quota with unmet demand takes
// nodes back from a pool over its quota, idle ones first, else busy ones
// (Move.Drain: lent now, moved when empty). Then demand moves: the pool
// with the most unmet demand (GPUs
// wanted over the next interval beyond its idle ones, at least Hysteresis
// nodes' worth) takes an idle node of the pool with the most idle GPUs
// beyond its own demand, as long as the donor keeps MinShare of its quota.
// When no pool has unmet demand, idle nodes drift back toward the quotas
// (a pool more than Hysteresis nodes under its quota takes one from a pool
// over its own). Nodes moved within Cooldown stay put; at most MaxMoves
// nodes move. Unknown pools in hosts are ignored.
func Plan(now time.Time, cfg RebalanceConfig, pools []PoolDemand, hosts []HostView) []Move {
	out, _ := plan(now, cfg, pools, hosts)
	return out
}

// plan is Plan, with the rule that decided each move.
func plan(now time.Time, cfg RebalanceConfig, pools []PoolDemand, hosts []HostView) ([]Move, []moveKind) {
	cfg = cfg.WithDefaults()
	books, names, hs, nodeGPUs := makeBooks(cfg, pools, hosts)
	moved := map[string]bool{}
	movable := func(h HostView, from, to string) bool {
		return !moved[h.Host] && !h.Busy && h.MovingTo == "" && h.Owner == from && slices.Contains(h.Pools, to) &&
			(h.LastMove.IsZero() || now.Sub(h.LastMove) >= cfg.Cooldown)
	}
	// pick returns the first movable host from -> to whose GPUs fit ok.
	pick := func(from, to string, ok func(g float64) bool) (HostView, bool) {
		for _, h := range hs {
			if movable(h, from, to) && ok(float64(h.GPUs)) {
				return h, true
			}
		}
		return HostView{}, false
	}
	var out []Move
	var kinds []moveKind
	apply := func(h HostView, from, to *poolBook, kind moveKind, reason string) {
		g := float64(h.GPUs)
		from.owned -= g
		from.idle -= g
		to.owned += g
		to.idle += g
		moved[h.Host] = true
		out = append(out, Move{Host: h.Host, From: from.d.Pool, To: to.d.Pool, Reason: reason})
		kinds = append(kinds, kind)
	}
	hyst := cfg.Hysteresis * nodeGPUs
	// Reclaim: a pool under its quota with unmet demand takes nodes back
	// from a pool over its own, idle ones first, else busy ones (drained).
	for len(out) < cfg.MaxMoves {
		var recv *poolBook
		for _, n := range names {
			if b := books[n]; b.unmet() >= hyst && b.unmet() > 0 && b.owned < b.target-1e-9 && (recv == nil || b.unmet() > recv.unmet()) {
				recv = b
			}
		}
		if recv == nil {
			break
		}
		done := false
		for _, dn := range names {
			don := books[dn]
			if don == recv || don.owned <= don.target {
				continue
			}
			fits := func(g float64) bool { return don.owned-g >= don.target-1e-9 }
			h, ok := pick(dn, recv.d.Pool, fits)
			drain := false
			if !ok {
				for _, c := range hs {
					c.Busy = false
					if movable(c, dn, recv.d.Pool) && fits(float64(c.GPUs)) {
						h, ok, drain = c, true, true
						break
					}
				}
			}
			if !ok {
				continue
			}
			reason := fmt.Sprintf("reclaim: %s owns %.0f of its %.0f-GPU quota and wants %.1f GPUs over the next %v with %.0f idle; %s owns %.0f over its quota of %.0f",
				recv.d.Pool, recv.owned, recv.target, recv.need, cfg.Interval, recv.idle, dn, don.owned, don.target)
			if drain {
				reason += " (busy: drained, moves when its jobs end)"
				g := float64(h.GPUs)
				don.owned -= g
				recv.owned += g
				recv.coming += g
				moved[h.Host] = true
				out = append(out, Move{Host: h.Host, From: dn, To: recv.d.Pool, Reason: reason, Drain: true})
				kinds = append(kinds, moveReclaim)
			} else {
				apply(h, don, recv, moveReclaim, reason)
			}
			done = true
			break
		}
		if !done {
			break
		}
	}
	for len(out) < cfg.MaxMoves {
		// Receiver: the most unmet demand.
		var recv *poolBook
		for _, n := range names {
			if b := books[n]; b.unmet() >= hyst && b.unmet() > 0 && (recv == nil || b.unmet() > recv.unmet()) {
				recv = b
			}
		}
		if recv == nil {
			break
		}
		// Donor: the most spare idle GPUs that can give a node.
		done := false
		donors := slices.Clone(names)
		slices.SortStableFunc(donors, func(a, b string) int { return cmp.Compare(books[b].spare(), books[a].spare()) })
		for _, dn := range donors {
			don := books[dn]
			if don == recv || don.spare() <= 0 {
				continue
			}
			h, ok := pick(dn, recv.d.Pool, func(g float64) bool {
				return g <= don.spare() && don.owned-g >= cfg.MinShare*don.target
			})
			if !ok {
				continue
			}
			reason := fmt.Sprintf("demand: %s wants %.1f GPUs over the next %v (pending %.1f GPU-h, reserved %.1f) and has %.0f idle; %s has %.0f idle GPUs beyond its demand of %.1f",
				recv.d.Pool, recv.need, cfg.Interval, recv.d.PendingGPUHours, recv.d.ReservedGPUs, recv.idle, don.d.Pool, don.spare(), don.need)
			apply(h, don, recv, moveDemand, reason)
			done = true
			break
		}
		if !done {
			break
		}
	}
	if len(out) > 0 {
		return out, kinds
	}
	// No demand move: drift idle nodes back toward the quotas.
	for len(out) < cfg.MaxMoves {
		done := false
		for _, rn := range names {
			recv := books[rn]
			if recv.target-recv.owned < hyst || recv.target-recv.owned <= 0 {
				continue
			}
			for _, dn := range names {
				don := books[dn]
				if don == recv || don.unmet() > 0 || don.owned <= don.target {
					continue
				}
				h, ok := pick(dn, rn, func(g float64) bool { return g <= don.spare() && don.owned-g >= don.target-1e-9 })
				if !ok {
					continue
				}
				reason := fmt.Sprintf("quota: %s owns %.0f of its %.0f-GPU quota and %s %.0f of %.0f, with no unmet demand on either side",
					rn, recv.owned, recv.target, dn, don.owned, don.target)
				apply(h, don, recv, moveQuota, reason)
				done = true
				break
			}
			if done {
				break
			}
		}
		if !done {
			break
		}
	}
	return out, kinds
}

// makeBooks sums the pools' demand and the hosts' GPUs into one book per
// pool (names sorted; hosts sorted by name); nodeGPUs is the largest
// host's GPUs.
func makeBooks(cfg RebalanceConfig, pools []PoolDemand, hosts []HostView) (books map[string]*poolBook, names []string, hs []HostView, nodeGPUs float64) {
	books = map[string]*poolBook{}
	names = make([]string, 0, len(pools))
	for _, d := range pools {
		if _, dup := books[d.Pool]; dup {
			continue
		}
		books[d.Pool] = &poolBook{d: d}
		names = append(names, d.Pool)
	}
	slices.Sort(names)
	hs = slices.Clone(hosts)
	slices.SortFunc(hs, func(a, b HostView) int { return cmp.Compare(a.Host, b.Host) })
	var total float64
	for _, h := range hs {
		total += float64(h.GPUs)
		nodeGPUs = math.Max(nodeGPUs, float64(h.GPUs))
		if t := books[h.MovingTo]; h.MovingTo != "" && t != nil {
			t.owned += float64(h.GPUs)
			t.coming += float64(h.GPUs)
			continue
		}
		b := books[h.Owner]
		if b == nil {
			continue
		}
		b.owned += float64(h.GPUs)
		if !h.Busy {
			b.idle += float64(h.GPUs)
		}
	}
	hours := cfg.Interval.Hours()
	for _, n := range names {
		b := books[n]
		b.need = b.d.PendingGPUHours/hours + b.d.ReservedGPUs
		b.target = b.d.Quota * total
	}
	return books, names, hs, nodeGPUs
}

// shortPools are the pools that one round's plan lends an idle node
// because they want it: the receivers of reclaim and demand moves that
// are not drains. A plan with any makes RunRebalancer run the round
// before its interval.
func shortPools(moves []Move, kinds []moveKind) map[string]bool {
	out := map[string]bool{}
	for i, m := range moves {
		if kinds[i] != moveQuota && !m.Drain {
			out[m.To] = true
		}
	}
	return out
}
