package engine

import (
	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// MIG reconfiguration (cycle step 8). Placement already creates instances
// in free memory slices (mig.MayCreate); what it cannot do is destroy idle
// instances of the wrong size. When fractional / MIG jobs are blocked by
// capacity, the planner (mig.Pool.Plan) chooses new layouts for the idle
// capacity of ready MIG GPUs; the plan is emitted in Ready.MIG when the
// blocked jobs it serves have waited more GPU-seconds than it costs (see
// MIGConfig), and applied to the engine's snapshot when Advance confirms
// it (or booked assumed until its outcome event, Outcome.AssumeMIG:
// migflight.go). The next cycle places the jobs on the new instances.

// reconfigure is step 8.
func (e *Engine) reconfigure(rd *Ready) {
	cs := &e.cyc
	pool := cs.plan.Pool()
	if e.cfg.MIG.Disabled || len(cs.fracBlocked) == 0 || pool == nil || cs.now.Before(e.migNotBefore) {
		return
	}
	c := e.cluster
	gpus := roaring.New()
	for n := range c.NumNodes() {
		id := topo.NodeID(n)
		if cfg, ok := c.NodeGPUConfig(id); ok && cfg.MIG && cs.plan.NodeState(id) == topo.Ready {
			first, k := c.NodeGPUs(id)
			gpus.AddRange(uint64(first), uint64(first)+uint64(k))
		}
	}
	// A GPU whose change is in flight (Outcome.AssumeMIG) gets no other.
	for g := range e.migReconfiguring {
		gpus.Remove(g)
	}
	if gpus.IsEmpty() {
		return
	}
	// Demand, one entry per distinct request, in the order of the first
	// blocked job asking it.
	var demand []mig.Demand
	var jobsOf [][]fracRec
	for _, fr := range cs.fracBlocked {
		js := fr.js
		if js.st != statePending || e.claims[js.j.ID] != nil {
			continue // bound late, or waiting for its victims
		}
		r, _ := sharedRequest(&js.req.Groups[0])
		k := -1
		for i := range demand {
			if demand[i].Request == r {
				k = i
				break
			}
		}
		if k < 0 {
			k = len(demand)
			demand = append(demand, mig.Demand{Request: r})
			jobsOf = append(jobsOf, nil)
		}
		demand[k].Count += js.req.Groups[0].Members
		jobsOf[k] = append(jobsOf[k], fr)
	}
	if len(demand) == 0 {
		return
	}
	// Plan does not change the pool.
	plan, err := pool.Plan(demand, mig.PlanOptions{GPUs: gpus, MaxGPUs: e.cfg.MIG.MaxGPUs, Costs: e.cfg.MIG.Costs})
	if err != nil || plan.Empty() {
		return
	}
	// Weigh: GPU-seconds the served jobs have waited against the plan's
	// cost time x GPUs touched.
	blocked := 0.0
	var served []int // status indices of the jobs served
	for k, jobs := range jobsOf {
		left := plan.Served[k]
		for _, fr := range jobs {
			m := fr.js.req.Groups[0].Members
			if m > left {
				break
			}
			left -= m
			served = append(served, fr.at)
			if w := cs.now.Sub(fr.js.j.Submit); w > 0 {
				blocked += fr.js.j.GPUMilliTotal() / 1000 * w.Seconds()
			}
		}
	}
	if blocked < e.cfg.MIG.WaitFactor*plan.Cost.Time.Seconds()*float64(max(1, plan.Cost.GPUs)) {
		return
	}
	for _, i := range served {
		if i < len(cs.pend) {
			cs.pend[i].Reason = ReasonReconfiguring
		}
	}
	for _, ch := range plan.Changes {
		id, err := c.NodeOfGPU(ch.GPU)
		if err != nil {
			continue // planned on the pool of this cluster: cannot happen
		}
		first, _ := c.NodeGPUs(id)
		r := MIGReconfiguration{Node: c.NodeName(id), GPU: int(ch.GPU - first), Seq: rd.Seq, From: ch.From, To: ch.To,
			Destroy: ch.Destroy, Create: ch.Create, NeedsReset: ch.NeedsReset}
		for _, in := range ch.To.Instances() {
			r.Profiles = append(r.Profiles, in.Profile.Name())
		}
		rd.MIG = append(rd.MIG, r)
	}
	e.out.mig = append(e.out.mig[:0], rd.MIG...)
}

// applyMIG applies the reconfigurations of the latest Ready that the
// backend did not refuse to the engine's snapshot, each GPU on its own;
// GPUs are found by node name, so nodes added in between do not matter. A
// refused change, or one that no longer applies, starts the backoff.
// assume: the changes applied are booked in flight until their outcome
// events (Outcome.AssumeMIG, migflight.go). It reports whether any change
// was applied.
func (e *Engine) applyMIG(changes, refused []MIGReconfiguration, assume bool) bool {
	applied := false
	for _, r := range changes {
		isRefused := false
		for _, x := range refused {
			if x.Node == r.Node && x.GPU == r.GPU {
				isRefused = true
				break
			}
		}
		if isRefused || e.applyOne(r) != nil {
			e.migNotBefore = e.now.Add(e.cfg.MIG.RetryBackoff)
			continue
		}
		if assume {
			e.assumeMIG(r)
		}
		applied = true
	}
	return applied
}

func (e *Engine) applyOne(r MIGReconfiguration) error {
	id, ok := e.cluster.NodeByName(r.Node)
	if !ok {
		return ErrUnknownNode
	}
	first, _ := e.cluster.NodeGPUs(id)
	ch := mig.Change{GPU: first + uint32(r.GPU), NeedsReset: r.NeedsReset, From: r.From, To: r.To, Destroy: r.Destroy, Create: r.Create}
	return e.snap.ApplyMIGPlan(mig.Plan{Changes: []mig.Change{ch}})
}

// destroyCreated takes out of the books the instances created for a bind
// the backend refused (they are idle now): the backend never made them.
func (e *Engine) destroyCreated(grants []mig.Grant) {
	pool := e.snap.Pool()
	for _, gr := range grants {
		from := pool.Layout(gr.GPU)
		to, err := from.Remove(gr.Instance)
		if err != nil {
			continue
		}
		ch := mig.Change{GPU: gr.GPU, From: from, To: to, Destroy: []mig.Instance{gr.Instance}}
		// The instance is idle: the change cannot be stale.
		_ = e.snap.ApplyMIGPlan(mig.Plan{Changes: []mig.Change{ch}})
		pool = e.snap.Pool()
	}
}
