package backends

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
)

// MIG changes run like binds (see async in binder.go): each is issued on a
// goroutine and assumed (engine.Outcome.AssumeMIG): the engine books the
// new layout at once and the GPU is reconfiguring until the outcome comes
// back as an event (engine.MIGApplied, MIGFailed, MIGUnknown). The loop
// never waits on a MIG call:
//
//   - Order: the change runs after the ops issued before it on its GPU
//     (goOp's GPU key: the binds of the same Ready whose created instances
//     its From already holds), and the binds issued after it on that GPU
//     (on the new instances, which the next cycle places) run after it.
//   - A change that failed or timed out fences the instances of its GPU
//     that its From does not have: a bind on one of them is not made
//     (engine.BindDeferred: pending again after the bind backoff, no try
//     counted) until the outcome is known. Binds on instances the old and
//     new layouts share go on. A failed change is stepped failed (the
//     engine books the old layout again, withdraws the binds that depended
//     on it and backs off); the fence is lifted once it is.
//   - One that timed out is unknown until the abandoned call returns, or
//     the backend's layout (MIGReporter) says: To: applied; From, with no
//     call of it in flight: failed. So a hung ApplyMIG delays only the
//     binds on the new instances of its GPU, and only for a while: a
//     change whose call has not returned within ReconcileInterval (or,
//     without MIGReporter, that no answer settled by then) is given up
//     (failed) unless the GPU has the new layout; if that call comes
//     through after all, the change is undone (the reverse change, To ->
//     From, ordered on the GPU), so that the GPU is as the engine books
//     it.

// MIGResult is the outcome of one asynchronous MIG change as the Runner
// stepped it (see Cycle.MIG). A change that was unknown comes back twice:
// unknown, then applied or failed.
type MIGResult struct {
	Change engine.MIGReconfiguration
	// Err is nil when the backend made it. Unknown: its call timed out
	// (Err wraps ErrCallTimeout) or was cut short; the backend's answer
	// decides later.
	Err     error
	Unknown bool
}

// unknownMIG is a MIG change whose call timed out.
type unknownMIG struct {
	r       engine.MIGReconfiguration
	waiting int   // abandoned calls that have not returned
	err     error // a late return's error
	since   time.Time
}

// migLayoutRead is one MIGLayout answer of a poll.
type migLayoutRead struct {
	layout mig.Layout
	err    error
}

// migKeyOf is the GPU key of r (goOp's order, the MIG fences).
func migKeyOf(r engine.MIGReconfiguration) string { return gpuKey(r.Node, r.GPU) }

// issueMIG starts the MIG changes of rd on goroutines.
func (r *Runner) issueMIG(ctx context.Context, rd *engine.Ready) {
	act := r.cfg.Backend
	for _, m := range rd.MIG {
		key := migKeyOf(m)
		r.goOp(ctx, []string{key}, func(ctx context.Context) result {
			a := r.as
			late := func(err error) {
				a.mu.Lock()
				a.abandoned--
				a.mu.Unlock()
				a.post(result{kind: resLateMIG, job: key, run: m.Seq, err: err, mig: m})
			}
			err := r.retryLate(ctx, func(ctx context.Context) error { return act.ApplyMIG(ctx, m) }, late)
			res := result{kind: resMIG, job: key, run: m.Seq, err: err, mig: m}
			switch {
			case err == nil:
				return res
			case errors.Is(err, ErrCallTimeout):
				res.unknown, res.abandoned = true, 1
			case errors.Is(err, errOutcomeUnknown):
				res.unknown = true
			}
			// Before the op ends, so that the binds ordered after it see it.
			a.mu.Lock()
			a.migFences[key] = m
			a.mu.Unlock()
			return res
		})
	}
}

// migFencedOn says why a MIG instance of members is not to be bound yet
// (its GPU's change failed or is unknown, and the instance is not in the
// change's From); empty: none is.
func (r *Runner) migFencedOn(members []engine.Member) string {
	a := r.as
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.migFences) == 0 {
		return ""
	}
	for _, m := range members {
		if !m.Fractional || len(m.GPUs) == 0 || !m.Instance.Profile.Valid() {
			continue
		}
		if ch, ok := a.migFences[gpuKey(m.Node, m.GPUs[0])]; ok && (m.Created || !ch.From.Has(m.Instance)) {
			return fmt.Sprintf("MIG instance %v of %s GPU %d not made yet: the GPU's reconfiguration has not succeeded", m.Instance, m.Node, m.GPUs[0])
		}
	}
	return ""
}

// unfenceMIG lifts the fence of the change of key, if it is seq's.
func (r *Runner) unfenceMIG(key string, seq uint64) {
	a := r.as
	a.mu.Lock()
	if ch, ok := a.migFences[key]; ok && ch.Seq == seq {
		delete(a.migFences, key)
	}
	a.mu.Unlock()
}

// settleMIG steps the results of the MIG ops.
func (r *Runner) settleMIG(eng *engine.Engine, x result) error {
	a := r.as
	now := r.stepTime(eng)
	key := x.job
	cur, _, inFlight := eng.MIGChange(x.mig.Node, x.mig.GPU)
	inFlight = inFlight && cur.Seq == x.mig.Seq
	switch x.kind {
	case resMIGUndo:
		if x.err != nil {
			r.log.Error("undoing a MIG change given up failed: the GPU's layout may differ from the engine's", "node", x.mig.Node, "gpu", x.mig.GPU, "err", x.err)
		}
		return nil
	case resMIG:
		a.migs = append(a.migs, MIGResult{Change: x.mig, Err: x.err, Unknown: x.unknown})
		switch {
		case !inFlight:
			// The engine did not book it (its Advance found it stale:
			// not expected, no event comes between a Ready and its
			// Advance). One the backend made is undone, so that the GPU
			// is as booked.
			r.unfenceMIG(key, x.mig.Seq)
			if x.err == nil {
				r.log.Error("a MIG change the engine did not book was made: undoing it", "node", x.mig.Node, "gpu", x.mig.GPU)
				r.undoMIGOp(context.WithoutCancel(context.Background()), x.mig)
			}
			return nil
		case x.err == nil:
			return r.step(eng, engine.MIGApplied(now, x.mig))
		case x.unknown:
			a.migUnknown[key] = &unknownMIG{r: x.mig, waiting: x.abandoned, since: now}
			r.log.Warn("MIG change of unknown outcome (timed out or cut short): the backend's layout decides", "node", x.mig.Node, "gpu", x.mig.GPU, "err", x.err)
			return r.step(eng, engine.MIGUnknown(now, x.mig))
		default:
			r.log.Warn("MIG change failed", "node", x.mig.Node, "gpu", x.mig.GPU, "err", x.err)
			return r.migFailed(eng, now, key, x.mig, x.err.Error())
		}
	case resLateMIG:
		u := a.migUnknown[key]
		if u == nil || u.r.Seq != x.mig.Seq {
			if x.err == nil && a.migGivenUp[key] == x.mig.Seq {
				// Given up (failed: the engine books the old layout) and
				// made after all: undone, so that the GPU is as booked.
				delete(a.migGivenUp, key)
				r.log.Warn("a MIG change given up came through after all: undoing it", "node", x.mig.Node, "gpu", x.mig.GPU)
				r.undoMIGOp(context.WithoutCancel(context.Background()), x.mig)
			}
			return nil
		}
		u.waiting--
		u.err = cmp.Or(u.err, x.err)
		if u.waiting > 0 {
			return nil
		}
		delete(a.migUnknown, key)
		if u.err == nil {
			a.migs = append(a.migs, MIGResult{Change: u.r})
			r.unfenceMIG(key, u.r.Seq)
			if !inFlight {
				return nil
			}
			return r.step(eng, engine.MIGApplied(now, u.r))
		}
		reason := fmt.Sprintf("MIG change failed after its timeout: %v", u.err)
		a.migs = append(a.migs, MIGResult{Change: u.r, Err: errors.New(reason)})
		return r.migFailed(eng, now, key, u.r, reason)
	}
	return nil
}

// undoMIGOp applies the reverse of m (To -> From), ordered on its GPU,
// for a change given up that came through after all.
func (r *Runner) undoMIGOp(ctx context.Context, m engine.MIGReconfiguration) {
	rev := engine.MIGReconfiguration{Node: m.Node, GPU: m.GPU, Seq: m.Seq, From: m.To, To: m.From,
		Destroy: m.Create, Create: m.Destroy, Profiles: nil}
	for _, in := range rev.To.Instances() {
		rev.Profiles = append(rev.Profiles, in.Profile.Name())
	}
	key := migKeyOf(m)
	r.goOp(ctx, []string{key}, func(ctx context.Context) result {
		err := r.retry(ctx, func(ctx context.Context) error { return r.cfg.Backend.ApplyMIG(ctx, rev) })
		return result{kind: resMIGUndo, job: key, run: m.Seq, err: err, mig: rev}
	})
}

// migFailed steps a failed change, lifts its fence (the engine withdrew
// the binds that depended on it) and wakes the loop at the end of the MIG
// backoff.
func (r *Runner) migFailed(eng *engine.Engine, now time.Time, key string, m engine.MIGReconfiguration, reason string) error {
	err := r.step(eng, engine.MIGFailed(now, m, reason))
	r.unfenceMIG(key, m.Seq)
	r.addWake(now.Add(migRetryBackoff(r.cfg.Engine.MIG.RetryBackoff)))
	return err
}

// reconcileMIG settles the unknown changes with the layouts a poll read
// (x.layouts; a GPU missing there: the backend is no MIGReporter): To is
// applied; From, with no call of the change left in flight, failed (one in
// flight may still come through: the GPU stays reconfiguring); any other
// layout failed. Without the backend's layout, a change with no call in
// flight and no answer within ReconcileInterval is failed.
func (r *Runner) reconcileMIG(eng *engine.Engine, x result) {
	a := r.as
	now := r.stepTime(eng)
	for _, key := range sortedIDs(a.migUnknown) {
		u := a.migUnknown[key]
		if cur, _, ok := eng.MIGChange(u.r.Node, u.r.GPU); !ok || cur.Seq != u.r.Seq {
			delete(a.migUnknown, key) // settled otherwise
			r.unfenceMIG(key, u.r.Seq)
			continue
		}
		if x.at.Before(u.since) {
			continue // timed out after the poll began
		}
		var reason string
		lr, read := x.layouts[key]
		due := !now.Before(u.since.Add(r.cfg.ReconcileInterval))
		switch {
		case read && lr.err != nil:
			r.log.Warn("reading a GPU's MIG layout failed", "node", u.r.Node, "gpu", u.r.GPU, "err", lr.err)
			continue
		case read && lr.layout == u.r.To:
			delete(a.migUnknown, key)
			a.migs = append(a.migs, MIGResult{Change: u.r})
			r.log.Info("MIG change of unknown outcome: the GPU has the new layout", "node", u.r.Node, "gpu", u.r.GPU)
			r.unfenceMIG(key, u.r.Seq)
			if err := r.step(eng, engine.MIGApplied(now, u.r)); err != nil {
				r.log.Error("stepping a MIG change", "node", u.r.Node, "err", err)
			}
			continue
		case read && lr.layout != u.r.From:
			reason = fmt.Sprintf("MIG change timed out and the GPU has the layout %v, neither the old nor the new", lr.layout)
		case u.waiting > 0 && !due, !read && !due:
			continue // its call may still come through
		case read && u.waiting == 0:
			reason = "MIG change timed out and the GPU still has the old layout"
		case read:
			reason = "MIG change timed out, its call has not returned within ReconcileInterval and the GPU still has the old layout: given up"
		default:
			reason = "MIG change timed out and the backend did not answer within ReconcileInterval: given up"
		}
		if u.waiting > 0 {
			// If the call comes through after all, the change is undone
			// (settleMIG): the engine books the old layout.
			a.migGivenUp[key] = u.r.Seq
		}
		delete(a.migUnknown, key)
		a.migs = append(a.migs, MIGResult{Change: u.r, Err: errors.New(reason)})
		if err := r.migFailed(eng, now, key, u.r, reason); err != nil {
			r.log.Error("stepping a MIG change", "node", u.r.Node, "err", err)
		}
	}
}

// readMIGLayouts reads the layouts of the GPUs of the unknown changes
// keys (nil: the backend is no MIGReporter), each call bounded by
// CallTimeout.
func (r *Runner) readMIGLayouts(ctx context.Context, changes map[string]engine.MIGReconfiguration) map[string]migLayoutRead {
	mr, ok := r.cfg.Backend.(MIGReporter)
	if !ok || len(changes) == 0 {
		return nil
	}
	out := make(map[string]migLayoutRead, len(changes))
	for _, key := range sortedIDs(changes) {
		m := changes[key]
		var l mig.Layout
		err := r.call(ctx, func(ctx context.Context) (err error) { l, err = mr.MIGLayout(ctx, m.Node, m.GPU); return err })
		if errors.Is(err, errors.ErrUnsupported) {
			return nil
		}
		out[key] = migLayoutRead{layout: l, err: err}
	}
	return out
}

// settleRestoredMIG makes the changes a restored engine holds in flight
// (the process that made them stopped before their outcome) unknown: the
// first poll reads the backend's layouts (MIGReporter) and settles them;
// they are never applied twice.
func (r *Runner) settleRestoredMIG(eng *engine.Engine) error {
	now := r.stepTime(eng)
	for _, m := range eng.MIGChanges() {
		key := migKeyOf(m)
		r.as.migUnknown[key] = &unknownMIG{r: m, since: now}
		r.as.migFences[key] = m
		r.as.pollSoon = true
		if err := r.step(eng, engine.MIGUnknown(now, m)); err != nil {
			return err
		}
	}
	return nil
}
