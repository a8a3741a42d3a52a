package engine

import (
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// Batched placement of identical replicas.
//
// The pending replicas of one service that share its current template
// are identical one-member gangs. Placing each with its own gang.Place
// repeats the same search (a MIG or fractional request scans every node
// each time). Instead, the first such replica a cycle's walk reaches
// places all of them at once: one gang.Place of a k-member group (k: the
// pending replicas), without a required level (one member is always in
// one domain); when not all k fit, a second call places as many as the
// first said fit in the cluster. The members are then handed out to the
// replicas in walk order, each booked on the plan like any placement (so
// quota, site rules and everything else the walk checks still apply to
// each replica). A member that is no longer free when its replica comes
// (a job between them took its GPUs) drops the batch, and that replica
// and the next are placed alone or from a new batch. Batches are also
// dropped when a reservation is added (the GPUs they must stay off
// change). This is how the engine places replicas, whether the caches
// (Config.DisableCaches) are on or off, so both give the same decisions.

// svcBatch is the batch of one service in the current cycle.
type svcBatch struct {
	p      int // reservations held when it was computed
	ms     []*placement
	next   int
	capped bool // fewer members than pending replicas fit
}

// batchable reports whether js is placed from its service's batch.
func (e *Engine) batchable(js *job) bool {
	sv := js.svc
	if sv == nil || js.tmpl != sv.gen || js.site != nil && len(js.site.parts) > 1 {
		return false
	}
	r := &js.req
	if len(r.Groups) != 1 || r.Groups[0].Members != 1 || r.Required != "" {
		return false
	}
	return !e.advApplies(js, e.cyc.now)
}

// batchNext returns js's placement from its service's batch (computing
// the batch if needed), not yet booked; nil: none (place js alone).
func (e *Engine) batchNext(js *job, p int) *placement {
	cs := &e.cyc
	sv := js.svc
	b := cs.batches[sv]
	if b != nil && b.p != p {
		b = nil
	}
	if b != nil && b.next >= len(b.ms) && !b.capped {
		b = nil // used up while more replicas wait: place them anew
	}
	if b == nil {
		b = e.computeBatch(js, p)
		if cs.batches == nil {
			cs.batches = map[*service]*svcBatch{}
		}
		cs.batches[sv] = b
	}
	if b.next >= len(b.ms) {
		return nil
	}
	pl := b.ms[b.next]
	b.next++
	return pl
}

// computeBatch places js's pending siblings (js included) at once.
func (e *Engine) computeBatch(js *job, p int) *svcBatch {
	sv := js.svc
	b := &svcBatch{p: p}
	k := 0
	for _, r := range sv.reps {
		if r.st == statePending && r.tmpl == sv.gen && (r == js || r.walked != e.cyc.gen) {
			k++
		}
	}
	if k < 1 {
		return b
	}
	req := gang.Request{Groups: slices.Clone(js.req.Groups), Preferred: js.req.Preferred}
	req.Groups[0].Members = k
	s := e.snapFor(p)
	res, err := e.placer.Place(s, &req)
	if err != nil {
		return b
	}
	if !res.Found {
		b.capped = true
		fit := res.Reason.Fit
		if res.Reason.Code != gang.NoCapacity || res.Reason.Level != topo.LevelCluster || fit <= 0 || fit >= k {
			return b
		}
		req.Groups[0].Members = fit
		if res, err = e.placer.Place(s, &req); err != nil || !res.Found {
			return b
		}
	}
	all := fromResult(&res, &req)
	b.ms = make([]*placement, len(all.members))
	for i, m := range all.members {
		m.group = 0
		m.gpus = slices.Clone(m.gpus)
		one := &placement{members: []pmember{m}, sreq: all.sreq, shared: all.shared}
		if all.shared {
			one.rebuildAll()
		} else {
			one.gpus = slices.Clone(m.gpus)
		}
		b.ms[i] = one
	}
	return b
}

// sharesReservedPl is sharesReserved for a placement's member GPUs.
func (cs *cycleState) sharesReservedPl(pl *placement, p int) bool {
	for _, m := range pl.members {
		for _, g := range m.gpus {
			if cs.claimed[g] {
				return true
			}
			for _, r := range cs.res[:p] {
				if _, found := slices.BinarySearch(r.gpus, g); found {
					return true
				}
			}
		}
	}
	return false
}
