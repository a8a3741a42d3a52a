package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Errors of the simulator's own methods (Submit, FailNode, ...). Actuator
// refusals wrap backends.ErrRefused instead.
var (
	// ErrInvalid: an argument the simulator cannot use (nil job, unknown
	// node, a time before the clock).
	ErrInvalid = errors.New("sim: invalid argument")
	// ErrDuplicateJob: a job ID submitted twice.
	ErrDuplicateJob = errors.New("sim: duplicate job ID")
	// ErrTransient is the error of a bind failed on purpose by FailBinds;
	// the Runner retries it.
	ErrTransient = errors.New("sim: transient failure")
)

// Config configures a simulator.
type Config struct {
	// Cluster is the simulated inventory. Required: at least one node
	// (the nodes of Autoscale's pools count).
	Cluster topo.Spec
	// Start is the virtual clock before the first event.
	Start time.Time
	// RuntimeFactor, if set, stretches a run by where it landed: the run
	// of a job bound on the named nodes (one entry per member, in bind
	// order) lasts its runtime times the factor returned (at least 1;
	// NaN or less counts as 1). It is asked again as each member of the
	// run binds in the instant the run began, so the factor sees the
	// whole gang. It must be deterministic. Nil: runs last their runtime.
	// The replay's price of placement (replay.Price) is built on it.
	RuntimeFactor func(job string, nodes []string) float64
	// Autoscale, if set, adds autoscaling pools to Cluster: the simulator
	// is then a backends.Provisioner (provision.go). Nil: none.
	Autoscale *Autoscale
}

// Outcome is what happened to one job.
type Outcome struct {
	ID     string
	Submit time.Time
	// Start is the start of the job's last run; End its end (finished).
	Start, End time.Time
	Started    bool
	Finished   bool
	// GPUs is the number of whole GPUs the last run held (its largest
	// size). Milli is what the last run held in thousandths of a GPU (its
	// largest): 1000 per whole GPU, a share's milli, a MIG instance's
	// compute fraction (a 3g of a 7-slice GPU is 428).
	GPUs  int
	Milli int64
	// Preemptions counts the job's preempted runs; Interrupted its runs
	// stopped by node failures. LostRun is the time those runs held their
	// GPUs.
	Preemptions int
	Interrupted int
	LostRun     time.Duration
}

// Sim is an in-memory cluster on a virtual clock. It implements
// backends.Backend and backends.Clock: jobs are submitted at their Submit
// time, each bound job runs for its runtime and is then reported
// finished; node failures and refused or failing binds can be injected.
//
// Every method is safe for concurrent use. Results do not depend on the
// order of concurrent Actuator calls: events of one instant are delivered
// sorted (finishes by job ID, then node changes, then submissions in
// submission order).
type Sim struct {
	mu      sync.Mutex
	spec    topo.Spec
	nodeIdx map[string]int
	nodes   []node
	now     time.Time
	evq     evHeap
	seq     uint64
	// jobs maps every unfinished job submitted (and every replica bound)
	// to its record. A finished job's ID stays known (a second submission
	// of it is a duplicate): while sorted (every job's ID greater than the
	// one submitted before, lastID the last), the records in outs are in
	// order of ID and a binary search finds it; after, done maps the hash
	// of the ID (seed) to its index in outs, or doneX holds it when
	// another ID took that hash.
	jobs   map[string]*job
	sorted bool
	lastID string
	done   map[uint64]int
	doneX  map[string]struct{}
	seed   maphash.Seed
	// outs holds every submitted job's outcome record, in submission
	// order, in chunks of outChunk (no copy as it grows); njobs counts
	// them. A finished job keeps only its outcome there, without pointers
	// (outstore.go): times as offsets from base, the ID's bytes in ids;
	// full holds the outcomes that do not fit a record.
	outs    [][]outRec
	ids     [][]byte
	full    map[int]*Outcome
	base    time.Time
	njobs   int
	refuse  map[injKey]int
	fail    map[injKey]int
	refMIG  map[migKey]int
	failMIG map[migKey]int

	busy      int   // GPUs with anything on them
	busyMilli int64 // GPU milli held
	running   int   // jobs with members bound
	// live lists the jobs with members bound (not replicas), in no order;
	// job.live is a job's index in it plus one (0: not in it). Running
	// reads it instead of every job submitted.
	live     []*job
	finished int
	viol     []error
	mig      []engine.MIGReconfiguration
	stats    Stats

	factor func(job string, nodes []string) float64
	fnodes []string // scratch for factor
	// freeHist[f] counts the nodes with f idle GPUs (down nodes: 0),
	// kept as nodes change (State's FreeHist).
	freeHist []int

	svcs     map[string]*engine.Service // service specs (service.go)
	replicas []*job                     // replicas, by first bind

	prov *provisioner // autoscaling pools (provision.go); nil: none

	// stream, if set, yields the jobs still to arrive (Stream); ahead is
	// the next of them, taken from it and not yet submitted.
	stream    func() (*queue.Job, time.Duration, bool)
	ahead     *job
	streamErr error // the stream's bad job, returned by the next Next

	batch []event // Next's scratch
}

type node struct {
	name  string
	gpus  []gpu
	down  bool
	busy  int       // GPUs with anything on them
	mig   mig.Model // MIG mode on every GPU (NoModel: not in MIG mode)
	share bool      // fractional members may share its GPUs
}

// gpu is one simulated GPU: held whole, or holding MIG instances in use,
// or shares.
type gpu struct {
	holder string     // job holding the GPU whole; "" none
	layout mig.Layout // MIG nodes: the instances present
	inUse  []instUse  // MIG instances in use
	shares []shareUse
	milli  int // milli held by shares
}

type instUse struct {
	in  mig.Instance
	job string
}

type shareUse struct {
	id    mig.ShareID
	milli int
	job   string
}

func (g *gpu) idle() bool { return g.holder == "" && len(g.inUse) == 0 && len(g.shares) == 0 }

type job struct {
	j       *queue.Job
	runtime time.Duration
	members []engine.Member
	nodeIx  []int32 // the node index of each member (Sim.nodes)
	gpus    int     // whole GPUs bound now
	milli   int64   // GPU milli bound now
	gen     uint64
	out     *Outcome // &outv until it finishes (Sim.outs then holds it)
	outv    Outcome
	prev    runStart // before the current run began (restored on rollback)
	// submitted: its submission was delivered (Next); until it ends it is
	// running or pending.
	submitted bool
	// replica: a service replica (service.go): no runtime, never finishes.
	replica bool
	// idx is its position in submission order (Sim.outs); live its index
	// in Sim.live plus one (0: no member bound).
	idx, live int
}

// runStart is the part of an Outcome a run's first bind changes, as it
// was before: a run rolled back in the instant it began restores it.
type runStart struct {
	started bool
	start   time.Time
	gpus    int
	milli   int64
}

func runStartOf(o *Outcome) runStart { return runStart{o.Started, o.Start, o.GPUs, o.Milli} }

// restore puts r back into o.
func (r runStart) restore(o *Outcome) {
	o.Started, o.Start, o.GPUs, o.Milli = r.started, r.start, r.gpus, r.milli
}

type injKey struct{ job, node string }

type migKey struct {
	node string
	gpu  int
}

// Stats counts what the simulator did with MIG instances and shares.
type Stats struct {
	// MIGApplied and MIGRefused count ApplyMIG calls applied and refused
	// (injected refusals included; transient failures are not counted).
	MIGApplied, MIGRefused int
	// InstancesCreated counts MIG instances created, by binds (a member
	// with Created) and by MIG changes; InstancesDestroyed those destroyed
	// by MIG changes and by rolled-back binds.
	InstancesCreated, InstancesDestroyed int
	// InstanceBinds and ShareBinds count fractional members bound.
	InstanceBinds, ShareBinds int
	// MaxShares is the most shares held at once; MaxSharesPerGPU the most
	// on one GPU.
	MaxShares, MaxSharesPerGPU int

	shares int
}

type evKind uint8

const (
	evFinish evKind = iota
	evNodeFail
	evNodeRecover
	evSubmit
	evService
	evBoot     // a pool node comes up (provision.go)
	evBootFail // a pool node asked for never comes up
	evRelease  // a pool node scaled down
)

type event struct {
	at   time.Time
	kind evKind
	seq  uint64
	job  *job
	gen  uint64
	node string
	svc  *engine.Event // evService
}

// evHeap is a binary min-heap of events by (at, seq), a total order (seq
// is unique). Typed, not container/heap: that boxed every event pushed and
// popped (two allocations an event, millions in a month's replay). The
// heap moves small entries (the time, the seq and the event's slot); the
// events stay in their slots (free ones reused), so a sift moves 40 bytes
// an entry instead of a whole event.
type evHeap struct {
	h    []evEntry
	evs  []event
	free []int32
}

type evEntry struct {
	at   time.Time
	seq  uint64
	slot int32
}

func (q *evHeap) len() int { return len(q.h) }

// first is the time of the least event; q must not be empty.
func (q *evHeap) first() time.Time { return q.h[0].at }

func evLess(a, b *evEntry) bool {
	if c := a.at.Compare(b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

func (q *evHeap) push(e event) {
	var slot int32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
		q.evs[slot] = e
	} else {
		slot = int32(len(q.evs))
		q.evs = append(q.evs, e)
	}
	h := append(q.h, evEntry{at: e.at, seq: e.seq, slot: slot})
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !evLess(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	q.h = h
}

// pop removes and returns the least event; q must not be empty.
func (q *evHeap) pop() event {
	h := q.h
	n := len(h) - 1
	slot := h[0].slot
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && evLess(&h[r], &h[l]) {
			m = r
		}
		if !evLess(&h[m], &h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.h = h
	e := q.evs[slot]
	q.evs[slot] = event{} // no job kept alive by a free slot
	q.free = append(q.free, slot)
	return e
}

// New returns a simulator of cfg.Cluster with its clock at cfg.Start and
// no jobs. Errors wrap ErrInvalid (and topo's validation error).
func New(cfg Config) (*Sim, error) {
	var pv *provisioner
	if cfg.Autoscale != nil {
		cfg.Cluster = cloneSpec(cfg.Cluster)
		var err error
		if pv, err = addPools(cfg.Autoscale, &cfg.Cluster, cfg.Start); err != nil {
			return nil, err
		}
	}
	if len(cfg.Cluster.Nodes) == 0 {
		return nil, fmt.Errorf("%w: cluster has no nodes", ErrInvalid)
	}
	if err := cfg.Cluster.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s := &Sim{
		spec: cloneSpec(cfg.Cluster), nodeIdx: map[string]int{}, now: cfg.Start,
		jobs: map[string]*job{}, sorted: true, done: map[uint64]int{}, seed: maphash.MakeSeed(), base: cfg.Start, refuse: map[injKey]int{}, fail: map[injKey]int{},
		refMIG: map[migKey]int{}, failMIG: map[migKey]int{}, factor: cfg.RuntimeFactor, prov: pv,
	}
	for i, n := range s.spec.Nodes {
		s.nodeIdx[n.Name] = i
		nd := node{name: n.Name, gpus: make([]gpu, n.GPUs), down: n.State == topo.Down,
			share: n.Sharing.Mode != mig.Exclusive || (cfg.Cluster.ShareFreeGPUs && !n.MIG)}
		if n.MIG {
			m, err := mig.LookupModel(n.GPUModel)
			if err != nil {
				return nil, fmt.Errorf("%w: node %s: %w", ErrInvalid, n.Name, err)
			}
			l := mig.EmptyLayout(m)
			if n.MIGLayout != "" {
				if l, err = mig.ParseLayout(m, n.MIGLayout); err != nil {
					return nil, fmt.Errorf("%w: node %s: %w", ErrInvalid, n.Name, err)
				}
			}
			nd.mig = m
			for g := range nd.gpus {
				nd.gpus[g].layout = l
			}
		}
		s.nodes = append(s.nodes, nd)
	}
	for i := range s.nodes {
		s.histAdd(&s.nodes[i], 1)
	}
	return s, nil
}

// nodeFree is what State reports of n: its idle GPUs, 0 when down.
func nodeFree(n *node) int {
	if n.down {
		return 0
	}
	return len(n.gpus) - n.busy
}

// histAdd counts n (d = 1) in freeHist, or takes it out (d = -1); every
// change of n.busy or n.down is wrapped in a take-out and a count.
func (s *Sim) histAdd(n *node, d int) {
	f := nodeFree(n)
	if f >= len(s.freeHist) {
		s.freeHist = append(s.freeHist, make([]int, f+1-len(s.freeHist))...)
	}
	s.freeHist[f] += d
}

func cloneSpec(sp topo.Spec) topo.Spec {
	out := sp
	out.Levels = slices.Clone(sp.Levels)
	out.GPULevels = slices.Clone(sp.GPULevels)
	out.Nodes = slices.Clone(sp.Nodes)
	return out
}

// ---------------------------------------------------------------- set-up

// Submit schedules j for submission at j.Submit; once bound it runs for
// runtime (at least 1 ns). The simulator owns j afterwards. Errors:
// ErrInvalid (nil job, empty ID, non-positive runtime, a submit time
// before the clock), ErrDuplicateJob.
func (s *Sim) Submit(j *queue.Job, runtime time.Duration) error {
	if j == nil || j.ID == "" {
		return fmt.Errorf("%w: job without an ID", ErrInvalid)
	}
	if runtime <= 0 {
		return fmt.Errorf("%w: job %q: runtime %v is not positive", ErrInvalid, j.ID, runtime)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known(j.ID) {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	if j.Submit.Before(s.now) {
		return fmt.Errorf("%w: job %q submitted at %v, clock at %v", ErrInvalid, j.ID, j.Submit, s.now)
	}
	js := &job{j: j, runtime: runtime}
	s.enroll(js)
	s.push(event{at: j.Submit, kind: evSubmit, job: js})
	return nil
}

// enroll adds js to the submitted jobs (its submission is on its way).
func (s *Sim) enroll(js *job) {
	if s.njobs%outChunk == 0 {
		s.outs = append(s.outs, make([]outRec, outChunk))
	}
	s.enrolled(js.j.ID)
	js.idx = s.njobs
	s.njobs++
	r := s.recAt(js.idx)
	r.idChunk, r.idOff = s.addID(js.j.ID)
	r.idLen = uint32(len(js.j.ID))
	js.outv = Outcome{ID: js.j.ID, Submit: js.j.Submit}
	js.out = &js.outv
	s.jobs[js.j.ID] = js
}

// Stream gives the simulator jobs to submit as their time comes, instead
// of all at set-up (Submit): next returns the next job and its runtime
// (as Submit takes them), and false when there are no more. The jobs must
// come in order of their Submit times; those of one instant are delivered
// in the order next returns them, after the jobs of that instant given to
// Submit. The simulator takes one job ahead of its clock: a job counts as
// submitted (Pending, Outcomes, binds) only once its time has come, so a
// long workload holds no record, and the engine no job, of what has not
// arrived yet. A job that Submit would refuse (nil, without an ID, a
// runtime that is not positive, a duplicate ID, a Submit time before the
// clock, so before the job before it) ends the stream: the next call of
// Next returns its error (ErrInvalid or ErrDuplicateJob). The simulator
// owns the jobs next returns. Stream replaces a stream set before (the job
// taken ahead from it is kept and delivered first); nil ends it. next is
// called with the simulator's lock held: it must not call the simulator.
func (s *Sim) Stream(next func() (*queue.Job, time.Duration, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stream = next
}

// known reports whether a job of that ID was submitted (finished ones
// included).
func (s *Sim) known(id string) bool {
	if s.sorted && len(s.replicas) == 0 && (s.njobs == 0 || id > s.lastID) {
		return false // after every ID submitted, and no replica
	}
	if _, ok := s.jobs[id]; ok {
		return true
	}
	return s.finishedID(id)
}

// pull takes the next job of the stream ahead, if none is and a stream is
// set; a bad job ends the stream and is kept in streamErr.
func (s *Sim) pull() {
	if s.ahead != nil || s.stream == nil {
		return
	}
	j, runtime, ok := s.stream()
	if !ok {
		s.stream = nil
		return
	}
	var err error
	switch {
	case j == nil || j.ID == "":
		err = fmt.Errorf("%w: streamed job without an ID", ErrInvalid)
	case runtime <= 0:
		err = fmt.Errorf("%w: streamed job %q: runtime %v is not positive", ErrInvalid, j.ID, runtime)
	case s.known(j.ID):
		err = fmt.Errorf("%w: streamed %q", ErrDuplicateJob, j.ID)
	case j.Submit.Before(s.now):
		err = fmt.Errorf("%w: streamed job %q submitted at %v, clock at %v (out of order)", ErrInvalid, j.ID, j.Submit, s.now)
	}
	if err != nil {
		s.stream, s.streamErr = nil, err
		return
	}
	s.ahead = &job{j: j, runtime: runtime}
}

// FailNode schedules the failure of node at time at: its running jobs stop
// (the engine requeues them) and binds on it are refused until
// RecoverNode.
func (s *Sim) FailNode(at time.Time, name string) error {
	return s.nodeEvent(at, name, evNodeFail)
}

// RecoverNode schedules node to become ready again at time at.
func (s *Sim) RecoverNode(at time.Time, name string) error {
	return s.nodeEvent(at, name, evNodeRecover)
}

func (s *Sim) nodeEvent(at time.Time, name string, k evKind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodeIdx[name]; !ok {
		return fmt.Errorf("%w: unknown node %q", ErrInvalid, name)
	}
	if at.Before(s.now) {
		return fmt.Errorf("%w: node event at %v, clock at %v", ErrInvalid, at, s.now)
	}
	s.push(event{at: at, kind: k, node: name})
	return nil
}

// RefuseBinds makes the next n binds of job's members on node fail with
// backends.ErrRefused (n < 0: all of them). An empty node means any node.
func (s *Sim) RefuseBinds(job, node string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse[injKey{job, node}] = n
}

// FailBinds makes the next n binds of job's members on node fail with
// ErrTransient, which the Runner retries. An empty node means any node.
func (s *Sim) FailBinds(job, node string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[injKey{job, node}] = n
}

// RefuseMIG makes the next n MIG changes of GPU gpu (node-local) of node
// fail with backends.ErrRefused (n < 0: all of them). A negative gpu means
// any GPU of the node.
func (s *Sim) RefuseMIG(node string, gpu, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refMIG[migKey{node, max(gpu, -1)}] = n
}

// FailMIG makes the next n MIG changes of GPU gpu of node fail with
// ErrTransient, which the Runner retries. A negative gpu means any GPU.
func (s *Sim) FailMIG(node string, gpu, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failMIG[migKey{node, max(gpu, -1)}] = n
}

func takeMIG(m map[migKey]int, node string, gpu int) bool {
	for _, k := range [2]migKey{{node, gpu}, {node, -1}} {
		if n, ok := m[k]; ok && n != 0 {
			if n > 0 {
				m[k] = n - 1
			}
			return true
		}
	}
	return false
}

func (s *Sim) push(e event) {
	s.seq++
	e.seq = s.seq
	s.evq.push(e)
}

// ---------------------------------------------------------------- clock

// Now returns the virtual clock.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Sleep returns at once: decisions take no virtual time.
func (s *Sim) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// ---------------------------------------------------------------- inventory

// Cluster returns the simulated cluster's spec, with the nodes that are
// down (FailNode) in state Down.
func (s *Sim) Cluster(ctx context.Context) (topo.Spec, error) {
	if err := ctx.Err(); err != nil {
		return topo.Spec{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := cloneSpec(s.spec)
	for i := range s.nodes {
		if s.nodes[i].down {
			sp.Nodes[i].State = topo.Down
		} else if sp.Nodes[i].State == topo.Down {
			sp.Nodes[i].State = topo.Ready // recovered
		}
	}
	return sp, nil
}

// Pending returns the jobs whose submission was delivered and that are
// neither running nor finished (preempted and interrupted jobs waiting to
// run again included), in submission order (backends.PendingReporter).
func (s *Sim) Pending(ctx context.Context) ([]*queue.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*queue.Job
	for i := range s.njobs {
		if r := s.recAt(i); !r.closed {
			if js := s.jobs[string(s.idBytes(r))]; js != nil && js.submitted && len(js.members) == 0 {
				out = append(out, js.j)
			}
		}
	}
	return out, nil
}

// Running returns the jobs with bound members, in submission order, then
// the running service replicas in order of their first bind.
func (s *Sim) Running(ctx context.Context) ([]backends.RunningJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs := slices.Clone(s.live)
	slices.SortFunc(jobs, func(a, b *job) int { return cmp.Compare(a.idx, b.idx) })
	out := make([]backends.RunningJob, 0, len(jobs))
	for _, l := range [][]*job{jobs, s.replicas} {
		for _, js := range l {
			if len(js.members) > 0 {
				out = append(out, backends.RunningJob{Job: js.j, Members: slices.Clone(js.members), Start: js.out.Start})
			}
		}
	}
	return out, nil
}

// RunningNow is Running (it acts on nothing): the simulator is a
// backends.RunningReporter.
func (s *Sim) RunningNow(ctx context.Context) ([]backends.RunningJob, error) { return s.Running(ctx) }

// ---------------------------------------------------------------- events

// Next moves the virtual clock to the earliest pending event (or to wake,
// if that comes first) and returns every event of that instant. It
// returns backends.ErrClosed when no event is left and wake is zero, or
// every submitted job has finished (so periodic ticks do not run forever).
func (s *Sim) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	return s.NextInto(ctx, wake, nil)
}

// NextInto is Next appending the events to buf[:0] (backends.EventsInto):
// the Runner hands back the slice of its previous answer once it has
// stepped the events, so a replay allocates no slice of events per batch.
// A nil buf is Next.
func (s *Sim) NextInto(ctx context.Context, wake time.Time, buf []engine.Event) ([]engine.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if err := s.streamErr; err != nil {
			s.streamErr = nil
			return nil, err
		}
		s.pull()
		if s.evq.len() == 0 && s.ahead == nil {
			if s.streamErr != nil {
				continue
			}
			if wake.IsZero() || s.finished == s.njobs && !s.provPending() {
				return nil, backends.ErrClosed
			}
			s.advanceTo(wake)
			return emptyEvents(buf), nil
		}
		// The earlier of the next event and the next streamed arrival.
		var t time.Time
		if s.evq.len() > 0 {
			t = s.evq.first()
		}
		if s.ahead != nil && (s.evq.len() == 0 || s.ahead.j.Submit.Before(t)) {
			t = s.ahead.j.Submit
		}
		if !wake.IsZero() && wake.Before(t) {
			s.advanceTo(wake)
			return emptyEvents(buf), nil
		}
		s.advanceTo(t)
		batch := s.batch[:0] // scratch: the events are copied out below
		for s.evq.len() > 0 && s.evq.first().Equal(t) {
			batch = append(batch, s.evq.pop())
		}
		// Streamed jobs arrive: submitted now, after those given to
		// Submit (a later seq).
		for s.ahead != nil && s.ahead.j.Submit.Equal(t) {
			js := s.ahead
			s.ahead = nil
			if s.known(js.j.ID) { // given to Submit since it was taken
				s.stream, s.streamErr = nil, fmt.Errorf("%w: streamed %q", ErrDuplicateJob, js.j.ID)
				break
			}
			s.enroll(js)
			s.seq++
			batch = append(batch, event{at: t, kind: evSubmit, seq: s.seq, job: js})
			s.pull()
		}
		slices.SortFunc(batch, func(a, b event) int {
			if c := cmp.Compare(a.kind, b.kind); c != 0 {
				return c
			}
			if a.kind == evFinish {
				return cmp.Compare(a.job.out.ID, b.job.out.ID)
			}
			return cmp.Compare(a.seq, b.seq)
		})
		evs := buf[:0]
		if evs == nil {
			evs = make([]engine.Event, 0, len(batch))
		}
		for _, e := range batch {
			if ev, ok := s.fire(e); ok {
				evs = append(evs, ev)
			}
		}
		clear(batch) // no job kept alive by the scratch
		s.batch = batch[:0]
		if len(evs) > 0 {
			return evs, nil
		}
		// Only stale completions: look further.
	}
}

// emptyEvents is the empty, non-nil answer of a wake-up: buf[:0], or a
// new empty slice when buf is nil.
func emptyEvents(buf []engine.Event) []engine.Event {
	if buf == nil {
		return []engine.Event{}
	}
	return buf[:0]
}

func (s *Sim) advanceTo(t time.Time) {
	if t.After(s.now) {
		s.now = t
	}
}

// fire applies one event to the simulated cluster and returns what the
// engine is told.
func (s *Sim) fire(e event) (engine.Event, bool) {
	switch e.kind {
	case evSubmit:
		e.job.submitted = true
		return engine.Submitted(s.now, e.job.j), true
	case evFinish:
		js := e.job
		if js.gen != e.gen || len(js.members) == 0 {
			return engine.Event{}, false
		}
		s.release(js)
		js.out.Finished, js.out.End = true, s.now
		js.gen++
		s.finished++
		// A finished job keeps only its outcome (in Sim.outs, without
		// pointers): the engine has forgotten the job, and a month's
		// replay holds millions. Its ID stays known.
		id := js.out.ID
		s.close(js)
		s.forget(js)
		js.j = nil
		return engine.Finished(s.now, id), true
	case evNodeFail:
		n := &s.nodes[s.nodeIdx[e.node]]
		s.histAdd(n, -1)
		n.down = true
		s.histAdd(n, 1)
		var hit []*job
		add := func(h string) {
			if js := s.jobs[h]; js != nil && !slices.Contains(hit, js) {
				hit = append(hit, js)
			}
		}
		for g := range n.gpus {
			gs := &n.gpus[g]
			if gs.holder != "" {
				add(gs.holder)
			}
			for _, u := range gs.inUse {
				add(u.job)
			}
			for _, u := range gs.shares {
				add(u.job)
			}
		}
		slices.SortFunc(hit, func(a, b *job) int { return cmp.Compare(a.out.ID, b.out.ID) })
		for _, js := range hit {
			js.out.Interrupted++
			js.out.LostRun += s.now.Sub(js.out.Start)
			s.release(js)
			js.gen++
		}
		return engine.NodeFailed(s.now, e.node), true
	case evService:
		return s.fireService(*e.svc), true
	case evBoot, evBootFail, evRelease:
		return s.fireProv(e)
	case evNodeRecover:
		n := &s.nodes[s.nodeIdx[e.node]]
		s.histAdd(n, -1)
		n.down = false
		s.histAdd(n, 1)
		return engine.NodeChanged(s.now, e.node, topo.Ready, s.spec.Nodes[s.nodeIdx[e.node]].Labels), true
	}
	return engine.Event{}, false
}

// release frees every GPU, instance and share of js. MIG instances stay
// in their GPU's layout, idle.
func (s *Sim) release(js *job) {
	for i, m := range js.members {
		s.unhold(js.out.ID, int(js.nodeIx[i]), m, false)
	}
	js.gpus, js.milli = 0, 0
	js.members, js.nodeIx = nil, js.nodeIx[:0]
	s.running--
	s.unlive(js)
}

// enlive and unlive keep Sim.live: the jobs with members bound.
func (s *Sim) enlive(js *job) {
	if js.live == 0 && !js.replica {
		s.live = append(s.live, js)
		js.live = len(s.live)
	}
}

func (s *Sim) unlive(js *job) {
	if js.live == 0 {
		return
	}
	i, last := js.live-1, len(s.live)-1
	s.live[i] = s.live[last]
	s.live[i].live = i + 1
	s.live[last] = nil
	s.live = s.live[:last]
	js.live = 0
}

// instMilli is a MIG instance's compute fraction in thousandths.
func instMilli(in mig.Instance) int64 {
	return int64(in.Profile.ComputeSlices()) * 1000 / int64(max(1, in.Profile.Model().ComputeSlices()))
}

// memberMilli is the GPU milli a member holds.
func memberMilli(m engine.Member) int64 {
	switch {
	case !m.Fractional:
		return 1000 * int64(len(m.GPUs))
	case m.Share.ID != 0:
		return int64(m.Share.Milli)
	}
	return instMilli(m.Instance)
}

func sameMember(a, b engine.Member) bool {
	return a.Node == b.Node && slices.Equal(a.GPUs, b.GPUs) && a.Fractional == b.Fractional &&
		a.Instance == b.Instance && a.Share.ID == b.Share.ID
}

// busyDelta updates the busy GPU counts after GPU gs of n went from
// wasIdle to its current state.
func (s *Sim) busyDelta(n *node, gs *gpu, wasIdle bool) {
	switch idle := gs.idle(); {
	case wasIdle && !idle:
		s.histAdd(n, -1)
		n.busy++
		s.busy++
		s.histAdd(n, 1)
	case !wasIdle && idle:
		s.histAdd(n, -1)
		n.busy--
		s.busy--
		s.histAdd(n, 1)
	}
}

// unhold gives back what member m of job holds. destroy: a MIG instance
// the member created is destroyed (a rolled-back bind: the engine takes it
// out of its books).
func (s *Sim) unhold(jobID string, ni int, m engine.Member, destroy bool) {
	n := &s.nodes[ni]
	s.busyMilli -= memberMilli(m)
	if !m.Fractional {
		for _, g := range m.GPUs {
			gs := &n.gpus[g]
			gs.holder = ""
			s.busyDelta(n, gs, false)
		}
		return
	}
	gs := &n.gpus[m.GPUs[0]]
	wasIdle := gs.idle()
	if m.Share.ID != 0 {
		if i := slices.IndexFunc(gs.shares, func(u shareUse) bool { return u.id == m.Share.ID }); i >= 0 {
			gs.milli -= gs.shares[i].milli
			gs.shares = slices.Delete(gs.shares, i, i+1)
			s.stats.shares--
		}
	} else {
		gs.inUse = slices.DeleteFunc(gs.inUse, func(u instUse) bool { return u.in == m.Instance && u.job == jobID })
		if destroy && m.Created {
			if l, err := gs.layout.Remove(m.Instance); err == nil {
				gs.layout = l
				s.stats.InstancesDestroyed++
			}
		}
	}
	s.busyDelta(n, gs, wasIdle)
}

// hold books member m of job on its node, or says why it cannot be (an
// impossible bind: the caller records it as a violation).
func (s *Sim) hold(jobID string, n *node, m engine.Member) error {
	for _, g := range m.GPUs {
		if g < 0 || g >= len(n.gpus) {
			return refused("job %q: node %s has no GPU %d", jobID, m.Node, g)
		}
	}
	if !m.Fractional {
		if n.mig.Valid() || n.share && s.spec.Nodes[s.nodeIdx[m.Node]].Sharing.Mode != mig.Exclusive {
			return refused("job %q: whole GPUs %v of %s, which is in MIG mode or shared", jobID, m.GPUs, m.Node)
		}
		for _, g := range m.GPUs {
			if gs := &n.gpus[g]; !gs.idle() {
				return refused("job %q: GPU %d of %s is held by %q", jobID, g, m.Node, gs.user())
			}
		}
		for _, g := range m.GPUs {
			gs := &n.gpus[g]
			gs.holder = jobID
			s.busyDelta(n, gs, true)
		}
		s.busyMilli += memberMilli(m)
		return nil
	}
	if len(m.GPUs) != 1 {
		return refused("job %q: fractional member on %d GPUs of %s", jobID, len(m.GPUs), m.Node)
	}
	g := m.GPUs[0]
	gs := &n.gpus[g]
	if gs.holder != "" {
		return refused("job %q: GPU %d of %s is held whole by %q", jobID, g, m.Node, gs.holder)
	}
	wasIdle := gs.idle()
	if m.Share.ID != 0 {
		switch {
		case n.mig.Valid() || !n.share:
			return refused("job %q: share on GPU %d of %s, which is not shared", jobID, g, m.Node)
		case m.Share.GPU != uint32(g):
			return refused("job %q: share of GPU %d bound on GPU %d of %s", jobID, m.Share.GPU, g, m.Node)
		case m.Share.Milli < 1 || gs.milli+m.Share.Milli > 1000:
			return refused("job %q: share of %d milli on GPU %d of %s, which has %d milli held", jobID, m.Share.Milli, g, m.Node, gs.milli)
		case slices.ContainsFunc(gs.shares, func(u shareUse) bool { return u.id == m.Share.ID }):
			return refused("job %q: share %d on GPU %d of %s is bound twice", jobID, m.Share.ID, g, m.Node)
		}
		gs.shares = append(gs.shares, shareUse{id: m.Share.ID, milli: m.Share.Milli, job: jobID})
		gs.milli += m.Share.Milli
		s.stats.ShareBinds++
		s.stats.shares++
		s.stats.MaxShares = max(s.stats.MaxShares, s.stats.shares)
		s.stats.MaxSharesPerGPU = max(s.stats.MaxSharesPerGPU, len(gs.shares))
	} else {
		in := m.Instance
		switch {
		case !n.mig.Valid():
			return refused("job %q: MIG instance %v on GPU %d of %s, which is not in MIG mode", jobID, in, g, m.Node)
		case in.Profile.Model() != n.mig:
			return refused("job %q: instance %v on a %v GPU (%s)", jobID, in, n.mig, m.Node)
		case slices.ContainsFunc(gs.inUse, func(u instUse) bool { return u.in == in }):
			return refused("job %q: instance %v of GPU %d of %s is bound twice (held by %q)", jobID, in, g, m.Node, gs.user())
		}
		if m.Created {
			l, err := gs.layout.Place(in)
			if err != nil {
				return refused("job %q: cannot create %v on GPU %d of %s: %v", jobID, in, g, m.Node, err)
			}
			gs.layout = l
			s.stats.InstancesCreated++
		} else if !gs.layout.Has(in) {
			return refused("job %q: instance %v does not exist on GPU %d of %s (%v)", jobID, in, g, m.Node, gs.layout)
		}
		gs.inUse = append(gs.inUse, instUse{in: in, job: jobID})
		s.stats.InstanceBinds++
	}
	s.busyMilli += memberMilli(m)
	s.busyDelta(n, gs, wasIdle)
	return nil
}

// user names a job using the GPU, for messages.
func (g *gpu) user() string {
	switch {
	case g.holder != "":
		return g.holder
	case len(g.inUse) > 0:
		return g.inUse[0].job
	case len(g.shares) > 0:
		return g.shares[0].job
	}
	return ""
}

// ---------------------------------------------------------------- actuator

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{backends.ErrRefused}, args...)...)
}

// take consumes one injected failure of m for (job, node) or (job, "").
func take(m map[injKey]int, job, node string) bool {
	for _, k := range [2]injKey{{job, node}, {job, ""}} {
		if n, ok := m[k]; ok && n != 0 {
			if n > 0 {
				m[k] = n - 1
			}
			return true
		}
	}
	return false
}

// BindMember starts one member of job. A bind on a down or unknown node,
// of an unknown job, or injected by RefuseBinds is refused. An impossible
// bind is refused and recorded as a violation (the engine double-booked):
// a GPU another job holds (whole, or by instances or shares when the
// member wants it whole), a GPU out of range, whole GPUs on a MIG or
// shared node, a MIG instance that does not exist (and is not to be
// created), that is in use already or cannot be created, a share on a GPU
// that is not shared or that would exceed 1000 milli. Binding a member
// already bound is a no-op. The job's run begins with its first member.
func (s *Sim) BindMember(ctx context.Context, jobID string, m engine.Member) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[jobID]
	if js == nil && s.finishedID(jobID) {
		return refused("job %q has finished", jobID)
	}
	if js == nil {
		js = s.replicaJob(jobID)
	}
	if js == nil {
		return refused("unknown job %q", jobID)
	}
	ni, ok := s.nodeIdx[m.Node]
	if !ok {
		return refused("job %q: unknown node %q", jobID, m.Node)
	}
	n := &s.nodes[ni]
	if n.down {
		return refused("job %q: node %s is down", jobID, m.Node)
	}
	if take(s.fail, jobID, m.Node) {
		return fmt.Errorf("%w: bind of %q on %s", ErrTransient, jobID, m.Node)
	}
	if take(s.refuse, jobID, m.Node) {
		return refused("job %q on %s (injected)", jobID, m.Node)
	}
	for _, b := range js.members {
		if sameMember(b, m) {
			return nil
		}
	}
	if err := s.hold(jobID, n, m); err != nil {
		s.viol = append(s.viol, err)
		return err
	}
	if len(js.members) == 0 {
		js.prev = runStartOf(js.out)
		js.out.Started, js.out.Start, js.out.GPUs, js.out.Milli = true, s.now, 0, 0
		js.gen++
		s.running++
		s.enlive(js)
		if s.factor == nil && !js.replica {
			s.push(event{at: s.now.Add(js.runtime), kind: evFinish, job: js, gen: js.gen})
		}
	}
	b := m
	b.GPUs = slices.Clone(m.GPUs)
	js.members = append(js.members, b)
	js.nodeIx = append(js.nodeIx, int32(ni))
	if s.factor != nil && js.out.Start.Equal(s.now) && !js.replica {
		s.stretch(js)
	}
	if !m.Fractional {
		js.gpus += len(m.GPUs)
	}
	js.milli += memberMilli(m)
	js.out.GPUs = max(js.out.GPUs, js.gpus)
	js.out.Milli = max(js.out.Milli, js.milli)
	return nil
}

// UnbindMember stops one bound member. A MIG instance the member created
// is destroyed again (the engine takes the instances of a refused bind out
// of its books). When the last member of a run that began at this instant
// is unbound (a rolled-back gang), the run is forgotten.
func (s *Sim) UnbindMember(ctx context.Context, jobID string, m engine.Member) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[jobID]
	if js == nil {
		return nil
	}
	i := slices.IndexFunc(js.members, func(b engine.Member) bool { return sameMember(b, m) })
	if i < 0 {
		return nil
	}
	b := js.members[i]
	s.unhold(jobID, int(js.nodeIx[i]), b, true)
	if !b.Fractional {
		js.gpus -= len(b.GPUs)
	}
	js.milli -= memberMilli(b)
	js.members = slices.Delete(js.members, i, i+1)
	js.nodeIx = slices.Delete(js.nodeIx, i, i+1)
	if len(js.members) == 0 {
		s.running--
		s.unlive(js)
		js.gen++
		if js.out.Start.Equal(s.now) {
			js.prev.restore(js.out)
		} else {
			js.out.LostRun += s.now.Sub(js.out.Start)
		}
	}
	return nil
}

// Preempt stops a running job at once (its GPUs are free in the
// simulator; the engine holds them until the deadline). The job is not
// reported finished: the engine requeues it, and it reruns from the
// start. A job that is not running is refused.
func (s *Sim) Preempt(ctx context.Context, p engine.Preemption) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[p.Victim]
	if js == nil || len(js.members) == 0 {
		return refused("preemption of %q, which is not running", p.Victim)
	}
	js.out.Preemptions++
	js.out.LostRun += s.now.Sub(js.out.Start)
	s.release(js)
	js.gen++
	return nil
}

// ApplyMIG carries out a MIG change on the simulated GPU. It is refused
// (backends.ErrRefused) for an unknown node, one that is down, an injected
// refusal (RefuseMIG), a From that is not the GPU's layout (stale), a
// reset while the GPU is in use, and a change that destroys an instance in
// use or whose Destroy / Create do not lead from From to To. The last two,
// and changes on GPUs that do not exist or are not in MIG mode, are also
// recorded as violations: the engine never plans them.
func (s *Sim) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ni, ok := s.nodeIdx[r.Node]
	if !ok {
		s.stats.MIGRefused++
		return refused("MIG change on unknown node %q", r.Node)
	}
	n := &s.nodes[ni]
	bad := func(err error) error {
		s.stats.MIGRefused++
		s.viol = append(s.viol, err)
		return err
	}
	if r.GPU < 0 || r.GPU >= len(n.gpus) || !n.mig.Valid() {
		return bad(refused("MIG change on GPU %d of %s, which is not a MIG GPU", r.GPU, r.Node))
	}
	if takeMIG(s.failMIG, r.Node, r.GPU) {
		return fmt.Errorf("%w: MIG change on %s GPU %d", ErrTransient, r.Node, r.GPU)
	}
	if n.down {
		s.stats.MIGRefused++
		return refused("MIG change on %s, which is down", r.Node)
	}
	if takeMIG(s.refMIG, r.Node, r.GPU) {
		s.stats.MIGRefused++
		return refused("MIG change on %s GPU %d (injected)", r.Node, r.GPU)
	}
	gs := &n.gpus[r.GPU]
	if r.From != gs.layout {
		s.stats.MIGRefused++
		return refused("MIG change on %s GPU %d from %v: the layout is %v", r.Node, r.GPU, r.From, gs.layout)
	}
	if r.NeedsReset && !gs.idle() {
		s.stats.MIGRefused++
		return refused("MIG change on %s GPU %d needs a reset, and the GPU is in use", r.Node, r.GPU)
	}
	l := r.From
	for _, in := range r.Destroy {
		if u := slices.IndexFunc(gs.inUse, func(u instUse) bool { return u.in == in }); u >= 0 {
			return bad(refused("MIG change on %s GPU %d destroys %v, in use by %q", r.Node, r.GPU, in, gs.inUse[u].job))
		}
		var err error
		if l, err = l.Remove(in); err != nil {
			return bad(refused("MIG change on %s GPU %d: destroy: %v", r.Node, r.GPU, err))
		}
	}
	for _, in := range r.Create {
		var err error
		if l, err = l.Place(in); err != nil {
			return bad(refused("MIG change on %s GPU %d: create: %v", r.Node, r.GPU, err))
		}
	}
	if l != r.To {
		return bad(refused("MIG change on %s GPU %d: destroying and creating gives %v, not %v", r.Node, r.GPU, l, r.To))
	}
	gs.layout = l
	s.stats.MIGApplied++
	s.stats.InstancesDestroyed += len(r.Destroy)
	s.stats.InstancesCreated += len(r.Create)
	s.mig = append(s.mig, r)
	return nil
}

// Layout returns the MIG layout of GPU gpu (node-local) of node; false
// when there is no such GPU or it is not in MIG mode.
func (s *Sim) Layout(node string, gpu int) (mig.Layout, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ni, ok := s.nodeIdx[node]
	if !ok || gpu < 0 || gpu >= len(s.nodes[ni].gpus) || !s.nodes[ni].mig.Valid() {
		return mig.Layout{}, false
	}
	return s.nodes[ni].gpus[gpu].layout, true
}

// MIGLayout is Layout as backends.MIGReporter: the truth the Runner reads
// after a MIG change timed out. A GPU that is not a MIG GPU of a node is
// refused (backends.ErrRefused).
func (s *Sim) MIGLayout(ctx context.Context, node string, gpu int) (mig.Layout, error) {
	if err := ctx.Err(); err != nil {
		return mig.Layout{}, err
	}
	l, ok := s.Layout(node, gpu)
	if !ok {
		return mig.Layout{}, refused("GPU %d of %q is not a MIG GPU", gpu, node)
	}
	return l, nil
}

// Stats returns the MIG and share counters so far.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// ---------------------------------------------------------------- observing

// Outcomes returns every submitted job's outcome, in submission order.
func (s *Sim) Outcomes() []Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Outcome, s.njobs)
	for i := range out {
		s.outcomeOf(i, &out[i])
	}
	return out
}

// EachOutcome calls f with every submitted job's outcome, in submission
// order (Outcomes' order), without copying them all as Outcomes does: for
// replays of millions of jobs. f must not keep o nor call the simulator.
func (s *Sim) EachOutcome(f func(o *Outcome)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var o Outcome
	for i := range s.njobs {
		s.outcomeOf(i, &o)
		f(&o)
	}
}

// State is the simulated cluster's occupancy at one instant.
type State struct {
	Now time.Time
	// BusyGPUs counts GPUs with anything on them (held whole, MIG
	// instances in use, shares); BusyMilli the GPU milli held (see
	// Outcome.Milli).
	BusyGPUs  int
	BusyMilli int64
	Running   int
	Finished  int // jobs finished so far
	// Shares counts the shares held now.
	Shares int
	// NodeFree is the count of idle GPUs (nothing on them) of every ready
	// node, in spec order; down nodes count 0. Filled by State only.
	NodeFree []int
	// FreeHist[f] is the number of nodes whose NodeFree value is f.
	// Filled by Summary only.
	FreeHist []int
}

// State returns the occupancy now. NodeFree is appended to buf[:0].
func (s *Sim) State(buf []int) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = buf[:0]
	for i := range s.nodes {
		buf = append(buf, nodeFree(&s.nodes[i]))
	}
	st := s.stateLocked()
	st.NodeFree = buf
	return st
}

// Summary is State with FreeHist (appended to buf[:0]) instead of
// NodeFree: O(GPUs per node), not O(nodes), for observers that follow
// every cycle of a large cluster.
func (s *Sim) Summary(buf []int) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked()
	st.FreeHist = append(buf[:0], s.freeHist...)
	return st
}

func (s *Sim) stateLocked() State {
	return State{Now: s.now, BusyGPUs: s.busy, BusyMilli: s.busyMilli, Running: s.running, Finished: s.finished,
		Shares: s.stats.shares}
}

// Violations returns the binds and MIG changes the simulator refused
// because they were impossible (a GPU or instance booked twice, a GPU
// index out of range, an instance that does not exist, a change that
// destroys an instance in use): an engine that respects its own bookings
// causes none.
func (s *Sim) Violations() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.viol)
}

// MIGChanges returns the MIG changes applied, in order.
func (s *Sim) MIGChanges() []engine.MIGReconfiguration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mig)
}

var (
	_ backends.Backend         = (*Sim)(nil)
	_ backends.Clock           = (*Sim)(nil)
	_ backends.RunningReporter = (*Sim)(nil)
)

// stretch (re)schedules the end of js's run, which began now, from the
// runtime factor of the members bound so far (Config.RuntimeFactor): the
// previous end event is made stale by the generation.
func (s *Sim) stretch(js *job) {
	s.fnodes = s.fnodes[:0]
	for _, b := range js.members {
		s.fnodes = append(s.fnodes, b.Node)
	}
	f := s.factor(js.out.ID, s.fnodes)
	if !(f > 1) { // NaN too
		f = 1
	}
	if len(js.members) > 1 {
		js.gen++ // the end pushed for fewer members is stale
	}
	d := js.runtime
	if x := math.Round(float64(js.runtime) * f); x < math.MaxInt64/4 {
		d = max(d, time.Duration(x))
	} else {
		d = math.MaxInt64 / 4 // an absurd factor: a run that never ends in practice
	}
	s.push(event{at: s.now.Add(d), kind: evFinish, job: js, gen: js.gen})
}
