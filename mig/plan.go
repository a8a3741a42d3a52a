package mig

import (
	"container/heap"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

// Demand is pending work of one kind: Count requests like Request.
type Demand struct {
	Request Request
	Count   int
}

// CostModel prices the actions of a plan. The defaults are rough
// assumptions (not measurements), there so that a plan's cost is comparable
// with waiting; set them from the site's own observations.
type CostModel struct {
	Create  time.Duration // create one GPU instance (and its compute instance)
	Destroy time.Duration // destroy one idle GPU instance
	Reset   time.Duration // GPU reset to switch MIG mode (A100, A30)
}

// DefaultCosts returns the costs used for the zero CostModel fields.
func DefaultCosts() CostModel {
	return CostModel{Create: 2 * time.Second, Destroy: time.Second, Reset: 60 * time.Second}
}

// PlanOptions bound a planning pass.
type PlanOptions struct {
	// GPUs are the candidates (nil: the whole pool). Only read.
	GPUs *roaring.Bitmap
	// EnableMIG lets the plan switch idle, MIG-capable GPUs that are not in
	// MIG mode into MIG mode (a reset on A100 / A30).
	EnableMIG bool
	// MaxGPUs caps the GPUs a plan touches; 0: no cap.
	MaxGPUs int
	// Costs prices the actions; zero fields take DefaultCosts.
	Costs CostModel
}

// Change is what a plan does to one GPU. Instances in use on From are in To
// too; Destroy lists idle instances only.
type Change struct {
	GPU uint32
	// EnableMIG: switch the GPU into MIG mode first.
	EnableMIG bool
	// NeedsReset: switching MIG mode needs a GPU reset on this model; the
	// GPU must be idle meanwhile.
	NeedsReset bool
	From, To   Layout
	Destroy    []Instance // From minus To, by start
	Create     []Instance // To minus From, by start
}

// Cost sums a plan's actions.
type Cost struct {
	GPUs, Resets, Creates, Destroys int
	// Time is the actuation time of all actions done one after another,
	// priced by the CostModel: what the engine weighs against waiting.
	Time time.Duration
}

// Plan is a reconfiguration of idle MIG capacity for pending demand.
type Plan struct {
	Changes []Change // ascending GPU index
	// Served[i] is how many requests of demand i idle instances serve
	// after the plan: instances that existed and instances it creates.
	Served []int
	// Created[i] is the part of Served[i] that needs the plan's new instances.
	Created []int
	Cost    Cost
}

// Empty reports a plan that changes nothing.
func (pl *Plan) Empty() bool { return len(pl.Changes) == 0 }

// planGPU is one candidate GPU during planning.
type planGPU struct {
	g         uint32
	model     Model
	fixedPl   uint32 // in-use and claimed instances: never move
	fixedUsed uint8
	idlePl    uint32 // idle instances not claimed: may be destroyed
	enable    bool
	reset     bool
	done      bool
}

type evalResult struct {
	layout             int32 // index into tables.layouts, -1 when nothing is served
	served, servedCnt  int
	destroyed, created int
}

type memoKey struct {
	model          Model
	fixedPl, idle  uint32
	fixedUsedBytes uint8
}

// Plan chooses new layouts for idle MIG capacity so that idle instances
// serve as much of the demand as possible. In order of importance it
//
//  1. serves the most demand, counted in compute slices (a 3g request
//     weighs three 1g requests, so neither small nor large work starves);
//  2. touches the fewest GPUs, preferring GPUs that need no reset;
//  3. destroys the fewest idle instances, then creates the fewest.
//
// Instances in use never move. Idle instances that already match demand
// are kept and counted first (tightest GPUs first). The rest is a greedy
// pass: each step takes the GPU whose best new layout serves the most of
// what is still unserved; a GPU's best layout is exact (every valid layout
// around its fixed instances is scored from precomputed tables), and GPUs
// in the same state share one evaluation. The result is deterministic: ties
// break on GPU index and on the fixed layout order.
//
// A demand whose request no model resolves to is left unserved. Plan does
// not change the pool; Apply does.
func (p *Pool) Plan(demand []Demand, o PlanOptions) (Plan, error) {
	K := len(demand)
	for i, d := range demand {
		if d.Count < 0 {
			return Plan{}, fmt.Errorf("%w: demand %d: count %d", ErrBadRequest, i, d.Count)
		}
		if err := d.Request.Validate(); err != nil {
			return Plan{}, fmt.Errorf("demand %d: %w", i, err)
		}
	}
	costs := o.Costs
	if costs.Create == 0 {
		costs.Create = DefaultCosts().Create
	}
	if costs.Destroy == 0 {
		costs.Destroy = DefaultCosts().Destroy
	}
	if costs.Reset == 0 {
		costs.Reset = DefaultCosts().Reset
	}
	rem := make([]int, K)
	total := 0
	for i, d := range demand {
		rem[i] = d.Count
		total += d.Count
	}
	// res[m][k]: the profile index demand k resolves to on model m, or -1.
	var res [len(modelTable)][]int8
	for m := Model(1); int(m) < len(modelTable); m++ {
		res[m] = make([]int8, K)
		for k, d := range demand {
			res[m][k] = -1
			if pr, err := m.Resolve(d.Request); err == nil {
				res[m][k] = int8(pr.idx)
			}
		}
	}
	plan := Plan{Served: make([]int, K), Created: make([]int, K)}

	// Candidates, ascending GPU index.
	var cands []planGPU
	visit := func(g uint32) {
		if int64(g) >= int64(p.gpus.len()) {
			return
		}
		st := p.gpus.at(int(g))
		m := st.layout.model
		switch {
		case st.mig():
			in := st.inUseLayout()
			cands = append(cands, planGPU{g: g, model: m, fixedPl: in.pl, fixedUsed: in.used, idlePl: st.layout.pl &^ in.pl})
		case o.EnableMIG && m.Valid() && !st.busy():
			cands = append(cands, planGPU{g: g, model: m, enable: true, reset: m.ResetToToggle()})
		}
	}
	if o.GPUs != nil {
		it := o.GPUs.Iterator()
		for it.HasNext() {
			visit(it.Next())
		}
	} else {
		for g := range p.gpus.len() {
			visit(uint32(g))
		}
	}

	// Step 1: claim idle instances that match demand, tightest GPUs first.
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return bits.OnesCount8(cands[b].fixedUsed) - bits.OnesCount8(cands[a].fixedUsed)
	})
	for _, ci := range order {
		c := &cands[ci]
		if c.idlePl == 0 || total == 0 {
			continue
		}
		t := c.model.tables()
		for _, k := range (Layout{pl: c.idlePl, model: c.model}).byStart(t) {
			pl := t.placements[k]
			for d := range K {
				if rem[d] > 0 && res[c.model][d] == int8(pl.prof) {
					rem[d]--
					total--
					plan.Served[d]++
					c.fixedPl |= 1 << k
					c.fixedUsed |= pl.mask
					c.idlePl &^= 1 << k
					break
				}
			}
		}
	}

	// Step 2: lazy greedy over GPUs. A GPU's best value only falls as
	// demand is served, so a stale heap entry is an upper bound: re-score
	// it, and commit an entry only when it is fresh.
	version := 0
	memo := map[memoKey]evalResult{}
	eval := func(c *planGPU) evalResult {
		key := memoKey{model: c.model, fixedPl: c.fixedPl, idle: c.idlePl, fixedUsedBytes: c.fixedUsed}
		if r, ok := memo[key]; ok {
			return r
		}
		r := evaluate(c, rem, res[c.model])
		memo[key] = r
		return r
	}
	h := &planHeap{}
	if total > 0 {
		for i := range cands {
			r := eval(&cands[i])
			if r.served > 0 {
				h.items = append(h.items, planItem{r: r, ci: i, g: cands[i].g, reset: cands[i].reset, ver: version})
			}
		}
		heap.Init(h)
	}
	for h.Len() > 0 && total > 0 && (o.MaxGPUs == 0 || len(plan.Changes) < o.MaxGPUs) {
		it := heap.Pop(h).(planItem)
		c := &cands[it.ci]
		if it.ver != version {
			it.r, it.ver = eval(c), version
			if it.r.served > 0 {
				heap.Push(h, it)
			}
			continue
		}
		t := c.model.tables()
		L := t.layouts[it.r.layout]
		cnt := t.counts[it.r.layout]
		for pi := range c.model.NumProfiles() {
			n := int(cnt[pi])
			for d := 0; d < K && n > 0; d++ {
				if res[c.model][d] == int8(pi) && rem[d] > 0 {
					s := min(n, rem[d])
					rem[d] -= s
					total -= s
					n -= s
					plan.Served[d] += s
					plan.Created[d] += s
				}
			}
		}
		st := p.gpus.at(int(c.g))
		to := Layout{pl: c.fixedPl | L.pl, used: c.fixedUsed | L.used, model: c.model}
		from := st.layout
		if c.enable {
			from = EmptyLayout(c.model)
		}
		ch := Change{GPU: c.g, EnableMIG: c.enable, NeedsReset: c.reset, From: from, To: to}
		ch.Destroy = fromPl(c.model, from.pl&^to.pl).Instances()
		ch.Create = fromPl(c.model, to.pl&^from.pl).Instances()
		plan.Changes = append(plan.Changes, ch)
		c.done = true
		version++
		clear(memo)
	}
	slices.SortFunc(plan.Changes, func(a, b Change) int { return int(int64(a.GPU) - int64(b.GPU)) })
	for _, ch := range plan.Changes {
		plan.Cost.GPUs++
		plan.Cost.Creates += len(ch.Create)
		plan.Cost.Destroys += len(ch.Destroy)
		plan.Cost.Time += time.Duration(len(ch.Create))*costs.Create + time.Duration(len(ch.Destroy))*costs.Destroy
		if ch.NeedsReset {
			plan.Cost.Resets++
			plan.Cost.Time += costs.Reset
		}
	}
	return plan, nil
}

// evaluate scores every valid layout of c's free memory slices against the
// unserved demand and returns the best (see Plan for the order).
func evaluate(c *planGPU, rem []int, res []int8) evalResult {
	best := evalResult{layout: -1}
	var R [maxProfiles]int
	any := false
	for d, pi := range res {
		if pi >= 0 && rem[d] > 0 {
			R[pi] += rem[d]
			any = true
		}
	}
	if !any {
		return best
	}
	t := c.model.tables()
	prof := c.model.data().profiles
	np := len(prof)
	var w, room [maxProfiles]int
	fixedCnt := t.countsOf(c.fixedPl)
	for pi := range np {
		w[pi] = int(prof[pi].computeSlices)
		room[pi] = int(prof[pi].maxCount) - int(fixedCnt[pi])
	}
	for _, li := range t.within[t.fullMask&^c.fixedUsed] {
		cnt := &t.counts[li]
		served, sc := 0, 0
		ok := true
		for pi := range np {
			n := int(cnt[pi])
			if n == 0 {
				continue
			}
			if n > room[pi] {
				ok = false
				break
			}
			s := min(n, R[pi])
			served += s * w[pi]
			sc += s
		}
		if !ok || served == 0 || served < best.served {
			continue
		}
		lp := t.layouts[li].pl
		r := evalResult{layout: int32(li), served: served, servedCnt: sc,
			destroyed: bits.OnesCount32(c.idlePl &^ lp), created: bits.OnesCount32(lp &^ c.idlePl)}
		if best.layout < 0 || r.better(best) {
			best = r
		}
	}
	if best.served == 0 {
		best.layout = -1
	}
	return best
}

func (r evalResult) better(s evalResult) bool {
	if r.served != s.served {
		return r.served > s.served
	}
	if r.servedCnt != s.servedCnt {
		return r.servedCnt > s.servedCnt
	}
	if r.destroyed != s.destroyed {
		return r.destroyed < s.destroyed
	}
	return r.created < s.created
}

type planItem struct {
	r     evalResult
	ci    int
	g     uint32
	reset bool
	ver   int
}

type planHeap struct{ items []planItem }

func (h *planHeap) Len() int { return len(h.items) }
func (h *planHeap) Less(i, j int) bool {
	a, b := &h.items[i], &h.items[j]
	if a.r.served != b.r.served || a.r.servedCnt != b.r.servedCnt {
		return a.r.better(b.r)
	}
	if a.reset != b.reset {
		return !a.reset
	}
	if a.r.destroyed != b.r.destroyed || a.r.created != b.r.created {
		return a.r.better(b.r)
	}
	return a.g < b.g
}
func (h *planHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *planHeap) Push(x any)    { h.items = append(h.items, x.(planItem)) }
func (h *planHeap) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	h.items = h.items[:n]
	return x
}

// Apply carries out a plan made by Plan on this pool (after the backend
// has done it, or to simulate it). Every change is checked first against
// the pool as it is now: the GPU's layout must still be the change's From,
// its MIG mode as the change expects, its in-use instances inside To, and
// Destroy / Create must be exactly From minus To and To minus From. If any
// check fails nothing is applied and the error wraps ErrStalePlan (or
// ErrBadGPU / ErrModelMismatch / a validity error for a malformed plan).
func (p *Pool) Apply(pl Plan) error {
	seen := map[uint32]bool{}
	for _, ch := range pl.Changes {
		st, err := p.gpu(ch.GPU)
		if err != nil {
			return err
		}
		if seen[ch.GPU] {
			return fmt.Errorf("%w: GPU %d changed twice", ErrStalePlan, ch.GPU)
		}
		seen[ch.GPU] = true
		if ch.To.model != st.layout.model || ch.From.model != st.layout.model || !ch.To.model.Valid() {
			return fmt.Errorf("%w: GPU %d is a %v, change is for %v", ErrModelMismatch, ch.GPU, st.layout.model, ch.To.model)
		}
		if err := ch.To.Validate(); err != nil {
			return fmt.Errorf("GPU %d: %w", ch.GPU, err)
		}
		if ch.EnableMIG {
			if st.mig() || st.busy() || !ch.From.IsEmpty() {
				return fmt.Errorf("%w: GPU %d: enabling MIG needs an idle GPU out of MIG mode", ErrStalePlan, ch.GPU)
			}
		} else if !st.mig() || st.layout != ch.From {
			return fmt.Errorf("%w: GPU %d: layout is %v, plan expects %v", ErrStalePlan, ch.GPU, st.layout, ch.From)
		}
		if in := st.inUseLayout(); in.pl&^ch.To.pl != 0 {
			return fmt.Errorf("%w: GPU %d: plan drops in-use instances of %v", ErrStalePlan, ch.GPU, in)
		}
		if !sameInstances(ch.Destroy, fromPl(ch.To.model, ch.From.pl&^ch.To.pl)) ||
			!sameInstances(ch.Create, fromPl(ch.To.model, ch.To.pl&^ch.From.pl)) {
			return fmt.Errorf("%w: GPU %d: Destroy/Create do not match From -> To", ErrStalePlan, ch.GPU)
		}
	}
	for _, ch := range pl.Changes {
		ns := *p.gpus.at(int(ch.GPU))
		ns.layout = ch.To
		if ch.EnableMIG {
			ns = gpuState{layout: ch.To, flags: flagMIG, head: -1}
		}
		p.set(ch.GPU, ns)
	}
	return nil
}

func sameInstances(list []Instance, l Layout) bool {
	var pl uint32
	for _, in := range list {
		k := l.plIndex(in)
		if k < 0 || pl&(1<<k) != 0 {
			return false
		}
		pl |= 1 << k
	}
	return pl == l.pl
}
