package engine

import (
	"math"
	"slices"

	"time"

	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// A cycle (unless Config.EagerPending) may stop its walk early (the cut): once
// no reservation can be made any more, no pending job can start on what
// is free, and nothing else can act on the jobs left, every job after
// that point would only get a status. The walk then stops, Ready.Pending
// lists the jobs it reached, and Ready.Unwalked counts the others;
// PendingAll computes their statuses when asked. docs/scale.md ("A walk
// that stops") has the conditions and why each is needed.

// tailState is what PendingAll and PendingStatuses need after a cycle
// that cut its walk.
type tailState struct {
	gen   uint64       // the cycle (cycleState.gen) that cut
	first *queue.Job   // the job the walk stopped before
	cur   queue.Cursor // the walk's cursor, after first
	// plan is the plan at the cut when steps after the walk changed it
	// (elastic jobs grew); nil: e.snap, unchanged since the cycle.
	plan  *topo.Snapshot
	stale bool            // an event came since: the statuses would not be the cycle's
	all   []PendingStatus // computed by the first PendingAll
	// order lists the jobs after the cut in the walk's order (the cursor
	// drained, when first needed: listed); at is a job's index in order,
	// built when first needed (posOf).
	order  []*job
	at     map[*job]int
	listed bool
	// done are the statuses computed on demand so far, by job; more lists
	// them in the order computed (the View's).
	done map[*job]PendingStatus
	more []PendingStatus
	// holders: tailHolders, once holdersDone.
	holders     []tailHolder
	holdersDone bool
	scratch     Ready // consider's (it places no job after the cut)
	// capAtCut: a job was blocked by capacity before the cut
	// (cycleState.blockedCap). Under BackfillNone without one, the first
	// job after the cut blocked by capacity blocks the ones after it:
	// capScan jobs of order were considered in order to find it, at
	// index capAt (capFound).
	capAtCut, capFound bool
	capScan, capAt     int
	// skips are the walk's skips (skip.go): the jobs they passed are
	// unwalked too, their statuses computed on the plan of their skip
	// (segStatus, with memos of its own: segFail and segFits, for segOn).
	skips   []skipSeg
	passedN int // the jobs they passed, counted by PendingAll (which drops skips)
	segFail map[uint64]failRec
	segFits map[uint64]int
	segOn   *skipSeg
	// saved is the cycle state tailBegin saved and tailEnd restores.
	saved struct {
		yielded, blockedCap bool
		limMin, limMax      time.Duration
	}
}

// cutAllowed reports whether this cycle's walk may stop early at all: the
// conditions that do not change during a walk.
//
//   - Config.EagerPending and Config.DisableCaches are off;
//   - no fractional or MIG job was ever seen (shares and instances serve
//     them without a free GPU), no service (replicas are batched), no site
//     rule (partitions, limits, advance reservations): each can act on a
//     job without a free GPU or acts after the walk;
//   - preemption is off and no claim is held: step 7 acts on the blocked
//     jobs after the walk (running elastic jobs may grow after it, which
//     the cut does not change: the walk clones the plan at the cut for
//     PendingAll then);
//   - no pending job's bind backoff ends after now: the walk notes those
//     ends for NextWake.
func (e *Engine) cutAllowed() bool {
	return !e.cfg.EagerPending && !e.cfg.DisableCaches && !e.fracSeen && e.site == nil && len(e.svcs) == 0 &&
		!e.cfg.Preemption.Priority && !e.cfg.Preemption.Reclaim && len(e.claims) == 0 &&
		e.cyc.nowNs >= e.maxNotBefore && e.held == 0
}

// cutHere reports whether the walk may stop before the next job: under
// BackfillNone, once a job was blocked by capacity; otherwise once no
// reservation can be made any more (EASY's one or Depth made, or the
// tries spent) and no pending job can start (noneStartable); in both
// cases quota must hold no pending job back (queue.Pending.QuotaIdle: a
// job blocked by quota is marked for its later reservations, see
// yieldTo). It returns false, and sets *allowed false for the rest of the
// walk, when the quota holds a job back: usage only grows during a walk.
// While it holds none, consider skips Tree.Fits (cycleState.quotaIdle).
func (e *Engine) cutHere(allowed *bool) bool {
	cs := &e.cyc
	if e.cfg.Backfill.Mode == BackfillNone && cs.blockedCap {
		// Every later job is blocked behind the first one held by
		// capacity, whatever is free.
		return e.quotaIdle(allowed)
	}
	d := e.cfg.depth()
	if len(cs.res) < d && cs.reserveTries < 2*d+2 {
		return false
	}
	// The answer changes only with the plan (a placement, which also
	// takes a job out of the pending set) or the reservations.
	key := cutKey{true, cs.plan.Version(), len(cs.res)}
	if key == cs.cutSeen {
		return false
	}
	cs.cutSeen = key
	// Quota first: usage only grows during a walk, so a walk whose quota
	// holds a job back never cuts (as when it is asked at the cut); while
	// it holds none, consider skips Tree.Fits (cycleState.quotaIdle).
	if !e.quotaIdle(allowed) {
		return false
	}
	cs.quotaIdle = true
	return e.noneStartable()
}

type cutKey struct {
	set  bool
	plan uint64 // topo.Snapshot.Version
	res  int
}

func (e *Engine) quotaIdle(allowed *bool) bool {
	if !e.pending.QuotaIdle() {
		*allowed = false
		return false
	}
	return true
}

// noneStartable reports whether no pending job can start in this cycle on
// what the plan has free (and so none after the walk's current point).
// A job starts only with each member on a node with as many free GPUs as
// it asks and its whole ask free, off the GPUs of the reservations it
// must respect: the first prefixFor ones, all of them for a job with no
// limit, fewer for one whose limit ends before the later ones start. With
// mf(p) the most free GPUs of one node and fk(p) the free GPUs of the
// nodes with at least k free, once the first p reservations are booked
// (both only shrink as p grows), a job of a size class whose smallest
// member asks k GPUs and whose total is at least T
// (queue.Pending.AskClasses) can start only if prefixFor(job) <= P, the
// largest p with mf(p) >= k and fk(p) >= T (a node with fewer than k free
// takes no member of it): only if there is such
// a p, and P is every reservation or the job's limit ends by the start
// of reservation P. A class gives its count, its unlimited jobs and its
// shortest limit. With more than maxCutRes reservations only p = 0 and p
// = all are read, and a P between them is taken to be the last
// reservation (the latest start: a limit that ends by then may start,
// which is the safe side).
func (e *Engine) noneStartable() bool {
	cs := &e.cyc
	top := maxNodeFree(cs.plan)
	n := len(cs.res)
	var mf [maxCutRes + 2]int
	var hs [maxCutRes + 2][]int32 // free-GPU histograms of the nodes
	mf[0], hs[0] = top, cs.plan.DomainHistogram(0, 0, -1)
	all := n // the index of "every reservation" in mf and hs
	if n <= maxCutRes {
		for p := 1; p <= n; p++ {
			s := e.snapFor(p)
			mf[p], hs[p] = maxNodeFree(s), s.DomainHistogram(0, 0, -1)
		}
	} else {
		all = 1
		s := e.snapFor(n)
		mf[1], hs[1] = maxNodeFree(s), s.DomainHistogram(0, 0, -1)
	}
	// fk is the free GPUs of the nodes with at least k free in h.
	fk := func(h []int32, k int) int {
		t := 0
		for f := k; f < len(h); f++ {
			t += f * int(h[f])
		}
		return t
	}
	none := true
	// Every class that may start is noted for skipHere (skip.go): with
	// the runtime limit a job of it must not exceed, or skipAny.
	cs.skipCls, cs.skipAny = cs.skipCls[:0], false
	e.pending.AskClasses(top, func(c queue.AskClass) bool {
		if c.PerMember == 0 { // a fractional, MIG or GPU-less member
			none, cs.skipAny = false, true
			return false
		}
		if fk(hs[0], c.PerMember) < c.MinTotal {
			return true // too large for what is free
		}
		P := 0
		for P < all && mf[P+1] >= c.PerMember && fk(hs[P+1], c.PerMember) >= c.MinTotal {
			P++
		}
		if P == all {
			// It may start whatever it respects: every job of it is a
			// candidate (EachLimited lists them all).
			none = false
			cs.skipCls = append(cs.skipCls, skipClass{c, math.MaxInt64})
			return true
		}
		res := P // the first reservation it must not overlap
		if n > maxCutRes {
			res = n - 1
		}
		if lim := cs.res[res].start.Sub(cs.now); c.Jobs > c.Unlimited && c.ShortestLimit <= lim {
			none = false // it may end before that reservation starts
			cs.skipCls = append(cs.skipCls, skipClass{c, lim})
		}
		return true
	})
	if !none && !cs.skipAny {
		cs.skipFor = cs.cutSeen
	}
	return none
}

// maxCutRes bounds the reservations whose snapshots noneStartable builds.
const maxCutRes = 4

// freezeTail computes the statuses after the cut before Advance changes
// what they depend on (a refused bind frees GPUs, gives back quota and
// puts the job back to pending, which the stopped cursor would then
// meet): only cycles with refusals pay for the whole list.
func (e *Engine) freezeTail() {
	if t := e.tail; t != nil && t.all == nil && !t.stale {
		e.PendingAll()
	}
}

// PendingAll returns the status of every pending job as the latest cycle
// would have listed it in Ready.Pending had it walked every job
// (Config.EagerPending): the jobs its walk reached (its Ready.Pending),
// then the Ready.Unwalked jobs after its cut, in the policy's order (the
// walk's cursor goes on from the cut), each with the status the walk
// would have given it (the same code computes it, on the plan at the
// cut). The statuses after the cut are computed on the first call and
// kept, and the View is published again with all of them (View.Pending
// complete, View.Unwalked zero); the slice is shared and must not be
// modified. The first call costs what the full walk would have.
//
// ok is false when an event was stepped since that cycle and before the
// first call (the statuses after the cut would no longer be that
// cycle's): PendingAll then returns Ready.Pending alone. Advance does not
// make them stale (one with refusals computes them first). Without a cut
// it returns the latest Ready.Pending and true. Like Step, it is for the
// engine's owner only (observers read the View).
func (e *Engine) PendingAll() (all []PendingStatus, ok bool) {
	head := e.View().cyc // the cycle's own, without what Advance put back since
	t := e.tail
	if t == nil {
		return head, true
	}
	if t.all != nil {
		return t.all, true
	}
	if t.stale || t.gen != e.cyc.gen {
		return head, false
	}
	e.listTail(t)
	passed := 0
	for _, s := range t.skips {
		passed += s.passed.Len()
	}
	all = make([]PendingStatus, 0, len(head)+passed+len(t.order))
	e.tailBegin(t)
	k := 0 // head[:k] are in all
	for i := range t.skips {
		s := &t.skips[i]
		all = append(all, head[k:s.at]...)
		k = s.at
		s.passed.Each(func(j *queue.Job) bool {
			all = append(all, e.segStatus(t, s, e.byPtr[j], false))
			return true
		})
	}
	all = append(all, head[k:]...)
	for i, js := range t.order {
		all = append(all, e.tailStatus(t, js, false, i))
	}
	e.tailEnd(t)
	t.all, t.plan, t.cur, t.first, t.order, t.at, t.done, t.more, t.holders = all, nil, nil, nil, nil, nil, nil, nil, nil
	t.skips, t.segOn, t.passedN = nil, nil, passed
	e.republishWith(all, 0, nil)
	return all, true
}

// PendingStatuses returns the statuses of the jobs asked about that are
// pending, in the order asked (a job not pending is left out), each as
// PendingAll lists it: for a job after the latest cycle's cut, the
// status that cycle's full walk would have given it, computed now for
// that job alone (its cost is that job's in the walk, and a list of the
// jobs after the cut in order when the job was held by quota and a job
// after the cut holds a reservation: whether the walk reached that
// holder first changes its placement). Statuses computed are kept for
// the cycle and published in the View (View.Explain, View.Estimate).
//
// ok is false when a job asked about is after the cut and an event was
// stepped since the cycle (see PendingAll): its status is then left out.
// Like Step, it is for the engine's owner only.
func (e *Engine) PendingStatuses(ids ...string) (sts []PendingStatus, ok bool) {
	v := e.View()
	ok = true
	var byID map[string]int
	if len(ids) > 8 {
		byID = make(map[string]int, len(v.Pending))
		for i := range v.Pending {
			byID[v.Pending[i].Job] = i
		}
	}
	find := func(id string) (PendingStatus, bool) {
		if byID != nil {
			if i, found := byID[id]; found {
				return v.Pending[i], true
			}
			return PendingStatus{}, false
		}
		for i := range v.Pending {
			if v.Pending[i].Job == id {
				return v.Pending[i], true
			}
		}
		return PendingStatus{}, false
	}
	t := e.tail
	begun, added := false, false
	for _, id := range ids {
		if st, found := find(id); found {
			sts = append(sts, st)
			continue
		}
		js := e.jobs[id]
		if t == nil || t.all != nil || js == nil || js.st != statePending {
			continue // not pending, or Pending has every status
		}
		if st, found := t.done[js]; found {
			sts = append(sts, st)
			continue
		}
		if t.stale || t.gen != e.cyc.gen {
			ok = false
			continue
		}
		seg := t.segOf(js)
		if seg == nil && t.first == nil {
			continue // neither passed nor after a cut: not the cycle's
		}
		if !begun {
			e.tailBegin(t)
			begun = true
		}
		var st PendingStatus
		if seg != nil {
			st = e.segStatus(t, seg, js, true)
		} else {
			st = e.tailStatus(t, js, true, -1)
		}
		sts = append(sts, st)
		added = true
	}
	if begun {
		e.tailEnd(t)
	}
	if added {
		e.republishWith(v.cyc, v.Unwalked, slices.Clip(t.more))
	}
	return sts, ok
}

// listTail drains the walk's cursor into t.order, once.
func (e *Engine) listTail(t *tailState) {
	if t.listed {
		return
	}
	t.listed = true
	if t.first == nil {
		return // no cut: the walk skipped only
	}
	t.order = append(t.order, e.byPtr[t.first])
	for j, more := t.cur.Next(); more; j, more = t.cur.Next() {
		t.order = append(t.order, e.byPtr[j])
	}
	t.cur = nil
}

// posOf is js's index in t.order (listed), false if it is not after the
// cut.
func (t *tailState) posOf(js *job) (int, bool) {
	if t.at == nil {
		t.at = make(map[*job]int, len(t.order))
		for i, o := range t.order {
			t.at[o] = i
		}
	}
	i, ok := t.at[js]
	return i, ok
}

// tailBegin sets the cycle state back to the cut for tailStatus, and
// saves what consider changes that Advance or the next cycle reads.
func (e *Engine) tailBegin(t *tailState) {
	cs := &e.cyc
	t.saved.yielded, t.saved.blockedCap, t.saved.limMin, t.saved.limMax = cs.yielded, cs.blockedCap, cs.limMin, cs.limMax
	cs.plan = t.plan
	if cs.plan == nil {
		cs.plan = e.snap
	}
	cs.dropHeld()
}

// tailEnd undoes tailBegin.
func (e *Engine) tailEnd(t *tailState) {
	cs := &e.cyc
	cs.yielded, cs.blockedCap, cs.limMin, cs.limMax = t.saved.yielded, t.saved.blockedCap, t.saved.limMin, t.saved.limMax
	cs.dropHeld()
	cs.plan = nil
	cs.resetTLS()
	cs.recycleDead()
}

// tailStatus is the status the walk would have given js, a job after the
// cut, between tailBegin and tailEnd. What one job's consideration left
// for the next does not change the statuses here (no job is placed or
// reserved after the cut; the memos give what a placement would), but
// for one thing: a job once held by quota yields to the reservations of
// the last cycle held by jobs the walk has not reached yet (yieldTo, by
// job.walked). So the holders after the cut are marked reached or not
// as the walk would have found them at js.
//
// keep records the status (t.done, t.more): PendingStatuses keeps what it
// computes, PendingAll (which keeps the whole list) does not.
func (e *Engine) tailStatus(t *tailState, js *job, keep bool, pos int) PendingStatus {
	if st, found := t.done[js]; found {
		return st
	}
	cs := &e.cyc
	if e.cfg.Backfill.Mode == BackfillNone && !t.capAtCut {
		// Find the first job after the cut blocked by capacity: the walk
		// considers the jobs in order until then.
		e.listTail(t)
		for !t.capFound && t.capScan < len(t.order) {
			k := t.capScan
			t.capScan++
			cs.blockedCap = false
			e.tailConsider(t, t.order[k], true, k)
			if cs.blockedCap {
				t.capFound, t.capAt = true, k
			}
		}
		if st, found := t.done[js]; found {
			return st
		}
		if pos < 0 {
			pos, _ = t.posOf(js)
		}
		cs.blockedCap = t.capFound && pos > t.capAt
	}
	return e.tailConsider(t, js, keep, pos)
}

// tailConsider is tailStatus once cycleState.blockedCap is set as the
// walk would have left it at js (pos: its index in t.order, -1: unknown).
func (e *Engine) tailConsider(t *tailState, js *job, keep bool, pos int) PendingStatus {
	if st, found := t.done[js]; found {
		return st
	}
	cs := &e.cyc
	if js.quotaWait && len(e.lastRes) > 0 && !e.holds(js) {
		if hs := e.tailHolders(t); len(hs) > 0 {
			if pos < 0 {
				pos, _ = t.posOf(js)
			}
			for _, h := range hs {
				h.js.walked = cs.gen - 1
				if h.pos < pos {
					h.js.walked = cs.gen
				}
			}
		}
	}
	st, waits := e.consider(js.j, &t.scratch)
	if !waits {
		panic("engine: broken invariant: a job after the walk's cut was placed: " + js.j.ID)
	}
	if keep {
		t.keep(js, st)
	}
	return st
}

// keep records a status computed on demand (PendingStatuses): t.done, and
// t.more in the order computed.
func (t *tailState) keep(js *job, st PendingStatus) {
	if t.done == nil {
		t.done = map[*job]PendingStatus{}
	}
	t.done[js] = st
	t.more = append(t.more, st)
}

// tailHolder is a holder of a reservation of the last cycle after the
// cut, with its index in tailState.order.
type tailHolder struct {
	js  *job
	pos int
}

// tailHolders lists, once per cycle, the last cycle's reservation
// holders after the cut (listing the jobs after the cut when there is
// one): the jobs yieldTo may yield to.
func (e *Engine) tailHolders(t *tailState) []tailHolder {
	if t.holdersDone {
		return t.holders
	}
	t.holdersDone = true
	cs := &e.cyc
	after := false
	for id := range e.lastRes {
		// A holder is after the cut if the walk did not reach it (or
		// tailStatus considered it).
		if h := e.jobs[id]; h != nil && h.st == statePending && (h.walked != cs.gen || t.reachedHere(h)) {
			after = true
			break
		}
	}
	if !after {
		return nil
	}
	e.listTail(t)
	for _, id := range sortedKeys(e.lastRes) {
		if h := e.jobs[id]; h != nil && h.st == statePending {
			if k, in := t.posOf(h); in {
				t.holders = append(t.holders, tailHolder{h, k})
			}
		}
	}
	return t.holders
}

// reachedHere reports whether h is a job after the cut that tailStatus
// considered (its walked mark is this cycle's though the walk never
// reached it).
func (t *tailState) reachedHere(h *job) bool {
	_, in := t.done[h]
	if in {
		return true
	}
	if !t.listed {
		return false
	}
	_, in = t.posOf(h)
	return in
}

// maxNodeFree is the most free GPUs of one ready node of s.
func maxNodeFree(s *topo.Snapshot) int {
	h := s.DomainHistogram(0, 0, -1)
	for k := len(h) - 1; k > 0; k-- {
		if h[k] > 0 {
			return k
		}
	}
	return 0
}
