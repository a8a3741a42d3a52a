package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/berthsched/berth/queue"
)

// View is the read-only state an engine publishes after each cycle for
// observers (dashboards, CLIs, metrics). It is immutable: any number of
// goroutines may read it while the engine goes on.
type View struct {
	// Seq and At are those of the cycle that published it.
	Seq uint64
	At  time.Time
	// Pending explains every pending job: the cycle's, in the policy's
	// order, then the jobs whose binds failed since the cycle
	// (ReasonBindRefused, ReasonHeld), then the jobs whose binds are
	// assumed or unknown (ReasonBinding, ReasonBindingUnknown), by ID.
	// Every job the engine knows is in exactly one of Pending (or, after a
	// walk that stopped early, EachPending), Running, or gone. After
	// Engine.PendingAll (the Runner calls it for its readers) the View is
	// published again with every status here and Unwalked zero.
	Pending []PendingStatus
	// Unwalked counts the pending jobs that Pending leaves out: see
	// Ready.Unwalked. Their statuses are computed on demand by the
	// engine's owner (Engine.PendingStatuses, Engine.PendingAll), which
	// publishes the View again: Explain and Estimate then answer for
	// them too.
	Unwalked int
	// Reservations held by the cycle.
	Reservations []Reservation
	// Holds: see Ready.Holds.
	Holds map[string]string
	// FreeGPUs and TotalGPUs count allocatable free GPUs and all GPUs.
	FreeGPUs, TotalGPUs int
	// Services: every service, by name, with its replica counts and why
	// its pending replicas wait.
	Services []ServiceStatus
	queues   *queue.Snapshot
	running  runView   // records never change
	x        viewExtra // what Estimates and Explain read (explain.go)
	// cyc is the cycle's own Pending (Ready.Pending), which republish
	// extends.
	cyc []PendingStatus
	// more are statuses of jobs after the walk's cut computed on demand
	// (Engine.PendingStatuses) and not in Pending: Explain and Estimate
	// read them.
	more []PendingStatus
}

// runRec is a running job as the View keeps it; ExpectedEnd is computed
// when read, since it depends on the time.
type runRec struct {
	RunningJob
	estimate, limit time.Duration
	gpus            []uint32 // the whole GPUs it holds (a copy: placements rewrite theirs)
	binding         bool     // its bind is assumed or unknown: View.Pending lists it
}

// Running lists running and stopping jobs, by ID. It allocates; the
// engine pays nothing for it per cycle (runSet).
func (v *View) Running() []RunningJob {
	if v.running.none() {
		return nil
	}
	recs := v.running.all()
	out := make([]RunningJob, 0, len(recs))
	for _, r := range recs {
		if r.binding {
			continue
		}
		rj := r.RunningJob
		rj.ExpectedEnd = expectedEndAt(r, v.At)
		out = append(out, rj)
	}
	return out
}

func expectedEndAt(r *runRec, now time.Time) time.Time {
	if r.Stopping {
		return r.Deadline
	}
	if r.estimate > 0 {
		if t := r.Start.Add(r.estimate); t.After(now) {
			return t
		}
	}
	if r.limit > 0 {
		if t := r.Start.Add(r.limit); t.After(now) {
			return t
		}
		return now
	}
	return time.Time{}
}

// RunningJob is a running (or stopping) job in a View.
type RunningJob struct {
	Job   string
	Queue string
	Start time.Time
	// ExpectedEnd is zero when unknown (no estimate or limit left).
	ExpectedEnd time.Time
	// GPUs counts whole GPUs; Shared counts the members holding a MIG
	// instance or a share of a GPU.
	GPUs   int
	Shared int
	// Members is the member count of the first group (elastic jobs).
	Members    int
	Backfilled bool
	// Stopping: preempted, in its grace period until Deadline.
	Stopping bool
	Deadline time.Time
}

// EachPending calls fn for every pending job of the cycle, until fn
// returns false: queue by queue, in each queue's order (not the policy's
// order across queues). It reads the published pending sets, so it lists
// the jobs after a LazyPending cut too, without their statuses, at the
// cost of a B-tree walk. The jobs must not be modified.
func (v *View) EachPending(fn func(*queue.Job) bool) {
	if v.queues != nil {
		v.queues.Each(fn)
	}
}

// MinPendingPerMember returns the fewest whole GPUs a member of any
// pending job asks (queue.Snapshot.MinPerMember: 0 for a fractional, MIG
// or GPU-less member); ok is false when nothing is pending. O(1).
func (v *View) MinPendingPerMember() (k int, ok bool) {
	if v.queues == nil {
		return 0, false
	}
	return v.queues.MinPerMember()
}

// Queues returns the usage, quotas and fair share of every leaf queue. It
// allocates.
func (v *View) Queues() []queue.QueueStatus {
	if v.queues == nil {
		return nil
	}
	return v.queues.Queues()
}

// publish stores the View of the cycle that made rd.
func (e *Engine) publish(rd *Ready, qs *queue.Snapshot) {
	e.putBack = e.putBack[:0] // the cycle lists them
	e.publishWith(rd, qs, nil, nil)
}

// publishWith is publish with the statuses of jobs put back to pending
// since rd's cycle (republish), listed after rd's.
func (e *Engine) publishWith(rd *Ready, qs *queue.Snapshot, since, more []PendingStatus) {
	v := &View{At: e.now, FreeGPUs: e.snap.Free(), TotalGPUs: e.cluster.NumGPUs(), queues: qs, x: e.viewExtra(), more: more}
	if rd != nil {
		v.Seq, v.cyc, v.Unwalked, v.Reservations, v.Holds = rd.Seq, rd.Pending, rd.Unwalked, slices.Clone(rd.Reservations), maps.Clone(rd.Holds)
	}
	v.Pending = v.cyc
	if b := e.bindingStatuses(); len(b)+len(since) > 0 {
		v.Pending = slices.Concat(v.cyc, since, b)
	}
	v.Services = e.serviceStatuses(v.Pending)
	v.running = e.running.view()
	e.view.Store(v)
}

// Publish publishes the latest cycle's View again with the running jobs,
// binds and free GPUs as they are now: for an owner that stepped bind
// outcomes (EventBindApplied, EventBindUnknown), which run no cycle. Like
// Step, it is for the engine's owner only.
func (e *Engine) Publish() { e.republish() }

// republish publishes the latest cycle's View again with the running jobs
// and free GPUs as they are now, and the jobs whose binds failed since
// the cycle (e.putBack), which its Pending does not list.
func (e *Engine) republish() {
	old := e.view.Load()
	e.republishWith(old.cyc, old.Unwalked, old.more)
}

// republishWith is republish with the cycle's statuses, unwalked count
// and on-demand statuses given (lazy.go completes them).
func (e *Engine) republishWith(cyc []PendingStatus, unwalked int, more []PendingStatus) {
	old := e.view.Load()
	var since []PendingStatus
	holds, cloned := old.Holds, false
	for _, id := range sortedUnique(e.putBack) {
		js := e.jobs[id]
		if js == nil || js.st != statePending {
			continue
		}
		st := PendingStatus{Job: id, Queue: js.j.Queue, Reason: ReasonBindRefused, js: js}
		if js.held {
			st.Reason = ReasonHeld
			if !cloned {
				holds, cloned = maps.Clone(holds), true
				if holds == nil {
					holds = map[string]string{}
				}
			}
			holds[id] = heldText(js)
		}
		since = append(since, st)
	}
	rd := &Ready{Seq: old.Seq, Pending: cyc, Unwalked: unwalked, Reservations: old.Reservations, Holds: holds}
	e.publishWith(rd, old.queues, since, more)
}

// runUpsert records a job's current facts for observers.
func (e *Engine) runUpsert(js *job) {
	var rec *runRec
	var gpus []uint32
	if n := len(js.place.gpus); n <= len(runRecOne{}.g) {
		// One allocation for the record and its copy of a few GPUs.
		o := &runRecOne{}
		rec, gpus = &o.runRec, o.g[:n:n]
		copy(gpus, js.place.gpus)
	} else {
		rec, gpus = &runRec{}, slices.Clone(js.place.gpus)
	}
	*rec = runRec{
		RunningJob: RunningJob{Job: js.j.ID, Queue: js.j.Queue, Start: js.start, GPUs: js.gpus(), Shared: js.shared(), Members: js.members,
			Backfilled: js.backfilled, Stopping: js.st == stateStopping, Deadline: js.deadline},
		estimate: js.j.RuntimeEstimate, limit: js.j.RuntimeLimit, gpus: gpus,
		binding: js.bindSt != bindNone,
	}
	e.running.set(js.j.ID, rec)
}

// runRecOne is a runRec with room for the GPUs of a small job, allocated
// together (runUpsert).
type runRecOne struct {
	runRec
	g [4]uint32
}

func (e *Engine) runDelete(id string) {
	if !e.running.view().none() {
		e.running.set(id, nil)
	}
}
