package federation

import (
	"fmt"
	"slices"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

// CycleObserver is a member backend with a Runner observer of its own
// (backends/kube writes berth's pending reasons into its pods' conditions
// from it).
type CycleObserver interface {
	Observe(c backends.Cycle)
}

// StepErrorHandler is a member backend with a Runner OnStepError of its
// own.
type StepErrorHandler interface {
	OnStepError(ev engine.Event, err error) error
}

// Observe is for backends.RunnerConfig.Observe on a federation: every
// member that is a CycleObserver sees every cycle, so that a job pending
// in the engine shows berth's reason in its own system (a Kubernetes pod's
// PodScheduled=False condition) in federated mode too. Members match jobs
// by their own IDs, which the federation keeps. The cycle's reservations
// are left out: their GPU indices are the federation's inventory's, not
// the member's, so a member would nominate the wrong nodes (Kubernetes
// pods get no nominatedNodeName in federated mode; their reason and
// estimated start are kept).
//
// While RunRebalancer runs, a job of one pool pending for capacity, in a
// pool that shares nodes, has its reason say when the next rebalance is
// (PendingStatus.Note): "waiting for the next rebalance at T", the next
// early check when the pool is short (another pool has an idle node the
// round would lend it), else the next periodic round.
func (f *Federation) Observe(c backends.Cycle) {
	c.Ready.Reservations = nil
	c.Ready.Pending = f.noteRebalance(c.Ready.Pending)
	for _, m := range f.members {
		if o, ok := m.Backend.(CycleObserver); ok {
			o.Observe(c)
		}
	}
}

// noteRebalance returns ps with a Note on the jobs pending for capacity
// in a pool a rebalance can give nodes to (see Observe); ps itself, which
// the engine's View shares, is not changed.
func (f *Federation) noteRebalance(ps []engine.PendingStatus) []engine.PendingStatus {
	f.mu.Lock()
	check, round := f.nextCheck, f.nextRound
	pools := map[string]string{} // job -> pool, for the jobs to note
	shared := map[string]bool{}  // pools that share a node
	if !round.IsZero() {
		for _, h := range f.hosts {
			if len(h.pools) > 1 {
				for _, p := range h.pools {
					shared[p] = true
				}
			}
		}
		for _, p := range ps {
			if pool, ok := f.jobPool[p.Job]; ok && p.Reason == engine.ReasonCapacity && shared[pool] {
				pools[p.Job] = pool
			}
		}
	}
	f.mu.Unlock()
	if len(pools) == 0 {
		return ps
	}
	short := shortPools(f.planRound(f.cfg.Clock.Now()))
	out := slices.Clone(ps)
	for i, p := range out {
		pool, ok := pools[p.Job]
		if !ok {
			continue
		}
		if short[pool] && check.Before(round) {
			out[i].Note = fmt.Sprintf("waiting for the next rebalance at %s (early: pool %s is short and another pool has an idle node to lend it)",
				check.UTC().Format(time.RFC3339), pool)
		} else {
			out[i].Note = fmt.Sprintf("waiting for the next rebalance at %s (rounds every %v; no idle node of another pool can be lent to pool %s now)",
				round.UTC().Format(time.RFC3339), f.cfg.Rebalance.Interval, pool)
		}
	}
	return out
}

// OnStepError is for backends.RunnerConfig.OnStepError on a federation:
// an event the engine refused goes to the handler of the member it came
// from (by the job's pool, or the node's), with the member's own names, so
// that a Kubernetes pod whose submission berth refused says why. An event
// of no member, or of a member without a handler, is logged
// (Config.Logger, Warn) and skipped, as the Runner does without an
// OnStepError.
func (f *Federation) OnStepError(ev engine.Event, err error) error {
	pool := f.eventPool(ev)
	if m := f.byName[pool]; m != nil {
		if h, ok := m.Backend.(StepErrorHandler); ok {
			return h.OnStepError(localEvent(pool, ev), err)
		}
	}
	id := ev.JobID
	if ev.Job != nil {
		id = ev.Job.ID
	}
	f.cfg.Logger.Warn("federation: event rejected by the engine, skipped", "event", ev.Kind.String(), "pool", pool, "job", id,
		"node", ev.NodeName+ev.Node.Name, "err", err)
	return nil
}

// eventPool is the pool a translated event came from.
func (f *Federation) eventPool(ev engine.Event) string {
	switch ev.Kind {
	case engine.EventNodeAdded, engine.EventNodeChanged:
		p, _, _ := SplitNode(ev.Node.Name)
		return p
	case engine.EventNodeFailed:
		p, _, _ := SplitNode(ev.NodeName)
		return p
	}
	if len(ev.Members) > 0 {
		p, _, _ := SplitNode(ev.Members[0].Node)
		return p
	}
	if ev.Job != nil && len(ev.Job.Request.Groups) > 0 {
		if p, ok := ev.Job.Request.Groups[0].Selector[LabelPool]; ok {
			return p
		}
	}
	id := ev.JobID
	if ev.Job != nil {
		id = ev.Job.ID
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.jobPool[id]
}

// localEvent undoes Translate's renaming of nodes (jobs keep their IDs).
func localEvent(pool string, ev engine.Event) engine.Event {
	strip := func(n string) string {
		if p, node, ok := SplitNode(n); ok && p == pool {
			return node
		}
		return n
	}
	switch ev.Kind {
	case engine.EventNodeAdded, engine.EventNodeChanged:
		ev.Node.Name = strip(ev.Node.Name)
		if ev.Kind == engine.EventNodeAdded && len(ev.Node.Domains) > 0 && ev.Node.Domains[0] == pool {
			ev.Node.Domains = ev.Node.Domains[1:]
		}
	case engine.EventNodeFailed:
		ev.NodeName = strip(ev.NodeName)
	}
	if len(ev.Members) > 0 {
		ms := make([]engine.Member, len(ev.Members))
		copy(ms, ev.Members)
		for i := range ms {
			ms[i].Node = strip(ms[i].Node)
		}
		ev.Members = ms
	}
	return ev
}
