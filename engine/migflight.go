package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/mig"
)

// MIG changes applied asynchronously (Outcome.AssumeMIG). A change the
// backend did not refuse in Advance is booked at once (its new layout is
// the engine's, so the next cycle places the jobs it serves on the new
// instances) and its GPU is "reconfiguring" until an outcome event:
//
//   - EventMIGApplied: the backend made it; nothing changes in the books.
//   - EventMIGUnknown: its call timed out; the GPU stays reconfiguring
//     until EventMIGApplied or EventMIGFailed.
//   - EventMIGFailed: the backend did not make it. The binds not yet
//     confirmed that hold an instance of that GPU which the change's From
//     layout does not have (they depended on the change: a caller issues
//     them only after it succeeded) are withdrawn (pending again, no try
//     counted), the old layout is booked again, and no MIG change is
//     planned for Config.MIG.RetryBackoff, as for a refusal in Advance.
//
// No other change is planned on a reconfiguring GPU, and while its
// change is unknown nothing is placed on it (ReasonReconfiguring): its
// instances may not be those the books say. Outcome events are
// matched by node, GPU and the change's Seq: one about another change is
// a late answer and changes nothing.

// migKey names a GPU by node name and node-local index (as
// MIGReconfiguration does; nodes added meanwhile do not matter).
type migKey struct {
	node string
	gpu  int
}

// migFlight is a change booked but not confirmed.
type migFlight struct {
	r       MIGReconfiguration
	unknown bool
}

// assumeMIG books r, applied to the books, as in flight.
func (e *Engine) assumeMIG(r MIGReconfiguration) {
	if e.migFlight == nil {
		e.migFlight = map[migKey]*migFlight{}
	}
	e.migFlight[migKey{r.Node, r.GPU}] = &migFlight{r: r}
}

// gpuOf is the cluster index of the GPU k names; ok false: no such GPU.
func (e *Engine) gpuOf(k migKey) (g uint32, ok bool) {
	id, ok := e.cluster.NodeByName(k.node)
	if !ok {
		return 0, false
	}
	first, n := e.cluster.NodeGPUs(id)
	if k.gpu < 0 || k.gpu >= n {
		return 0, false
	}
	return first + uint32(k.gpu), true
}

// migReconfiguring reports the cluster GPUs with a change in flight.
func (e *Engine) migReconfiguring(yield func(g uint32) bool) {
	for k := range e.migFlight {
		if g, ok := e.gpuOf(k); ok && !yield(g) {
			return
		}
	}
}

// onUnknownMIG reports whether one of gpus (cluster indices) has a MIG
// change whose outcome is unknown.
func (e *Engine) onUnknownMIG(gpus []uint32) bool {
	for k, f := range e.migFlight {
		if g, ok := e.gpuOf(k); ok && f.unknown && slices.Contains(gpus, g) {
			return true
		}
	}
	return false
}

// migOutcome applies EventMIGApplied, EventMIGFailed or EventMIGUnknown.
// quiet: nothing a cycle decides on changed.
func (e *Engine) migOutcome(ev Event) (quiet bool, err error) {
	if ev.NodeName == "" || ev.GPU < 0 {
		return false, fmt.Errorf("%w: %v without a node and GPU", ErrInvalidEvent, ev.Kind)
	}
	k := migKey{ev.NodeName, ev.GPU}
	f := e.migFlight[k]
	if f == nil || f.r.Seq != ev.Run {
		return true, nil // a late answer
	}
	switch ev.Kind {
	case EventMIGApplied:
		delete(e.migFlight, k)
		// Unknown until now, nothing was placed on the GPU: a cycle may.
		return !f.unknown, nil
	case EventMIGUnknown:
		f.unknown = true
		return true, nil
	}
	delete(e.migFlight, k)
	e.freezeTail()
	e.undoMIG(f.r)
	e.migNotBefore = ev.Time.Add(e.cfg.MIG.RetryBackoff)
	return false, nil
}

// undoMIG books the layout before r again, after withdrawing the binds
// that depend on r. A GPU whose books cannot go back (a confirmed job
// holds an instance of the new layout: the backend runs it there, so that
// layout is what it has) keeps its books.
func (e *Engine) undoMIG(r MIGReconfiguration) {
	g, ok := e.gpuOf(migKey{r.Node, r.GPU})
	if !ok {
		return
	}
	var dep []*job
	for _, js := range e.binding {
		if js.st != stateRunning || js.confirmed {
			continue
		}
		if slices.ContainsFunc(js.place.members, func(pm pmember) bool {
			return pm.shared && len(pm.gpus) > 0 && pm.gpus[0] == g && !pm.grant.IsShare() &&
				(pm.grant.Created || !r.From.Has(pm.grant.Instance))
		}) {
			dep = append(dep, js)
		}
	}
	slices.SortFunc(dep, func(a, b *job) int { return strings.Compare(a.j.ID, b.j.ID) })
	for _, js := range dep {
		e.withdrawBind(js)
	}
	cur := e.snap.Pool().Layout(g)
	to := cur
	var destroy, create []mig.Instance
	for _, in := range r.Create {
		if !to.Has(in) {
			continue
		}
		var err error
		if to, err = to.Remove(in); err != nil {
			return
		}
		destroy = append(destroy, in)
	}
	for _, in := range r.Destroy {
		if to.Has(in) {
			continue
		}
		var err error
		if to, err = to.Place(in); err != nil {
			return
		}
		create = append(create, in)
	}
	if to == cur {
		return
	}
	ch := mig.Change{GPU: g, From: cur, To: to, Destroy: destroy, Create: create}
	// Stale (an instance to destroy is in use): the books stay.
	_ = e.snap.ApplyMIGPlan(mig.Plan{Changes: []mig.Change{ch}})
}

// withdrawBind frees the GPUs of js, whose bind is not made, and puts it
// back to pending at once, no try counted (EventBindFailed with no
// reason).
func (e *Engine) withdrawBind(js *job) {
	created := js.place.created()
	e.stopRunning(js, e.now)
	e.destroyCreated(created)
	e.toPending(js)
	e.putBack = append(e.putBack, js.j.ID)
}

// MIGChange reports whether a change of GPU gpu (node-local) of node is
// booked but not confirmed (see Outcome.AssumeMIG): the change, and
// whether its call timed out (EventMIGUnknown).
func (e *Engine) MIGChange(node string, gpu int) (r MIGReconfiguration, unknown, ok bool) {
	f := e.migFlight[migKey{node, gpu}]
	if f == nil {
		return MIGReconfiguration{}, false, false
	}
	return f.r, f.unknown, true
}

// MIGChanges lists the changes booked but not confirmed, by node and GPU.
func (e *Engine) MIGChanges() []MIGReconfiguration {
	out := make([]MIGReconfiguration, 0, len(e.migFlight))
	for _, f := range e.migFlight {
		out = append(out, f.r)
	}
	slices.SortFunc(out, func(a, b MIGReconfiguration) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), cmp.Compare(a.GPU, b.GPU))
	})
	return out
}
