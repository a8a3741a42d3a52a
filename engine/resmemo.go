package engine

import (
	"math"
	"slices"

	"github.com/berthsched/berth/topo"
)

// Reservations re-planned from the first affected point.
//
// A reservation search (reserve) probes the timeline in order and stops
// at its first success, at the probe cap (MaxProbes) or past the window:
// every probe before that point failed. The next search for the same
// job, a cycle later, need not place at the probes before the first point
// where something could have turned a failure into a success (the first
// affected point):
//
//   - the plan it searches has nothing allocatable that the earlier one
//     did not have (topo.Snapshot.AvailableWithin: no GPU freed, no node
//     back, since; bookings only take away);
//   - every expected end before that point was already in the timeline
//     at the same time, or gives back only what the earlier search had
//     all along: a job started or re-keyed since adds a probe time at its
//     end, where its GPUs come back, so the first affected point is at
//     most that end (e.tlAdds), unless all its GPUs were free on the
//     earlier plan and it books no host resources (a job backfilled on
//     free GPUs: the common case);
//   - the reservations made before it in the cycle are the same ones (the
//     GPUs they hold back at a probe time are the same; the overlap window
//     only moves with the probe, and a reservation that stops overlapping
//     ends at a probe time of both searches): the cycle's changes to its
//     reservations so far repeat the last cycle's, change for change, up
//     to the last search's point (cs.resLog);
//   - the point where the earlier search stopped is the first affected
//     point at the latest.
//
// Then at every probe before that point the plan, the releases and the
// held-back GPUs leave no more free than at the earlier search's last
// probe at or before it, which failed; a one-group gang that finds no placement on
// some GPUs finds none on fewer (capacity only counts), so the probe
// fails again. Those probes still count towards MaxProbes (gang.Possible
// is read as before); only the held-back count and the placement are
// skipped.
//
// It is off where that argument does not cover the search: several
// groups, fractional or MIG members ever seen (shares change in ways the
// plan comparison does not see), elastic jobs, site rules (advance
// reservations, partitions), preemption claims, reservations yielded to,
// and Config.DisableCaches. FuzzEngine compares with the last.

// resMemo is what one reservation search proved.
type resMemo struct {
	js    *job
	fails int64          // Unix ns: every probe before it failed (its success, the probe cap, the window's end)
	plan  *topo.Snapshot // the plan it searched (a clone, never written)
	tlSeq uint64         // e.tlSeq at the search
	resAt int            // len(cs.resLog) at the search: the reservations made before it
	gen   uint64         // the cycle (cycleState.gen) of the search
}

// resEvent is a change to the cycle's reservations (cs.res): one added,
// or one dropped.
type resEvent struct {
	drop           bool
	job            string
	startNs, endNs int64
	gpus           []uint32
}

func (a *resEvent) equal(b *resEvent) bool {
	return a.drop == b.drop && a.job == b.job && a.startNs == b.startNs && a.endNs == b.endNs && slices.Equal(a.gpus, b.gpus)
}

// logRes records a change to cs.res, and whether the changes so far
// repeat the last cycle's: then the reservations a search of this cycle
// meets after the first n of them are those a search of the last cycle
// met after its first n.
func (cs *cycleState) logRes(drop bool, r *resv) {
	ev := resEvent{drop: drop, job: r.job, startNs: r.startNs, endNs: r.endNs, gpus: r.gpus}
	if n := len(cs.resLog); n >= len(cs.resLogPrev) || !cs.resLogPrev[n].equal(&ev) {
		cs.resDiverged = true
	}
	cs.resLog = append(cs.resLog, ev)
}

// tlAddRec is an entry added to the timeline (tlAdd): its sequence
// number and expected end.
type tlAddRec struct {
	seq uint64
	at  int64
	js  *job
}

// booksHost reports whether p books host CPU or memory.
func (p *placement) booksHost() bool {
	for _, m := range p.members {
		if m.cpu != 0 || m.mem != 0 {
			return true
		}
	}
	return false
}

// resMemoOK reports whether the argument above covers js's search now.
func (e *Engine) resMemoOK(js *job) bool {
	cs := &e.cyc
	return !e.cfg.DisableCaches && !e.fracSeen && e.site == nil && len(e.claims) == 0 && cs.claimed == nil &&
		len(cs.yield) == 0 && len(js.req.Groups) == 1 && !js.frac && js.j.Elastic.IsZero()
}

// reserve finds js's reservation (reserveFrom), skipping the probes its
// last search proved to fail, and keeps what this one proves.
func (e *Engine) reserve(js *job) (*resv, bool) {
	cs := &e.cyc
	cs.resKnown = math.MaxInt64
	r, ok := e.reserveFrom(js, e.resFirstAffected(js))
	known := cs.resKnown
	if ok {
		known = min(known, r.start.UnixNano())
	}
	e.noteResMemo(js, known)
	return r, ok
}

// resFirstAffected returns the first affected point of js's search (Unix
// ns): probes before it fail. 0: none known.
func (e *Engine) resFirstAffected(js *job) int64 {
	cs := &e.cyc
	m := e.resMemos[js.j.ID]
	// The same reservations before it: the last cycle's search met the
	// first m.resAt changes of that cycle, this one meets as many, and they
	// are the same changes.
	if m == nil || m.js != js || m.gen+1 != cs.gen || cs.resDiverged || len(cs.resLog) != m.resAt || !e.resMemoOK(js) {
		return 0
	}
	if !cs.plan.AvailableWithin(m.plan) {
		return 0
	}
	at := m.fails
	for i := len(e.tlAdds) - 1; i >= 0 && e.tlAdds[i].seq > m.tlSeq; i-- {
		a := &e.tlAdds[i]
		if a.at >= at || !a.js.inTL || a.js.tlAt != a.at {
			continue // later, or no longer in the timeline (a later addition has it)
		}
		if p := a.js.place; p != nil && !p.booksHost() && allFree(m.plan, p.gpus) {
			continue // what it gives back at its end was free all along
		}
		at = a.at
	}
	if at <= cs.nowNs {
		return 0
	}
	return at
}

// noteResMemo keeps what js's search proved: every probe before fails
// (Unix ns) failed, on the plan and timeline it was given, after the
// cycle's reservations so far.
func (e *Engine) noteResMemo(js *job, fails int64) {
	cs := &e.cyc
	if !e.resMemoOK(js) {
		return
	}
	m := e.resMemos[js.j.ID]
	if m == nil {
		m = &resMemo{}
		e.resMemos[js.j.ID] = m
	}
	// One clone serves the searches of a cycle between two writes to the
	// plan.
	if cs.memoPlan == nil || cs.memoPlanOf != cs.plan || cs.memoPlanVer != cs.plan.Version() {
		cs.memoPlan, cs.memoPlanOf, cs.memoPlanVer = cs.plan.Clone(), cs.plan, cs.plan.Version()
	}
	m.js, m.fails, m.plan, m.tlSeq = js, fails, cs.memoPlan, e.tlSeq
	m.resAt, m.gen = len(cs.resLog), cs.gen
}

// trimResMemos forgets the memos of searches before the last cycle and
// the timeline additions no memo left needs.
func (e *Engine) trimResMemos() {
	cs := &e.cyc
	cs.memoPlan, cs.memoPlanOf = nil, nil
	cs.resLogPrev, cs.resLog = cs.resLog, cs.resLogPrev[:0]
	cs.resDiverged = false
	oldest := e.tlSeq
	for id, m := range e.resMemos {
		if m.gen+1 < cs.gen {
			delete(e.resMemos, id)
			continue
		}
		oldest = min(oldest, m.tlSeq)
	}
	i := 0
	for i < len(e.tlAdds) && e.tlAdds[i].seq <= oldest {
		i++
	}
	e.tlAdds = slices.Delete(e.tlAdds, 0, i)
}

// dropResMemos forgets every memo (the cluster changed).
func (e *Engine) dropResMemos() {
	clear(e.resMemos)
	e.cyc.resDiverged = true
	e.tlAdds = e.tlAdds[:0]
	e.cyc.memoPlan, e.cyc.memoPlanOf = nil, nil
}
