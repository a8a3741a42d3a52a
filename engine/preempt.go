package engine

import (
	"cmp"
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// victim is a running job that a preemptor may stop.
type victim struct {
	js    *job
	cause PreemptCause
	cost  float64 // GPU-seconds since its last checkpoint
}

// preempt is step 7. For each blocked job that may preempt (the first
// MaxPreemptorsPerCycle in order): shrink elastic jobs if that is enough;
// else choose, over the domains of its required level, the cheapest set of
// whole victim gangs whose release gives it a valid placement (and the
// quota), drop the victims that turn out not to be needed, stop them with
// their grace periods, and hold the placement for the preemptor (a claim)
// so that no other job takes the GPUs when they free up.
func (e *Engine) preempt(rd *Ready) {
	cs := &e.cyc
	pc := &e.cfg.Preemption
	for _, p := range cs.preemptors {
		if cs.victims >= pc.MaxVictimsPerCycle {
			break
		}
		if p.st != statePending || e.claims[p.j.ID] != nil || p.badOf != nil || !e.siteAllows(p) {
			continue
		}
		if e.shrinkFor(p, rd) {
			continue
		}
		cands := e.candidates(p)
		if len(cands) == 0 {
			continue
		}
		chosen, res, ok := e.chooseVictims(p, cands)
		if !ok || cs.victims+len(chosen) > pc.MaxVictimsPerCycle {
			continue
		}
		e.stopVictims(p, chosen, res, rd)
	}
}

// candidates lists the running jobs p may preempt, cheapest first.
func (e *Engine) candidates(p *job) []victim {
	cs := &e.cyc
	pc := &e.cfg.Preemption
	reclaim := pc.Reclaim && e.withinNominal(p.j)
	var out []victim
	for _, v := range e.active {
		j := v.j
		if v.st != stateRunning || !j.Preemptible || v == p || !v.start.Before(cs.now) || e.noPreempt(v) {
			continue
		}
		if v.bindSt != bindNone {
			continue // its bind is not confirmed yet: the preemption would queue behind it
		}
		if _, grew := e.out.grows[j.ID]; grew {
			continue // the backend may still refuse the grow
		}
		if cs.now.Sub(v.start) < j.MinRuntime {
			continue
		}
		if !v.lastPreempted.IsZero() && cs.now.Sub(v.lastPreempted) < j.MinRuntime {
			continue
		}
		if v.svc != nil && v.svc.spec.QoS == QoSBurstable && !e.borrowing(j.Queue) {
			continue // burstable replicas are preemptible only while borrowing
		}
		var cause PreemptCause
		switch {
		case pc.Priority && j.Priority < p.j.Priority:
			cause = PreemptPriority
		case reclaim && j.Queue != p.j.Queue && e.borrowing(j.Queue):
			cause = PreemptReclaim
		case v.svc != nil && v.svc.spec.QoS == QoSBestEffort && !bestEffort(p) && (pc.Priority || pc.Reclaim):
			// best-effort replicas yield to any other work
			cause = PreemptPriority
			if !pc.Priority {
				cause = PreemptReclaim
			}
		default:
			continue
		}
		since := v.start
		if v.checkpoint.After(since) {
			since = v.checkpoint
		}
		out = append(out, victim{js: v, cause: cause, cost: v.place.weight() * cs.now.Sub(since).Seconds()})
	}
	slices.SortFunc(out, func(a, b victim) int {
		if c := cmp.Compare(qosRank(a.js), qosRank(b.js)); c != 0 {
			return c // best-effort replicas first, then borrowing burstable ones
		}
		if c := cmp.Compare(a.cost, b.cost); c != 0 {
			return c
		}
		if c := cmp.Compare(a.js.j.Priority, b.js.j.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.js.j.ID, b.js.j.ID)
	})
	return out
}

// withinNominal reports whether j's queue stays within its own quota of
// every governed resource j asks for: only then may it reclaim.
func (e *Engine) withinNominal(j *queue.Job) bool {
	any := false
	for _, q := range j.Demand() {
		if !slices.Contains(e.tree.Resources(), q.Name) {
			continue
		}
		any = true
		if e.tree.Usage(j.Queue, q.Name).Add(q.Amount) > e.tree.SubtreeQuota(j.Queue, q.Name) {
			return false
		}
	}
	return any
}

// borrowing reports whether a queue uses more than its own quota of some
// resource.
func (e *Engine) borrowing(q string) bool {
	for _, r := range e.tree.Resources() {
		if e.tree.Borrowed(q, r) > 0 {
			return true
		}
	}
	return false
}

// quotaWith reports whether p fits its quota once the victims' usage is
// released (a what-if on the tree, undone before returning).
func (e *Engine) quotaWith(p *job, vs []victim) bool {
	if fit, err := e.tree.Fits(p.j); err == nil && fit.OK {
		return true
	}
	now := e.cyc.now
	for _, v := range vs {
		if err := e.tree.Release(v.js.j, now); err != nil {
			panic("engine: broken invariant: what-if release of " + v.js.j.ID + ": " + err.Error())
		}
	}
	fit, err := e.tree.Fits(p.j)
	for _, v := range vs {
		if err := e.tree.Adopt(v.js.j, now); err != nil {
			panic("engine: broken invariant: what-if adopt of " + v.js.j.ID + ": " + err.Error())
		}
	}
	return err == nil && fit.OK
}

// chooseVictims picks, domain by domain of p's required level, victims in
// order of cost until p has a valid placement and its quota, then adds
// back every victim not needed after all; the cheapest domain wins (then
// fewer victims, then the lower domain index).
func (e *Engine) chooseVictims(p *job, cands []victim) ([]victim, *placement, bool) {
	cs := &e.cyc
	c := e.cluster
	level := 0
	if p.req.Required != "" {
		l, err := c.Level(p.req.Required)
		if err != nil {
			return nil, nil, false
		}
		level = l
	}
	need := p.req.GPUs()
	var best []victim
	var bestPl *placement
	bestCost := 0.0
	found := false
	for d := range c.NumDomains(level) {
		// Victims with a member in d, and a cheap bound first.
		var in []victim
		room := cs.plan.DomainFree(level, d)
		for _, v := range cands {
			touches := false
			for _, m := range v.js.place.members {
				if c.DomainOf(m.node, level) == d && cs.plan.NodeState(m.node) == topo.Ready {
					touches = true
					room += len(m.gpus)
				}
			}
			if touches {
				in = append(in, v)
			}
		}
		if len(in) == 0 || room < need {
			continue
		}
		// The what-if: the plan with the GPUs reserved for jobs ahead of
		// p held; released victims' GPUs stay held where such a
		// reservation counts on them.
		w := e.aheadSnap(p)
		protect := e.aheadGPUs(p)
		var chosen []victim
		var freed [][]uint32
		var wpl []*placement // the victims' placements on w (grants change on re-booking)
		ok := false
		for _, v := range in {
			vp := v.js.place.whatIf()
			freed = append(freed, releaseExcept(w, vp, protect))
			wpl = append(wpl, vp)
			chosen = append(chosen, v)
			if w.DomainFree(level, d) < need || !gang.Possible(w, &p.req) || !e.quotaWith(p, chosen) {
				continue
			}
			if res, err := e.placer.Place(w, &p.req); err == nil && res.Found && !cs.onHeld(&res, protect) {
				ok = true
				break
			}
		}
		if !ok {
			continue
		}
		// Add back the victims not needed, most expensive first.
		for i := len(chosen) - 1; i >= 0; i-- {
			if err := bookBack(w, wpl[i], freed[i]); err != nil {
				continue
			}
			rest := slices.Delete(slices.Clone(chosen), i, i+1)
			if res, err := e.placer.Place(w, &p.req); err == nil && res.Found && !cs.onHeld(&res, protect) && e.quotaWith(p, rest) {
				chosen = rest
				freed = slices.Delete(freed, i, i+1)
				wpl = slices.Delete(wpl, i, i+1)
				continue
			}
			releaseList(w, wpl[i], freed[i])
		}
		res, err := e.placer.Place(w, &p.req)
		if err != nil || !res.Found || cs.onHeld(&res, protect) {
			continue
		}
		cost := 0.0
		for _, v := range chosen {
			cost += v.cost
		}
		if !found || cost < bestCost || (cost == bestCost && len(chosen) < len(best)) {
			// The placer reuses its buffers: copy the placement out.
			best, bestCost, found, bestPl = chosen, cost, true, fromResult(&res, &p.req)
		}
	}
	return best, bestPl, found
}

// stopVictims starts the victims' grace periods and holds p's placement.
func (e *Engine) stopVictims(p *job, vs []victim, pl *placement, rd *Ready) {
	cs := &e.cyc
	cl := &claim{job: p.j.ID, place: pl, start: cs.now}
	p.preemptErr = ""
	slices.SortFunc(vs, func(a, b victim) int { return cmp.Compare(a.js.j.ID, b.js.j.ID) })
	for _, v := range vs {
		js := v.js
		js.st = stateStopping
		js.preemptSt = bindNone
		e.stopping++
		js.deadline = cs.now.Add(js.j.GracePeriod)
		js.victimFor = p.j.ID
		js.lastPreempted = cs.now
		if js.deadline.After(cl.start) {
			cl.start = js.deadline
		}
		cl.victims = append(cl.victims, js.j.ID)
		e.tlRekey(js)
		e.runUpsert(js)
		rd.Preemptions = append(rd.Preemptions, Preemption{Victim: js.j.ID, For: p.j.ID, Cause: v.cause, Deadline: js.deadline, CostGPUSeconds: v.cost, Run: js.run})
		e.out.preempts[js.j.ID] = true
		e.out.runs[js.j.ID] = js.run
	}
	e.claims[p.j.ID] = cl
	cs.victims += len(vs)
	// Hold what is free of it already, for the rest of this cycle.
	if cs.claimed == nil {
		cs.claimed = map[uint32]bool{}
	}
	var hold []uint32
	for _, g := range pl.claimGPUs() {
		cs.claimed[g] = true
		if cs.plan.IsFree(g) {
			hold = append(hold, g)
		}
	}
	if len(hold) > 0 {
		if err := cs.plan.Allocate(hold); err != nil {
			panic("engine: broken invariant: holding claimed GPUs: " + err.Error())
		}
		cs.holds = append(cs.holds, hold...)
		slices.Sort(cs.holds)
	}
	// Its backfill reservation, if any, gives way to the claim, and so do
	// reservations behind it on the claimed GPUs.
	cs.deleteRes(func(r *resv) bool { return r.job == p.j.ID })
	e.dropConflicting(p, pl.claimGPUs())
	if i, ok := cs.statusOf[p.j.ID]; ok && i < len(cs.pend) {
		cs.pend[i].Reason, cs.pend[i].Start = ReasonPreempting, cl.start
		cs.pend[i].Place = gang.Reason{}
		cs.pend[i].Quota = queue.Fit{}
	}
}

// aheadGPUs is the set of GPUs reserved this cycle for jobs ahead of p.
func (e *Engine) aheadGPUs(p *job) map[uint32]bool {
	cs := &e.cyc
	set := map[uint32]bool{}
	for _, r := range cs.res {
		if r.job != p.j.ID && slices.Contains(cs.ahead[p.j.ID], r.job) {
			for _, g := range r.gpus {
				set[g] = true
			}
		}
	}
	e.advProtect(p, set)
	return set
}

// onHeld reports whether a what-if placement for a preemptor puts a
// member on a GPU of protect (reserved for jobs ahead of it: aheadGPUs)
// or of a claim. The what-if holds such GPUs only where they are free: a
// GPU shared now is not free, so a fractional member may land on it, and
// a GPU whose victim held only shares is free again once they are
// released. One more share there keeps the GPU shared at the
// reservation's start or from the claim (the walk's sharesReserved).
func (cs *cycleState) onHeld(res *gang.Result, protect map[uint32]bool) bool {
	for _, g := range res.GPUs() {
		if protect[g] || cs.claimed[g] {
			return true
		}
	}
	return false
}

// releaseExcept frees a placement's whole GPUs on a what-if snapshot
// except those in keep, its grants and its host resources; it returns the
// GPUs freed.
func releaseExcept(s *topo.Snapshot, pl *placement, keep map[uint32]bool) []uint32 {
	var out []uint32
	for _, g := range pl.gpus {
		if !keep[g] {
			out = append(out, g)
		}
	}
	releaseList(s, pl, out)
	return out
}

// releaseList frees the listed GPUs of pl, its grants and its host
// resources.
func releaseList(s *topo.Snapshot, pl *placement, gpus []uint32) {
	if err := s.Release(gpus); err != nil {
		panic("engine: broken invariant: what-if release: " + err.Error())
	}
	if pl.shared {
		pl.unbookShared(s)
	}
	for _, m := range pl.members {
		if m.cpu != 0 || m.mem != 0 {
			_ = s.ReleaseHost(m.node, m.cpu, m.mem) // booked with the job
		}
	}
}

// bookBack books again what releaseList freed (the same MIG instances,
// shares of the same size: pl's grants are updated).
func bookBack(s *topo.Snapshot, pl *placement, gpus []uint32) error {
	if err := s.Allocate(gpus); err != nil {
		return err
	}
	if pl.shared {
		if err := pl.bookShared(s, true); err != nil {
			_ = s.Release(gpus) // booked above
			return err
		}
	}
	for i, m := range pl.members {
		if m.cpu != 0 || m.mem != 0 {
			if err := s.AllocateHost(m.node, m.cpu, m.mem); err != nil {
				for _, b := range pl.members[:i] {
					_ = s.ReleaseHost(b.node, b.cpu, b.mem) // booked above
				}
				if pl.shared {
					pl.unbookShared(s)
				}
				_ = s.Release(gpus) // booked above
				return err
			}
		}
	}
	return nil
}

// bestEffort reports whether js is a best-effort replica.
func bestEffort(js *job) bool { return js.svc != nil && js.svc.spec.QoS == QoSBestEffort }

// qosRank orders victims: best-effort replicas (0), then burstable ones
// (1, candidates only while their queue borrows), then all other jobs (2).
func qosRank(js *job) int {
	if js.svc == nil {
		return 2
	}
	switch js.svc.spec.QoS {
	case QoSBestEffort:
		return 0
	case QoSBurstable:
		return 1
	}
	return 2
}
