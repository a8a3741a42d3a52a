package engine

import (
	"math"
	"time"

	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// A walk that skips (issue 33, docs/scale.md "Cycle cost over a long
// run"). Where the walk may not cut because some size class can still
// start (noneStartable), only the pending jobs of those classes whose
// runtime limit ends before the reservation they would overlap can start
// at all, or every job of a class that fits beside all the reservations:
// the candidates, indexed (queue.Pending.EachLimited lists them; a
// StrictPriority cursor finds a whole class's next job itself,
// queue.ClassSkipper). Every other job the walk would reach before the
// next candidate gets a status and nothing else: no placement, no
// reservation (the walk's reservations are made: cutHere's preconditions
// hold), no quota check that can fail (QuotaIdle), and none of the marks
// a later job reads (below). So, where the policy's cursor can skip
// (queue.Skipper: DRS with one level of cohorts, StrictPriority), the
// walk jumps from the job it is on to the next candidate in the policy's
// order, and the jobs passed get their
// statuses on demand, computed by consider on the plan as it was at the
// skip (a clone: the candidate may bind), like the jobs after a cut.
//
// What consider leaves behind for a job it does not place, and why
// passing it changes no decision:
//   - job.walked: yieldTo and the cut's tail read it for the holders of
//     the last cycle's reservations only; skipHere skips only once every
//     pending holder was walked;
//   - limMin, limMax, Engine.order: read by resume only; a cycle that
//     skipped is not resumed (it is not quiet);
//   - blockedCap: read under BackfillNone only, where skipHere does not
//     skip; cs.yielded: set by a job yielding to a holder not yet walked
//     (none is left); preemptors, fracBlocked: preemption and fractional
//     jobs turn the cut off (cutAllowed), and so the skip;
//   - the placement memos: caches whose answers do not depend on what
//     filled them (DisableCaches turns them off; FuzzEngine compares);
//   - job.badOf: a cache of a placement error, computed again when the
//     job is next considered.
//
// Elastic jobs (grow may drop reservations after the walk) and
// BackfillNone turn the skip off; so does a listed candidate set larger
// than maxSkipCands (the 120% month's walks passed a thousand jobs and
// more to reach the first of 1,100 one-GPU jobs before StrictPriority
// found whole classes itself).

// skipState is the walk's skip state (part of cycleState).
type skipState struct {
	// skipCls are the classes that may start at the cut key skipFor (set
	// by noneStartable when none may start whatever its limit: skipAny
	// false), each with the longest limit that may start.
	skipCls []skipClass
	skipAny bool
	skipFor cutKey
	// skipOff: the key at which the skip was found not to apply.
	skipOff cutKey
	// candFor is the key at which skipList (and skipSet) were collected.
	candFor  cutKey
	skipList []*queue.Job
	skipSet  map[*queue.Job]bool
	// skipWhole are the classes every job of which is a candidate, when
	// the cursor finds them itself (queue.ClassSkipper); skipList and
	// skipSet then hold the other classes' candidates.
	skipWhole []queue.AskClass
	// skipNext is the candidate the cursor must yield next (checked
	// while skipped; nil: the cursor must be at its end).
	skipNext *queue.Job
	skipped  bool
	// skips are the walk's skips, in order.
	skips []skipSeg
}

type skipClass struct {
	c   queue.AskClass
	lim time.Duration
}

// skipSeg is one skip: the jobs passed (their statuses go before
// cs.pend[at]) and the plan they saw.
type skipSeg struct {
	at     int
	passed *queue.Skipped
	plan   *topo.Snapshot
}

// maxSkipCands bounds the candidates a skip reads.
const maxSkipCands = 1024

func (cs *cycleState) resetSkips() {
	cs.skipCls, cs.skipAny = cs.skipCls[:0], false
	cs.skipFor, cs.skipOff, cs.candFor = cutKey{}, cutKey{}, cutKey{}
	clear(cs.skipList)
	cs.skipList = cs.skipList[:0]
	clear(cs.skipSet)
	cs.skipWhole = cs.skipWhole[:0]
	cs.skipNext, cs.skipped, cs.skips = nil, false, nil
}

// skipHere moves cur, which just yielded j, past j and the jobs up to the
// next candidate (see above), when it may; it reports whether it did.
// Called after cutHere found no cut, so that the classes are known.
func (e *Engine) skipHere(cur queue.Cursor, j *queue.Job) bool {
	cs := &e.cyc
	key := cutKey{true, cs.plan.Version(), len(cs.res)}
	if !cs.quotaIdle || cs.skipAny || cs.skipFor != key || cs.skipOff == key {
		return false
	}
	sk, ok := cur.(queue.Skipper)
	if !ok || e.cfg.Backfill.Mode == BackfillNone || e.elastic > 0 {
		cs.skipOff = key
		return false
	}
	if cs.candFor != key {
		cs.candFor = key
		clear(cs.skipList)
		cs.skipList = cs.skipList[:0]
		if cs.skipSet == nil {
			cs.skipSet = map[*queue.Job]bool{}
		}
		clear(cs.skipSet)
		over := false
		_, byClass := cur.(queue.ClassSkipper)
		cs.skipWhole = cs.skipWhole[:0]
		for _, sc := range cs.skipCls {
			if byClass && sc.lim == math.MaxInt64 {
				cs.skipWhole = append(cs.skipWhole, sc.c) // found by the cursor, not listed
				continue
			}
			e.pending.EachLimited(sc.c, sc.lim, func(c *queue.Job) bool {
				if len(cs.skipList) == maxSkipCands {
					over = true
					return false
				}
				cs.skipList = append(cs.skipList, c)
				cs.skipSet[c] = true
				return true
			})
		}
		if over {
			cs.skipOff = key
			return false
		}
	}
	if cs.skipSet[j] {
		return false // it may start: consider it
	}
	for _, c := range cs.skipWhole {
		if c.Has(j) {
			return false
		}
	}
	for id := range e.lastRes {
		if h := e.jobs[id]; h != nil && h.st == statePending && h.walked != cs.gen {
			return false // a job passed would yield to it (yieldTo)
		}
	}
	var first *queue.Job
	var passed *queue.Skipped
	if cls, byClass := cur.(queue.ClassSkipper); byClass {
		first, passed, ok = cls.SkipTo(cs.skipList, cs.skipWhole)
	} else {
		first, passed, ok = sk.Skip(cs.skipList)
	}
	if !ok {
		cs.skipOff = key
		return false
	}
	cs.skips = append(cs.skips, skipSeg{at: len(cs.pend), passed: passed, plan: cs.plan.Clone()})
	cs.skipNext, cs.skipped = first, true
	return true
}

// segOf is the skip of the latest cycle that passed js, or nil.
func (t *tailState) segOf(js *job) *skipSeg {
	for i := range t.skips {
		if t.skips[i].passed.Contains(js.j) {
			return &t.skips[i]
		}
	}
	return nil
}

// segStatus is the status the walk would have given js, a job passed by
// skip s, between tailBegin and tailEnd: consider on the plan at the
// skip, with the quota idle then (Tree.Fits accepted every job) and
// placement memos of that plan's own. keep: as tailStatus.
func (e *Engine) segStatus(t *tailState, s *skipSeg, js *job, keep bool) PendingStatus {
	if st, found := t.done[js]; found {
		return st
	}
	cs := &e.cyc
	plan, fail, fits, idle := cs.plan, cs.fail, cs.fits, cs.quotaIdle
	cs.dropHeld()
	if t.segFail == nil {
		t.segFail, t.segFits = map[uint64]failRec{}, map[uint64]int{}
	}
	if t.segOn != s {
		clear(t.segFail)
		clear(t.segFits)
		t.segOn = s
	}
	cs.plan, cs.fail, cs.fits, cs.quotaIdle = s.plan, t.segFail, t.segFits, true
	st, waits := e.consider(js.j, &t.scratch)
	cs.dropHeld()
	cs.plan, cs.fail, cs.fits, cs.quotaIdle = plan, fail, fits, idle
	if !waits {
		panic("engine: broken invariant: a job a skip passed was placed: " + js.j.ID)
	}
	if keep {
		t.keep(js, st)
	}
	return st
}
