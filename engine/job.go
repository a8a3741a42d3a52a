package engine

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// state is where a job is. A job is in exactly one state.
type state uint8

const (
	statePending  state = iota + 1
	stateRunning        // bound (confirmed or not) and running
	stateStopping       // preempted, in its grace period: GPUs still booked
)

func (s state) String() string {
	switch s {
	case statePending:
		return "pending"
	case stateRunning:
		return "running"
	case stateStopping:
		return "stopping"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// job is the engine's record of one job. Its one-byte fields are kept
// together (after st), so that the record has no padding between them: an
// engine holds one per job it knows, and a replay allocates one per pod.
type job struct {
	// hot in the walk: read for every pending job every cycle
	j    *queue.Job
	st   state
	frac bool // fractional or MIG members (single group)
	// running and stopping
	confirmed  bool // Advance accepted the bind
	bindSt     bindState
	held       bool // pending, held after Config.MaxBindTries failed binds
	backfilled bool
	inTL       bool // on the timeline, at tlAt
	// preemptSt: stopping, its preemption assumed or unknown
	// (Outcome.AssumePreemptions): not requeued at its deadline until the
	// backend's answer.
	preemptSt bindState
	// quotaWait: the job was blocked by quota since it last started.
	// While it was, reservations went to jobs behind it; it does not take
	// them back (see Engine.yieldTo).
	quotaWait bool
	hasRes    bool   // it is in lastRes
	shape     uint64 // shape ID for the failure memo; 0: not memoized
	notBefore int64  // bind refused: not placed before (Unix ns)
	members0  int    // members of the first group in req
	refusals  int32  // consecutive refused binds (reset when one is applied)
	activeAt  int32  // its index in Engine.active + 1; 0: not active

	req   gang.Request // what is placed: elastic jobs start at MinMembers
	badOf error        // placement error of req (unsupported, unknown level), cached per cluster
	badC  *topo.Cluster

	// running and stopping
	place      *placement
	start      time.Time
	run        uint64 // which run this is (Engine.runs when it started)
	lastErr    string // the last bind failure's reason (EventBindFailed)
	members    int    // members of group 0 now (elastic)
	checkpoint time.Time
	// lastPreempted is when the job was last preempted (or a preemption
	// of it was refused): it is not preempted again within MinRuntime.
	lastPreempted time.Time
	deadline      time.Time // stopping: end of the grace period
	tlAt          int64
	victimFor     string // stopping: the preemptor
	// preemptErr: pending, a preemption made for it failed
	// (EventPreemptFailed): noted in Ready.Holds.
	preemptErr string
	walked     uint64   // the cycle (cycleState.gen) that last considered it
	gpuN       int      // whole GPUs req asks for
	site       *siteJob // site rules' facts (site.go); nil: none apply
	svc        *service // the service of a replica; nil: not one
	tmpl       uint64   // the service template generation it was built from
}

// gpus is the number of GPUs the job holds.
func (js *job) gpus() int {
	if js.place == nil {
		return 0
	}
	return len(js.place.gpus)
}

// shared is the number of members holding a MIG instance or a share.
func (js *job) shared() int {
	if js.place == nil || !js.place.shared {
		return 0
	}
	n := 0
	for _, m := range js.place.members {
		if m.shared {
			n++
		}
	}
	return n
}

// expectedEnd is when a running job is expected to end: at its estimate,
// else its limit; once it overran both, unknown (ok false). A stopping job
// ends at its grace deadline.
func (js *job) expectedEnd(now time.Time) (time.Time, bool) {
	if js.st == stateStopping {
		return js.deadline, true
	}
	if e := js.j.RuntimeEstimate; e > 0 {
		if t := js.start.Add(e); t.After(now) {
			return t, true
		}
	}
	if l := js.j.RuntimeLimit; l > 0 {
		if t := js.start.Add(l); t.After(now) {
			return t, true
		}
		// Past its limit: the backend is stopping it.
		return now, true
	}
	return time.Time{}, false
}

// duration is how long a job is expected to hold its GPUs once started,
// for later reservations planned around it: its estimate, else its limit,
// as the timeline expects of a running job (expectedEnd); ok false:
// unbounded. (Planning on the limit while the timeline plans on the
// estimate would move the job's successors earlier once it starts, onto
// GPUs already promised to jobs behind them.)
func duration(j *queue.Job) (time.Duration, bool) {
	if j.RuntimeEstimate > 0 {
		return j.RuntimeEstimate, true
	}
	if j.RuntimeLimit > 0 {
		return j.RuntimeLimit, true
	}
	return 0, false
}

func (e *Engine) submit(j *queue.Job) error {
	if j == nil {
		return fmt.Errorf("%w: submission without a job", ErrInvalidEvent)
	}
	if _, dup := e.jobs[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	if err := e.checkLevels(j); err != nil {
		return err
	}
	if err := e.checkFits(j); err != nil {
		return err
	}
	if err := e.siteCheck(j); err != nil {
		return err
	}
	if err := e.pending.Add(j); err != nil {
		return err
	}
	js := e.newJob(j)
	e.jobs[j.ID] = js
	e.byPtr[j] = js
	e.siteAttach(js)
	if js.frac || !j.Elastic.IsZero() {
		e.since.shaped = true
	}
	return nil
}

// checkLevels rejects a request whose Required or Preferred level the
// cluster does not have: the levels never change (nodes added later have
// the same ones), so such a job could only wait forever.
func (e *Engine) checkLevels(j *queue.Job) error {
	for _, f := range []struct{ field, name string }{{"Required", j.Request.Required}, {"Preferred", j.Request.Preferred}} {
		if f.name == "" || f.name == topo.LevelNode {
			continue
		}
		if _, err := e.cluster.Level(f.name); err != nil {
			return fmt.Errorf("%w: job %q: %s: %w: %w", ErrInvalidRequest, j.ID, f.field, gang.ErrUnknownLevel, err)
		}
	}
	return nil
}

func (e *Engine) newJob(j *queue.Job) *job {
	js := &job{j: j, st: statePending, req: j.Request}
	if !j.Elastic.IsZero() {
		js.req.Groups = slices.Clone(j.Request.Groups)
		js.req.Groups[0].Members = j.Elastic.MinMembers
	}
	js.shape = e.shapeID(&js.req)
	js.members0 = js.req.Groups[0].Members
	js.gpuN = js.req.GPUs()
	for gi := range js.req.Groups {
		if _, ok := sharedRequest(&js.req.Groups[gi]); ok {
			js.frac = true
			e.fracSeen = true
			if len(js.req.Groups) > 1 || !j.Elastic.IsZero() {
				js.badOf, js.badC = errFractional, nil // whatever the cluster
			}
		}
	}
	return js
}

// shapeID names what a single-group request asks for apart from its
// member count, for the failure memo; 0 for requests it does not cover.
func (e *Engine) shapeID(r *gang.Request) uint64 {
	if len(r.Groups) != 1 {
		return 0
	}
	g := &r.Groups[0]
	if len(g.Selector) > 0 || g.GPUsPerMember == 0 {
		return 0
	}
	// The key is "%d/%d/%d/%s/%s/%s" of the fields below, built without
	// fmt (every submission pays for it; the lookup does not allocate).
	b := e.keyBuf[:0]
	b = strconv.AppendInt(b, int64(g.GPUsPerMember), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, g.CPUMilli, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, g.MemoryMiB, 10)
	b = append(b, '/')
	b = append(b, g.GPUModel...)
	for _, m := range g.GPUModels { // the set, as given (one entry: GPUModel's twin)
		b = append(append(b, ','), m...)
	}
	if g.SameModel {
		b = append(b, ",same"...)
	}
	b = append(b, '/')
	b = append(b, r.Required...)
	b = append(b, '/')
	b = append(b, r.Preferred...)
	e.keyBuf = b
	id, ok := e.shapes[string(b)]
	if !ok {
		id = uint64(len(e.shapes) + 1)
		e.shapes[string(b)] = id
	}
	return id
}

func (e *Engine) lookup(id string) (*job, error) {
	js := e.jobs[id]
	if js == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownJob, id)
	}
	return js, nil
}

func (e *Engine) finish(id string, at time.Time, failed bool) error {
	js, err := e.lookup(id)
	if err != nil {
		return err
	}
	if js.st == statePending {
		return fmt.Errorf("%w: job %q finished while pending", ErrInvalidEvent, id)
	}
	if e.site != nil && !failed {
		e.site.ending = endOK
	}
	e.stopRunning(js, at)
	e.forget(js)
	return nil
}

func (e *Engine) cancel(id string, at time.Time) error {
	js, err := e.lookup(id)
	if err != nil {
		if ok, aerr := e.cancelArray(id, at); ok {
			return aerr
		}
		return err
	}
	if e.site != nil {
		e.site.ending = endCancelled
	}
	if js.st == statePending {
		e.pending.Remove(id)
		delete(e.claims, id)
	} else {
		e.stopRunning(js, at)
	}
	e.forget(js)
	return nil
}

// forget drops a job that ended.
func (e *Engine) forget(js *job) {
	if js.held {
		e.held--
	}
	delete(e.jobs, js.j.ID)
	delete(e.byPtr, js.j)
	if e.site != nil {
		e.siteForget(js)
	}
	if js.svc != nil {
		e.replicaGone(js)
	}
}

func (e *Engine) checkpointed(id string, at time.Time) error {
	js, err := e.lookup(id)
	if err != nil {
		return err
	}
	if js.st != statePending {
		js.checkpoint = at
	}
	return nil
}

func (e *Engine) adopt(j *queue.Job, ms []Member, at, started time.Time) error {
	if j == nil {
		return fmt.Errorf("%w: adoption without a job", ErrInvalidEvent)
	}
	if err := j.Validate(); err != nil {
		return err
	}
	if err := e.tree.ValidateJob(j); err != nil {
		return err
	}
	// A pending replica of the same ID is replaced by the running one.
	var pendRep *job
	if old, dup := e.jobs[j.ID]; dup {
		if old.svc == nil || old.st != statePending {
			return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
		}
		pendRep = old
	}
	if err := e.checkLevels(j); err != nil {
		return err
	}
	var sreq mig.Request
	if len(j.Request.Groups) > 0 {
		sreq, _ = sharedRequest(&j.Request.Groups[0])
	}
	p, err := fromMembers(e.cluster, ms, sreq)
	if err != nil {
		return err
	}
	js := e.newJob(j)
	if js.badOf == errFractional {
		return fmt.Errorf("%w: adopting %q: %w", ErrInvalidEvent, j.ID, errFractional)
	}
	if err := checkWhole(js, p); err != nil {
		return err
	}
	if err := e.rebookAnyState(p); err != nil {
		return fmt.Errorf("%w: adopting %q: %w", ErrInvalidEvent, j.ID, err)
	}
	if err := e.tree.Adopt(j, at); err != nil {
		p.unbook(e.snap)
		return err
	}
	if started.IsZero() || started.After(at) {
		started = at
	}
	js.st, js.place, js.start, js.confirmed = stateRunning, p, started, true
	e.runs++
	js.run = e.runs
	js.members = countGroup(p, 0)
	if pendRep != nil {
		e.pending.Remove(j.ID)
		delete(e.claims, j.ID)
		delete(e.byPtr, pendRep.j)
		if e.site != nil {
			e.siteForget(pendRep)
		}
		delete(pendRep.svc.reps, j.ID)
	}
	e.jobs[j.ID] = js
	e.siteAttach(js)
	e.activate(js)
	e.adoptReplica(js, at)
	return nil
}

// rebookAnyState books an adopted job's placement on the live snapshot
// even where its nodes are cordoned or draining (they keep their jobs, and
// the GPUs must be booked so that nothing else takes them when the node is
// back): such nodes are made ready for the booking and set back. On a down
// node the booking fails.
func (e *Engine) rebookAnyState(p *placement) error {
	type was struct {
		id topo.NodeID
		st topo.NodeState
	}
	var set []was
	for _, m := range p.members {
		if st := e.snap.NodeState(m.node); st == topo.Cordoned || st == topo.Draining {
			if !slices.ContainsFunc(set, func(w was) bool { return w.id == m.node }) {
				set = append(set, was{m.node, st})
			}
		}
	}
	for _, w := range set {
		if err := e.snap.SetNodeState(w.id, topo.Ready); err != nil {
			return err
		}
	}
	err := p.rebook(e.snap)
	for _, w := range set {
		if serr := e.snap.SetNodeState(w.id, w.st); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// checkWhole checks that a placement has every member of the request (an
// elastic first group: between its bounds) with the GPUs each asks for.
func checkWhole(js *job, p *placement) error {
	groups := js.j.Request.Groups
	counts := make([]int, len(groups))
	for _, m := range p.members {
		if m.group < 0 || int(m.group) >= len(groups) {
			return fmt.Errorf("%w: job %q: member of unknown group %d", ErrInvalidEvent, js.j.ID, m.group)
		}
		_, frac := sharedRequest(&groups[m.group])
		if frac != m.shared {
			return fmt.Errorf("%w: job %q: member fractional %v, group %d fractional %v", ErrInvalidEvent, js.j.ID, m.shared, m.group, frac)
		}
		if !frac && len(m.gpus) != groups[m.group].GPUsPerMember {
			return fmt.Errorf("%w: job %q: member with %d GPUs, group %d asks %d", ErrInvalidEvent, js.j.ID, len(m.gpus), m.group, groups[m.group].GPUsPerMember)
		}
		counts[m.group]++
	}
	for g, n := range counts {
		lo, hi := groups[g].Members, groups[g].Members
		if g == 0 && !js.j.Elastic.IsZero() {
			lo, hi = js.j.Elastic.MinMembers, js.j.Elastic.MaxMembers
		}
		if n < lo || n > hi {
			return fmt.Errorf("%w: job %q: group %d has %d members, want %d..%d", ErrInvalidEvent, js.j.ID, g, n, lo, hi)
		}
	}
	return nil
}

func countGroup(p *placement, g int32) int {
	n := 0
	for _, m := range p.members {
		if m.group == g {
			n++
		}
	}
	return n
}

// stopRunning releases a running or stopping job's GPUs and quota.
func (e *Engine) stopRunning(js *job, at time.Time) {
	js.place.unbook(e.snap)
	if js.st == stateStopping {
		e.stopping--
	}
	e.deactivate(js)
	if err := e.tree.Release(js.j, at); err != nil {
		panic(fmt.Sprintf("engine: broken invariant: quota release of %q: %v", js.j.ID, err))
	}
	js.place = nil
	js.confirmed, js.backfilled = false, false
	if js.bindSt != bindNone {
		js.bindSt = bindNone
		delete(e.binding, js.j.ID)
	}
	js.deadline, js.victimFor = time.Time{}, ""
}

// toPending puts a job whose GPUs were released back to pending.
func (e *Engine) toPending(js *job) {
	js.st = statePending
	js.members = 0
	if err := e.pending.Add(js.j); err != nil {
		panic(fmt.Sprintf("engine: broken invariant: requeue of %q: %v", js.j.ID, err))
	}
	e.byPtr[js.j] = js
}

// requeue stops a running job and puts it back to pending, whole.
func (e *Engine) requeue(js *job, at time.Time) {
	e.stopRunning(js, at)
	e.toPending(js)
	e.requeued = append(e.requeued, js.j.ID)
}
