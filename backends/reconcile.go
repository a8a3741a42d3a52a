package backends

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// reconcileNodes steps the backend's nodes into a restored engine: new
// nodes are added, down nodes failed, the others take the backend's state
// and labels. A node the engine has and the backend no longer lists (it
// was removed while berth was down) is failed: the engine has no removal,
// and a down node takes no work; its jobs go by Config.NodeFailure. A node
// the engine rejects is a StateMismatchError.
func (r *Runner) reconcileNodes(eng *engine.Engine, spec topo.Spec, now time.Time) error {
	listed := make(map[string]bool, len(spec.Nodes))
	var rejected []string
	for _, n := range spec.Nodes {
		listed[n.Name] = true
		ev := engine.NodeChanged(now, n.Name, n.State, n.Labels)
		if _, ok := eng.Cluster().NodeByName(n.Name); !ok {
			ev = engine.NodeAdded(now, n)
		} else if n.State == topo.Down {
			ev = engine.NodeFailed(now, n.Name)
		}
		// Not r.step: a node the engine refuses is not skipped (the
		// engine would run without its GPUs) but stops Run.
		err := eng.Step(ev)
		if r.jobRecs != nil {
			r.jobRecs.event(ev, err)
		}
		if err != nil {
			rejected = append(rejected, n.Name+": "+err.Error())
			continue
		}
		r.rec.Nodes++
	}
	if len(rejected) > 0 {
		return &StateMismatchError{Rejected: rejected}
	}
	c := eng.Cluster()
	var gone []string
	for i := range c.NumNodes() {
		if name := c.NodeName(topo.NodeID(i)); !listed[name] {
			gone = append(gone, name)
		}
	}
	for _, name := range gone {
		r.log.Warn("node gone from the backend, failed in the engine", "node", name)
		if err := r.step(eng, engine.NodeFailed(now, name)); err != nil {
			return err
		}
		r.rec.Removed = append(r.rec.Removed, name)
	}
	return nil
}

// reconcileRunning brings one job the backend runs into the engine.
//
//   - Running in the engine on the same members: nothing to do; in its
//     grace period (the engine preempted it, and the backend may never have
//     heard: berth died first), the preemption is sent again.
//   - Running in the engine on other members (a bind the engine never
//     recorded, a gang moved): the backend is right; the engine's run was
//     cancelled by reconcile, before any adoption (moved), and the
//     backend's is adopted (Moved).
//   - Pending in the engine or unknown: adopted (Adopted).
//
// A job that cannot be adopted (a gang bound in part when berth died, a
// member on a node the engine cannot book) is not left running on GPUs
// the engine does not book: its members are unbound in the backend and it
// is submitted again (Stopped). If the backend refuses to unbind, Run
// stops with the error rather than risk booking those GPUs twice.
func (r *Runner) reconcileRunning(ctx context.Context, eng *engine.Engine, rj RunningJob, active, pending, moved bool, deadline time.Time, now time.Time) error {
	id := rj.Job.ID
	if active {
		if !deadline.IsZero() {
			p := engine.Preemption{Victim: id, Deadline: deadline}
			if err := r.call(ctx, func(ctx context.Context) error { return r.cfg.Backend.Preempt(ctx, p) }); err != nil {
				r.log.Warn("preemption sent again at restart failed", "job", id, "err", err)
			}
			return nil
		}
		if ms, ok := eng.Members(id); ok && sameMembers(ms, rj.Members) {
			return nil
		}
		// reconcile cancels moved jobs before it adopts any; a caller
		// that did not gets the same here.
		if err := r.step(eng, engine.Cancelled(now, id)); err != nil {
			return err
		}
		r.rec.Moved = append(r.rec.Moved, id)
		moved = true
	} else if pending && !moved {
		if err := r.step(eng, engine.Cancelled(now, id)); err != nil {
			return err
		}
	}
	// The job keeps the backend's start time (expected end, minimum
	// runtime); the event itself happens no earlier than the clock.
	at := rj.Start
	if at.Before(eng.Now()) {
		at = eng.Now()
	}
	aerr := eng.Step(engine.AdoptedSince(at, rj.Start, rj.Job, rj.Members))
	if aerr == nil {
		if !moved {
			r.rec.Adopted = append(r.rec.Adopted, id)
		}
		return nil
	}
	r.log.Warn("running job cannot be adopted: stopped and submitted again", "job", id, "err", aerr)
	for _, m := range rj.Members {
		if err := r.call(ctx, func(ctx context.Context) error { return r.cfg.Backend.UnbindMember(ctx, id, m) }); err != nil {
			return fmt.Errorf("backends: reconcile: stopping %q, which cannot be adopted (%v): %w", id, aerr, err)
		}
	}
	if err := r.step(eng, engine.Submitted(now, rj.Job)); err != nil {
		return err
	}
	r.rec.Stopped = append(r.rec.Stopped, id)
	return nil
}

// sameMemberAnyOrder is sameMembers for one member each, without allocating
// when the GPU indices come in the same order (the poll compares every
// running job's members with the engine's).
func sameMemberAnyOrder(a, b engine.Member) bool {
	if a.Group != b.Group || a.Node != b.Node || a.Fractional != b.Fractional || a.Instance != b.Instance ||
		a.Share.Milli != b.Share.Milli || len(a.GPUs) != len(b.GPUs) {
		return false
	}
	if slices.Equal(a.GPUs, b.GPUs) {
		return true
	}
	ga, gb := slices.Clone(a.GPUs), slices.Clone(b.GPUs)
	slices.Sort(ga)
	slices.Sort(gb)
	return slices.Equal(ga, gb)
}

// sameMembers reports whether a and b are the same members in any order
// (share IDs aside: they are the engine's own).
func sameMembers(a, b []engine.Member) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(m engine.Member) string {
		g := slices.Clone(m.GPUs)
		slices.Sort(g)
		return fmt.Sprintf("%d/%s/%v/%v/%v/%d", m.Group, m.Node, g, m.Fractional, m.Instance, m.Share.Milli)
	}
	ka := make([]string, len(a))
	kb := make([]string, len(b))
	for i := range a {
		ka[i], kb[i] = key(a[i]), key(b[i])
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return strings.Join(ka, ";") == strings.Join(kb, ";")
}
