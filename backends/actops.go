package backends

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/berthsched/berth/engine"
)

// The other decisions run like binds (see async in binder.go): replica
// stops, preemptions, shrinks and grows are issued on goroutines (the
// Parallelism slots, CallTimeout per call) and the loop never waits on
// them; their outcomes come back as results, stepped into the engine as
// events. What the engine's books say meanwhile:
//
//   - A preemption is assumed (Outcome.AssumePreemptions): the victim keeps
//     its GPUs booked, and is not requeued at its deadline, until the call
//     answers: PreemptApplied (requeued at the deadline; the preemptor
//     binds then), PreemptFailed (the victim runs on, the preemptor is
//     pending again with the failure in Ready.Holds), or, on a timeout,
//     PreemptUnknown: still booked until the abandoned call returns or
//     the backend's Running list says (gone: applied; still running after
//     its deadline with no call of it left in flight: failed). A backend
//     with no Running list fails it after a ReconcileInterval.
//   - A replica stop or a shrink frees its GPUs in the engine at once (the
//     engine's contract for Ready.Stops and shrinks). The Runner orders
//     every later op on those GPUs after the stop (goOp's GPU keys), and
//     a stop that failed or timed out fences its GPUs: a bind or grow on
//     them fails without a call ("GPU ... is not released yet"), until
//     the late call returns nil or the backend's Running list no longer
//     shows the members (the ghost sweep stops them meanwhile). Never two
//     jobs on one GPU in the backend.
//   - A grow keeps its new members booked until its call answers; one that
//     failed (or timed out: its members are unbound, a late commit is a
//     ghost the sweep stops) is undone with ResizeFailed.

// ActResult is the outcome of one asynchronous preemption, replica stop,
// shrink or grow as the Runner stepped it (see Cycle.Acts). A preemption
// that was unknown comes back twice: unknown, then applied or failed.
type ActResult struct {
	// Kind is "preempt", "stop", "shrink" or "grow".
	Kind string
	Job  string
	// Err is nil when the backend applied it. Unknown: the call timed out
	// (Err wraps ErrCallTimeout); the backend's state decides later (a
	// preemption: PreemptApplied or PreemptFailed; a stop or shrink: its
	// GPUs stay fenced until the backend no longer runs the members).
	Err     error
	Unknown bool
	// Cause is a preemption's (engine.Preemption.Cause).
	Cause engine.PreemptCause
}

// unknownPreempt is a preemption whose call timed out.
type unknownPreempt struct {
	p       engine.Preemption
	waiting int   // abandoned calls that have not returned
	err     error // a late return's error
	since   time.Time
}

// releasing is a replica stop or a shrink that failed or timed out: its
// members' GPUs are fenced.
type releasing struct {
	members []engine.Member
	keys    []string
	waiting int  // abandoned calls that have not returned
	failed  bool // a call failed outright: the backend's state decides
}

// gpuKey names one GPU for goOp's order and the fences.
func gpuKey(node string, gpu int) string { return "\x00gpu:" + node + "/" + strconv.Itoa(gpu) }

// opKeys is job's key, then the keys of the GPUs of members.
func opKeys(job string, members []engine.Member) []string {
	keys := []string{job}
	for _, m := range members {
		for _, g := range m.GPUs {
			if k := gpuKey(m.Node, g); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// fencedOn says why a GPU of members is not released yet; empty: none is
// fenced.
func (r *Runner) fencedOn(members []engine.Member) string {
	a := r.as
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.fences) == 0 {
		return ""
	}
	for _, k := range opKeys("", members)[1:] {
		if why, ok := a.fences[k]; ok {
			return why
		}
	}
	return ""
}

// unfence lifts the fences of a release.
func (r *Runner) unfence(job string) {
	a := r.as
	rl := a.released[job]
	if rl == nil {
		return
	}
	delete(a.released, job)
	a.mu.Lock()
	for _, k := range rl.keys {
		delete(a.fences, k)
	}
	a.mu.Unlock()
}

// issueActs starts the replica stops, preemptions and resizes of rd on
// goroutines. errs gets what no op can report (a backend that cannot stop
// replicas).
func (r *Runner) issueActs(ctx context.Context, rd *engine.Ready, errs *[]error) {
	act := r.cfg.Backend
	if len(rd.Stops) > 0 {
		rs, ok := act.(ReplicaStopper)
		for _, st := range rd.Stops {
			if !ok {
				*errs = append(*errs, fmt.Errorf("backends: stop of replica %q: the backend cannot stop replicas (no StopReplica)", st.Job))
				continue
			}
			ms := r.placed[st.Job]
			delete(r.placed, st.Job)
			r.releaseOp(ctx, st.Job, ms, "stop", func(ctx context.Context, late func(error)) []error {
				return []error{r.retryLate(ctx, func(ctx context.Context) error { return rs.StopReplica(ctx, st) }, late)}
			})
		}
	}
	for _, p := range rd.Preemptions {
		r.goOp(ctx, []string{p.Victim}, func(ctx context.Context) result {
			late := func(err error) {
				r.as.mu.Lock()
				r.as.abandoned--
				r.as.mu.Unlock()
				r.as.post(result{kind: resLatePreempt, job: p.Victim, run: p.Run, err: err})
			}
			err := r.retryLate(ctx, func(ctx context.Context) error { return act.Preempt(ctx, p) }, late)
			res := result{kind: resPreempt, job: p.Victim, run: p.Run, preempt: p, err: err}
			if errors.Is(err, ErrCallTimeout) {
				res.unknown, res.abandoned = true, 1
			} else if errors.Is(err, errOutcomeUnknown) {
				res.unknown = true
			}
			return res
		})
	}
	for _, rs := range rd.Resizes {
		if len(rs.Remove) > 0 {
			if ms, ok := r.placed[rs.Job]; ok {
				r.placed[rs.Job] = slices.DeleteFunc(slices.Clone(ms), func(m engine.Member) bool {
					return slices.ContainsFunc(rs.Remove, func(x engine.Member) bool { return sameMember(m, x) })
				})
			}
			r.releaseOp(ctx, rs.Job, rs.Remove, "shrink", func(ctx context.Context, late func(error)) []error {
				errs := make([]error, len(rs.Remove))
				r.each(ctx, len(rs.Remove), func(ctx context.Context, i int) {
					errs[i] = r.retryLate(ctx, func(ctx context.Context) error { return act.UnbindMember(ctx, rs.Job, rs.Remove[i]) }, late)
				})
				return errs
			})
		}
		if len(rs.Add) > 0 {
			r.placed[rs.Job] = append(slices.Clone(r.placed[rs.Job]), rs.Add...)
			r.as.issued = append(r.as.issued, rs.Job)
			g := gangBind{job: rs.Job, members: rs.Add}
			run := rs.Run
			r.goOp(ctx, opKeys(rs.Job, rs.Add), func(ctx context.Context) result {
				res := result{kind: resGrow, job: g.job, run: run, members: g.members}
				if why := r.fencedOn(g.members); why != "" {
					res.err = fmt.Errorf("%w: %s", ErrRefused, why)
					return res
				}
				var errs []error
				if len(r.bindGangs(ctx, []gangBind{g}, &errs)) > 0 {
					res.err = cmp.Or(errors.Join(errs...), errors.New("the backend did not apply the grow"))
					if len(errs) > 0 {
						// The rollback failed: what runs is not known; a
						// member left bound is a ghost the sweep stops.
						r.log.Error("rollback of a failed grow failed", "job", g.job, "err", errors.Join(errs...))
					}
				}
				return res
			})
		}
	}
}

// releaseOp runs a replica stop or a shrink (call, one error per call
// made) of job's members. One that fails or times out fences the
// members' GPUs before its op ends, so that the ops ordered after it
// (goOp's GPU keys) see the fence.
func (r *Runner) releaseOp(ctx context.Context, job string, members []engine.Member, what string, call func(ctx context.Context, late func(error)) []error) {
	keys := opKeys(job, members)
	r.goOp(ctx, keys, func(ctx context.Context) result {
		a := r.as
		late := func(err error) {
			a.mu.Lock()
			a.abandoned--
			a.mu.Unlock()
			a.post(result{kind: resLateRelease, job: job, err: err, release: what})
		}
		errs := call(context.WithoutCancel(ctx), late)
		res := result{kind: resRelease, job: job, members: members, err: errors.Join(errs...), release: what}
		if res.err == nil {
			return res
		}
		for _, err := range errs {
			if errors.Is(err, ErrCallTimeout) {
				res.abandoned++
			} else if err != nil {
				res.withdrawn = true // failed outright: "failed", not only timed out
			}
		}
		why := fmt.Sprintf("GPU not released yet: the %s of %s failed: %v", what, job, res.err)
		if !res.withdrawn {
			why = fmt.Sprintf("GPU not released yet: the %s of %s timed out", what, job)
		}
		a.mu.Lock()
		for _, k := range keys[1:] {
			a.fences[k] = why
		}
		a.mu.Unlock()
		return res
	})
}

// settleAct steps the results of the ops of actops.go.
func (r *Runner) settleAct(ctx context.Context, eng *engine.Engine, x result) error {
	a := r.as
	now := r.stepTime(eng)
	switch x.kind {
	case resPreempt, resRelease, resGrow:
		kind := x.release
		if x.kind == resPreempt {
			kind = "preempt"
		} else if x.kind == resGrow {
			kind = "grow"
		}
		a.acts = append(a.acts, ActResult{Kind: kind, Job: x.job, Err: x.err, Unknown: x.unknown || errors.Is(x.err, ErrCallTimeout), Cause: x.preempt.Cause})
	}
	switch x.kind {
	case resPreempt:
		switch {
		case x.err == nil:
			return r.step(eng, engine.PreemptApplied(now, x.job, x.run))
		case x.unknown:
			a.preempting[x.job] = &unknownPreempt{p: x.preempt, waiting: x.abandoned, since: now}
			r.log.Warn("preemption of unknown outcome (timed out or cut short): the backend's state decides", "job", x.job, "err", x.err)
			return r.step(eng, engine.PreemptUnknown(now, x.job, x.run))
		default:
			r.log.Warn("preemption failed", "job", x.job, "for", x.preempt.For, "err", x.err)
			return r.preemptFailed(eng, now, x.job, x.run, x.err.Error())
		}
	case resLatePreempt:
		u := a.preempting[x.job]
		if u == nil || u.p.Run != x.run {
			if x.err == nil {
				r.log.Warn("a preemption given up came through after all", "job", x.job)
			}
			return nil
		}
		u.waiting--
		u.err = cmp.Or(u.err, x.err)
		if u.waiting > 0 {
			return nil
		}
		delete(a.preempting, x.job)
		if u.err == nil {
			a.acts = append(a.acts, ActResult{Kind: "preempt", Job: x.job, Cause: u.p.Cause})
			return r.step(eng, engine.PreemptApplied(now, x.job, x.run))
		}
		reason := fmt.Sprintf("preemption failed after its timeout: %v", u.err)
		a.acts = append(a.acts, ActResult{Kind: "preempt", Job: x.job, Err: errors.New(reason), Cause: u.p.Cause})
		return r.preemptFailed(eng, now, x.job, x.run, reason)
	case resRelease:
		if x.err == nil {
			return nil
		}
		r.log.Error("a "+x.release+" failed: its GPUs are fenced until the backend no longer runs it", "job", x.job, "err", x.err)
		rl := a.released[x.job]
		if rl == nil {
			rl = &releasing{}
			a.released[x.job] = rl
		}
		rl.members = append(rl.members, x.members...)
		rl.keys = append(rl.keys, opKeys(x.job, x.members)[1:]...)
		rl.waiting += x.abandoned
		rl.failed = rl.failed || x.withdrawn
		a.issued = append(a.issued, x.job) // the ghost sweep stops it
		a.pollSoon = true
	case resLateRelease:
		rl := a.released[x.job]
		if rl == nil {
			return nil
		}
		rl.waiting = max(0, rl.waiting-1)
		if x.err != nil {
			rl.failed = true
		}
		if rl.waiting == 0 && !rl.failed {
			// Every abandoned call came through: released.
			r.log.Info("a "+x.release+" that timed out came through: its GPUs are free", "job", x.job)
			r.unfence(x.job)
		}
	case resGrow:
		if x.err == nil {
			return nil
		}
		r.log.Warn("grow failed", "job", x.job, "err", x.err)
		if ms, ok := r.placed[x.job]; ok {
			r.placed[x.job] = slices.DeleteFunc(slices.Clone(ms), func(m engine.Member) bool {
				return slices.ContainsFunc(x.members, func(y engine.Member) bool { return sameMember(m, y) })
			})
		}
		r.addWake(now.Add(max(r.cfg.Engine.BindRetryBackoff, r.cfg.Retry.Initial)))
		return r.step(eng, engine.ResizeFailed(now, x.job, x.run, x.members, x.err.Error()))
	}
	return nil
}

// preemptFailed steps a failed preemption; the preemptor is placed again
// after the retry backoff (not at once: the same victim could be chosen).
func (r *Runner) preemptFailed(eng *engine.Engine, now time.Time, job string, run uint64, reason string) error {
	r.addWake(now.Add(max(r.cfg.Engine.BindRetryBackoff, r.cfg.Retry.Initial)))
	return r.step(eng, engine.PreemptFailed(now, job, run, reason))
}

// reconcileActs is reconcileBinds for preemptions and releases: a victim
// of an unknown preemption the backend no longer runs is gone (applied);
// one it still runs after its deadline, with no call of it in flight, is
// failed. A fenced release whose members the
// backend no longer runs is lifted.
func (r *Runner) reconcileActs(eng *engine.Engine, x result, runs map[string][]engine.Member) {
	a := r.as
	now := r.stepTime(eng)
	for _, id := range sortedIDs(a.preempting) {
		u := a.preempting[id]
		if run, _, ok := eng.PreemptState(id); !ok || run != u.p.Run {
			delete(a.preempting, id) // settled otherwise (ended, requeued)
			continue
		}
		if x.at.Before(u.since) {
			continue // timed out after the poll began
		}
		if _, running := runs[id]; !running {
			delete(a.preempting, id)
			a.acts = append(a.acts, ActResult{Kind: "preempt", Job: id, Cause: u.p.Cause})
			r.log.Info("preemption of unknown outcome: the victim is gone", "job", id)
			if err := r.step(eng, engine.PreemptApplied(now, id, u.p.Run)); err != nil {
				r.log.Error("stepping a preemption", "job", id, "err", err)
			}
			continue
		}
		if now.Before(u.p.Deadline) || u.waiting > 0 {
			// In its grace period, or its call may still come through:
			// failing it now could leave the engine running a victim the
			// backend stops later. It stays booked (never two jobs on one
			// GPU); the preemptor waits.
			continue
		}
		delete(a.preempting, id)
		const why = "preemption timed out and the backend still runs the victim after its deadline"
		a.acts = append(a.acts, ActResult{Kind: "preempt", Job: id, Err: errors.New(why), Cause: u.p.Cause})
		if err := r.preemptFailed(eng, now, id, u.p.Run, why); err != nil {
			r.log.Error("stepping a preemption", "job", id, "err", err)
		}
	}
	for _, id := range sortedIDs(a.released) {
		rl := a.released[id]
		ms := runs[id]
		still := slices.ContainsFunc(rl.members, func(m engine.Member) bool {
			return slices.ContainsFunc(ms, func(y engine.Member) bool { return sameMembers([]engine.Member{m}, []engine.Member{y}) })
		})
		if !still {
			r.log.Info("a stop or shrink that failed or timed out: the backend no longer runs it, its GPUs are free", "job", id)
			r.unfence(id)
		}
	}
}

// giveUpActs is giveUpUnknown for preemptions and releases: without the
// backend's Running list, an unknown preemption with no answer within
// ReconcileInterval is failed (the victim keeps its GPUs: never two jobs
// on one), and a fenced release is lifted after a ReconcileInterval with
// its calls returned.
func (r *Runner) giveUpActs(eng *engine.Engine, now time.Time) {
	a := r.as
	for _, id := range sortedIDs(a.preempting) {
		u := a.preempting[id]
		if now.Before(u.since.Add(r.cfg.ReconcileInterval)) {
			continue
		}
		delete(a.preempting, id)
		if run, _, ok := eng.PreemptState(id); ok && run == u.p.Run {
			const why = "preemption timed out and the backend did not answer"
			a.acts = append(a.acts, ActResult{Kind: "preempt", Job: id, Err: errors.New(why), Cause: u.p.Cause})
			if err := r.preemptFailed(eng, r.stepTime(eng), id, u.p.Run, why); err != nil {
				r.log.Error("stepping a preemption", "job", id, "err", err)
			}
		}
	}
	for _, id := range sortedIDs(a.released) {
		if rl := a.released[id]; rl.waiting == 0 && !rl.failed {
			r.unfence(id)
		}
	}
}

// actsUnknown reports whether preemptions, releases or MIG changes wait
// for the backend's state.
func (a *async) actsUnknown() bool {
	return len(a.preempting) > 0 || len(a.released) > 0 || len(a.migUnknown) > 0
}
