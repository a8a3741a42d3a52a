package sim

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
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
	// Cluster is the simulated inventory. Required: at least one node.
	Cluster topo.Spec
	// Start is the virtual clock before the first event.
	Start time.Time
}

// Outcome is what happened to one job.
type Outcome struct {
	ID     string
	Submit time.Time
	// Start is the start of the job's last run; End its end (finished).
	Start, End time.Time
	Started    bool
	Finished   bool
	// GPUs is the number of GPUs the last run held (its largest size).
	GPUs int
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
	jobs    map[string]*job
	order   []*job // submission order
	refuse  map[injKey]int
	fail    map[injKey]int

	busy     int // GPUs held
	running  int // jobs with members bound
	finished int
	viol     []error
	mig      []engine.MIGReconfiguration
}

type node struct {
	name   string
	holder []string // job holding each GPU; "" free
	down   bool
	busy   int
}

type job struct {
	j       *queue.Job
	runtime time.Duration
	members []engine.Member
	gpus    int // GPUs bound now
	gen     uint64
	out     Outcome
	prev    Outcome // before the current run began (restored on rollback)
	seq     uint64
}

type injKey struct{ job, node string }

type evKind uint8

const (
	evFinish evKind = iota
	evNodeFail
	evNodeRecover
	evSubmit
)

type event struct {
	at   time.Time
	kind evKind
	seq  uint64
	job  *job
	gen  uint64
	node string
}

type evHeap []event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, k int) bool {
	if c := h[i].at.Compare(h[k].at); c != 0 {
		return c < 0
	}
	return h[i].seq < h[k].seq
}
func (h evHeap) Swap(i, k int) { h[i], h[k] = h[k], h[i] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *evHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// New returns a simulator of cfg.Cluster with its clock at cfg.Start and
// no jobs. Errors wrap ErrInvalid (and topo's validation error).
func New(cfg Config) (*Sim, error) {
	if len(cfg.Cluster.Nodes) == 0 {
		return nil, fmt.Errorf("%w: cluster has no nodes", ErrInvalid)
	}
	if err := cfg.Cluster.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s := &Sim{
		spec: cloneSpec(cfg.Cluster), nodeIdx: map[string]int{}, now: cfg.Start,
		jobs: map[string]*job{}, refuse: map[injKey]int{}, fail: map[injKey]int{},
	}
	for i, n := range s.spec.Nodes {
		s.nodeIdx[n.Name] = i
		s.nodes = append(s.nodes, node{name: n.Name, holder: make([]string, n.GPUs), down: n.State == topo.Down})
	}
	return s, nil
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
	if _, dup := s.jobs[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	if j.Submit.Before(s.now) {
		return fmt.Errorf("%w: job %q submitted at %v, clock at %v", ErrInvalid, j.ID, j.Submit, s.now)
	}
	js := &job{j: j, runtime: runtime, out: Outcome{ID: j.ID, Submit: j.Submit}}
	s.jobs[j.ID] = js
	s.order = append(s.order, js)
	s.push(event{at: j.Submit, kind: evSubmit, job: js})
	return nil
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

func (s *Sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.evq, e)
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

// Cluster returns the simulated cluster's spec.
func (s *Sim) Cluster(ctx context.Context) (topo.Spec, error) {
	if err := ctx.Err(); err != nil {
		return topo.Spec{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneSpec(s.spec), nil
}

// Running returns the jobs with bound members, by ID.
func (s *Sim) Running(ctx context.Context) ([]backends.RunningJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []backends.RunningJob
	for _, js := range s.order {
		if len(js.members) > 0 {
			out = append(out, backends.RunningJob{Job: js.j, Members: slices.Clone(js.members), Start: js.out.Start})
		}
	}
	return out, nil
}

// ---------------------------------------------------------------- events

// Next moves the virtual clock to the earliest pending event (or to wake,
// if that comes first) and returns every event of that instant. It
// returns backends.ErrClosed when no event is left and wake is zero.
func (s *Sim) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if len(s.evq) == 0 {
			if wake.IsZero() {
				return nil, backends.ErrClosed
			}
			s.advanceTo(wake)
			return []engine.Event{}, nil
		}
		t := s.evq[0].at
		if !wake.IsZero() && wake.Before(t) {
			s.advanceTo(wake)
			return []engine.Event{}, nil
		}
		s.advanceTo(t)
		var batch []event
		for len(s.evq) > 0 && s.evq[0].at.Equal(t) {
			batch = append(batch, heap.Pop(&s.evq).(event))
		}
		slices.SortFunc(batch, func(a, b event) int {
			if c := cmp.Compare(a.kind, b.kind); c != 0 {
				return c
			}
			if a.kind == evFinish {
				return cmp.Compare(a.job.j.ID, b.job.j.ID)
			}
			return cmp.Compare(a.seq, b.seq)
		})
		evs := make([]engine.Event, 0, len(batch))
		for _, e := range batch {
			if ev, ok := s.fire(e); ok {
				evs = append(evs, ev)
			}
		}
		if len(evs) > 0 {
			return evs, nil
		}
		// Only stale completions: look further.
	}
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
		return engine.Finished(s.now, js.j.ID), true
	case evNodeFail:
		n := &s.nodes[s.nodeIdx[e.node]]
		n.down = true
		var hit []*job
		for _, h := range n.holder {
			if h != "" {
				if js := s.jobs[h]; !slices.Contains(hit, js) {
					hit = append(hit, js)
				}
			}
		}
		for _, js := range hit {
			js.out.Interrupted++
			js.out.LostRun += s.now.Sub(js.out.Start)
			s.release(js)
			js.gen++
		}
		return engine.NodeFailed(s.now, e.node), true
	case evNodeRecover:
		n := &s.nodes[s.nodeIdx[e.node]]
		n.down = false
		return engine.NodeChanged(s.now, e.node, topo.Ready, s.spec.Nodes[s.nodeIdx[e.node]].Labels), true
	}
	return engine.Event{}, false
}

// release frees every GPU of js.
func (s *Sim) release(js *job) {
	for _, m := range js.members {
		n := &s.nodes[s.nodeIdx[m.Node]]
		for _, g := range m.GPUs {
			n.holder[g] = ""
		}
		n.busy -= len(m.GPUs)
	}
	s.busy -= js.gpus
	js.gpus = 0
	js.members = nil
	s.running--
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
// of an unknown job, or injected by RefuseBinds is refused; a bind on a
// GPU another job holds is refused and recorded as a violation (the
// engine double-booked). Binding a member already bound is a no-op. The
// job's run begins with its first member.
func (s *Sim) BindMember(ctx context.Context, jobID string, m engine.Member) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[jobID]
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
		if b.Node == m.Node && slices.Equal(b.GPUs, m.GPUs) {
			return nil
		}
	}
	for _, g := range m.GPUs {
		if g < 0 || g >= len(n.holder) {
			err := refused("job %q: node %s has no GPU %d", jobID, m.Node, g)
			s.viol = append(s.viol, err)
			return err
		}
		if h := n.holder[g]; h != "" {
			err := refused("job %q: GPU %d of %s is held by %q", jobID, g, m.Node, h)
			s.viol = append(s.viol, err)
			return err
		}
	}
	for _, g := range m.GPUs {
		n.holder[g] = jobID
	}
	n.busy += len(m.GPUs)
	s.busy += len(m.GPUs)
	if len(js.members) == 0 {
		js.prev = js.out
		js.out.Started, js.out.Start, js.out.GPUs = true, s.now, 0
		js.gen++
		s.running++
		s.push(event{at: s.now.Add(js.runtime), kind: evFinish, job: js, gen: js.gen})
	}
	js.members = append(js.members, engine.Member{Group: m.Group, Node: m.Node, GPUs: slices.Clone(m.GPUs), CPUMilli: m.CPUMilli, MemoryMiB: m.MemoryMiB})
	js.gpus += len(m.GPUs)
	js.out.GPUs = max(js.out.GPUs, js.gpus)
	return nil
}

// UnbindMember stops one bound member. When the last member of a run that
// began at this instant is unbound (a rolled-back gang), the run is
// forgotten.
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
	i := slices.IndexFunc(js.members, func(b engine.Member) bool { return b.Node == m.Node && slices.Equal(b.GPUs, m.GPUs) })
	if i < 0 {
		return nil
	}
	n := &s.nodes[s.nodeIdx[m.Node]]
	for _, g := range m.GPUs {
		n.holder[g] = ""
	}
	n.busy -= len(m.GPUs)
	s.busy -= len(m.GPUs)
	js.gpus -= len(m.GPUs)
	js.members = slices.Delete(js.members, i, i+1)
	if len(js.members) == 0 {
		s.running--
		js.gen++
		if js.out.Start.Equal(s.now) {
			js.out = js.prev
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

// ApplyMIG records the change; the simulator does not model MIG
// instances. A change on an unknown node is refused.
func (s *Sim) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodeIdx[r.Node]; !ok {
		return refused("MIG change on unknown node %q", r.Node)
	}
	s.mig = append(s.mig, r)
	return nil
}

// ---------------------------------------------------------------- observing

// Outcomes returns every submitted job's outcome, in submission order.
func (s *Sim) Outcomes() []Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Outcome, len(s.order))
	for i, js := range s.order {
		out[i] = js.out
	}
	return out
}

// State is the simulated cluster's occupancy at one instant.
type State struct {
	Now      time.Time
	BusyGPUs int
	Running  int
	Finished int // jobs finished so far
	// NodeFree is the free GPU count of every ready node, in spec order;
	// down nodes count 0.
	NodeFree []int
}

// State returns the occupancy now. NodeFree is appended to buf[:0].
func (s *Sim) State(buf []int) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = buf[:0]
	for i := range s.nodes {
		n := &s.nodes[i]
		if n.down {
			buf = append(buf, 0)
		} else {
			buf = append(buf, len(n.holder)-n.busy)
		}
	}
	return State{Now: s.now, BusyGPUs: s.busy, Running: s.running, Finished: s.finished, NodeFree: buf}
}

// Violations returns the binds the simulator refused because they were
// impossible (a GPU booked twice, a GPU index out of range): an engine
// that respects its own bookings causes none.
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
	_ backends.Backend = (*Sim)(nil)
	_ backends.Clock   = (*Sim)(nil)
)
