package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berthsched/berth/queue"
)

// Job arrays and dependencies.
//
// An array is one submission (ArraySubmitted) of N tasks, each its own job
// "ID_1" .. "ID_N" (queue.Job.ArrayIndex 1..N) for placement and
// accounting; a throttle K lets at most K tasks run at once. Cancelling
// the array's ID cancels the tasks left.
//
// A dependency names a job the engine tracks when the dependent is
// submitted (ErrDependency otherwise). When the job depended on ends, each
// dependency on it is met or can never be met; a job whose dependency can
// never be met is cancelled (CancelNeverMet, reported in Ready.Failed) or
// held (HoldNeverMet).

// jobArray is one array's state.
type jobArray struct {
	id       string
	throttle int
	running  int // tasks running or stopping
	left     int // tasks the engine still tracks
}

// depState is one dependency of a job and where it stands.
type depState struct {
	queue.Dependency
	met, never bool
}

// ArraySubmitted returns the submission of a job array: tasks copies of
// j, with IDs j.ID+"_1" .. j.ID+"_N" and ArrayIndex 1..N, of which at
// most throttle run at once (0: no throttle). Cancelled(at, j.ID) cancels
// the tasks left.
func ArraySubmitted(at time.Time, j *queue.Job, tasks, throttle int) Event {
	return Event{Kind: EventArraySubmitted, Time: at, Job: j, Tasks: tasks, Throttle: throttle}
}

// FinishedFailed returns a job-finished event for a job that failed (a
// non-zero exit, a timeout): its afterok dependents can never start, its
// afternotok ones may. Finished means success.
func FinishedFailed(at time.Time, id string) Event {
	return Event{Kind: EventJobFinished, Time: at, JobID: id, Failed: true}
}

// maxArrayTasks bounds one array submission.
const maxArrayTasks = 1 << 20

func (e *Engine) submitArray(j *queue.Job, tasks, throttle int, at time.Time) error {
	if j == nil {
		return fmt.Errorf("%w: array submission without a job", ErrInvalidEvent)
	}
	if tasks <= 0 || tasks > maxArrayTasks || throttle < 0 {
		return fmt.Errorf("%w: array %q: %d tasks (1..%d), throttle %d", ErrInvalidEvent, j.ID, tasks, maxArrayTasks, throttle)
	}
	if _, dup := e.jobs[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	e.siteInit()
	if _, dup := e.site.arrays[j.ID]; dup {
		return fmt.Errorf("%w: array %q", ErrDuplicateJob, j.ID)
	}
	ts := make([]*queue.Job, tasks)
	for i := range ts {
		t := *j
		t.ID = j.ID + "_" + strconv.Itoa(i+1)
		t.ArrayIndex = i + 1
		if _, dup := e.jobs[t.ID]; dup {
			return fmt.Errorf("%w: %q (task of array %q)", ErrDuplicateJob, t.ID, j.ID)
		}
		ts[i] = &t
	}
	a := &jobArray{id: j.ID, throttle: throttle}
	for i, t := range ts {
		if err := e.submit(t); err != nil {
			for _, d := range ts[:i] { // the first tasks went in: take them back
				if js := e.jobs[d.ID]; js != nil {
					e.pending.Remove(d.ID)
					e.forgetQuiet(js)
				}
			}
			return err
		}
		e.siteOf(e.jobs[t.ID]).array = a
		a.left++
	}
	if e.site.arrays == nil {
		e.site.arrays = map[string]*jobArray{}
	}
	e.site.arrays[j.ID] = a
	_ = at
	return nil
}

// forgetQuiet drops a job that never really entered (an array rolled
// back): no outcome is recorded.
func (e *Engine) forgetQuiet(js *job) {
	if js.site != nil {
		for _, d := range js.site.deps {
			e.dropDependent(d.Job, js.j.ID)
		}
	}
	delete(e.jobs, js.j.ID)
	delete(e.byPtr, js.j)
}

// cancelArray cancels the tasks left of array id; ok false when there is
// no such array.
func (e *Engine) cancelArray(id string, at time.Time) (bool, error) {
	if e.site == nil || e.site.arrays[id] == nil {
		return false, nil
	}
	prefix := id + "_"
	for _, tid := range sortedKeys(e.jobs) {
		js := e.jobs[tid]
		if js == nil || !strings.HasPrefix(tid, prefix) || js.site == nil || js.site.array == nil || js.site.array.id != id {
			continue
		}
		if err := e.cancel(tid, at); err != nil {
			return true, err
		}
	}
	delete(e.site.arrays, id)
	return true, nil
}

// checkDeps checks a submission's dependencies: each names a job the
// engine tracks, other than itself.
func (e *Engine) checkDeps(j *queue.Job) error {
	for _, d := range j.Dependencies {
		switch d.Kind {
		case queue.Singleton:
			if d.Job != "" {
				return fmt.Errorf("%w: job %q: singleton names no job, got %q", ErrDependency, j.ID, d.Job)
			}
			continue
		case queue.AfterOK, queue.AfterAny, queue.AfterNotOK:
		default:
			return fmt.Errorf("%w: job %q: unknown kind %d", ErrDependency, j.ID, d.Kind)
		}
		if d.Job == j.ID {
			return fmt.Errorf("%w: job %q depends on itself", ErrDependency, j.ID)
		}
		if e.jobs[d.Job] == nil {
			return fmt.Errorf("%w: job %q: %v: no such job (it ended, or was never submitted)", ErrDependency, j.ID, d)
		}
	}
	return nil
}

func (e *Engine) attachDeps(js *job) {
	sj := e.siteOf(js)
	st := e.site
	for _, d := range js.j.Dependencies {
		if d.Kind == queue.Singleton {
			sj.key = js.j.User + "/" + js.j.Name
			continue
		}
		sj.deps = append(sj.deps, depState{Dependency: d})
		if st.dependents == nil {
			st.dependents = map[string][]string{}
		}
		st.dependents[d.Job] = append(st.dependents[d.Job], js.j.ID)
	}
}

func (e *Engine) dropDependent(on, id string) {
	st := e.site
	l := st.dependents[on]
	for i, x := range l {
		if x == id {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(st.dependents, on)
	} else {
		st.dependents[on] = l
	}
}

// depEnded settles the dependencies on a job that ended, and applies the
// never-met policy to its dependents.
func (e *Engine) depEnded(id string, how outcome) {
	st := e.site
	ids := st.dependents[id]
	if len(ids) == 0 {
		return
	}
	delete(st.dependents, id)
	var never []string
	for _, did := range ids {
		djs := e.jobs[did]
		if djs == nil || djs.site == nil {
			continue
		}
		for k := range djs.site.deps {
			d := &djs.site.deps[k]
			if d.Job != id || d.met || d.never {
				continue
			}
			var ok bool
			switch d.Kind {
			case queue.AfterOK:
				ok = how == endOK
			case queue.AfterAny:
				ok = true
			case queue.AfterNotOK:
				ok = how != endOK
			}
			d.met, d.never = ok, !ok
			if d.never && djs.st == statePending && st.cfg.NeverMet == CancelNeverMet {
				never = append(never, did)
			}
		}
	}
	for _, did := range never {
		djs := e.jobs[did]
		if djs == nil || djs.st != statePending {
			continue
		}
		why := e.depsDetail(djs)
		e.pending.Remove(did)
		delete(e.claims, did)
		st.ending = endCancelled
		e.forget(djs) // its own dependents see a cancellation
		e.failed = append(e.failed, JobFailure{Job: did, Reason: "dependency never met: " + why})
	}
}

// depsWait reports whether js waits on a dependency, and the reason.
func (e *Engine) depsWait(js *job) (ReasonCode, bool) {
	sj := js.site
	wait := false
	for _, d := range sj.deps {
		if d.never {
			return ReasonDependencyNeverMet, true
		}
		if !d.met {
			wait = true
		}
	}
	if !wait && sj.key != "" && e.site.singles[sj.key] > 0 {
		wait = true
	}
	if wait {
		return ReasonDependency, true
	}
	return 0, false
}

// depsDetail names the dependencies js still waits on (or that failed).
func (e *Engine) depsDetail(js *job) string {
	var b strings.Builder
	for _, d := range js.site.deps {
		if d.met {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d.String())
		if d.never {
			b.WriteString(" (never met)")
		}
	}
	if js.site.key != "" && e.site.singles[js.site.key] > 0 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString("singleton")
	}
	return b.String()
}
