package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// cycleState is the scratch of one cycle, reused between cycles.
type cycleState struct {
	now   time.Time
	nowNs int64
	plan  *topo.Snapshot // the live bookings plus this cycle's decisions
	// holds are GPUs booked on plan for preemptors' claims; released when
	// the cycle ends, so that e.snap holds only real bookings.
	holds []uint32
	// res are this cycle's backfill reservations, by start then job.
	res []*resv
	// resByEnd is res by expected end (overlapHold): kept by addRes,
	// rebuilt after deleteRes (resByEndStale).
	resByEnd      []*resv
	resByEndStale bool
	resEnds       []time.Time // reserve's probe times from reservations
	scratch       gang.Result // placeScratch's answers
	// held[p] is plan with the GPUs of res[:p] booked too (lazily built,
	// nil when stale).
	held []*topo.Snapshot
	// dead are the what-if snapshots the cycle is done with, recycled
	// (topo.Snapshot.Recycle) when it ends, not earlier: a caller may
	// still read one it took before it was dropped. Off with
	// Config.DisableCaches, so that FuzzEngine's replay without caches
	// checks that no recycled page was still in use.
	dead    []*topo.Snapshot
	recycle bool
	relBuf  []uint32 // reserve's buffer of released GPUs
	// fail remembers, per shape and reservation prefix, the fewest members
	// that did not fit: free GPUs only shrink during the walk, so a larger
	// gang of that shape cannot fit either.
	fail map[uint64]failRec // by shape ID << 16 | reservation prefix
	// fits remembers, per shape and prefix, the most members known to fit
	// on the plan as it is; any placement invalidates it.
	fits    map[uint64]int
	claimed map[uint32]bool // GPUs of claims: not released by the timeline

	reserveTries int
	blockedCap   bool // a job was blocked by capacity (BackfillNone)
	// quotaIdle: queue.Pending.QuotaIdle held at a point of this walk and
	// nothing was charged since, so Tree.Fits accepts every pending job
	// and consider does not ask it (set by cutHere, cleared by a Charge
	// and around each walk).
	quotaIdle  bool
	preemptors []*job // blocked jobs, in order, that may preempt
	pend       []PendingStatus
	// pendBuf is the array a walk that is not resumed appends its
	// statuses to (pendOwn: pend is in it), kept from cycle to cycle; the
	// cycle publishes a copy of exactly its statuses (publishPend), so a
	// walk allocates what it lists once instead of regrowing a new array
	// by doubling every cycle (issue 33: a long walk's garbage was most
	// of a cycle's allocations, and their collection a quarter of its CPU).
	pendBuf    []PendingStatus
	pendOwn    bool
	statusOf   map[string]int // job -> index in pend (blocked jobs only)
	victims    int
	placedLate []string // blocked jobs bound after the walk (by shrinking)
	// ahead lists, per preemptor, the reservations made before it was
	// considered (for jobs ahead of it in order): preemption on its
	// behalf keeps off their GPUs.
	ahead map[string][]string
	// resAt is where the status of a job holding a reservation is in pend.
	resAt map[string]int
	// yield are the reservations the job being considered must respect
	// besides res[:p]: those of jobs behind it that it yields to
	// (Engine.yieldTo); set around its placement and reservation only.
	yield []*resv
	// yielded: in EASY mode, a job yielded its turn to a reservation
	// holder behind it this cycle; no job but such a holder takes the one
	// reservation this cycle (it goes to the yielding job next cycle).
	yielded bool
	backoff bool // a job waited for its bind retry backoff
	cut     bool // the walk stopped early (lazy.go)
	// cutPlan is the plan at the cut when steps after the walk may change
	// it (elastic jobs grow), else nil.
	cutPlan   *topo.Snapshot
	cutCur    queue.Cursor // the walk's cursor at the cut
	cutJob    *queue.Job   // the job it stopped before
	cutSeen   cutKey       // the state cutHere last found not cut
	skipState              // the walk's skips (skip.go)
	// seen and seenGen: GPUs counted by enoughFree (seen[g] == seenGen);
	// holdback: the GPUs it holds back.
	seen     []uint32
	seenGen  uint32
	holdback gang.Holdback
	inc      overlapHold // enoughFree across one reserve call (reservehold.go)
	tls      tlSnaps     // the timeline's what-if snapshots (tlsnaps.go)
	// limMin and limMax are the least and greatest runtime limits of the
	// jobs considered (zero: none had one).
	limMin, limMax time.Duration
	gen            uint64 // cycles run; job.walked is the cycle that considered it
	// resKnown: the last reserve call tried every probe before it (Unix
	// ns; it stopped at MaxProbes or the window there). memoPlan is the
	// clone of the plan (memoPlanOf at memoPlanVer) the reservation memos
	// of the cycle share (resmemo.go).
	resKnown int64
	// resLog lists the changes to cs.res in this cycle, resLogPrev the
	// last cycle's; resDiverged: they differ (logRes).
	resLog, resLogPrev []resEvent
	resDiverged        bool
	memoPlan           *topo.Snapshot
	memoPlanOf         *topo.Snapshot
	memoPlanVer        uint64
	// fracBlocked are the fractional / MIG jobs blocked by capacity, in
	// order, with where their status is in pend: the demand of step 8.
	fracBlocked []fracRec
	holdsBy     map[string]string      // Ready.Holds (site rules), made when needed
	unplanned   NoEstimate             // why the last reserve found no start (estimate.go)
	batches     map[*service]*svcBatch // replicas placed at once (svcbatch.go)
}

type resv struct {
	job   string
	start time.Time
	gpus  []uint32 // ascending
	// bm is gpus as published (Reservation.GPUs, read-only), built once:
	// a sticky reservation keeps it from cycle to cycle.
	bm *roaring.Bitmap
	pl *placement
	// dur is how long the job is expected to hold the GPUs once started
	// (duration: estimate, else limit; bounded false: unknown): later
	// reservations may plan on them after start+dur.
	dur     time.Duration
	bounded bool
	// lim is the job's runtime limit (limited false: none): how far it may
	// overlap earlier reservations (see prefixFor).
	lim     time.Duration
	limited bool
	// startNs and endNs: start and expected end in Unix nanoseconds, set
	// when it joins cs.res (resNs); incGen: overlapHold.
	startNs, endNs int64
	incGen         uint64
}

type fracRec struct {
	js *job
	at int // index of its status in pend
}

type failRec struct {
	members int
	reason  gang.Reason
}

func (cs *cycleState) reset(now time.Time) {
	cs.now, cs.nowNs = now, now.UnixNano()
	cs.plan = nil
	cs.resetTLS()
	cs.holds = cs.holds[:0]
	cs.res = cs.res[:0]
	clear(cs.resByEnd)
	cs.resByEnd, cs.resByEndStale = cs.resByEnd[:0], false
	cs.dropHeld()
	if cs.fail == nil {
		cs.fail = map[uint64]failRec{}
		cs.fits = map[uint64]int{}
		cs.statusOf = map[string]int{}
	}
	clear(cs.fail)
	clear(cs.fits)
	clear(cs.statusOf)
	cs.claimed = nil
	cs.yield, cs.yielded, cs.backoff, cs.cut, cs.cutSeen = cs.yield[:0], false, false, false, cutKey{}
	cs.resetSkips()
	cs.limMin, cs.limMax = 0, 0
	cs.gen++
	cs.reserveTries = 0
	cs.blockedCap = false
	cs.preemptors = cs.preemptors[:0]
	cs.victims = 0
	cs.placedLate = cs.placedLate[:0]
	clear(cs.fracBlocked)
	cs.fracBlocked = cs.fracBlocked[:0]
	clear(cs.ahead)
	clear(cs.resAt)
	clear(cs.batches)
}

// cyclePlan returns the snapshot a cycle books on: a copy-on-write clone
// of the engine's, which becomes the engine's at the end of the cycle.
// Under Config.BareViews no View holds the engine's snapshot, and nothing
// reads it during a cycle but through the plan, so the plan is the
// snapshot itself: its pages are its own and are written in place (a
// clone would make every page shared, and the cycle would copy each page
// it writes). What-if clones of the plan still copy what they write.
func (e *Engine) cyclePlan() *topo.Snapshot {
	if e.cfg.BareViews {
		return e.snap
	}
	return e.snap.Clone()
}

// cycle is one scheduling cycle. Its steps, in order:
//
//  1. Drain: the intake into the pending set; victims whose grace period
//     ended go back to pending.
//  2. Update fair share: decayed usage up to now.
//  3. Order: the policy's cursor over the pending jobs. Preemptors whose
//     claimed GPUs are now free bind first.
//  4. Place what fits: quota (nominal or borrowing) and a valid gang
//     placement.
//  5. Reserve: a blocked job (EASY: the first; conservative: up to Depth)
//     gets an exact GPU set at a future time from the timeline.
//  6. Backfill: later jobs run now only if they end (by their limit)
//     before every reservation whose GPUs they use. Elastic jobs then grow
//     into what is left.
//  7. Preempt: for the first blocked jobs, shrink elastic jobs, then
//     preempt the cheapest whole victim gangs (priority, then reclaim).
//  8. Reconfigure MIG: for fractional / MIG jobs blocked by capacity, a
//     plan of new layouts for idle MIG capacity, when waiting costs more
//     than reconfiguring (see MIGConfig).
//  9. Publish: decisions, reasons, estimates, and the observers' View.
func (e *Engine) cycle() Ready {
	now := e.now
	cs := &e.cyc
	rd := Ready{Seq: e.seq, At: now, MIG: []MIGReconfiguration{}}
	e.out = e.nextOutstanding()

	e.retryAt = 0 // noted again by the walk and by Advance

	// 1. Drain (and replace service replicas that ended).
	e.topUp(now)
	e.drain(&rd)
	resumed := e.resume(now, &rd)
	if !resumed {
		cs.reset(now)
		e.trimResMemos()
		e.endGracePeriods(now)

		// 2. Update fair share.
		e.tree.Advance(now)
		e.tlRefresh(now)
		// Room for the jobs a resumed cycle appends (see resume).
		n := e.pending.Len()
		if e.tail != nil && e.cutAllowed() {
			// The last walk stopped early and this one may too: room
			// for about as many, grown by append if it goes further.
			n = min(n, 2*len(e.lastPend)+64)
		}
		if !e.cutAllowed() && n > ownPendMin {
			// Every job walked, each cycle as long: an array of its own.
			cs.pend, cs.pendOwn = make([]PendingStatus, 0, n+n/32+16), false
		} else {
			if cap(cs.pendBuf) < n+n/32+16 {
				cs.pendBuf = make([]PendingStatus, 0, n+n/32+16)
			}
			cs.pend, cs.pendOwn = cs.pendBuf[:0], true
		}
		e.order = e.order[:0]

		cs.plan = e.cyclePlan()
		e.bindClaims(&rd)
		e.holdClaims()

		// 3. Order.
		cur := e.policy.Order(e.pending, now)

		// 4-6. Place, reserve, backfill: one walk in order.
		e.walk(cur, &rd)
	}
	e.grow(&rd)

	// 7. Preempt.
	e.preempt(&rd)

	// 8. Reconfigure MIG.
	e.reconfigure(&rd)

	// 9. Publish.
	for _, r := range cs.res {
		if r.bm == nil {
			r.bm = bitmapOf(r.gpus)
		}
		rd.Reservations = append(rd.Reservations, Reservation{Job: r.job, Start: r.start, GPUs: r.bm})
	}
	for _, id := range sortedKeys(e.claims) {
		c := e.claims[id]
		rd.Reservations = append(rd.Reservations, Reservation{Job: id, Start: c.start, GPUs: bitmapOf(c.place.claimGPUs()), Preemption: true})
	}
	slices.SortStableFunc(rd.Reservations, func(a, b Reservation) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		if a.Job < b.Job {
			return -1
		} else if a.Job > b.Job {
			return 1
		}
		return 0
	})
	for id := range e.lastRes {
		if js := e.jobs[id]; js != nil {
			js.hasRes = false
		}
	}
	clear(e.lastRes)
	for _, r := range cs.res {
		e.lastRes[r.job] = r
		if js := e.jobs[r.job]; js != nil {
			js.hasRes = true
		}
	}
	if len(cs.holds) > 0 {
		if err := cs.plan.Release(cs.holds); err != nil {
			panic("engine: broken invariant: releasing claim holds: " + err.Error())
		}
	}
	if e.snap != cs.plan {
		cs.drop(e.snap) // nothing holds it: Views and estimates hold clones
	}
	e.snap = cs.plan
	cs.plan = nil
	cs.dropHeld()
	cs.resetTLS() // its snapshots hold pages until the next cycle otherwise
	if len(cs.placedLate) > 0 {
		cs.pend = slices.DeleteFunc(cs.pend, func(p PendingStatus) bool { return slices.Contains(cs.placedLate, p.Job) })
	}
	cs.publishPend()
	// Ready and View get the statuses without spare capacity: a resumed
	// cycle appends to cs.pend beyond their length, never within it.
	rd.Pending = cs.pend[:len(cs.pend):len(cs.pend)]
	e.lastPend = cs.pend
	e.tail = nil
	skipped := len(cs.skips) > 0 // resumable: the walk's order has holes
	if cs.cut || skipped {
		rd.Unwalked = e.pending.Len() - len(cs.pend)
		e.tailBuf = tailState{gen: cs.gen, plan: cs.cutPlan, capAtCut: cs.blockedCap, skips: cs.skips}
		if cs.cut {
			e.tailBuf.first, e.tailBuf.cur = cs.cutJob, cs.cutCur
		}
		e.tail = &e.tailBuf
		cs.cutPlan, cs.cutCur, cs.cutJob, cs.skips = nil, nil, nil, nil
	}
	e.quiet = len(rd.Binds) == 0 && len(cs.placedLate) == 0 && len(rd.Preemptions) == 0 && len(rd.Resizes) == 0 &&
		len(rd.MIG) == 0 && len(cs.fracBlocked) == 0 && len(e.claims) == 0 && len(cs.holds) == 0 &&
		!cs.backoff && !cs.yielded && !cs.cut && !skipped && e.stopping == 0 && len(e.requeued) == 0 && len(e.failed) == 0
	e.since = sinceCycle{}
	rd.Requeued, e.requeued = e.requeued, nil
	rd.Failed, e.failed = e.failed, nil
	rd.Holds = e.takeHolds(resumed)
	rd.Rejected, e.rejected = e.rejected, nil
	rd.Stops, e.stops = e.stops, nil
	e.publish(&rd, e.pending.Publish(now))
	cs.recycleDead()
	return rd
}

// ownPendMin is the most pending jobs for which a walk that cannot stop
// early still appends to cs.pendBuf (copied out by publishPend) instead of
// an array of its own: a short walk's copy costs less than an array with
// room for resumed appends made every cycle (one job submitted and placed
// per cycle allocated that array for nothing).
const ownPendMin = 256

// noPend is the statuses of a walk that listed none: empty, not nil, with
// no room, so that an append never writes into it.
var noPend = []PendingStatus{}

// publishPend moves the statuses of a walk that appended to cs.pendBuf
// into an array of their own, with room for a resumed cycle's appends
// (resume), and keeps the buffer (grown by the walk's appends) for the
// next walk. The buffer's entries are overwritten by the next walk, never
// read: Ready, the View and lastPend hold the copy.
func (cs *cycleState) publishPend() {
	if !cs.pendOwn {
		return // resumed: cs.pend is lastPend's array, appended to
	}
	n := len(cs.pend)
	if n == 0 {
		// Nothing to keep: a resumed cycle's first append allocates.
		cs.pendBuf, cs.pend, cs.pendOwn = cs.pend[:0], noPend, false
		return
	}
	// Room for a resumed cycle's appends, as much as there are statuses
	// up to n/32+16 (a resumed cycle that needs more grows it).
	out := make([]PendingStatus, n, n+min(n, n/32+16))
	copy(out, cs.pend)
	cs.pendBuf, cs.pend, cs.pendOwn = cs.pend[:0], out, false
}

// placeScratch is e.placer.Place answering in memory the cycle reuses
// (Placer.PlaceInto): the answer is valid until the next placeScratch,
// so callers turn it into a placement (fromResult) or a reason first.
func (e *Engine) placeScratch(s *topo.Snapshot, r *gang.Request) (gang.Result, error) {
	err := e.placer.PlaceInto(&e.cyc.scratch, s, r)
	return e.cyc.scratch, err
}

// drop notes that the cycle is done with s, a what-if clone of its own
// that nothing else holds (see dead).
func (cs *cycleState) drop(s *topo.Snapshot) {
	if s != nil && cs.recycle {
		cs.dead = append(cs.dead, s)
	}
}

// dropHeld drops the held snapshots (snapFor builds them again).
func (cs *cycleState) dropHeld() {
	for _, s := range cs.held {
		cs.drop(s)
	}
	clear(cs.held)
	cs.held = cs.held[:0]
}

// resetTLS drops the timeline's snapshots and forgets them.
func (cs *cycleState) resetTLS() {
	for _, s := range cs.tls.at {
		cs.drop(s)
	}
	cs.tls.reset()
}

// recycleDead recycles the dropped snapshots: the cycle (or PendingAll)
// is over, and none of them is read again.
func (cs *cycleState) recycleDead() {
	for i, s := range cs.dead {
		s.Recycle() // a second Recycle of the same snapshot does nothing
		cs.dead[i] = nil
	}
	cs.dead = cs.dead[:0]
}

// nextOutstanding is the record of this cycle's decisions for Advance:
// the one of the last cycle, emptied (accept and Advance are done with it
// by the time a new cycle starts), so that a cycle allocates no maps.
func (e *Engine) nextOutstanding() *outstanding {
	o := e.outBuf
	if o == nil || len(o.binds) > 1024 || len(o.runs) > 1024 { // clear costs what a map once held
		o = &outstanding{binds: map[string]bool{}, preempts: map[string]bool{}, grows: map[string][]pmember{}, runs: map[string]uint64{}}
		e.outBuf = o
		return o
	}
	clear(o.binds)
	clear(o.preempts)
	clear(o.grows)
	clear(o.runs)
	clear(o.bindIDs)
	o.bindIDs = o.bindIDs[:0]
	o.mig = nil
	return o
}

// walk runs steps 4 to 6 over the cursor's jobs, noting the order.
func (e *Engine) walk(cur queue.Cursor, rd *Ready) {
	cs := &e.cyc
	canCut := e.cutAllowed()
	cs.quotaIdle = false
	defer func() { cs.quotaIdle = false }() // PendingAll's consider asks the tree
	for j, ok := cur.Next(); ok; j, ok = cur.Next() {
		if cs.skipped {
			if j != cs.skipNext {
				panic("engine: broken invariant: a skip's cursor yielded " + j.ID + ", not the next candidate")
			}
			cs.skipped, cs.skipNext = false, nil
		}
		if canCut && e.cutHere(&canCut) {
			cs.cut, cs.cutCur, cs.cutJob = true, cur, j
			if e.elastic > 0 { // grow books after the walk
				cs.cutPlan = cs.plan.Clone()
			}
			return
		}
		if canCut && e.skipHere(cur, j) {
			continue // the cursor passed j and the jobs up to the next candidate
		}
		if st, waits := e.consider(j, rd); waits {
			cs.pend = append(cs.pend, st)
			e.order = append(e.order, j)
		}
	}
}

// sinceCycle records what came in between two cycles, for resumable:
// Step notes each event's kind, submit notes fractional and elastic jobs
// (through the intake too), and the cycle clears it.
type sinceCycle struct {
	events uint32 // bit k: an event of kind k came
	shaped bool   // a fractional or elastic job was submitted
}

// resumable reports whether the next cycle at now may resume the last
// one's walk (see resume). It is the one place that decides; resumption
// is off when:
//   - the last cycle changed something (a bind, preemption, resize, MIG
//     plan, claim, hold, requeue, failure, bind backoff, yield, a job in its
//     grace period, a fractional job blocked: e.quiet is false), since a
//     bind late in a walk changes what the jobs before it see next time;
//   - an event other than a submission or a tick came since (a job ended,
//     a node changed, a job was adopted or checkpointed); refusals in
//     Advance need no rule of their own: they refuse decisions, and a
//     cycle that made decisions is not quiet;
//   - a fractional or elastic job was submitted since;
//   - elastic jobs run, preemption is on, or the backfill window is set
//     (the window moves with the clock);
//   - a running job's expected end or a reservation's start has come, or
//     a reservation entered or left the span that a job with a limit
//     overlaps;
//   - tests turned it off (noResume), or Config.DisableCaches.
//
// The order check (the policy still orders the walk's jobs first and as
// before) is resume's, since it needs the cursor.
func (e *Engine) resumable(now time.Time) bool {
	cs := &e.cyc
	const allowed = 1<<EventTick | 1<<EventJobSubmitted
	if !e.quiet || e.since.events&^allowed != 0 || e.since.shaped || e.noResume || !e.siteResumable() ||
		e.cfg.DisableCaches || e.elastic > 0 || e.cfg.Preemption.Priority || e.cfg.Preemption.Reclaim || e.cfg.Backfill.Window > 0 {
		return false
	}
	if first, ok := e.tl.Min(); ok && first.at <= now.UnixNano() {
		return false
	}
	for _, r := range cs.res {
		if !r.start.After(now) {
			return false
		}
		// A job with a limit overlaps the reservations starting before it
		// would end (prefixFor): that count must not have changed.
		if cs.limMax > 0 && !r.start.Before(cs.now.Add(cs.limMin)) && r.start.Before(now.Add(cs.limMax)) {
			return false
		}
	}
	return true
}

// resume is steps 2 to 6 for a cycle that resumable allows, when the
// policy still orders the jobs of the last walk first and as before: then
// the walk would repeat itself job for job (the same plan, quota,
// reservations and memos), so their statuses are copied and only the jobs
// after them are considered, on the walk state the last cycle left. It
// reports false, having changed nothing but the cursor, when it cannot.
// The decisions are those of a full cycle (FuzzEngine compares both).
func (e *Engine) resume(now time.Time, rd *Ready) bool {
	cs := &e.cyc
	if !e.resumable(now) {
		return false
	}
	e.tree.Advance(now) // policies order on decayed usage
	cur := e.policy.Order(e.pending, now)
	for _, o := range e.order {
		j, ok := cur.Next()
		if !ok || j != o {
			return false
		}
	}
	cs.now, cs.nowNs = now, now.UnixNano()
	cs.dropHeld()
	cs.plan = e.cyclePlan()
	cs.cutSeen = cutKey{}
	cs.resetSkips()
	clear(cs.batches) // computed on the last cycle's plan
	// The last cycle's statuses, shared: Ready and View hold them with no
	// spare capacity, and they are never written again, so new statuses
	// go after them in the same array while there is room.
	cs.pend, cs.pendOwn = e.lastPend, false
	e.walk(cur, rd)
	e.resumed++
	return true
}

// drain moves the intake's jobs into the pending set.
func (e *Engine) drain(rd *Ready) {
	e.drainBuf = e.intake.Drain(e.drainBuf[:0])
	for i, j := range e.drainBuf {
		if e.jn != nil {
			r := &e.jn.recs[len(e.jn.recs)-1]
			r.Intake = append(r.Intake, j)
		}
		if err := e.submit(j); err != nil {
			e.rejected = append(e.rejected, Rejection{Job: j.ID, Err: err})
		}
		e.drainBuf[i] = nil
	}
}

// endGracePeriods requeues preempted jobs whose grace period is over.
func (e *Engine) endGracePeriods(now time.Time) {
	if e.stopping == 0 {
		return
	}
	var due []string
	for _, js := range e.active {
		if js.st == stateStopping && !js.deadline.After(now) && js.preemptSt == bindNone {
			due = append(due, js.j.ID)
		}
	}
	slices.Sort(due)
	for _, id := range due {
		e.requeue(e.jobs[id], now)
	}
}

// bindClaims binds preemptors whose claimed GPUs are all free; claims that
// can no longer be honoured (a node failed, quota changed) are dropped and
// their jobs go through the walk like any other.
func (e *Engine) bindClaims(rd *Ready) {
	cs := &e.cyc
	for _, id := range sortedKeys(e.claims) {
		c := e.claims[id]
		js := e.jobs[id]
		if js == nil || js.st != statePending {
			delete(e.claims, id)
			continue
		}
		free := true
		for _, g := range c.place.gpus {
			if !cs.plan.IsFree(g) {
				free = false
				break
			}
		}
		if c.place.shared {
			// Shares and instances are not held for the claim: it waits
			// until its victims are gone.
			for _, v := range c.victims {
				if e.isActive(v) {
					free = false
					break
				}
			}
		}
		if !free {
			// Past its start with the GPUs still taken: given up, unless a
			// victim's preemption is still unconfirmed (assumed or
			// unknown): the GPUs are the victim's until the backend says.
			if !c.start.After(cs.now) && !e.awaitsVictims(c) {
				delete(e.claims, id)
			}
			continue
		}
		delete(e.claims, id)
		if fit, err := e.tree.Fits(js.j); err != nil || !fit.OK {
			continue
		}
		if e.site != nil && !e.claimAllowed(js, c.place) {
			continue // a site rule set since holds it back: the walk decides
		}
		if err := c.place.book(cs.plan); err != nil {
			continue
		}
		e.started(js, c.place, false, rd)
	}
}

// holdClaims books on the plan the free GPUs of the remaining claims
// (for a claim with shared members, also the free GPUs they will share;
// GPUs shared now are not free: fractional jobs keep off them through
// cs.claimed).
func (e *Engine) holdClaims() {
	cs := &e.cyc
	if len(e.claims) == 0 {
		return
	}
	cs.claimed = map[uint32]bool{}
	for _, id := range sortedKeys(e.claims) {
		for _, g := range e.claims[id].place.claimGPUs() {
			cs.claimed[g] = true
			if cs.plan.IsFree(g) {
				cs.holds = append(cs.holds, g)
			}
		}
	}
	slices.Sort(cs.holds)
	cs.holds = slices.Compact(cs.holds)
	if err := cs.plan.Allocate(cs.holds); err != nil {
		panic("engine: broken invariant: holding claimed GPUs: " + err.Error())
	}
}

// started records a placement booked on the plan: quota, state, bind.
func (e *Engine) started(js *job, p *placement, backfill bool, rd *Ready) bool {
	cs := &e.cyc
	if js.site != nil && !e.siteAllows(js) { // the walk checked; later starts (shrinking) may not
		p.unbook(cs.plan)
		return false
	}
	if err := e.tree.Charge(js.j, cs.now); err != nil {
		p.unbook(cs.plan)
		return false
	}
	cs.quotaIdle = false // usage grew
	e.pending.Remove(js.j.ID)
	delete(e.byPtr, js.j)
	js.st, js.place, js.start = stateRunning, p, cs.now
	js.preemptErr = ""
	e.runs++
	js.run = e.runs
	js.confirmed, js.backfilled = false, backfill
	js.members = countGroup(p, 0)
	js.checkpoint = time.Time{}
	js.notBefore = 0
	js.quotaWait = false
	e.activate(js)
	rd.Binds = append(rd.Binds, Bind{Job: js.j.ID, Members: toMembers(e.cluster, p.members), Backfill: backfill,
		Queue: js.j.Queue, Submit: js.j.Submit, Partition: e.boundPartition(js, p), Run: js.run})
	e.out.bind(js.j.ID)
	e.out.runs[js.j.ID] = js.run
	cs.dropHeld()
	clear(cs.fits)
	// The failure memo's verdicts stay true (free GPUs only shrink), but
	// its reasons count what was free before this placement.
	clear(cs.fail)
	return true
}

// consider is steps 4 to 6 for one job. It returns the job's status and
// whether it is still pending.
func (e *Engine) consider(j *queue.Job, rd *Ready) (st PendingStatus, waits bool) {
	cs := &e.cyc
	js := e.byPtr[j]
	js.walked = cs.gen
	if l := j.RuntimeLimit; l > 0 {
		if cs.limMax == 0 || l < cs.limMin {
			cs.limMin = l
		}
		cs.limMax = max(cs.limMax, l)
	}
	st = PendingStatus{Job: j.ID, Queue: j.Queue, js: js}
	waits = true
	if (js.held || js.notBefore > cs.nowNs) && e.waitsForBind(js, &st) {
		return st, true
	}
	if js.preemptErr != "" {
		e.noteBindHold(js, js.preemptErr)
	}
	if len(e.claims) > 0 {
		if c := e.claims[j.ID]; c != nil {
			st.Reason, st.Start = ReasonPreempting, c.start
			return st, true
		}
	}
	if js.badOf != nil && (js.badC == nil || js.badC == e.cluster) {
		st.Reason = badReason(js.badOf)
		return st, true
	}
	if js.site != nil && e.siteWait(js, &st) {
		return st, true
	}
	// While quota holds nothing back, every job fits (cs.quotaIdle); a
	// guaranteed replica asks anyway, since it must fit without borrowing
	// (Fit.Borrowing, which the idle shortcut does not know). Today no walk
	// with a service can cut (cutAllowed), so quotaIdle is never set with
	// a replica in it; the guard keeps that so if the cut is widened.
	guaranteed := js.svc != nil && js.svc.spec.QoS == QoSGuaranteed
	fit, err := queue.Fit{OK: true}, error(nil)
	if !cs.quotaIdle || guaranteed {
		fit, err = e.tree.Fits(j)
	}
	if err != nil {
		st.Reason = ReasonInvalid
		return st, true
	}
	if fit.OK && fit.Borrowing && guaranteed {
		fit = e.guaranteedFit(j) // guaranteed replicas never borrow
	}
	if !fit.OK {
		js.quotaWait = true
		st.Reason, st.Quota = ReasonQuota, fit
		e.blocked(js, len(cs.pend))
		return st, true
	}
	if e.cfg.Backfill.Mode == BackfillNone && cs.blockedCap {
		st.Reason = ReasonBlocked
		return st, true
	}
	// 4 and 6: place now, respecting the reservations it would overlap.
	p := cs.prefixFor(js)
	if js.site != nil && len(js.site.parts) > 1 {
		e.pickPartition(js, p)
	}
	// A job whose reservation is due starts on exactly the reserved GPUs
	// when they are free: jobs later in order were planned around them.
	if r := e.lastResOf(js); r != nil && !r.start.After(cs.now) && r.pl != nil {
		if s := e.advSnap(e.snapFor(p), js, cs.now); allFree(s, r.pl.gpus) && r.pl.book(cs.plan) == nil {
			if e.started(js, r.pl, len(cs.res) > 0, rd) {
				return st, false
			}
		}
	}
	cs.yield = cs.yield[:0]
	if js.quotaWait {
		e.yieldTo(js)
	}
	var (
		res gang.Result
		why gang.Reason
		ok  bool
	)
	if len(cs.yield) == 0 && js.svc != nil && e.batchable(js) {
		// Identical replicas: one placement for all (svcbatch.go).
		if pl := e.batchNext(js, p); pl != nil {
			if !(js.frac && cs.sharesReservedPl(pl, p)) && pl.book(cs.plan) == nil {
				if e.started(js, pl, len(cs.res) > 0, rd) {
					return st, false
				}
			}
			delete(cs.batches, js.svc)
		}
	}
	if len(cs.yield) == 0 {
		res, why, ok = e.tryPlace(js, p)
	} else {
		res, why, ok = e.tryPlaceYielding(js, p)
	}
	if js.badOf != nil {
		st.Reason = badReason(js.badOf)
		return st, true
	}
	shareReserved := false
	if ok && js.frac && cs.sharesReserved(&res, p) {
		// A GPU shared now is not free, so neither the held snapshot nor
		// the claims' holds keep fractional members off reserved or
		// claimed GPUs: one more share there would keep the GPU from the
		// reservation or the preemptor.
		ok, shareReserved = false, true
	}
	reconf := false
	if ok && js.frac && len(e.migFlight) > 0 && e.onUnknownMIG(res.GPUs()) {
		// Nothing is placed on a GPU whose MIG change's outcome is
		// unknown: its instances may not be those the books say.
		ok, reconf = false, true
	}
	if ok {
		pl := fromResult(&res, &js.req)
		if err := pl.book(cs.plan); err == nil && e.started(js, pl, len(cs.res) > 0, rd) {
			return st, false
		}
	}
	st.Reason, st.Place = ReasonCapacity, why
	if reconf {
		st.Reason = ReasonReconfiguring
	} else if shareReserved {
		st.Reason = ReasonReservedGPUs
	} else if p > 0 {
		if e.fitsAt(js, 0) {
			st.Reason = ReasonReservedGPUs
		}
	}
	cs.blockedCap = true
	if js.frac {
		// No reservations for fractional / MIG jobs: the timeline does not
		// track instances and shares. Their demand goes to step 8.
		if st.Reason == ReasonCapacity {
			cs.fracBlocked = append(cs.fracBlocked, fracRec{js, len(cs.pend)})
		}
		st.plan = NoEstimateFractional
		e.blocked(js, len(cs.pend))
		return st, true
	}
	// 5. Reserve.
	// A job that can never start within the window does not use up a
	// reservation, but the tries are bounded: 2 x depth + 2 per cycle.
	d := e.cfg.depth()
	easyTaken := d == 1 && (len(cs.yield) > 0 || cs.yielded && !e.holds(js))
	if len(cs.yield) > 0 && d == 1 {
		// EASY: the one reservation stays with its holder.
		cs.yielded = true
	}
	st.plan = NoEstimateDepth // why it has no estimate (see estimate.go)
	if len(cs.res) < d && cs.reserveTries < 2*d+2 && !easyTaken {
		cs.reserveTries++
		r, ok := e.reserveIn(js)
		st.plan = cs.unplanned // read only when ok is false
		if ok {
			cs.addRes(r)
			if cs.resAt == nil {
				cs.resAt = map[string]int{}
			}
			cs.resAt[js.j.ID] = len(cs.pend)
			st.Reason, st.Start = ReasonReserved, r.start
		}
	}
	cs.yield = cs.yield[:0]
	e.blocked(js, len(cs.pend))
	return st, true
}

// yieldTo sets cs.yield for js, a job that was blocked by quota: the
// reservations of the last cycle held by pending jobs not yet considered
// in this walk (so behind js in order). While js waited for quota, those
// jobs got reservations that js, ahead of them, did not take; once js has
// the quota it is planned around them, like a later job, instead of
// taking their GPUs back (which would delay a promised start though no
// estimate failed). A job blocked by quota thus gets no reservation and
// displaces no holder; in EASY mode it waits for the holder to start and
// then takes the one reservation itself.
func (e *Engine) yieldTo(js *job) {
	cs := &e.cyc
	if len(e.lastRes) == 0 || e.holds(js) {
		// A job that held a reservation last cycle was planned ahead of
		// the jobs behind it, whose reservations were then made around
		// its own: yielding to those would push it later every cycle
		// (enginetest reserve_quota_yield).
		return
	}
	for _, id := range sortedKeys(e.lastRes) {
		r := e.lastRes[id]
		if id == js.j.ID || r.pl == nil {
			continue
		}
		if h := e.jobs[id]; h == nil || h.st != statePending {
			continue
		}
		if h := e.jobs[id]; h.walked == cs.gen {
			continue // considered this cycle, ahead of js (in cs.res if reserved)
		}
		cs.yield = append(cs.yield, r)
	}
}

// holds reports whether js held a reservation in the last cycle.
func (e *Engine) holds(js *job) bool {
	_, ok := e.lastRes[js.j.ID]
	return ok
}

// tryPlaceYielding places js now with the first p reservations held and
// the reservations it yields to that it would overlap (by its limit).
func (e *Engine) tryPlaceYielding(js *job, p int) (gang.Result, gang.Reason, bool) {
	cs := &e.cyc
	s := e.advSnap(e.snapFor(p), js, cs.now)
	if s == e.snapFor(p) {
		s = s.Clone()
	}
	defer e.cyc.drop(s)
	l := js.j.RuntimeLimit
	for _, r := range cs.yield {
		if l <= 0 || r.start.Before(cs.now.Add(l)) {
			bookFree(s, r.gpus)
		}
	}
	res, err := e.placeScratch(s, &js.req)
	if err != nil {
		js.badOf, js.badC = err, e.cluster
		return gang.Result{}, gang.Reason{}, false
	}
	if !res.Found {
		return res, res.Reason, false
	}
	return res, gang.Reason{}, true
}

// lastResOf is js's reservation of the last cycle, if any (the flag
// spares the walk a map lookup per job).
func (e *Engine) lastResOf(js *job) *resv {
	if !js.hasRes {
		return nil
	}
	return e.lastRes[js.j.ID]
}

// blocked notes a job that may preempt, and where its status will be.
func (e *Engine) blocked(js *job, at int) {
	cs := &e.cyc
	if len(cs.preemptors) < e.cfg.Preemption.MaxPreemptorsPerCycle && (e.cfg.Preemption.Priority || e.cfg.Preemption.Reclaim) {
		cs.preemptors = append(cs.preemptors, js)
		cs.statusOf[js.j.ID] = at
		if cs.ahead == nil {
			cs.ahead = map[string][]string{}
		}
		ids := make([]string, len(cs.res))
		for i, r := range cs.res {
			ids[i] = r.job
		}
		cs.ahead[js.j.ID] = ids
	}
}

// errFractional: fractional and MIG members are booked in single-group,
// non-elastic jobs only.
var errFractional = fmt.Errorf("%w: fractional or MIG members in multi-group or elastic jobs", gang.ErrUnsupported)

func badReason(err error) ReasonCode {
	if errors.Is(err, gang.ErrUnsupported) {
		return ReasonUnsupported
	}
	return ReasonInvalid
}

// prefixFor is how many reservations (by start) a job starting now would
// overlap: those starting before it ends by its limit (all of them
// without a limit).
func (cs *cycleState) prefixFor(js *job) int {
	if len(cs.res) == 0 {
		return 0
	}
	l := js.j.RuntimeLimit
	if l <= 0 {
		return len(cs.res)
	}
	end := cs.now.Add(l)
	n := 0
	for n < len(cs.res) && cs.res[n].start.Before(end) {
		n++
	}
	return n
}

// sharesReserved reports whether a fractional placement puts a member on a
// GPU of the first p reservations or of a preemptor's claim.
func (cs *cycleState) sharesReserved(res *gang.Result, p int) bool {
	for _, g := range res.GPUs() {
		if cs.claimed[g] {
			return true
		}
		for _, r := range cs.res[:p] {
			if _, found := slices.BinarySearch(r.gpus, g); found {
				return true
			}
		}
	}
	return false
}

// snapFor is the plan with the GPUs of the first p reservations booked.
func (e *Engine) snapFor(p int) *topo.Snapshot {
	cs := &e.cyc
	if p == 0 {
		return cs.plan
	}
	for len(cs.held) <= p {
		cs.held = append(cs.held, nil)
	}
	if s := cs.held[p]; s != nil {
		return s
	}
	s := cs.plan.Clone()
	for _, r := range cs.res[:p] {
		bookFree(s, r.gpus)
	}
	cs.held[p] = s
	return s
}

// aheadSnap is a clone of the plan with the GPUs reserved for jobs ahead
// of p booked: what preemption on p's behalf may use.
func (e *Engine) aheadSnap(p *job) *topo.Snapshot {
	cs := &e.cyc
	s := cs.plan.Clone()
	for _, r := range cs.res {
		if slices.Contains(cs.ahead[p.j.ID], r.job) && r.job != p.j.ID {
			bookFree(s, r.gpus)
		}
	}
	return e.advSnap(s, p, cs.now)
}

// dropConflicting removes the reservations of jobs behind p (made after p
// was considered) that use any of gpus: step 7 gave those GPUs to p, so
// those jobs lose their estimate this cycle and are planned again in the
// next.
func (e *Engine) dropConflicting(p *job, gpus []uint32) {
	cs := &e.cyc
	taken := make(map[uint32]bool, len(gpus))
	for _, g := range gpus {
		taken[g] = true
	}
	cs.deleteRes(func(r *resv) bool {
		if r.job == p.j.ID || slices.Contains(cs.ahead[p.j.ID], r.job) {
			return false
		}
		for _, g := range r.gpus {
			if taken[g] {
				if i, ok := cs.resAt[r.job]; ok && i < len(cs.pend) && cs.pend[i].Job == r.job {
					cs.pend[i].Reason, cs.pend[i].Start = ReasonCapacity, time.Time{}
				}
				return true
			}
		}
		return false
	})
}

// allFree reports whether every GPU is allocatable and free on s.
func allFree(s *topo.Snapshot, gpus []uint32) bool {
	for _, g := range gpus {
		if !s.IsFree(g) {
			return false
		}
	}
	return true
}

// bookFree books the GPUs of gpus that are free on s.
func bookFree(s *topo.Snapshot, gpus []uint32) {
	var arr [256]uint32 // on the stack for gangs up to 256 GPUs
	buf := arr[:0]
	for _, g := range gpus {
		if s.IsFree(g) {
			buf = append(buf, g)
		}
	}
	if len(buf) > 0 {
		if err := s.Allocate(buf); err != nil {
			panic("engine: broken invariant: booking free GPUs: " + err.Error())
		}
	}
}

// fitsAt reports whether js would fit with the first p reservations held,
// without placing it, using both memos.
func (e *Engine) fitsAt(js *job, p int) bool {
	cs := &e.cyc
	if js.gpuN > 0 && js.gpuN > e.snapFor(p).Free() {
		return false // fewer free GPUs than it needs
	}
	key := js.shape<<16 | uint64(p)
	if js.shape != 0 && !e.advApplies(js, cs.now) && !e.cfg.DisableCaches {
		if n, ok := cs.fits[key]; ok && js.members0 <= n {
			return true
		}
	}
	_, _, ok := e.tryPlace(js, p)
	if ok && js.shape != 0 && !e.cfg.DisableCaches && js.members0 > cs.fits[key] {
		cs.fits[key] = js.members0
	}
	return ok
}

// tryPlace places js's request on the plan with the first p reservations
// held, using the failure memo.
func (e *Engine) tryPlace(js *job, p int) (gang.Result, gang.Reason, bool) {
	cs := &e.cyc
	held := e.advApplies(js, cs.now) // an advance reservation keeps js off GPUs: no memo
	key, cacheable := js.shape<<16|uint64(p), js.shape != 0 && !held && !e.cfg.DisableCaches
	members := 0
	if cacheable {
		members = js.members0
		if rec, ok := cs.fail[key]; ok && members >= rec.members {
			// The memo's reason is that of a job of the same shape;
			// only a count of group 0's members depends on this job.
			r := rec.reason
			if r.Group == 0 && r.Code == gang.NoCapacity {
				r.Need = members
			}
			return gang.Result{}, r, false
		}
	}
	s := e.snapFor(p)
	if held {
		s = e.advSnap(s, js, cs.now)
	}
	res, err := e.placeScratch(s, &js.req)
	if err != nil {
		js.badOf, js.badC = err, e.cluster
		return gang.Result{}, gang.Reason{}, false
	}
	if !res.Found {
		if cacheable {
			if rec, ok := cs.fail[key]; !ok || members < rec.members {
				cs.fail[key] = failRec{members: members, reason: res.Reason}
			}
		}
		return res, res.Reason, false
	}
	return res, gang.Reason{}, true
}

// deleteRes drops the reservations del picks (resByEnd is rebuilt when
// next needed).
func (cs *cycleState) deleteRes(del func(*resv) bool) {
	cs.res = slices.DeleteFunc(cs.res, func(r *resv) bool {
		if del(r) {
			cs.logRes(true, r)
			return true
		}
		return false
	})
	cs.resByEndStale = true
}

// addRes inserts a reservation by start, then job; held snapshots and the
// failure memo depend on the reservations, so they are dropped.
func (cs *cycleState) addRes(r *resv) {
	i, _ := slices.BinarySearchFunc(cs.res, r, func(a, b *resv) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		if a.job < b.job {
			return -1
		}
		return 1
	})
	cs.res = slices.Insert(cs.res, i, r)
	r.resNs()
	cs.logRes(false, r)
	if !cs.resByEndStale {
		j, _ := slices.BinarySearchFunc(cs.resByEnd, r.endNs, func(a *resv, end int64) int { return cmp.Compare(a.endNs, end) })
		cs.resByEnd = slices.Insert(cs.resByEnd, j, r)
	}
	clear(cs.batches)
	cs.dropHeld()
	clear(cs.fail)
	clear(cs.fits)
}

// awaitsVictims reports whether a victim of c is stopping with its
// preemption not yet confirmed (Outcome.AssumePreemptions).
func (e *Engine) awaitsVictims(c *claim) bool {
	for _, v := range c.victims {
		if js := e.jobs[v]; js != nil && js.st == stateStopping && js.preemptSt != bindNone {
			return true
		}
	}
	return false
}
