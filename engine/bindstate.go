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
	if n := e.cfg.MaxBindTries; n > 0 && js.refusals >= n {
		js.held = true
		e.held++
	} else {
		js.notBefore = e.now.Add(e.bindBackoff(js.refusals)).UnixNano()
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
			created := js.place.created()
			e.stopRunning(js, e.now)
			e.destroyCreated(created)
			e.toPending(js)
			e.putBack = append(e.putBack, js.j.ID)
			break
		}
		e.failBind(js, ev.Reason)
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
		if js.lastErr != "" {
			at := time.Unix(0, js.notBefore).In(cs.now.Location())
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
