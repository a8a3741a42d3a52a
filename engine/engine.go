package engine

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/google/btree"
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

// job is the engine's record of one job.
type job struct {
	// hot in the walk: read for every pending job every cycle
	j         *queue.Job
	st        state
	shape     uint64 // shape ID for the failure memo; 0: not memoized
	notBefore int64  // bind refused: not placed before (Unix ns)
	members0  int    // members of the first group in req
	frac      bool   // fractional or MIG members (single group)

	req   gang.Request // what is placed: elastic jobs start at MinMembers
	badOf error        // placement error of req (unsupported, unknown level), cached per cluster
	badC  *topo.Cluster

	// running and stopping
	place      *placement
	start      time.Time
	confirmed  bool // Advance accepted the bind
	backfilled bool
	members    int // members of group 0 now (elastic)
	checkpoint time.Time
	// lastPreempted is when the job was last preempted (or a preemption
	// of it was refused): it is not preempted again within MinRuntime.
	lastPreempted time.Time
	deadline      time.Time // stopping: end of the grace period
	inTL          bool      // on the timeline, at tlAt
	tlAt          int64
	victimFor     string // stopping: the preemptor
	// quotaWait: the job was blocked by quota since it last started.
	// While it was, reservations went to jobs behind it; it does not take
	// them back (see Engine.yieldTo).
	quotaWait bool
	walked    uint64 // the cycle (cycleState.gen) that last considered it
	hasRes    bool   // it is in lastRes
	gpuN      int    // whole GPUs req asks for
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

// claim holds GPUs for a preemptor until its victims' grace periods end.
type claim struct {
	job     string
	place   *placement
	victims []string
	start   time.Time // the latest victim deadline
}

// outstanding is what the latest Ready asked and Advance may refuse.
type outstanding struct {
	binds    map[string]bool
	preempts map[string]bool
	grows    map[string][]pmember
	mig      []MIGReconfiguration
}

// Engine is berth's deterministic scheduler: events go in through Step,
// decisions come out of Ready, and Advance says which were applied. See the
// package documentation for the cycle and the concurrency contract.
type Engine struct {
	cfg     Config
	spec    topo.Spec
	specIdx map[string]int
	cluster *topo.Cluster
	snap    *topo.Snapshot
	tree    *queue.Tree
	pending *queue.Pending
	intake  *queue.Intake
	policy  queue.Policy

	jobs      map[string]*job
	byPtr     map[*queue.Job]*job // the same jobs, for the walk (no string hashing)
	active    map[string]*job     // running and stopping
	activeIDs []string            // keys of active, sorted
	tl        []tlEntry           // active jobs by expected end (see timeline.go)
	elastic   int                 // active elastic jobs
	stopping  int                 // jobs in their grace period
	shapes    map[string]uint64
	claims    map[string]*claim
	// sticky reservations of the last cycle: a job keeps its GPU set and
	// start while they stay valid.
	lastRes map[string]*resv
	// resumeOK: the last cycle's walk may be resumed by the next one when
	// only submissions and ticks came in between (see resume); order is
	// that walk's pending jobs, in order, with their statuses in
	// lastPend. noResume turns resuming off (tests compare both).
	resumeOK bool
	order    []*queue.Job
	lastPend []PendingStatus
	noResume bool
	resumed  int // cycles that resumed (tests)
	// checkGate (tests): a probe enoughFree skips is placed anyway, and
	// the engine panics if that placement succeeds.
	checkGate bool

	now   time.Time
	dirty bool
	// migNotBefore: no MIG plan before this (a plan was refused).
	migNotBefore time.Time
	seq          uint64
	out          *outstanding

	// reported with the next Ready
	requeued []string
	failed   []JobFailure
	rejected []Rejection

	placer   gang.Placer
	drainBuf []*queue.Job
	view     atomic.Pointer[View]
	running  *btree.BTreeG[*runRec] // observers' copy of the running jobs
	runDirty bool                   // running changed since the last View
	cyc      cycleState
}

// New validates cfg and returns an engine with the cluster and queues of
// cfg, no jobs, and its clock at cfg.Start.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tree, err := queue.NewTree(cfg.Queues)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	pending, err := queue.NewPending(tree, cfg.Pending)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	in, err := queue.NewIntake(cfg.IntakeCapacity)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	e := &Engine{
		cfg: cfg, tree: tree, pending: pending, intake: in, policy: cfg.Policy,
		jobs: map[string]*job{}, byPtr: map[*queue.Job]*job{}, active: map[string]*job{}, shapes: map[string]uint64{}, claims: map[string]*claim{}, lastRes: map[string]*resv{},
		now: cfg.Start, dirty: true,
	}
	e.spec = topo.Spec{
		Levels:    slices.Clone(cfg.Cluster.Levels),
		GPULevels: slices.Clone(cfg.Cluster.GPULevels),
		Nodes:     slices.Clone(cfg.Cluster.Nodes),

		ShareFreeGPUs: cfg.Cluster.ShareFreeGPUs,
	}
	if err := e.rebuild(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	e.publish(nil, nil)
	return e, nil
}

// Intake is the lock-free submission path: Submit may be called from any
// goroutine; the next cycle drains it. Jobs it holds count as a change
// (HasReady).
func (e *Engine) Intake() *queue.Intake { return e.intake }

// Cluster is the current cluster (it is replaced when nodes are added or
// relabelled). Read-only.
func (e *Engine) Cluster() *topo.Cluster { return e.cluster }

// Now is the engine's clock: the time of the latest event.
func (e *Engine) Now() time.Time { return e.now }

// View returns the snapshot published by the latest cycle. Safe from any
// goroutine; never nil.
func (e *Engine) View() *View { return e.view.Load() }

// Step applies one event. Errors: ErrTimeBackwards, ErrInvalidEvent,
// ErrUnknownJob, ErrDuplicateJob, ErrUnknownNode, and the validation
// errors of queue and topo (wrapped). On error nothing changed.
func (e *Engine) Step(ev Event) error {
	if ev.Time.Before(e.now) {
		return fmt.Errorf("%w: event at %v, clock at %v", ErrTimeBackwards, ev.Time, e.now)
	}
	var err error
	if ev.Kind != EventTick && ev.Kind != EventJobSubmitted {
		e.resumeOK = false // see resume
	}
	switch ev.Kind {
	case EventTick:
	case EventJobSubmitted:
		err = e.submit(ev.Job)
	case EventJobFinished:
		err = e.finish(ev.JobID, ev.Time)
	case EventJobCancelled:
		err = e.cancel(ev.JobID, ev.Time)
	case EventJobCheckpointed:
		err = e.checkpointed(ev.JobID, ev.Time)
	case EventJobAdopted:
		err = e.adopt(ev.Job, ev.Members, ev.Time)
	case EventNodeAdded:
		err = e.addNode(ev.Node)
	case EventNodeChanged:
		err = e.changeNode(ev.Node, ev.Time)
	case EventNodeFailed:
		err = e.failNode(ev.NodeName, ev.Time)
	case EventDevicesReported:
		err = e.devicesReported(ev.JobID, ev.Members)
	default:
		err = fmt.Errorf("%w: kind %v", ErrInvalidEvent, ev.Kind)
	}
	if err != nil {
		return err
	}
	e.now = ev.Time
	e.dirty = true
	return nil
}

// HasReady reports whether Ready would run a cycle: an event arrived, the
// intake holds jobs, or a grace period ended.
func (e *Engine) HasReady() bool {
	if e.dirty || e.intake.Len() > 0 {
		return true
	}
	for _, c := range e.claims {
		if !c.start.After(e.now) {
			return true
		}
	}
	return false
}

// Ready runs a scheduling cycle if anything changed (HasReady) and returns
// its decisions; otherwise it returns an empty Ready with the latest Seq.
// Decisions of an earlier Ready that was not advanced are accepted as
// applied.
func (e *Engine) Ready() Ready {
	if !e.HasReady() {
		return Ready{Seq: e.seq, At: e.now, MIG: []MIGReconfiguration{}}
	}
	e.accept()
	e.seq++
	rd := e.cycle()
	// A job that yielded the one EASY reservation to a holder that started
	// in this cycle takes it in the next one, without waiting for an event.
	e.dirty = e.cyc.yielded && len(e.cyc.res) == 0
	return rd
}

// accept confirms what the outstanding Ready asked.
func (e *Engine) accept() {
	if e.out == nil {
		return
	}
	for id := range e.out.binds {
		if js := e.jobs[id]; js != nil && js.st == stateRunning {
			js.confirmed = true
		}
	}
	e.applyMIG(e.out.mig, nil)
	e.out = nil
}

// Advance tells the engine which decisions of rd the backend refused (see
// Outcome); the rest count as applied. rd must be the latest Ready
// (ErrStaleReady otherwise). Refusals of decisions rd did not make are
// ErrInvalidEvent.
func (e *Engine) Advance(rd Ready, out Outcome) error {
	if rd.Seq != e.seq {
		return fmt.Errorf("%w: Ready %d, latest %d", ErrStaleReady, rd.Seq, e.seq)
	}
	o := e.out
	if o == nil {
		o = &outstanding{}
	}
	if len(out.RefusedBinds)+len(out.RefusedPreemptions)+len(out.RefusedResizes)+len(out.RefusedMIG) > 0 || len(o.mig) > 0 {
		e.resumeOK = false // see resume
	}
	for _, id := range out.RefusedBinds {
		if !o.binds[id] || e.jobs[id] == nil || e.jobs[id].st != stateRunning {
			return fmt.Errorf("%w: refused bind of %q, which Ready %d did not bind", ErrInvalidEvent, id, rd.Seq)
		}
	}
	for _, id := range out.RefusedPreemptions {
		if !o.preempts[id] || e.jobs[id] == nil || e.jobs[id].st != stateStopping {
			return fmt.Errorf("%w: refused preemption of %q, which Ready %d did not preempt", ErrInvalidEvent, id, rd.Seq)
		}
	}
	for _, id := range out.RefusedResizes {
		if _, ok := o.grows[id]; !ok || e.jobs[id] == nil || e.jobs[id].st != stateRunning {
			return fmt.Errorf("%w: refused resize of %q, which Ready %d did not grow", ErrInvalidEvent, id, rd.Seq)
		}
	}
	for _, r := range out.RefusedMIG {
		if !slices.ContainsFunc(o.mig, func(x MIGReconfiguration) bool { return x.Node == r.Node && x.GPU == r.GPU }) {
			return fmt.Errorf("%w: refused MIG change of %s GPU %d, which Ready %d did not make", ErrInvalidEvent, r.Node, r.GPU, rd.Seq)
		}
	}
	for _, id := range sortedUnique(out.RefusedBinds) {
		js := e.jobs[id]
		created := js.place.created()
		e.stopRunning(js, e.now)
		e.destroyCreated(created)
		js.notBefore = e.now.Add(e.cfg.BindRetryBackoff).UnixNano()
		e.toPending(js)
	}
	for _, id := range sortedUnique(out.RefusedPreemptions) {
		js := e.jobs[id]
		js.st = stateRunning
		js.deadline, js.victimFor = time.Time{}, ""
		js.lastPreempted = e.now
		e.stopping--
		e.tlRekey(js)
		e.runUpsert(js)
		for _, cid := range sortedKeys(e.claims) {
			if slices.Contains(e.claims[cid].victims, id) {
				delete(e.claims, cid)
			}
		}
	}
	for _, id := range sortedUnique(out.RefusedResizes) {
		e.undoGrow(e.jobs[id], o.grows[id])
	}
	for id := range o.binds {
		if js := e.jobs[id]; js != nil && js.st == stateRunning {
			js.confirmed = true
		}
	}
	if e.applyMIG(o.mig, out.RefusedMIG) {
		e.dirty = true // the jobs the new instances serve are placed next cycle
	}
	e.out = nil
	if len(out.RefusedBinds)+len(out.RefusedPreemptions)+len(out.RefusedResizes) > 0 {
		e.dirty = true
		e.republish()
	}
	return nil
}

// ---------------------------------------------------------------- job events

func (e *Engine) submit(j *queue.Job) error {
	if j == nil {
		return fmt.Errorf("%w: submission without a job", ErrInvalidEvent)
	}
	if _, dup := e.jobs[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	if err := e.pending.Add(j); err != nil {
		return err
	}
	js := e.newJob(j)
	e.jobs[j.ID] = js
	if js.frac || !j.Elastic.IsZero() {
		e.resumeOK = false
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
			if len(js.req.Groups) > 1 || !j.Elastic.IsZero() {
				js.badOf, js.badC = errFractional, nil // whatever the cluster
			}
		}
	}
	e.byPtr[j] = js
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
	key := fmt.Sprintf("%d/%d/%d/%s/%s/%s", g.GPUsPerMember, g.CPUMilli, g.MemoryMiB, g.GPUModel, r.Required, r.Preferred)
	id, ok := e.shapes[key]
	if !ok {
		id = uint64(len(e.shapes) + 1)
		e.shapes[key] = id
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

func (e *Engine) finish(id string, at time.Time) error {
	js, err := e.lookup(id)
	if err != nil {
		return err
	}
	if js.st == statePending {
		return fmt.Errorf("%w: job %q finished while pending", ErrInvalidEvent, id)
	}
	e.stopRunning(js, at)
	e.forget(js)
	return nil
}

func (e *Engine) cancel(id string, at time.Time) error {
	js, err := e.lookup(id)
	if err != nil {
		return err
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
	delete(e.jobs, js.j.ID)
	delete(e.byPtr, js.j)
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

func (e *Engine) adopt(j *queue.Job, ms []Member, at time.Time) error {
	if j == nil {
		return fmt.Errorf("%w: adoption without a job", ErrInvalidEvent)
	}
	if err := j.Validate(); err != nil {
		return err
	}
	if err := e.tree.ValidateJob(j); err != nil {
		return err
	}
	if _, dup := e.jobs[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
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
		delete(e.byPtr, j)
		return fmt.Errorf("%w: adopting %q: %w", ErrInvalidEvent, j.ID, errFractional)
	}
	if err := checkWhole(js, p); err != nil {
		delete(e.byPtr, j)
		return err
	}
	if err := p.rebook(e.snap); err != nil {
		delete(e.byPtr, j)
		return fmt.Errorf("%w: adopting %q: %w", ErrInvalidEvent, j.ID, err)
	}
	if err := e.tree.Adopt(j, at); err != nil {
		p.unbook(e.snap)
		delete(e.byPtr, j)
		return err
	}
	js.st, js.place, js.start, js.confirmed = stateRunning, p, at, true
	js.members = countGroup(p, 0)
	e.jobs[j.ID] = js
	e.activate(js)
	return nil
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
	js.deadline, js.victimFor = time.Time{}, ""
}

// toPending puts a job whose GPUs were released back to pending.
func (e *Engine) toPending(js *job) {
	js.st = statePending
	js.members = 0
	if err := e.pending.Add(js.j); err != nil {
		panic(fmt.Sprintf("engine: broken invariant: requeue of %q: %v", js.j.ID, err))
	}
}

// requeue stops a running job and puts it back to pending, whole.
func (e *Engine) requeue(js *job, at time.Time) {
	e.stopRunning(js, at)
	e.toPending(js)
	e.requeued = append(e.requeued, js.j.ID)
}

// ---------------------------------------------------------------- node events

// rebuild makes the cluster from e.spec and re-books every running job by
// node name and GPU offset.
func (e *Engine) rebuild() error {
	// Build with every node ready, book the running jobs, then set the
	// states: Allocate books only on ready nodes, and cordoned or draining
	// nodes keep their jobs.
	ready := e.spec
	ready.Nodes = slices.Clone(e.spec.Nodes)
	for i := range ready.Nodes {
		ready.Nodes[i].State = topo.Ready
	}
	c, err := topo.New(ready)
	if err != nil {
		return err
	}
	s := c.NewSnapshot()
	old := e.cluster
	if err := carryLayouts(old, e.snap, c, s); err != nil {
		return err
	}
	moved := map[string]*placement{}
	for _, id := range sortedKeys(e.jobs) {
		js := e.jobs[id]
		if js.place == nil {
			continue
		}
		p, err := remap(old, c, js.place)
		if err != nil {
			return err
		}
		moved[id] = p
	}
	claims := map[string]*placement{}
	for _, id := range sortedKeys(e.claims) {
		p, err := remap(old, c, e.claims[id].place)
		if err != nil {
			return err
		}
		claims[id] = p
	}
	// Book on ready nodes first, then set states: Allocate needs ready nodes.
	for _, id := range sortedKeys(moved) {
		if err := moved[id].rebook(s); err != nil {
			return fmt.Errorf("re-booking %q: %w", id, err)
		}
	}
	for i := range e.spec.Nodes {
		if st := e.spec.Nodes[i].State; st != topo.Ready {
			id, _ := c.NodeByName(e.spec.Nodes[i].Name)
			if err := s.SetNodeState(id, st); err != nil {
				return err
			}
		}
	}
	e.cluster, e.snap = c, s
	for id, p := range moved {
		e.jobs[id].place = p
	}
	for id, p := range claims {
		e.claims[id].place = p
	}
	e.specIdx = make(map[string]int, len(e.spec.Nodes))
	for i := range e.spec.Nodes {
		e.specIdx[e.spec.Nodes[i].Name] = i
	}
	for _, js := range e.jobs {
		if js.badOf != errFractional {
			js.badOf, js.badC = nil, nil // placement errors depend on the cluster
		}
	}
	clear(e.lastRes)
	return nil
}

func (e *Engine) addNode(n topo.NodeSpec) error {
	if _, dup := e.specIdx[n.Name]; dup {
		return fmt.Errorf("%w: node %q: %w", ErrInvalidEvent, n.Name, topo.ErrDuplicateNode)
	}
	saved := e.spec.Nodes
	e.spec.Nodes = append(slices.Clip(saved), n)
	if err := e.spec.Validate(); err != nil {
		e.spec.Nodes = saved
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if err := e.rebuildOrRestore(saved); err != nil {
		return err
	}
	return nil
}

// rebuildOrRestore rebuilds from e.spec; on failure it restores the old
// node list (the engine is unchanged).
func (e *Engine) rebuildOrRestore(saved []topo.NodeSpec) error {
	// A rebuild is all or nothing: it only assigns at the end.
	if err := e.rebuild(); err != nil {
		e.spec.Nodes = saved
		e.specIdx = make(map[string]int, len(saved))
		for i := range saved {
			e.specIdx[saved[i].Name] = i
		}
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return nil
}

func (e *Engine) changeNode(n topo.NodeSpec, at time.Time) error {
	i, ok := e.specIdx[n.Name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, n.Name)
	}
	if n.State > topo.Down {
		return fmt.Errorf("%w: node %q: %w", ErrInvalidEvent, n.Name, topo.ErrBadState)
	}
	cur := e.spec.Nodes[i]
	if !mapsEqual(cur.Labels, n.Labels) {
		saved := e.spec.Nodes
		e.spec.Nodes = slices.Clone(saved)
		e.spec.Nodes[i].Labels = cloneLabels(n.Labels)
		if err := e.rebuildOrRestore(saved); err != nil {
			return err
		}
	}
	if n.State == topo.Down {
		return e.failNode(n.Name, at)
	}
	e.spec.Nodes[i].State = n.State
	id, _ := e.cluster.NodeByName(n.Name)
	return e.snap.SetNodeState(id, n.State)
}

func (e *Engine) failNode(name string, at time.Time) error {
	i, ok := e.specIdx[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	id, _ := e.cluster.NodeByName(name)
	e.spec.Nodes[i].State = topo.Down
	if err := e.snap.SetNodeState(id, topo.Down); err != nil {
		return err
	}
	for _, jid := range sortedKeys(e.jobs) {
		js := e.jobs[jid]
		if js.place == nil || !js.place.onNode(id) {
			continue
		}
		if e.cfg.NodeFailure == FailOnFailure {
			e.stopRunning(js, at)
			e.forget(js)
			e.failed = append(e.failed, JobFailure{Job: jid, Node: name})
			continue
		}
		e.requeue(js, at)
	}
	return nil
}

// ---------------------------------------------------------------- helpers

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func cloneLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// carryLayouts gives the MIG GPUs of a rebuilt cluster c (snapshot s,
// nothing booked yet) the layouts their GPUs had in the old cluster
// (instances created by placements and reconfigurations stay), by node
// name and GPU offset.
func carryLayouts(old *topo.Cluster, os *topo.Snapshot, c *topo.Cluster, s *topo.Snapshot) error {
	if old == nil || os == nil || os.Pool() == nil || s.Pool() == nil {
		return nil
	}
	for n := range c.NumNodes() {
		id := topo.NodeID(n)
		if cfg, ok := c.NodeGPUConfig(id); !ok || !cfg.MIG {
			continue
		}
		oid, ok := old.NodeByName(c.NodeName(id))
		if !ok {
			continue
		}
		if cfg, ok := old.NodeGPUConfig(oid); !ok || !cfg.MIG {
			continue
		}
		first, k := c.NodeGPUs(id)
		ofirst, _ := old.NodeGPUs(oid)
		for i := range uint32(k) {
			if l := os.Pool().Layout(ofirst + i); l != s.Pool().Layout(first+i) {
				if err := s.SetMIGLayout(first+i, l); err != nil {
					return fmt.Errorf("carrying the MIG layout of %s GPU %d: %w", c.NodeName(id), i, err)
				}
			}
		}
	}
	return nil
}

// bitmapOf returns the GPUs of a placement as a bitmap.
func bitmapOf(gpus []uint32) *roaring.Bitmap { return roaring.BitmapOf(gpus...) }
