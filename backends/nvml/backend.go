package nvml

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Config configures the backend.
type Config struct {
	// NVML is the library: nv.New() for libnvidia-ml.so, a mock server
	// (see nvmlmock) in tests. Required. The backend calls Init on it and,
	// from Close, Shutdown.
	NVML nv.Interface
	// NodeName names the box in berth's topology. Empty: the host name.
	NodeName string
	// CPUMilli and MemoryMiB are the box's allocatable host resources
	// (zero: not tracked); Labels its node labels.
	CPUMilli, MemoryMiB int64
	Labels              map[string]string
	// RunDir holds each run's output and exit files:
	// RunDir/<job>/run-<n>/member-<i>.{out,err,exit}. Required.
	RunDir string
	// Queues, when set, is the engine's queue tree (the same
	// engine.Config.Queues): Open checks that HoldQueue is a leaf of it,
	// and Submit refuses jobs whose queue or account it does not have
	// (without it such a job reaches the engine, which rejects the
	// event and stops the Runner unless RunnerConfig.OnStepError skips it).
	Queues *queue.TreeSpec
	// HoldQueue is the queue charged for the hold jobs that keep a GPU
	// with a critical XID out of the free set ("nvml-hold/<uuid>"); it
	// must exist in the engine's queue tree. Empty: DefaultHoldQueue.
	HoldQueue string
	// OutOfService lists GPUs (UUID -> reason) to keep out of service from
	// the start, as Quarantine would: the backend does not persist
	// quarantines, so an operator (or the embedding program, from
	// OutOfService before a restart) carries them over.
	OutOfService map[string]string
	// KillGrace is the time between SIGTERM and SIGKILL when a run hits
	// its runtime limit without a GracePeriod of its own, when a gang
	// member failed, when a job is cancelled and when its GPU failed.
	// Zero: 10s.
	KillGrace time.Duration
	// CriticalXID says which XIDs take a GPU out of service. Nil: every
	// XID except those caused by applications (DefaultCriticalXID).
	CriticalXID func(xid uint64) bool
	// Env is the environment of every job before its own (nil:
	// os.Environ()). CUDA_VISIBLE_DEVICES, BERTH_JOB_ID and BERTH_MEMBER
	// are set by the backend.
	Env []string
	// OnExit, if set, is called with every process exit, in order, from
	// one goroutine of the backend (not under its lock; a slow callback
	// delays only later callbacks).
	OnExit func(Exit)
	// OnHealth, if set, is called with every health event the backend
	// receives or derives, in order, from the same goroutine as OnExit.
	OnHealth func(Health)
}

// DefaultHoldQueue is the hold jobs' queue when Config.HoldQueue is empty.
const DefaultHoldQueue = "nvml-hold"

// applicationXIDs are XIDs an application causes (illegal memory access,
// graphics engine exception, a killed context): the GPU stays in service.
// The list follows NVIDIA's k8s-device-plugin (13, 31, 43, 45, 68, 109).
var applicationXIDs = []uint64{13, 31, 43, 45, 68, 109}

// DefaultCriticalXID reports whether xid takes the GPU out of service:
// every XID but those an application causes.
func DefaultCriticalXID(xid uint64) bool { return !slices.Contains(applicationXIDs, xid) }

// Command is what a job runs, once per member.
type Command struct {
	// Args is the program and its arguments (no shell). Required.
	Args []string
	// Env is added to Config.Env ("KEY=value").
	Env []string
	// Dir is the working directory; empty: the backend's.
	Dir string
}

// Backend is berth's backend for one bare GPU box, driven through NVML:
// it implements backends.Backend (inventory, actuator, events) and runs
// each bound member as a local process. All methods are safe for
// concurrent use.
type Backend struct {
	cfg   Config
	lib   nv.Interface
	node  string
	devs  []Device
	spec  topo.Spec
	model mig.Model // NoModel: the box is not in MIG mode

	migMu []sync.Mutex // per GPU: NVML MIG changes and binds on it

	mu       sync.Mutex
	closed   bool
	jobs     map[string]*jobEntry
	runs     map[string]*run // the job's current run
	stopping []*run          // older runs still stopping
	gpuUser  []string        // job using the whole GPU
	instUse  []map[mig.Instance]string
	layouts  []mig.Layout
	bad      map[int]*badGPU
	busyTill []time.Time  // per GPU: the latest preemption deadline of a run on it
	requeue  []*queue.Job // jobs whose GPU failed: Finished + Submitted at the next Next
	evs      []engine.Event
	notify   chan struct{}
	seq      int // run numbers

	tree   *queue.Tree // nil without Config.Queues
	cb     *callbacks
	driver string // the driver version, read at Open ("" when NVML does not say)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type jobEntry struct {
	job *queue.Job
	cmd Command
}

// Open initialises NVML, discovers the GPUs and starts the health watcher.
// When Init fails (libnvidia-ml.so missing: ErrNoLibrary; otherwise
// ErrInit) no other NVML call is made. Other errors: ErrInvalid (Config),
// ErrNVML, ErrUnsupported.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.NVML == nil {
		return nil, fmt.Errorf("%w: Config.NVML is nil", ErrInvalid)
	}
	if cfg.RunDir == "" {
		return nil, fmt.Errorf("%w: Config.RunDir is empty", ErrInvalid)
	}
	if cfg.KillGrace < 0 {
		return nil, fmt.Errorf("%w: KillGrace %v", ErrInvalid, cfg.KillGrace)
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 10 * time.Second
	}
	if cfg.HoldQueue == "" {
		cfg.HoldQueue = DefaultHoldQueue
	}
	if cfg.CriticalXID == nil {
		cfg.CriticalXID = DefaultCriticalXID
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("%w: no NodeName and no host name: %v", ErrInvalid, err)
		}
		cfg.NodeName = h
	}
	var tree *queue.Tree
	if cfg.Queues != nil {
		t, err := queue.NewTree(*cfg.Queues)
		if err != nil {
			return nil, fmt.Errorf("%w: Queues: %w", ErrInvalid, err)
		}
		if !t.HasQueue(cfg.HoldQueue) {
			return nil, fmt.Errorf("%w: HoldQueue %q is not a leaf queue of Queues (add queue.QueueSpec{Name: %q})", ErrInvalid, cfg.HoldQueue, cfg.HoldQueue)
		}
		tree = t
	}
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: RunDir: %v", ErrInvalid, err)
	}
	switch ret := cfg.NVML.Init(); ret {
	case nv.SUCCESS:
	case nv.ERROR_LIBRARY_NOT_FOUND:
		return nil, ErrNoLibrary
	default:
		return nil, fmt.Errorf("%w: %v", ErrInit, ret)
	}
	devs, spec, model, err := discover(cfg.NVML, &cfg)
	if err != nil {
		_ = cfg.NVML.Shutdown()
		return nil, err
	}
	n := len(devs)
	b := &Backend{
		cfg: cfg, lib: cfg.NVML, node: cfg.NodeName, devs: devs, spec: spec, model: model,
		migMu: make([]sync.Mutex, n), jobs: map[string]*jobEntry{}, runs: map[string]*run{},
		gpuUser: make([]string, n), instUse: make([]map[mig.Instance]string, n), layouts: make([]mig.Layout, n),
		bad: map[int]*badGPU{}, busyTill: make([]time.Time, n), notify: make(chan struct{}, 1), tree: tree,
		cb: newCallbacks(), driver: driverVersion(cfg.NVML),
	}
	for i := range devs {
		b.instUse[i] = map[mig.Instance]string{}
		b.layouts[i] = devs[i].Layout
	}
	for _, uuid := range slices.Sorted(maps.Keys(cfg.OutOfService)) {
		g := b.gpuByUUID(uuid)
		if g < 0 {
			b.cb.close()
			_ = cfg.NVML.Shutdown()
			return nil, fmt.Errorf("%w: OutOfService: %w: %q", ErrInvalid, ErrUnknownGPU, uuid)
		}
		b.mu.Lock()
		b.quarantineLocked(g, cfg.OutOfService[uuid])
		b.mu.Unlock()
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	if err := b.startHealth(hctx); err != nil {
		cancel()
		b.cb.close()
		_ = cfg.NVML.Shutdown()
		return nil, err
	}
	return b, nil
}

// Close stops the health watcher and every running process (SIGTERM, then
// SIGKILL after KillGrace), waits for them, ends the event stream and
// shuts NVML down.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, r := range b.allRuns() {
		b.stopLocked(r, ReasonShutdown, b.cfg.KillGrace)
	}
	b.signal()
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.cb.close()
	if ret := b.lib.Shutdown(); ret != nv.SUCCESS {
		return callErr("Shutdown", ret)
	}
	return nil
}

// Devices returns what Open discovered about each GPU (a fresh slice).
func (b *Backend) Devices() []Device {
	out := slices.Clone(b.devs)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range out {
		out[i].NVLinkPeers = slices.Clone(out[i].NVLinkPeers)
		out[i].Layout = b.layouts[i]
	}
	return out
}

// Node is the box's name in the topology.
func (b *Backend) Node() string { return b.node }

// Cluster returns the box as a one-node topology: GPU model and memory,
// MIG mode and layout, and GPU levels from NUMA nodes, NVLink islands and
// PCIe switches.
func (b *Backend) Cluster(ctx context.Context) (topo.Spec, error) {
	if err := ctx.Err(); err != nil {
		return topo.Spec{}, err
	}
	sp := b.spec
	sp.GPULevels = slices.Clone(sp.GPULevels)
	sp.Nodes = slices.Clone(sp.Nodes)
	return sp, nil
}

// Running returns the runs this backend started and that still run (not
// preempted, requeued, cancelled or reported finished), with their live
// members and the start of their first member, so that a Runner started
// again on the same backend (a restart) adopts them. Processes the backend
// did not start are not adopted (it cannot know their gangs, limits or
// commands).
func (b *Backend) Running(ctx context.Context) ([]backends.RunningJob, error) {
	return b.RunningNow(ctx)
}

// RunningNow is Running (which acts on nothing): what the Runner polls
// after a bind timed out, to learn whether it came through, and to stop
// jobs started by binds it gave up on (backends.RunningReporter).
func (b *Backend) RunningNow(ctx context.Context) ([]backends.RunningJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backends.RunningJob
	for _, id := range slices.Sorted(maps.Keys(b.runs)) {
		r := b.runs[id]
		if r.reported || r.preempted || r.requeued || r.cancelled {
			continue
		}
		rj := backends.RunningJob{Job: r.job}
		for _, p := range r.procs {
			if p.done || p.unbound {
				continue
			}
			rj.Members = append(rj.Members, cloneMember(p.m))
			if rj.Start.IsZero() || p.start.Before(rj.Start) {
				rj.Start = p.start
			}
		}
		if len(rj.Members) > 0 {
			out = append(out, rj)
		}
	}
	return out, nil
}

// ---------------------------------------------------------------- intake

// Submit queues job j to run cmd on each member. The backend owns j
// afterwards. Errors: ErrInvalid (nil job, an invalid job, a job ID that
// cannot name a directory, no command, a queue or account Config.Queues
// does not have), ErrDuplicateJob, ErrClosed.
func (b *Backend) Submit(ctx context.Context, j *queue.Job, cmd Command) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if j == nil {
		return fmt.Errorf("%w: nil job", ErrInvalid)
	}
	if err := validID(j.ID); err != nil {
		return err
	}
	if len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return fmt.Errorf("%w: job %q: no command", ErrInvalid, j.ID)
	}
	if err := j.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if b.tree != nil {
		if err := b.tree.ValidateJob(j); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if _, dup := b.jobs[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	b.jobs[j.ID] = &jobEntry{job: j, cmd: Command{Args: slices.Clone(cmd.Args), Env: slices.Clone(cmd.Env), Dir: cmd.Dir}}
	b.push(engine.Submitted(time.Now(), j))
	return nil
}

// Cancel withdraws a job: a pending one is dropped, a running one stopped
// (SIGTERM, KillGrace, SIGKILL).
func (b *Backend) Cancel(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.jobs[id]; !ok {
		return fmt.Errorf("%w: unknown job %q", ErrInvalid, id)
	}
	if r := b.runs[id]; r != nil {
		r.cancelled = true
		b.stopLocked(r, ReasonCancelled, b.cfg.KillGrace)
	}
	// A requeue its failed GPU asked for is moot: the engine forgets it.
	b.requeue = slices.DeleteFunc(b.requeue, func(j *queue.Job) bool { return j.ID == id })
	delete(b.jobs, id)
	b.push(engine.Cancelled(time.Now(), id))
	return nil
}

func validID(id string) error {
	if id == "" || len(id) > 200 || id == "." || id == ".." {
		return fmt.Errorf("%w: job ID %q", ErrInvalid, id)
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("%w: job ID %q: only letters, digits, '-', '_' and '.'", ErrInvalid, id)
		}
	}
	return nil
}

// cloneJob copies j's public fields: a requeued job is submitted again as
// a fresh value the engine owns.
func cloneJob(j *queue.Job) *queue.Job {
	c := &queue.Job{
		ID: j.ID, Queue: j.Queue, Account: j.Account, Priority: j.Priority, Class: j.Class,
		Request: j.Request, RuntimeEstimate: j.RuntimeEstimate, RuntimeLimit: j.RuntimeLimit,
		Preemptible: j.Preemptible, MinRuntime: j.MinRuntime, GracePeriod: j.GracePeriod,
		Elastic: j.Elastic, Submit: j.Submit, ArrayIndex: j.ArrayIndex,
	}
	c.Request.Groups = slices.Clone(j.Request.Groups)
	for i := range c.Request.Groups {
		g := &c.Request.Groups[i]
		g.Selector = maps.Clone(g.Selector)
	}
	return c
}

// ---------------------------------------------------------------- events

func (b *Backend) push(evs ...engine.Event) {
	b.evs = append(b.evs, evs...)
	b.signal()
}

func (b *Backend) signal() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// Next returns the backend's events: submissions and cancellations,
// finished runs, and what GPU failures and restores mean to the engine
// (see Quarantine). See backends.Events.
func (b *Backend) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	for {
		b.mu.Lock()
		due := b.healthEventsLocked(time.Now())
		if len(b.evs) > 0 {
			evs := b.evs
			b.evs = nil
			// A job reported finished is forgotten here: the engine steps
			// the event before its next cycle, so no bind or rollback of
			// that run can follow.
			for _, e := range evs {
				if r := b.runs[e.JobID]; e.Kind == engine.EventJobFinished && r != nil && r.reported {
					delete(b.runs, e.JobID)
					delete(b.jobs, e.JobID)
				}
			}
			b.mu.Unlock()
			return evs, nil
		}
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return nil, backends.ErrClosed
		}
		w := wake
		if !due.IsZero() && (w.IsZero() || due.Before(w)) {
			w = due
		}
		var t *time.Timer
		var timer <-chan time.Time
		if !w.IsZero() {
			t = time.NewTimer(time.Until(w))
			timer = t.C
		}
		hold := false
		select {
		case <-b.notify:
		case <-timer:
			hold = !due.IsZero() && !w.Before(due)
			if !hold {
				return []engine.Event{}, nil
			}
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return nil, ctx.Err()
		}
		if t != nil {
			t.Stop()
		}
	}
}

// ---------------------------------------------------------------- refusals

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{backends.ErrRefused}, args...)...)
}

var (
	_ backends.Backend         = (*Backend)(nil)
	_ backends.RunningReporter = (*Backend)(nil)
)
