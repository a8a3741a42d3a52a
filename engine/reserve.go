package engine

import (
	"slices"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// releaseOn frees a job's GPUs (and host resources) on a what-if
// snapshot, except GPUs claimed by preemptors, which go to them.
func (e *Engine) releaseOn(s *topo.Snapshot, js *job, buf []uint32) []uint32 {
	cs := &e.cyc
	buf = e.releasedGPUs(js, buf)
	if err := s.Release(buf); err != nil {
		panic("engine: broken invariant: what-if release: " + err.Error())
	}
	for _, m := range js.place.members {
		if m.cpu != 0 || m.mem != 0 {
			_ = s.ReleaseHost(m.node, m.cpu, m.mem) // booked with the job
		}
	}
	if js.place.shared {
		// A GPU shared on demand is whole again once its last share goes;
		// one a preemptor claimed stays booked (it goes to the claim, as
		// claimed whole GPUs above: FuzzEngineShared 91aa8c24844bd483, a
		// reservation on a GPU a victim held a share of).
		js.place.unbookShared(s)
		if cs.claimed != nil {
			for _, m := range js.place.members {
				if g := m.grant.GPU; m.shared && cs.claimed[g] && s.IsFree(g) {
					if err := s.Allocate([]uint32{g}); err != nil {
						panic("engine: broken invariant: keeping a claimed GPU: " + err.Error())
					}
				}
			}
		}
	}
	return buf
}

// releasedGPUs lists, into buf, the whole GPUs releaseOn frees for js:
// its own, but those claimed by preemptors.
func (e *Engine) releasedGPUs(js *job, buf []uint32) []uint32 {
	cs := &e.cyc
	if cs.claimed == nil {
		return append(buf[:0], js.place.gpus...)
	}
	buf = buf[:0]
	for _, g := range js.place.gpus {
		if !cs.claimed[g] {
			buf = append(buf, g)
		}
	}
	return buf
}

// reserve finds the earliest time at which js has a valid placement, and
// the exact GPUs, from the timeline of expected ends: at each end time the
// GPUs of the jobs ending by then are released on a copy-on-write clone of
// the plan, the reservations it would overlap are booked, and gang.Place
// answers. A reservation of the last cycle that is still valid is kept
// unless an earlier start appears (reservations are sticky, so a job's
// start does not move later because the placer would now pick other GPUs).
// Probes before from (Unix ns; 0: none) are known to fail (resmemo.go):
// they count towards MaxProbes but are not placed.
func (e *Engine) reserveFrom(js *job, from int64) (*resv, bool) {
	cs := &e.cyc
	dur, bounded := duration(js.j)
	r := &resv{job: js.j.ID, dur: dur, bounded: bounded}
	// The reservation may overlap the reservations made before it only as
	// far as the job may start then: consider admits a job at its start
	// only if it ends by its limit before every earlier reservation whose
	// GPUs it uses (prefixFor; no limit: it may end after any of them).
	// Planning it into a hole by its estimate instead would promise a
	// start that step 4 then refuses.
	r.lim, r.limited = js.j.RuntimeLimit, js.j.RuntimeLimit > 0
	var horizon time.Time
	if w := e.cfg.Backfill.Window; w > 0 {
		horizon = cs.now.Add(w)
	}
	sticky, hasSticky := e.lastRes[js.j.ID]
	if hasSticky && (sticky.start.Before(cs.now) || len(sticky.gpus) != js.req.GPUs() || sticky.pl == nil) {
		hasSticky = false
	}
	// w is the plan with the GPUs of the jobs ending by the probe time
	// released: shared snapshots of the cycle (tlsnaps.go), or one clone
	// released step by step (the first call on a plan, or no caches).
	var (
		w  *topo.Snapshot
		tc *tlSnaps
	)
	if !e.cfg.DisableCaches {
		tc = e.tlSnapsFor()
	}
	cached := tc != nil
	if cached {
		w = e.snapAt(tc, 0)
	} else {
		w = cs.plan.Clone()
		defer cs.drop(w)
	}
	buf := cs.relBuf // the cycle's, grown once
	probes := 0
	cs.inc.begin(w.Cluster(), cs)
	trySticky := func() bool {
		hasSticky = false
		if !e.freeOffOverlapping(w, sticky.start, r, sticky.gpus) {
			return false
		}
		r.start, r.gpus, r.pl, r.bm = sticky.start, sticky.gpus, sticky.pl, sticky.bm
		return true
	}
	// Probe times: the expected ends of running jobs and, in conservative
	// mode, the ends of the reservations made before this one.
	// cs.resByEnd gives the first in order (begin synced it); the few
	// others are sorted in.
	resEnds := cs.resEnds[:0]
	for _, o := range cs.resByEnd {
		if o.bounded {
			resEnds = append(resEnds, o.start.Add(o.dur))
		}
	}
	n := len(resEnds)
	for _, o := range cs.yield {
		if o.bounded {
			resEnds = append(resEnds, o.start.Add(o.dur))
		}
	}
	resEnds = e.advEnds(cs.now, resEnds)
	if len(resEnds) > n {
		slices.SortFunc(resEnds, time.Time.Compare)
	}
	cs.resEnds = resEnds
	cs.unplanned = noEstimateNoRoom
	// The timeline is copied as far as the search reads it (ntl entries
	// in all).
	ntl := e.tl.Len()
	tl := e.timeline(0)
	for i, k := 0, 0; i < ntl || k < len(resEnds); {
		if i < ntl && i >= len(tl) {
			tl = e.timeline(i + 1)
		}
		var t time.Time
		if k >= len(resEnds) || (i < ntl && tl[i].at <= resEnds[k].UnixNano()) {
			t = time.Unix(0, tl[i].at).In(cs.now.Location())
		} else {
			t = resEnds[k]
		}
		if !horizon.IsZero() && t.After(horizon) {
			cs.unplanned = NoEstimateWindow
			cs.resKnown = t.UnixNano() // probes from here on were not tried
			break
		}
		if hasSticky && t.After(sticky.start) && trySticky() {
			return r, true
		}
		i0 := i
		for i < ntl {
			if i >= len(tl) {
				tl = e.timeline(i + 1)
			}
			if tl[i].at > t.UnixNano() {
				break
			}
			i++
		}
		if cached && i > i0 {
			w = e.snapAt(tc, i)
		}
		// A GPU free after its job's release stays free after the later
		// ones, so the shared snapshot, with all of them released, is told
		// of each as the clone released step by step is.
		for k := i0; k < i; k++ {
			gs := tl[k].js.place.gpus // read only
			switch {
			case !cached:
				buf = e.releaseOn(w, tl[k].js, buf)
				gs, cs.relBuf = buf, buf
			case cs.claimed != nil:
				buf = e.releasedGPUs(tl[k].js, buf)
				gs, cs.relBuf = buf, buf
			}
			cs.inc.released(w, gs, tl[k].js.place.shared)
		}
		for k < len(resEnds) && !resEnds[k].After(t) {
			k++
		}
		if t.Before(cs.now) {
			t = cs.now
		}
		// At its own start the kept reservation comes before any other
		// set the placer might now prefer: jobs planned around it stay
		// valid.
		if hasSticky && t.Equal(sticky.start) && trySticky() {
			return r, true
		}
		if !gang.Possible(w, &js.req) {
			continue
		}
		if probes++; probes > e.cfg.Backfill.MaxProbes {
			cs.unplanned = NoEstimateProbes
			cs.resKnown = t.UnixNano()
			break
		}
		if t.UnixNano() < from {
			e.resSkipped++
			continue // it failed there last cycle, and nothing since helps (resmemo.go)
		}
		if !e.enoughFreeOf(w, t, r, &js.req) {
			continue // Place would fail: too few GPUs free at t
		}
		s := e.withOverlapping(w, t, r)
		res, err := e.placeScratch(s, &js.req)
		if s != w {
			cs.drop(s)
		}
		if err != nil || !res.Found {
			continue
		}
		r.start = t
		r.pl = fromResult(&res, &js.req)
		r.gpus = r.pl.gpus
		return r, true
	}
	if hasSticky && (horizon.IsZero() || !sticky.start.After(horizon)) && trySticky() {
		return r, true
	}
	return nil, false
}

// withOverlapping returns w, or a clone of it with the GPUs of this
// cycle's reservations booked that r, starting at t, would overlap: those
// starting before r ends by its limit (all of them without one) and not
// ending (as expected) by t.
func (e *Engine) withOverlapping(w *topo.Snapshot, t time.Time, r *resv) *topo.Snapshot {
	cs := &e.cyc
	var s *topo.Snapshot
	for _, rs := range [2][]*resv{cs.res, cs.yield} {
		for _, o := range rs {
			if !overlaps(t, r.lim, r.limited, o.start, o.dur, o.bounded) {
				continue
			}
			if s == nil {
				s = w.Clone()
			}
			bookFree(s, o.gpus)
		}
	}
	if s == nil {
		s = w
	}
	if e.site != nil {
		s = e.advSnap(s, e.jobs[r.job], t)
	}
	return s
}

// freeOffOverlapping is allFree(e.withOverlapping(w, t, r), gpus)
// without building that snapshot: gpus are free on w and none is held by
// a reservation r would overlap at t. With advance reservations (site
// rules) or Config.DisableCaches it builds the snapshot.
func (e *Engine) freeOffOverlapping(w *topo.Snapshot, t time.Time, r *resv, gpus []uint32) bool {
	cs := &e.cyc
	if e.site != nil || e.cfg.DisableCaches {
		return allFree(e.withOverlapping(w, t, r), gpus)
	}
	if !allFree(w, gpus) {
		return false
	}
	cs.nextSeen(w.Cluster().NumGPUs())
	for _, g := range gpus {
		if int(g) < len(cs.seen) {
			cs.seen[g] = cs.seenGen
		}
	}
	for _, rs := range [2][]*resv{cs.res, cs.yield} {
		for _, o := range rs {
			if !overlaps(t, r.lim, r.limited, o.start, o.dur, o.bounded) {
				continue
			}
			for _, g := range o.gpus {
				if int(g) < len(cs.seen) && cs.seen[g] == cs.seenGen {
					return false
				}
			}
		}
	}
	return true
}

// enoughFree is gang.Possible for the snapshot withOverlapping would
// build at t: w with the free GPUs of the reservations r would overlap
// held back. It counts them per node instead of building it (most probes
// fail here). False only when Place on that snapshot would find nothing.
func (e *Engine) enoughFree(w *topo.Snapshot, t time.Time, r *resv, req *gang.Request) bool {
	cs := &e.cyc
	c := w.Cluster()
	// seen[g] == seenGen: g was held in this call.
	cs.nextSeen(c.NumGPUs())
	h := &cs.holdback
	h.Reset()
	for _, rs := range [2][]*resv{cs.res, cs.yield} {
		for _, o := range rs {
			if !overlaps(t, r.lim, r.limited, o.start, o.dur, o.bounded) {
				continue
			}
			for _, g := range o.gpus {
				if int(g) >= len(cs.seen) || cs.seen[g] == cs.seenGen || !w.IsFree(g) {
					continue
				}
				cs.seen[g] = cs.seenGen
				id, err := c.NodeOfGPU(g)
				if err != nil {
					return true // let Place answer
				}
				h.Hold(id)
			}
		}
	}
	return h.Len() == 0 || gang.PossibleWithout(w, req, h)
}

// nextSeen starts a marking round over n GPUs: from now on cs.seen[g] ==
// cs.seenGen marks g in this round only.
func (cs *cycleState) nextSeen(n int) {
	if len(cs.seen) < n {
		cs.seen = make([]uint32, n)
	}
	if cs.seenGen++; cs.seenGen == 0 {
		clear(cs.seen)
		cs.seenGen = 1
	}
}

func overlaps(a time.Time, da time.Duration, ba bool, b time.Time, db time.Duration, bb bool) bool {
	// [a, a+da) and [b, b+db) overlap; unbounded intervals never end.
	aEndsBeforeB := ba && !a.Add(da).After(b)
	bEndsBeforeA := bb && !b.Add(db).After(a)
	return !aEndsBeforeB && !bEndsBeforeA
}
