package engine

import (
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// A cycle under Config.LazyPending may stop its walk early (the cut): once
// no reservation can be made any more, no pending job can start on what
// is free, and nothing else can act on the jobs left, every job after
// that point would only get a status. The walk then stops, Ready.Pending
// lists the jobs it reached, and Ready.Unwalked counts the others;
// PendingAll computes their statuses when asked. docs/scale.md ("A walk
// that stops") has the conditions and why each is needed.

// tailState is what PendingAll needs after a cycle that cut its walk.
type tailState struct {
	gen   uint64       // the cycle (cycleState.gen) that cut
	first *queue.Job   // the job the walk stopped before
	cur   queue.Cursor // the walk's cursor, after first
	// plan is the plan at the cut when steps after the walk changed it
	// (elastic jobs grew); nil: e.snap, unchanged since the cycle.
	plan  *topo.Snapshot
	stale bool            // an event came since: the statuses would not be the cycle's
	all   []PendingStatus // computed by the first PendingAll
}

// cutAllowed reports whether this cycle's walk may stop early at all: the
// conditions that do not change during a walk.
//
//   - Config.LazyPending is on and Config.DisableCaches off;
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
	return e.cfg.LazyPending && !e.cfg.DisableCaches && !e.fracSeen && e.site == nil && len(e.svcs) == 0 &&
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
// walk, when only the quota stops it: usage only grows during a walk.
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
	if !e.noneStartable() {
		return false
	}
	return e.quotaIdle(allowed)
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
// mf(p) the most free GPUs of one node and ft(p) the free GPUs once the
// first p reservations are booked (both only shrink as p grows), a job of
// a size class whose smallest member asks k GPUs and whose total is at
// least T (queue.Pending.AskClasses) can start only if prefixFor(job) <=
// P, the largest p with mf(p) >= k and ft(p) >= T: only if there is such
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
	var mf, ft [maxCutRes + 2]int
	mf[0], ft[0] = top, cs.plan.Free()
	all := n // the index of "every reservation" in mf and ft
	if n <= maxCutRes {
		for p := 1; p <= n; p++ {
			s := e.snapFor(p)
			mf[p], ft[p] = maxNodeFree(s), s.Free()
		}
	} else {
		all = 1
		s := e.snapFor(n)
		mf[1], ft[1] = maxNodeFree(s), s.Free()
	}
	none := true
	e.pending.AskClasses(top, func(c queue.AskClass) bool {
		if c.PerMember == 0 { // a fractional, MIG or GPU-less member
			none = false
			return false
		}
		if ft[0] < c.MinTotal {
			return true // too large for what is free
		}
		P := 0
		for P < all && mf[P+1] >= c.PerMember && ft[P+1] >= c.MinTotal {
			P++
		}
		if P == all {
			none = false // it may start whatever it respects
			return false
		}
		res := P // the first reservation it must not overlap
		if n > maxCutRes {
			res = n - 1
		}
		if c.Jobs > c.Unlimited && c.ShortestLimit <= cs.res[res].start.Sub(cs.now) {
			none = false // it may end before that reservation starts
			return false
		}
		return true
	})
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
// would have listed it in Ready.Pending without Config.LazyPending: the
// jobs its walk reached (its Ready.Pending), then the Ready.Unwalked jobs
// after its cut, in the policy's order (the walk's cursor goes on from the
// cut), each with the status the walk would have given it (the same code
// computes it, on the plan at the cut). The statuses after the cut are
// computed on the first call and kept; the slice is shared and must not
// be modified. The first call costs what the full walk would have.
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
	cs := &e.cyc
	cs.plan = t.plan
	if cs.plan == nil {
		cs.plan = e.snap
	}
	cs.dropHeld()
	tail := []*queue.Job{t.first}
	for j, more := t.cur.Next(); more; j, more = t.cur.Next() {
		tail = append(tail, j)
	}
	all = make([]PendingStatus, len(head), len(head)+len(tail))
	copy(all, head)
	var scratch Ready
	for _, j := range tail {
		st, waits := e.consider(j, &scratch)
		if !waits {
			panic("engine: broken invariant: a job after the walk's cut was placed: " + j.ID)
		}
		all = append(all, st)
	}
	cs.dropHeld()
	cs.plan = nil
	cs.resetTLS()
	cs.recycleDead()
	t.all, t.plan, t.cur, t.first = all, nil, nil, nil
	return all, true
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
