package engine

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/google/btree"
)

// claim holds GPUs for a preemptor until its victims' grace periods end.
type claim struct {
	job     string
	place   *placement
	victims []string
	start   time.Time // the latest victim deadline
}

// outstanding is what the latest Ready asked and Advance may refuse.
type outstanding struct {
	binds map[string]bool
	// bindIDs are binds' keys, in the order bound: accept and Advance
	// go through them without starting a map iteration per cycle.
	bindIDs  []string
	preempts map[string]bool
	grows    map[string][]pmember
	mig      []MIGReconfiguration
	// runs is the run (job.run) of each job a decision is about: a refusal
	// applies to that run only, not to a later run of the same job ID
	// (cancelled and adopted, or requeued and bound again, meanwhile).
	runs map[string]uint64
}

// bind records a bind of job id (once however often it is bound).
func (o *outstanding) bind(id string) {
	n := len(o.binds)
	o.binds[id] = true
	if len(o.binds) > n {
		o.bindIDs = append(o.bindIDs, id)
	}
}

// current reports whether js still is in the run a decision was about.
func (o *outstanding) current(js *job, id string) bool {
	return js != nil && o.runs[id] == js.run
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
	byPtr     map[*queue.Job]*job    // the pending jobs only, for the walk (no string hashing)
	active    []*job                 // running and stopping, in no order (job.activeAt: its index + 1)
	tl        *btree.BTreeG[tlEntry] // active jobs by expected end (see timeline.go)
	tlGen     uint64                 // changes whenever tl does (tlsnaps.go)
	tlView    []tlEntry              // tl as a slice, as of tlViewGen (Engine.timeline)
	tlViewGen uint64
	tlSpare   []tlEntry // the array of the tlView before, reused by the next
	// tlSeq numbers the timeline's additions; tlAdds lists those the
	// reservation memos may need (resmemo.go), by job ID in resMemos.
	tlSeq    uint64
	tlAdds   []tlAddRec
	resMemos map[string]*resMemo
	// resSkipped counts the probes the memos spared (for tests).
	resSkipped uint64
	tailBuf    tailState // e.tail's memory when set
	elastic    int       // active elastic jobs
	stopping   int       // jobs in their grace period
	shapes     map[string]uint64
	keyBuf     []byte // shapeID's scratch
	claims     map[string]*claim
	// sticky reservations of the last cycle: a job keeps its GPU set and
	// start while they stay valid.
	lastRes map[string]*resv
	// Cycle resumption (see resumable, the one place that decides it):
	// quiet says the last cycle changed nothing; since records what came
	// in after it; order is that walk's pending jobs, in order, with their
	// statuses in lastPend. noResume turns resuming off (tests compare
	// both).
	quiet    bool
	since    sinceCycle
	order    []*queue.Job
	lastPend []PendingStatus
	noResume bool
	resumed  int // cycles that resumed (tests)
	// fitsSeen: the never-fits check's verdicts by request (scalecache.go).
	fitsSeen fitsMemo
	fitsBuf  []byte // the key being looked up in fitsSeen

	now   time.Time
	dirty bool
	// migNotBefore: no MIG plan before this (a plan was refused).
	migNotBefore time.Time
	// migFlight: MIG changes booked but not confirmed (Outcome.AssumeMIG,
	// migflight.go); nil: none yet.
	migFlight map[migKey]*migFlight
	seq       uint64
	runs      uint64   // runs started (bound or adopted): job.run
	jn        *journal // inputs recorded for Save (nil: off)
	touched   bool     // Step or Ready was called (EnableJournal)
	// retryAt is the earliest end of a bind retry backoff among the jobs
	// the last cycle found waiting for one, or Advance refused (Unix ns;
	// 0: none). See BindRetryAt.
	retryAt int64
	// maxNotBefore is the latest bind backoff end ever set, and fracSeen
	// whether a fractional or MIG job was ever known: two conditions of
	// the walk's cut (lazy.go); tail is what the last cycle's cut left
	// for PendingAll (nil: no cut).
	maxNotBefore int64
	fracSeen     bool
	tail         *tailState
	out          *outstanding
	// outBuf is the outstanding record reused by every cycle (its maps
	// cleared): nothing keeps it once the next cycle starts.
	outBuf *outstanding

	// reported with the next Ready
	requeued []string
	failed   []JobFailure
	rejected []Rejection

	placer   gang.Placer
	drainBuf []*queue.Job
	view     atomic.Pointer[View]
	running  runSet // observers' copy of the running jobs
	cyc      cycleState
	site     *siteState // site rules (site.go); nil while none is used

	// services (service.go): by name; svcTopUp: a replica ended on its
	// own and is to be replaced; stops: replicas removed, reported with
	// the next Ready.
	svcs     map[string]*service
	svcNext  map[string]int // next replica index of deleted services
	svcTopUp bool
	stops    []Stop

	// binding: the running jobs whose binds are assumed or unknown
	// (bindstate.go); held counts the held jobs.
	binding map[string]*job
	held    int
	// putBack: jobs whose binds failed since the last cycle's View, which
	// republish lists (their cycle listed them as bound).
	putBack []string
}

// New validates cfg and returns an engine with the cluster and queues of
// cfg, no jobs, and its clock at cfg.Start.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	tree, err := queue.NewTree(cfg.Queues)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	pending, err := queue.NewPending(tree, pendingConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	in, err := queue.NewIntake(cfg.IntakeCapacity)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	e := &Engine{
		cfg: cfg, tree: tree, pending: pending, intake: in, policy: cfg.Policy,
		jobs: map[string]*job{}, byPtr: map[*queue.Job]*job{}, shapes: map[string]uint64{}, claims: map[string]*claim{}, lastRes: map[string]*resv{}, resMemos: map[string]*resMemo{}, binding: map[string]*job{},
		now: cfg.Start, dirty: true,
		tl: btree.NewG(32, tlLess),
	}
	e.cyc.recycle = !cfg.DisableCaches
	if !cfg.Site.isZero() {
		e.siteInit()
	}
	e.spec = topo.Spec{
		Levels:    slices.Clone(cfg.Cluster.Levels),
		GPULevels: slices.Clone(cfg.Cluster.GPULevels),
		Nodes:     slices.Clone(cfg.Cluster.Nodes),

		ShareFreeGPUs: cfg.Cluster.ShareFreeGPUs,
	}
	if e.placer.Scorer, err = gang.NewScorer(cfg.Scorer); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// Placements keep the search inside each required domain until its
	// counters change (gang.Placer.Memo), across cycles and what-if clones.
	e.placer.Memo = !cfg.DisableCaches
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
	e.touched = true
	if ev.Time.Before(e.now) {
		return fmt.Errorf("%w: event at %v, clock at %v", ErrTimeBackwards, ev.Time, e.now)
	}
	var err error
	quiet := false // the event changes nothing a cycle decides on
	e.since.events |= 1 << ev.Kind
	if e.tail != nil {
		e.tail.stale = true
	}
	switch ev.Kind {
	case EventTick:
	case EventJobSubmitted:
		err = e.submit(ev.Job)
	case EventJobFinished:
		err = e.finish(ev.JobID, ev.Time, ev.Failed)
	case EventJobCancelled:
		err = e.cancel(ev.JobID, ev.Time)
	case EventJobCheckpointed:
		err = e.checkpointed(ev.JobID, ev.Time)
	case EventJobAdopted:
		err = e.adopt(ev.Job, ev.Members, ev.Time, ev.Started)
	case EventNodeAdded:
		err = e.addNode(ev.Node)
	case EventNodeChanged:
		err = e.changeNode(ev.Node, ev.Time)
	case EventNodeFailed:
		err = e.failNode(ev.NodeName, ev.Time)
	case EventDevicesReported:
		err = e.devicesReported(ev.JobID, ev.Members)
	case EventArraySubmitted:
		err = e.submitArray(ev.Job, ev.Tasks, ev.Throttle, ev.Time)
	case EventReservationSet:
		err = e.setReservation(ev.Reservation)
	case EventReservationDeleted:
		err = e.deleteReservation(ev.Reservation)
	case EventServiceSet:
		err = e.setService(ev.Service, ev.Time)
	case EventServiceScaled:
		err = e.scaleService(ev.ServiceName, ev.Desired, ev.Time)
	case EventServiceDeleted:
		err = e.deleteService(ev.ServiceName, ev.Time)
	case EventBindApplied, EventBindFailed, EventBindUnknown, EventBindDeferred:
		err = e.bindOutcome(ev)
	case EventReleased:
		err = e.release(ev.JobID)
	case EventPreemptApplied, EventPreemptFailed, EventPreemptUnknown:
		quiet, err = e.preemptOutcome(ev)
	case EventResizeFailed:
		err = e.resizeFailed(ev)
	case EventMIGApplied, EventMIGFailed, EventMIGUnknown:
		quiet, err = e.migOutcome(ev)
	default:
		err = fmt.Errorf("%w: kind %v", ErrInvalidEvent, ev.Kind)
	}
	if err != nil {
		return err
	}
	e.now = ev.Time
	// A bind applied or unknown changes nothing a cycle decides on (the
	// job was booked already): Publish shows it.
	if ev.Kind != EventBindApplied && ev.Kind != EventBindUnknown && !quiet {
		e.dirty = true
	}
	e.topUp(ev.Time)
	if e.jn != nil {
		e.recordEvent(ev)
	}
	return nil
}

// BindRetryAt returns the earliest time a job waiting for its bind retry
// backoff (ReasonBindRefused) may be placed again, as the latest cycle
// and Advance left it; ok false: no job waits for one. Nothing wakes the
// engine then by itself: a driver steps a Tick at that time (the Runner
// does).
func (e *Engine) BindRetryAt() (t time.Time, ok bool) {
	if e.retryAt == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, e.retryAt).In(e.now.Location()), true
}

func (e *Engine) noteRetry(ns int64) {
	if e.retryAt == 0 || ns < e.retryAt {
		e.retryAt = ns
	}
}

// bindBackoff is the wait after the n-th consecutive refusal of a job's
// binds (n >= 1): BindRetryBackoff doubled n-1 times, at most
// BindRetryMax (when that is larger).
func (e *Engine) bindBackoff(n int) time.Duration {
	d := e.cfg.BindRetryBackoff
	limit := e.cfg.BindRetryMax
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	if limit > e.cfg.BindRetryBackoff && d > limit {
		d = limit
	}
	return d
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
	e.touched = true
	if e.jn != nil {
		e.jn.recs = append(e.jn.recs, Record{Ready: true}) // drain adds its jobs
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
	for _, id := range e.out.bindIDs {
		if js := e.jobs[id]; js != nil && js.st == stateRunning && e.out.current(js, id) {
			e.confirm(js)
		}
	}
	e.applyMIG(e.out.mig, nil, false)
	e.out = nil
}

// Advance tells the engine which decisions of rd the backend refused (see
// Outcome); the rest count as applied. rd must be the latest Ready
// (ErrStaleReady otherwise). Refusals of decisions rd did not make are
// ErrInvalidEvent. A refusal applies only to the run of the job that rd's
// decision was about: when that run has ended since (the job finished,
// was cancelled or requeued, and may run again, e.g. adopted, under the
// same ID), the refusal refuses nothing and is ignored.
func (e *Engine) Advance(rd Ready, out Outcome) error {
	if rd.Seq != e.seq {
		return fmt.Errorf("%w: Ready %d, latest %d", ErrStaleReady, rd.Seq, e.seq)
	}
	o := e.out
	if o == nil {
		o = &outstanding{}
	}
	for _, id := range out.RefusedBinds {
		if !o.binds[id] {
			return fmt.Errorf("%w: refused bind of %q, which Ready %d did not bind", ErrInvalidEvent, id, rd.Seq)
		}
	}
	for _, id := range out.RefusedPreemptions {
		if !o.preempts[id] {
			return fmt.Errorf("%w: refused preemption of %q, which Ready %d did not preempt", ErrInvalidEvent, id, rd.Seq)
		}
	}
	for _, id := range out.RefusedResizes {
		if _, ok := o.grows[id]; !ok {
			return fmt.Errorf("%w: refused resize of %q, which Ready %d did not grow", ErrInvalidEvent, id, rd.Seq)
		}
	}
	// Only refusals of the runs the decisions were about (see above).
	live := func(ids []string, st state) []string {
		var keep []string
		for _, id := range sortedUnique(ids) {
			if js := e.jobs[id]; js != nil && js.st == st && o.current(js, id) {
				keep = append(keep, id)
			}
		}
		return keep
	}
	refBinds := live(out.RefusedBinds, stateRunning)
	refPreempts := live(out.RefusedPreemptions, stateStopping)
	refResizes := live(out.RefusedResizes, stateRunning)
	for _, r := range out.RefusedMIG {
		if !slices.ContainsFunc(o.mig, func(x MIGReconfiguration) bool { return x.Node == r.Node && x.GPU == r.GPU }) {
			return fmt.Errorf("%w: refused MIG change of %s GPU %d, which Ready %d did not make", ErrInvalidEvent, r.Node, r.GPU, rd.Seq)
		}
	}
	if len(refBinds) > 0 || len(out.RefusedMIG) > 0 {
		e.freezeTail()
	}
	for _, id := range refBinds {
		e.failBind(e.jobs[id], "")
	}
	for _, id := range refPreempts {
		e.unpreempt(e.jobs[id])
	}
	if out.AssumePreemptions {
		for id := range o.preempts {
			if js := e.jobs[id]; js != nil && js.st == stateStopping && o.current(js, id) {
				js.preemptSt = bindAssumed
			}
		}
	}
	for _, id := range refResizes {
		e.undoGrow(e.jobs[id], o.grows[id])
	}
	for _, id := range o.bindIDs { // each job on its own: the order does not matter
		if js := e.jobs[id]; js != nil && js.st == stateRunning && o.current(js, id) {
			if out.AssumeBinds {
				e.assume(js)
			} else {
				e.confirm(js)
			}
		}
	}
	if e.applyMIG(o.mig, out.RefusedMIG, out.AssumeMIG) {
		e.dirty = true // the jobs the new instances serve are placed next cycle
	}
	e.out = nil
	if e.jn != nil {
		e.recordAdvance(out)
	}
	if len(refBinds)+len(refPreempts)+len(refResizes) > 0 || out.AssumeBinds && len(o.binds) > 0 {
		e.dirty = e.dirty || len(refBinds)+len(refPreempts)+len(refResizes) > 0
		if !e.cfg.CycleViewsOnly {
			e.republish()
		}
	}
	return nil
}

// pendingConfig is cfg.Pending, with the policies' kept order off when
// every cache is (Config.DisableCaches).
func pendingConfig(cfg Config) queue.PendingConfig {
	pc := cfg.Pending
	pc.RebuildOrder = pc.RebuildOrder || cfg.DisableCaches
	return pc
}
