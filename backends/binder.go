package backends

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/berthsched/berth/engine"
)

// BindResult is the outcome of one asynchronous bind as the Runner
// stepped it into the engine (engine.BindApplied, BindFailed,
// BindUnknown).
type BindResult struct {
	Job string
	Run uint64
	// Err is nil when the bind was applied. Unknown: the call timed out
	// (Err wraps ErrCallTimeout) and the backend's own state decides
	// later; Withdrawn: Run stopped before the bind was made.
	Err       error
	Unknown   bool
	Withdrawn bool
}

// The asynchronous side of the Runner (see docs/reliability.md): binds are
// issued on goroutines and their outcomes come back as results, which the
// loop steps into the engine as events. The loop itself never waits on a
// bind: it runs the next cycle while binds are in flight. A call past
// CallTimeout is abandoned (its goroutine is left to return) and its bind
// is unknown, not failed: the job stays booked until the abandoned call
// returns or the backend's Running list (polled every ReconcileInterval
// while anything is unknown) says whether it runs.
//
// On a virtual clock (any Clock that is not RealClock or embeds it: the
// simulator's) results arriving at wall-clock moments would make runs
// nondeterministic, so the loop waits for the calls in flight (each bounded by CallTimeout, and
// then up to one more CallTimeout for abandoned ones to come back) before
// it lets the backend's clock move (Events.Next), and steps each batch of
// results in job order. The virtual clock does not move meanwhile, so a
// hung call delays no other job's virtual time.

type resultKind uint8

const (
	resBind        resultKind = iota // a bind op ended
	resLate                          // an abandoned call returned
	resPoll                          // a Running poll returned
	resStopped                       // a stop (fence or ghost) ended
	resAutoscale                     // an autoscaling round planned (autoscale.go)
	resScaledDown                    // an autoscaling round's releases ended
	resPreempt                       // a preemption ended (actops.go)
	resLatePreempt                   // an abandoned preemption call returned
	resRelease                       // a replica stop or a shrink ended
	resLateRelease                   // an abandoned stop or shrink call returned
	resGrow                          // a grow ended
	resMIG                           // a MIG change ended (migops.go)
	resLateMIG                       // an abandoned MIG call returned
	resMIGUndo                       // the undo of a MIG change given up ended
)

// result is what an op sends back to the loop.
type result struct {
	kind      resultKind
	job       string
	run       uint64
	members   []engine.Member
	err       error
	unknown   bool
	withdrawn bool
	abandoned int             // resBind: calls abandoned, whose late returns will come
	running   []RunningJob    // resPoll
	reason    string          // resStopped: the bind failure to step; empty: a ghost stopped
	ghost     bool            // resStopped
	at        time.Time       // resPoll: when the poll began
	polled    map[string]bool // resPoll: jobs unknown when the poll began
	auto      *autoRound      // resAutoscale, resScaledDown
	deferred  string          // resBind: not made, its GPUs are fenced (why)
	preempt   engine.Preemption
	release   string                    // resRelease: "stop" or "shrink"
	mig       engine.MIGReconfiguration // resMIG, resLateMIG (job: its GPU key)
	layouts   map[string]migLayoutRead  // resPoll: the unknown MIG changes' GPUs
}

// inflightBind is a bind in flight: its run, and the cancel of its
// context (called when the engine no longer binds that run: the job
// ended, was cancelled or requeued meanwhile, so that no retry of the bind
// starts it again).
type inflightBind struct {
	run    uint64
	cancel context.CancelFunc
}

// unknownBind is a job whose bind call timed out.
type unknownBind struct {
	run     uint64
	members []engine.Member
	waiting int   // abandoned calls that have not returned
	err     error // a late return's error
	since   time.Time
}

// async is the Runner's state for asynchronous binds. mu guards the
// fields ops write; the others are the loop's own.
type async struct {
	mu        sync.Mutex
	res       []result
	ops       int // ops in flight
	abandoned int // calls abandoned past CallTimeout, not returned yet
	// abandonedTotal counts the calls ever abandoned; graceSeen is its
	// value when waitIdle last gave them their grace.
	abandonedTotal, graceSeen int
	chain                     map[string]chan struct{}
	note                      chan struct{} // a result came (capacity 1)
	slots                     chan struct{} // backend calls in flight (Parallelism)

	inflight map[string]inflightBind // job -> its bind in flight
	unknown  map[string]*unknownBind
	// issued lists the jobs this Runner bound since the last poll, and
	// those the poll kept (running or known to the engine), for the ghost
	// sweep; a job bound again is listed again. A slice: a month's replay
	// binds 3.4 million jobs, and each insert into a map of a day's binds
	// (the poll empties it daily there) was 3% of its CPU time.
	issued   []string
	lastPoll time.Time
	polling  bool
	pollSoon bool
	stepped  []BindResult // since the last cycle
	acts     []ActResult  // since the last cycle
	ghosts   int          // ghosts stopped
	// preempting: preemptions whose calls timed out (or failed after a
	// timeout), until the backend's answer; released: stops and shrinks
	// that failed or timed out, whose GPUs stay fenced (fences, guarded
	// by mu: GPU key -> why) until the backend no longer runs them.
	preempting map[string]*unknownPreempt
	released   map[string]*releasing
	fences     map[string]string
	// migUnknown: MIG changes whose calls timed out, by GPU key, until
	// the backend's answer; migFences (guarded by mu): GPU key -> the
	// change that failed or is unknown there (migops.go); migs: MIG
	// outcomes stepped since the last cycle.
	migUnknown map[string]*unknownMIG
	migGivenUp map[string]uint64 // GPU key -> the Seq of a change failed with its call in flight
	migFences  map[string]engine.MIGReconfiguration
	migs       []MIGResult
	virtual    bool // the Clock is virtual (see RealClock)
	noPoll     bool // the backend is no RunningReporter

	// spare is a slice of results settled before, for res (take,
	// recycle); under mu.
	spare []result
}

func newAsync(parallelism int, virtual bool) *async {
	return &async{chain: map[string]chan struct{}{}, note: make(chan struct{}, 1), slots: make(chan struct{}, parallelism),
		inflight: map[string]inflightBind{}, unknown: map[string]*unknownBind{}, virtual: virtual,
		preempting: map[string]*unknownPreempt{}, released: map[string]*releasing{}, fences: map[string]string{},
		migUnknown: map[string]*unknownMIG{}, migGivenUp: map[string]uint64{}, migFences: map[string]engine.MIGReconfiguration{}}
}

func (a *async) post(res result) {
	a.mu.Lock()
	a.res = append(a.res, res)
	a.mu.Unlock()
	select {
	case a.note <- struct{}{}:
	default:
	}
}

// take returns the results so far, in a deterministic order: by kind,
// then job, then run.
func (a *async) take() []result {
	a.mu.Lock()
	res := a.res
	a.res, a.spare = a.spare[:0], nil
	a.mu.Unlock()
	slices.SortStableFunc(res, func(x, y result) int {
		if c := cmp.Compare(x.kind, y.kind); c != 0 {
			return c
		}
		if c := cmp.Compare(x.job, y.job); c != 0 {
			return c
		}
		return cmp.Compare(x.run, y.run)
	})
	return res
}

// recycle gives back a slice take returned, once its results are settled:
// the next take hands it out again for the results to come (a result is
// large, and a replay settles one a bind).
func (a *async) recycle(res []result) {
	clear(res)
	a.mu.Lock()
	if a.spare == nil {
		a.spare = res[:0]
	}
	a.mu.Unlock()
}

// busy reports whether ops are in flight (or, with abandoned, calls
// abandoned and not returned).
func (a *async) busy(abandoned bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ops > 0 || abandoned && a.abandoned > 0
}

// goOp runs f on a goroutine and posts its result. The ops that share a
// key run in order: key[0] is the job's (a bind after the stop of the
// job's ghost, ...), the others name GPUs (gpuKeys: a bind after the stop
// of the replica or the shrink that frees its GPUs, see fence). An op
// waits for the earlier ones only as long as they run, each bounded by
// its calls' CallTimeout (an abandoned call does not hold its op), so an
// op never queues for ever behind a hung call.
func (r *Runner) goOp(ctx context.Context, keys []string, f func(ctx context.Context) result) {
	a := r.as
	if r.cfg.Inline {
		// One op at a time, on the loop's goroutine: each ends before
		// the next begins, so ops sharing a key run in order.
		a.post(f(ctx))
		return
	}
	a.mu.Lock()
	a.ops++
	var prevs []chan struct{}
	done := make(chan struct{})
	for _, k := range keys {
		if p := a.chain[k]; p != nil && !slices.Contains(prevs, p) {
			prevs = append(prevs, p)
		}
		a.chain[k] = done
	}
	a.mu.Unlock()
	go func() {
		for _, p := range prevs {
			<-p
		}
		res := f(ctx)
		a.mu.Lock()
		a.ops--
		for _, k := range keys {
			if a.chain[k] == done {
				delete(a.chain, k)
			}
		}
		a.res = append(a.res, res)
		a.mu.Unlock()
		close(done)
		select {
		case a.note <- struct{}{}:
		default:
		}
	}()
}

// waitIdle waits until no op is in flight and then, when calls were
// abandoned since the last such wait, up to grace for them to come back
// (see async), or until ctx is done. A call abandoned for ever is waited
// for once.
func (r *Runner) waitIdle(ctx context.Context, grace time.Duration) {
	a := r.as
	var deadline time.Time
	for {
		a.mu.Lock()
		ops, left, fresh := a.ops, a.abandoned, a.abandonedTotal > a.graceSeen
		if ops == 0 && (left == 0 || !fresh || grace <= 0) {
			a.mu.Unlock()
			return
		}
		if ops == 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(grace)
			}
			if !time.Now().Before(deadline) {
				a.graceSeen = a.abandonedTotal
				a.mu.Unlock()
				return
			}
		}
		a.mu.Unlock()
		var tc <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			tc = t.C
			defer t.Stop()
		}
		select {
		case <-a.note: // the loop settles what came after waitIdle
		case <-tc:
		case <-ctx.Done():
			return
		}
	}
}

// has reports whether results wait to be settled.
func (a *async) has() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.res) > 0
}

// issueBinds starts the binds of rd on goroutines.
func (r *Runner) issueBinds(ctx context.Context, rd *engine.Ready) {
	for _, b := range rd.Binds {
		g := gangBind{job: b.Job, members: b.Members}
		run := b.Run
		r.as.issued = append(r.as.issued, b.Job)
		r.placed[b.Job] = b.Members
		if r.cfg.Inline {
			// The bind ends before goOp returns: nothing can withdraw it
			// meanwhile, and goOp orders nothing by key (a context and
			// the GPU keys a bind were a tenth of a month's replay's
			// Runner).
			r.as.inflight[b.Job] = inflightBind{run: run, cancel: noCancel}
			r.as.post(r.bindOp(ctx, g, run)) // goOp's inline path, without its closure
			continue
		}
		bctx, cancel := context.WithCancel(ctx)
		r.as.inflight[b.Job] = inflightBind{run: run, cancel: cancel}
		r.goOp(bctx, opKeys(b.Job, b.Members), func(ctx context.Context) result { return r.bindOp(ctx, g, run) })
	}
}

// noCancel is the cancel of a bind made inline (RunnerConfig.Inline).
func noCancel() {}

// bindOp binds one gang: with BindGang, or member by member (a gang with
// a member that failed is rolled back). A gang with members that timed
// out and none that failed is unknown: it is not rolled back, and the
// abandoned calls report their late returns.
func (r *Runner) bindOp(ctx context.Context, g gangBind, run uint64) result {
	res := result{kind: resBind, job: g.job, run: run, members: g.members}
	if why := cmp.Or(r.fencedOn(g.members), r.migFencedOn(g.members)); why != "" {
		// Ordered after a stop or shrink of these GPUs that failed or
		// timed out, or after a MIG change of the GPU that made its
		// instance and failed or timed out: not called (never two jobs
		// on one GPU, never a bind on an instance not made); the job
		// waits, no try counted (engine.BindDeferred).
		res.err, res.deferred = fmt.Errorf("%w: %s", ErrRefused, why), why
		return res
	}
	// late reports an abandoned call's return; an inline call is never
	// abandoned (callLate), so inline binds make no closure for it.
	var late func(error)
	if !r.cfg.Inline {
		late = func(err error) {
			r.as.mu.Lock()
			r.as.abandoned--
			r.as.mu.Unlock()
			r.as.post(result{kind: resLate, job: g.job, run: run, err: err})
		}
	}
	act := r.cfg.Backend
	var errs []error
	gb, whole := act.(GangBinder)
	switch {
	case whole:
		errs = []error{r.retryLate(ctx, func(ctx context.Context) error { return gb.BindGang(ctx, g.job, g.members) }, late)}
	case r.cfg.Inline:
		// One member after another on this goroutine, as each would call
		// them inline, without its closure (and, for a small gang, the
		// errors on the stack).
		var small [8]error
		errs = small[:0]
		if len(g.members) > len(small) {
			errs = make([]error, 0, len(g.members))
		}
		for i := range g.members {
			errs = append(errs, r.retryLate(ctx, func(ctx context.Context) error { return act.BindMember(ctx, g.job, g.members[i]) }, late))
		}
	default:
		each := make([]error, len(g.members)) // its own: errs stays off the closure
		r.each(ctx, len(g.members), func(ctx context.Context, i int) {
			each[i] = r.retryLate(ctx, func(ctx context.Context) error { return act.BindMember(ctx, g.job, g.members[i]) }, late)
		})
		errs = each
	}
	var failed, unknown error
	nUnknown := 0
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrCallTimeout):
			res.abandoned++
			fallthrough
		case errors.Is(err, errOutcomeUnknown):
			// Timed out, cut short by the Runner's stop, or refused after
			// an attempt that may have been applied: not rolled back
			// (that could come before the call it undoes, or undo a bind
			// that was applied); the backend's state decides.
			nUnknown++
			unknown = cmp.Or(unknown, err)
		default:
			failed = cmp.Or(failed, err)
		}
	}
	switch {
	case failed != nil && nUnknown > 0:
		// Some calls may still come through, or have been applied:
		// rolling back now could come before them. The bind is unknown;
		// once the abandoned calls have returned (or the backend's state
		// says), the whole gang is stopped and the bind failed.
		res.err, res.unknown = fmt.Errorf("%w (and %d calls of unknown outcome: %w)", failed, nUnknown, unknown), true
	case failed != nil:
		// Roll back, even when ctx is done, every member that may be
		// bound: all but those refused (ErrRefused: not applied). A
		// transient error or a timeout does not say the call did nothing
		// (a backend that restarted between the call and its answer).
		// Unbinding a member that is not bound is a no-op.
		var undo []engine.Member
		for i, err := range errs {
			if errors.Is(err, ErrRefused) {
				continue
			}
			if whole {
				undo = g.members
				break
			}
			undo = append(undo, g.members[i])
		}
		res.err = failed
		if len(undo) > 0 {
			if err := r.unbindAll(context.WithoutCancel(ctx), g.job, undo); err != nil {
				// What runs is not known: the job stays booked, unknown,
				// until the backend's state says (never two jobs on a GPU).
				r.log.Error("rollback of a failed gang failed: its bind is unknown", "job", g.job, "err", err)
				res.err, res.unknown = fmt.Errorf("%w; rollback failed: %w", failed, err), true
				return res
			}
		}
		res.withdrawn = errors.Is(failed, errNotBegun)
	case unknown != nil:
		res.err, res.unknown = unknown, true
	}
	return res
}

// unbindAll unbinds members of job; it returns the first error.
func (r *Runner) unbindAll(ctx context.Context, job string, members []engine.Member) error {
	errs := make([]error, len(members))
	r.each(ctx, len(members), func(ctx context.Context, i int) {
		errs[i] = r.retry(ctx, func(ctx context.Context) error { return r.cfg.Backend.UnbindMember(ctx, job, members[i]) })
	})
	return errors.Join(errs...)
}

// stopOp stops members of job in the backend; reason non-empty: then the
// bind of run is stepped failed with it (a fence: the job is unbooked only
// once the backend stopped it); ghost: a job the engine does not run there.
func (r *Runner) stopOp(ctx context.Context, job string, run uint64, members []engine.Member, reason string, ghost bool) {
	r.goOp(ctx, []string{job}, func(ctx context.Context) result {
		err := r.unbindAll(context.WithoutCancel(ctx), job, members)
		return result{kind: resStopped, job: job, run: run, members: members, reason: reason, ghost: ghost, err: err}
	})
}

// pollOp reads the backend's Running list.
func (r *Runner) pollOp(ctx context.Context, now time.Time) {
	a := r.as
	a.polling, a.pollSoon, a.lastPoll = true, false, now
	polled := make(map[string]bool, len(a.unknown))
	for id := range a.unknown {
		polled[id] = true
	}
	migs := make(map[string]engine.MIGReconfiguration, len(a.migUnknown))
	for k, u := range a.migUnknown {
		migs[k] = u.r
	}
	rr, _ := r.cfg.Backend.(RunningReporter)
	r.goOp(ctx, []string{"\x00poll"}, func(ctx context.Context) result {
		var rs []RunningJob
		err := errors.ErrUnsupported
		if rr != nil {
			err = r.call(ctx, func(ctx context.Context) (err error) { rs, err = rr.RunningNow(ctx); return err })
		}
		return result{kind: resPoll, running: rs, err: err, at: now, polled: polled, layouts: r.readMIGLayouts(ctx, migs)}
	})
}

// settle steps the results that came back; it reports whether any did.
func (r *Runner) settle(ctx context.Context, eng *engine.Engine) (bool, error) {
	res := r.as.take()
	for _, x := range res {
		if err := r.settleOne(ctx, eng, x); err != nil {
			return true, err
		}
	}
	r.as.recycle(res)
	if len(res) > 0 && !eng.HasReady() && !r.cfg.Engine.CycleViewsOnly {
		eng.Publish() // binds applied: no cycle shows them
	}
	return len(res) > 0, nil
}

func (r *Runner) settleOne(ctx context.Context, eng *engine.Engine, x result) error {
	a := r.as
	now := r.stepTime(eng)
	switch x.kind {
	case resBind:
		if fl, ok := a.inflight[x.job]; ok && fl.run == x.run {
			fl.cancel()
			delete(a.inflight, x.job)
		}
		br := BindResult{Job: x.job, Run: x.run, Err: x.err, Unknown: x.unknown, Withdrawn: x.withdrawn}
		a.stepped = append(a.stepped, br)
		if run, _, ok := eng.Binding(x.job); !ok || run != x.run {
			// The engine no longer binds this run (the job ended, was
			// cancelled or requeued while the call was made): nothing to
			// step. A bind that may have been applied is looked at by the
			// ghost sweep.
			if x.err == nil || x.unknown {
				a.pollSoon = true
			}
			return nil
		}
		switch {
		case x.deferred != "":
			return r.step(eng, engine.BindDeferred(now, x.job, x.run, x.deferred))
		case x.withdrawn:
			return r.step(eng, engine.BindFailed(now, x.job, x.run, ""))
		case x.unknown:
			a.unknown[x.job] = &unknownBind{run: x.run, members: x.members, waiting: x.abandoned, since: now}
			r.log.Warn("bind of unknown outcome (timed out or cut short): the backend's state decides", "job", x.job, "err", x.err)
			return r.step(eng, engine.BindUnknown(now, x.job, x.run))
		case x.err == nil:
			return r.step(eng, engine.BindApplied(now, x.job, x.run))
		default:
			r.log.Warn("bind failed", "job", x.job, "err", x.err)
			return r.step(eng, engine.BindFailed(now, x.job, x.run, x.err.Error()))
		}
	case resLate:
		u := a.unknown[x.job]
		if u == nil || u.run != x.run {
			// About a bind already settled: it may have started a job
			// the engine no longer runs there; the sweep looks.
			if x.err == nil {
				a.pollSoon = true
			}
			return nil
		}
		u.waiting--
		if x.err != nil {
			u.err = cmp.Or(u.err, x.err)
		}
		if u.waiting > 0 {
			return nil
		}
		delete(a.unknown, x.job)
		if u.err == nil {
			a.stepped = append(a.stepped, BindResult{Job: x.job, Run: x.run})
			return r.step(eng, engine.BindApplied(now, x.job, x.run))
		}
		r.stopOp(ctx, x.job, x.run, u.members, fmt.Sprintf("bind failed after its timeout: %v", u.err), false)
	case resStopped:
		if x.err != nil {
			// The backend may run it still: a ghost is looked at again; an
			// unknown bind stays unknown (booked) and is tried again.
			r.log.Error("stopping a job the engine does not run there failed", "job", x.job, "err", x.err)
			if !x.ghost {
				a.unknown[x.job] = &unknownBind{run: x.run, members: x.members, since: now}
				return nil
			}
			a.pollSoon = true
		}
		if x.ghost {
			return nil
		}
		a.stepped = append(a.stepped, BindResult{Job: x.job, Run: x.run, Err: errors.New(x.reason)})
		return r.step(eng, engine.BindFailed(now, x.job, x.run, x.reason))
	case resAutoscale, resScaledDown:
		return r.settleAutoscale(ctx, eng, x)
	case resPreempt, resLatePreempt, resRelease, resLateRelease, resGrow:
		return r.settleAct(ctx, eng, x)
	case resMIG, resLateMIG, resMIGUndo:
		return r.settleMIG(eng, x)
	case resPoll:
		a.polling = false
		r.reconcileMIG(eng, x)
		switch {
		case errors.Is(x.err, errors.ErrUnsupported):
			a.noPoll = true
			r.giveUpUnknown(ctx, eng, x.at)
			r.giveUpActs(eng, x.at)
		case x.err != nil:
			r.log.Warn("reading the backend's running jobs failed", "err", x.err)
		default:
			r.reconcileBinds(ctx, eng, x)
		}
	}
	return nil
}

// reconcileBinds compares the backend's running jobs with the engine:
// an unknown bind the backend runs on its members is applied (adopted);
// one it does not run is fenced (its members unbound, a no-op if the call
// never came through) and then failed. A job the backend runs that this
// Runner bound and the engine does not run there (a ghost: a bind that
// came through after it was given up) is stopped. Jobs with an op in
// flight are left for the next poll.
func (r *Runner) reconcileBinds(ctx context.Context, eng *engine.Engine, x result) {
	a := r.as
	runs := make(map[string][]engine.Member, len(x.running))
	for _, rj := range x.running {
		runs[rj.Job.ID] = rj.Members
	}
	r.reconcileActs(eng, x, runs)
	now := r.stepTime(eng)
	for _, id := range sortedIDs(a.unknown) {
		u := a.unknown[id]
		if run, _, ok := eng.Binding(id); !ok || run != u.run {
			delete(a.unknown, id) // settled otherwise (ended, cancelled)
			continue
		}
		if !x.polled[id] {
			continue // timed out after the poll began
		}
		ms, running := runs[id]
		switch {
		case running && samePlace(ms, u.members):
			delete(a.unknown, id)
			a.stepped = append(a.stepped, BindResult{Job: id, Run: u.run})
			r.log.Info("bind of unknown outcome runs: adopted", "job", id)
			if err := r.adoptBind(eng, now, id, u.run, ms, u.members); err != nil {
				r.log.Error("stepping an adopted bind", "job", id, "err", err)
			}
		default:
			delete(a.unknown, id)
			reason := "bind timed out and the backend does not run it"
			if running {
				reason = "bind timed out and the backend runs it elsewhere"
			}
			r.stopOp(ctx, id, u.run, append(slices.Clone(u.members), ms...), reason, false)
		}
	}
	// The running jobs this Runner bound (the ghost sweep looks at no
	// other).
	issuedRunning := make(map[string]bool, min(len(runs), len(a.issued)))
	for _, id := range a.issued {
		if _, running := runs[id]; running {
			issuedRunning[id] = true
		}
	}
	for _, rj := range x.running {
		id := rj.Job.ID
		if !issuedRunning[id] || a.unknown[id] != nil {
			continue
		}
		if _, ok := a.inflight[id]; ok {
			continue
		}
		a.mu.Lock()
		_, busy := a.chain[id]
		a.mu.Unlock()
		if busy {
			continue
		}
		if _, _, ok := eng.Binding(id); ok {
			continue
		}
		want, _ := eng.Members(id)
		var extra []engine.Member
		for _, m := range rj.Members {
			if !slices.ContainsFunc(want, func(w engine.Member) bool { return sameMemberAnyOrder(w, m) }) {
				extra = append(extra, m)
			}
		}
		if len(extra) == 0 {
			continue
		}
		a.ghosts++
		r.log.Warn("a job runs where the engine does not run it: stopped", "job", id, "members", len(extra))
		r.stopOp(ctx, id, 0, extra, "", true)
	}
	// Forget jobs the engine no longer has and the backend no longer runs
	// (and the second listing of a job bound twice).
	kept, seen := a.issued[:0], make(map[string]bool, len(issuedRunning))
	for _, id := range a.issued {
		if seen[id] {
			continue
		}
		_, running := runs[id]
		_, inflight := a.inflight[id]
		// A job the engine runs or holds is one it knows: Known alone
		// decides (Members would copy every running job's members).
		if running || inflight || eng.Known(id) {
			seen[id] = true
			kept = append(kept, id)
		}
	}
	clear(a.issued[len(kept):]) // no hold on the IDs forgotten
	a.issued = kept
}

// giveUpUnknown is reconcileBinds for a backend that cannot say what it
// runs (no RunningReporter): an unknown bind whose abandoned calls have not
// returned within ReconcileInterval is stopped (a no-op for members not
// bound) and failed.
func (r *Runner) giveUpUnknown(ctx context.Context, eng *engine.Engine, now time.Time) {
	a := r.as
	for _, id := range sortedIDs(a.unknown) {
		u := a.unknown[id]
		if run, _, ok := eng.Binding(id); !ok || run != u.run {
			delete(a.unknown, id)
			continue
		}
		if now.Before(u.since.Add(r.cfg.ReconcileInterval)) {
			continue
		}
		delete(a.unknown, id)
		r.stopOp(ctx, id, u.run, u.members, "bind timed out and the backend did not answer", false)
	}
}

// settleRestored settles the binds a restored engine holds as assumed or
// unknown (the process that made them stopped before their outcome), once
// reconciliation ran: it finished or requeued those the backend does not
// run, and moved those it runs elsewhere, so the backend runs the others
// on their members: they are applied. One it does not run (a backend that
// changed since its inventory) is withdrawn, no try counted.
func (r *Runner) settleRestored(eng *engine.Engine, running []RunningJob) error {
	ids := eng.BindingJobs()
	if len(ids) == 0 {
		return nil
	}
	runs := make(map[string][]engine.Member, len(running))
	for _, rj := range running {
		runs[rj.Job.ID] = rj.Members
	}
	now := r.stepTime(eng)
	for _, id := range ids {
		run, _, _ := eng.Binding(id)
		ms, _ := eng.Members(id)
		if bm, ok := runs[id]; ok && samePlace(bm, ms) {
			if err := r.adoptBind(eng, now, id, run, bm, ms); err != nil {
				return err
			}
			continue
		}
		if err := r.step(eng, engine.BindFailed(now, id, run, "")); err != nil {
			return err
		}
	}
	return nil
}

// adoptBind steps the bind of run of job applied: the backend runs it on
// have, the same place as the engine's want (samePlace). When the GPU
// indices differ (a backend that picks them inside a node, SLURM), the
// backend's are reported (engine.DevicesReported), so the books match.
func (r *Runner) adoptBind(eng *engine.Engine, now time.Time, job string, run uint64, have, want []engine.Member) error {
	if err := r.step(eng, engine.BindApplied(now, job, run)); err != nil {
		return err
	}
	if sameMembers(have, want) {
		return nil
	}
	return r.step(eng, engine.DevicesReported(now, job, have))
}

// samePlace reports whether a and b hold the same number of whole GPUs on
// each node, whatever their indices (a backend that picks the indices
// itself reports its own); fractional members (MIG instances, shares)
// must be the same members (sameMembers).
func samePlace(a, b []engine.Member) bool {
	whole := func(ms []engine.Member) bool {
		for _, m := range ms {
			if m.Fractional {
				return false
			}
		}
		return true
	}
	if !whole(a) || !whole(b) {
		return sameMembers(a, b)
	}
	count := func(ms []engine.Member) map[string]int {
		c := map[string]int{}
		for _, m := range ms {
			c[m.Node] += len(m.GPUs)
		}
		return c
	}
	return maps.Equal(count(a), count(b))
}

// withdrawStale cancels the bind in flight of job when the engine no
// longer binds its run: a retry of it would start a job that ended or was
// cancelled meanwhile.
func (r *Runner) withdrawStale(eng *engine.Engine, job string) {
	fl, ok := r.as.inflight[job]
	if !ok {
		return
	}
	if run, _, ok := eng.Binding(job); !ok || run != fl.run {
		fl.cancel()
	}
}

// stepTime is the time of events the Runner makes: its clock, never
// before the engine's.
func (r *Runner) stepTime(eng *engine.Engine) time.Time {
	now := r.clock.Now()
	if now.Before(eng.Now()) {
		now = eng.Now()
	}
	return now
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
