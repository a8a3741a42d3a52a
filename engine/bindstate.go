package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// bindState is where an unconfirmed bind stands for a caller that binds
// asynchronously (Outcome.AssumeBinds).
type bindState uint8

const (
	bindNone    bindState = iota
	bindAssumed           // booked, the backend has not answered
	bindUnknown           // the call timed out: the backend may run it
)

// assume books js's bind as assumed: it holds its GPUs, and waits for an
// outcome event.
func (e *Engine) assume(js *job) {
	js.bindSt = bindAssumed
	e.binding[js.j.ID] = js
	e.runUpsert(js)
}

// confirm records js's bind as applied.
func (e *Engine) confirm(js *job) {
	js.confirmed, js.refusals, js.lastErr = true, 0, ""
	if js.bindSt != bindNone {
		js.bindSt = bindNone
		delete(e.binding, js.j.ID)
		e.runUpsert(js)
	}
}

// failBind frees the GPUs of js, whose bind failed (refused by Advance, or
// EventBindFailed), and puts it back to pending: it waits for the bind
// backoff, or, after Config.MaxBindTries failures in a row, is held.
func (e *Engine) failBind(js *job, reason string) {
	created := js.place.created()
	e.stopRunning(js, e.now)
	e.destroyCreated(created)
	js.refusals++
	if reason != "" {
		js.lastErr = reason
	}
	if n := e.cfg.MaxBindTries; n > 0 && int(js.refusals) >= n {
		js.held = true
		e.held++
	} else {
		js.notBefore = e.now.Add(e.bindBackoff(int(js.refusals))).UnixNano()
		e.maxNotBefore = max(e.maxNotBefore, js.notBefore)
		e.noteRetry(js.notBefore)
	}
	e.toPending(js)
	e.putBack = append(e.putBack, js.j.ID)
}

// bindOutcome applies EventBindApplied, EventBindFailed or
// EventBindUnknown. An outcome about a run the job is no longer in (it
// ended, was requeued or bound again since), about a job the engine no
// longer knows, or about a bind already confirmed is a late answer and
// changes nothing: the Runner reconciles such jobs with the backend.
func (e *Engine) bindOutcome(ev Event) error {
	if ev.JobID == "" {
		return fmt.Errorf("%w: %v without a job", ErrInvalidEvent, ev.Kind)
	}
	js := e.jobs[ev.JobID]
	if js == nil || js.run != ev.Run || js.st != stateRunning || js.confirmed {
		return nil
	}
	switch ev.Kind {
	case EventBindApplied:
		e.confirm(js)
	case EventBindUnknown:
		js.bindSt = bindUnknown
		e.binding[js.j.ID] = js
	case EventBindFailed:
		e.freezeTail()
		if ev.Reason == "" { // withdrawn: no try counted
			e.withdrawBind(js)
			break
		}
		e.failBind(js, ev.Reason)
	case EventBindDeferred:
		e.freezeTail()
		created := js.place.created()
		e.stopRunning(js, e.now)
		e.destroyCreated(created)
		js.lastErr = orUnknown(ev.Reason)
		js.notBefore = e.now.Add(e.bindBackoff(1)).UnixNano()
		e.maxNotBefore = max(e.maxNotBefore, js.notBefore)
		e.noteRetry(js.notBefore)
		e.toPending(js)
		e.putBack = append(e.putBack, js.j.ID)
	}
	return nil
}

// release applies EventReleased.
func (e *Engine) release(id string) error {
	js, err := e.lookup(id)
	if err != nil {
		return err
	}
	if !js.held {
		return nil
	}
	js.held = false
	e.held--
	js.refusals, js.notBefore, js.lastErr = 0, 0, ""
	return nil
}

// waitsForBind gives the status of a pending job held, or waiting for its
// bind backoff (ok false: neither), and notes what it waits on in
// Ready.Holds when an event said why its binds failed.
func (e *Engine) waitsForBind(js *job, st *PendingStatus) (ok bool) {
	cs := &e.cyc
	switch {
	case js.held:
		st.Reason = ReasonHeld
		e.noteBindHold(js, heldText(js))
	case js.notBefore > cs.nowNs:
		e.noteRetry(js.notBefore)
		st.Reason = ReasonBindRefused
		at := time.Unix(0, js.notBefore).In(cs.now.Location())
		switch {
		case js.lastErr != "" && js.refusals == 0: // deferred (EventBindDeferred)
			e.noteBindHold(js, fmt.Sprintf("retrying at %s: %s", at.Format(time.RFC3339), js.lastErr))
		case js.lastErr != "":
			e.noteBindHold(js, fmt.Sprintf("retrying at %s after %d failed binds, the last: %s", at.Format(time.RFC3339), js.refusals, js.lastErr))
		}
	default:
		return false
	}
	cs.backoff = true
	return true
}

// heldText is what Ready.Holds says of a held job.
func heldText(js *job) string {
	return fmt.Sprintf("held: %d binds failed in a row, the last: %s", js.refusals, orUnknown(js.lastErr))
}

func orUnknown(s string) string {
	if s == "" {
		return "refused"
	}
	return s
}

func (e *Engine) noteBindHold(js *job, why string) {
	cs := &e.cyc
	if cs.holdsBy == nil {
		cs.holdsBy = map[string]string{}
	}
	cs.holdsBy[js.j.ID] = why
}

// bindingStatuses lists the jobs whose binds are assumed or unknown, by ID,
// as pending statuses (ReasonBinding, ReasonBindingUnknown).
func (e *Engine) bindingStatuses() []PendingStatus {
	if len(e.binding) == 0 {
		return nil
	}
	out := make([]PendingStatus, 0, len(e.binding))
	for _, js := range e.binding {
		st := PendingStatus{Job: js.j.ID, Queue: js.j.Queue, Reason: ReasonBinding, Start: js.start, js: js}
		if js.bindSt == bindUnknown {
			st.Reason = ReasonBindingUnknown
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b PendingStatus) int { return strings.Compare(a.Job, b.Job) })
	return out
}

// Binding reports whether the bind of job id is assumed or unknown, not
// yet confirmed by the backend (see Outcome.AssumeBinds), and the run it
// is about.
func (e *Engine) Binding(id string) (run uint64, unknown, ok bool) {
	js := e.binding[id]
	if js == nil {
		return 0, false, false
	}
	return js.run, js.bindSt == bindUnknown, true
}

// Known reports whether the engine has job id (pending, running or
// stopping).
func (e *Engine) Known(id string) bool { return e.jobs[id] != nil }

// BindingJobs lists, by ID, the jobs whose binds are assumed or unknown.
func (e *Engine) BindingJobs() []string { return sortedKeys(e.binding) }

// Held reports whether job id is held after failed binds, and the last
// error.
func (e *Engine) Held(id string) (reason string, ok bool) {
	js := e.jobs[id]
	if js == nil || !js.held {
		return "", false
	}
	return orUnknown(js.lastErr), true
}

// unpreempt puts the stopping victim js back to running: its preemption
// was refused or failed. It is protected for its minimum runtime, and the
// claims counting on it are given up.
func (e *Engine) unpreempt(js *job) {
	id := js.j.ID
	js.st = stateRunning
	js.deadline, js.victimFor, js.preemptSt = time.Time{}, "", bindNone
	js.lastPreempted = e.now
	e.stopping--
	e.tlRekey(js)
	e.runUpsert(js)
	for _, cid := range sortedKeys(e.claims) {
		if slices.Contains(e.claims[cid].victims, id) {
			delete(e.claims, cid)
		}
	}
}

// preemptOutcome applies EventPreemptApplied, EventPreemptFailed or
// EventPreemptUnknown. quiet: nothing a cycle decides on changed (the
// victim keeps its GPUs until its deadline, which has not passed).
func (e *Engine) preemptOutcome(ev Event) (quiet bool, err error) {
	if ev.JobID == "" {
		return false, fmt.Errorf("%w: %v without a job", ErrInvalidEvent, ev.Kind)
	}
	js := e.jobs[ev.JobID]
	if js == nil || js.run != ev.Run || js.st != stateStopping || js.preemptSt == bindNone {
		return true, nil // a late answer
	}
	switch ev.Kind {
	case EventPreemptApplied:
		js.preemptSt = bindNone
		// Requeued at its deadline (endGracePeriods); one that has passed
		// needs a cycle now.
		return js.deadline.After(ev.Time), nil
	case EventPreemptUnknown:
		js.preemptSt = bindUnknown
		return true, nil
	}
	if p := e.jobs[js.victimFor]; p != nil && p.st == statePending {
		p.preemptErr = fmt.Sprintf("preemption of %s failed: %s", ev.JobID, orUnknown(ev.Reason))
	}
	e.unpreempt(js)
	// Like a refusal in Advance, it runs no cycle by itself: the caller
	// places the preemptor again after a backoff (a Tick; the Runner
	// does), not at once, when the same victim could be chosen again.
	return true, nil
}

// PreemptState reports whether the victim id is being preempted (in its
// grace period) with its preemption assumed or unknown, not yet taken by
// the backend (see Outcome.AssumePreemptions), and the run it is about.
func (e *Engine) PreemptState(id string) (run uint64, unknown, ok bool) {
	js := e.jobs[id]
	if js == nil || js.st != stateStopping || js.preemptSt == bindNone {
		return 0, false, false
	}
	return js.run, js.preemptSt == bindUnknown, true
}

// resizeFailed applies EventResizeFailed: the added members of a grow the
// backend did not apply are taken out of the job's booking.
func (e *Engine) resizeFailed(ev Event) error {
	if ev.JobID == "" {
		return fmt.Errorf("%w: %v without a job", ErrInvalidEvent, ev.Kind)
	}
	js := e.jobs[ev.JobID]
	if js == nil || js.run != ev.Run || js.st != stateRunning {
		return nil
	}
	var undo []pmember
	for _, m := range ev.Members {
		id, ok := e.cluster.NodeByName(m.Node)
		if !ok || len(m.GPUs) == 0 {
			continue
		}
		first, _ := e.cluster.NodeGPUs(id)
		g := first + uint32(m.GPUs[0])
		for _, pm := range js.place.members {
			if pm.node == id && pm.group == 0 && len(pm.gpus) > 0 && pm.gpus[0] == g {
				undo = append(undo, pm)
				break
			}
		}
	}
	if len(undo) == 0 {
		return nil
	}
	e.undoGrow(js, undo)
	return nil
}

// bindStateText is st as saved ("assumed", "unknown"; empty: none).
func bindStateText(st bindState) string {
	switch st {
	case bindAssumed:
		return "assumed"
	case bindUnknown:
		return "unknown"
	}
	return ""
}
