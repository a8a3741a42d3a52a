package engine

import (
	"time"
)

// NextWake returns the earliest time after Now at which the engine needs a
// Tick to act though no other event comes, and false when there is none
// (it then waits for events). The times it considers:
//
//   - a grace period ends: a preemptor's claim starts, a stopping job's
//     deadline passes;
//   - a refused bind's backoff (Config.BindRetryBackoff) ends;
//   - a running job overruns its estimate or limit (the timeline's earliest
//     expected end after now): reservations and estimates move then;
//   - a reservation of the last cycle is due to start;
//   - the MIG planning backoff after a refused reconfiguration ends.
//
// A driver waits until the earliest of NextWake and the next event, then
// steps a Tick (or the event) and runs Ready; backends.Runner does so.
// Ticking earlier is harmless, only wasted work. Cost: O(log running) for
// the timeline, plus the claims and the last cycle's reservations; the
// scans for stopping jobs (O(running)) and bind backoffs (O(jobs)) run
// only when a counter shows there is one.
func (e *Engine) NextWake() (time.Time, bool) {
	now := e.now
	var w time.Time
	take := func(t time.Time) {
		if t.After(now) && (w.IsZero() || t.Before(w)) {
			w = t
		}
	}
	for _, c := range e.claims {
		take(c.start)
	}
	// e.stopping counts the stopping jobs: with none, the O(running) scan
	// would find nothing.
	for _, js := range scanIf(e, e.stopping != 0, e.active) {
		if js.st == stateStopping && js.preemptSt == bindNone {
			take(js.deadline)
		}
	}
	// retryAt zero: no pending job's backoff ends after now (the last
	// walk noted every one that did, Advance every new one), so the
	// O(jobs) scan below would find nothing.
	for _, js := range scanIf(e, e.retryAt != 0, e.jobs) {
		if js.st == statePending && js.notBefore != 0 {
			take(time.Unix(0, js.notBefore).In(now.Location()))
		}
	}
	n := now.UnixNano()
	if at, ok := e.tlFirstAfter(n); ok {
		take(time.Unix(0, at).In(now.Location()))
	}
	for _, r := range e.lastRes {
		take(r.start)
	}
	take(e.migNotBefore)
	return w, !w.IsZero()
}
