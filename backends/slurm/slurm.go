package slurm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Errors of the backend, besides ErrMissingCommand, ErrCommand and
// ErrParse.
var (
	// ErrInvalidConfig: a Config field is invalid.
	ErrInvalidConfig = errors.New("slurm: invalid config")
	// ErrBadArgument: a job ID or node name that SLURM's commands must not
	// be given (the backend never passes unchecked text to a command).
	ErrBadArgument = errors.New("slurm: bad argument")
	// ErrBadJob: a pending job berth cannot schedule (GPUs asked per job
	// with --gpus, a malformed berth: comment, a --constraint berth does
	// not read: see constraint.go). It is held in SLURM with the reason in
	// its admin comment and reported through Config.OnSkip.
	ErrBadJob = errors.New("slurm: job not schedulable by berth")
	// ErrClosed wraps backends.ErrClosed: Close was called.
	ErrClosed = fmt.Errorf("slurm: closed: %w", backends.ErrClosed)
)

// Partition is how berth treats the jobs of one managed partition.
type Partition struct {
	// Priority of the partition's jobs in berth (queue.Job.Priority).
	Priority int32
	// Preemptible jobs may be preempted by berth once they ran MinRuntime;
	// they get GracePeriod between SIGTERM and the stop.
	Preemptible bool
	MinRuntime  time.Duration
	GracePeriod time.Duration
	// Cancel: a preempted job is cancelled (scancel) instead of requeued
	// and held (scontrol requeuehold) for berth to start again.
	Cancel bool
}

// Config configures a Backend.
type Config struct {
	// Partitions are the partitions berth manages, by name. Each must be
	// State=DOWN in slurm.conf, so that SLURM queues their jobs but never
	// starts them (see docs/backends/slurm.md). Default: {"berth": {}}.
	Partitions map[string]Partition
	// RunPartition is the hidden, UP partition over the same nodes that
	// berth moves a job into, with its node list, to start it. Default
	// "berth-run".
	RunPartition string
	// AccountQueues maps a SLURM account to a berth queue; an account
	// not in the map is its own queue name, and a job without an account
	// goes to DefaultQueue (default "default").
	AccountQueues map[string]string
	DefaultQueue  string
	// Levels names the topology/tree switch levels, leaf first: the
	// switches of level 0 are Levels[0] ("rack"), those of level 1
	// Levels[1] ("block"), ... Default {"rack", "block", "pod", "zone"}.
	Levels []string
	// PollInterval is how often squeue and sinfo are read. Default 1 s.
	PollInterval time.Duration
	// EndLog, if set, is a file slurmctld appends to as each job ends:
	// JobCompLoc with JobCompType=jobcomp/filetxt (hack/slurm-up.sh sets
	// both). Next reads it every 10 ms and confirms the ends it names
	// with squeue at once, or polls at once, rather than PollInterval
	// after the last poll (endlog.go). Its
	// lines are hints (they hold text users wrote): a job a line names is
	// reported ended only once squeue shows it so. Empty: polls only.
	EndLog string
	// MaxBackoff bounds the wait between failed polls (doubling from
	// PollInterval); MaxPollFailures failed polls in a row stop the event
	// stream with the last error. Defaults 30 s and 10.
	MaxBackoff      time.Duration
	MaxPollFailures int
	// CommandTimeout bounds every command. Default 30 s.
	CommandTimeout time.Duration
	// Bin is the directory of scontrol, squeue, sinfo, scancel and sbatch;
	// empty: PATH.
	Bin string
	// Env is added to the commands' environment (e.g. "SLURM_CONF=...").
	Env []string
	// LaunchPartition is the managed partition that jobs a federation
	// launches (LaunchJob) wait in, held, until berth binds them. Default:
	// the first managed partition by name.
	LaunchPartition string
	// Scripts are the batch scripts of launched jobs, by queue.Job.Name
	// (each starts with #!). A job whose Name is not here runs
	// "sleep <RuntimeEstimate>" ("sleep infinity" without an estimate).
	Scripts map[string]string
	// LaunchOutput is the --output of launched jobs (default /dev/null);
	// LaunchDir their --chdir (default /tmp).
	LaunchOutput string
	LaunchDir    string
	// ReasonInterval and ReasonBatch bound ShowReasons: at most
	// ReasonBatch jobs' reasons written every ReasonInterval. Defaults 5 s
	// and 16; a negative ReasonInterval writes none.
	ReasonInterval time.Duration
	ReasonBatch    int
	// PowerPools are the pools of nodes berth powers up and down through
	// SLURM's power saving (node autoscaling: ScaleUp, ScaleDown,
	// Provisioning, Pools; see power.go). Empty: none.
	PowerPools []PowerPool
	// OnSkip, if set, is told once of every pending job berth cannot
	// schedule (ErrBadJob) and of failures no caller sees (a stop after a
	// grace period, moving a requeued job back). Called from the
	// backend's goroutines.
	OnSkip func(job string, err error)
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if len(out.Partitions) == 0 {
		out.Partitions = map[string]Partition{"berth": {}}
	}
	if out.RunPartition == "" {
		out.RunPartition = "berth-run"
	}
	if out.DefaultQueue == "" {
		out.DefaultQueue = "default"
	}
	if len(out.Levels) == 0 {
		out.Levels = []string{"rack", "block", "pod", "zone"}
	}
	if out.PollInterval == 0 {
		out.PollInterval = time.Second
	}
	if out.MaxBackoff == 0 {
		out.MaxBackoff = 30 * time.Second
	}
	if out.MaxPollFailures == 0 {
		out.MaxPollFailures = 10
	}
	if out.CommandTimeout == 0 {
		out.CommandTimeout = 30 * time.Second
	}
	if out.ReasonInterval == 0 {
		out.ReasonInterval = 5 * time.Second
	}
	if out.ReasonBatch <= 0 {
		out.ReasonBatch = 16
	}
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	for name, p := range out.Partitions {
		if !partRE.MatchString(name) {
			return bad("partition name %q", name)
		}
		if p.MinRuntime < 0 || p.GracePeriod < 0 {
			return bad("partition %q: negative MinRuntime or GracePeriod", name)
		}
	}
	if !partRE.MatchString(out.RunPartition) {
		return bad("RunPartition %q", out.RunPartition)
	}
	if _, managed := out.Partitions[out.RunPartition]; managed {
		return bad("RunPartition %q is also a managed partition", out.RunPartition)
	}
	if out.PollInterval < 0 || out.MaxBackoff < 0 || out.CommandTimeout < 0 || out.MaxPollFailures < 0 {
		return bad("negative interval, backoff, timeout or failure count")
	}
	for _, l := range out.Levels {
		if !levelRE.MatchString(l) {
			return bad("level name %q", l)
		}
	}
	if err := checkPowerPools(&out); err != nil {
		return Config{}, err
	}
	if err := out.launchDefaults(); err != nil {
		return Config{}, err
	}
	return out, nil
}

// Backend is berth's backend for a SLURM cluster (backends.Backend and
// backends.GangBinder). It is safe for the Runner's concurrent use.
type Backend struct {
	cfg Config
	cli *cli

	mu      sync.Mutex
	jobs    map[string]*tracked
	skipped map[string]bool
	nodes   map[string]topo.NodeState // what the engine was told
	resumed map[string]time.Time      // nodes ReclaimNode resumed, when (ResumeGrace)
	inSpec  map[string]bool
	timers  map[string]*time.Timer
	queued  []engine.Event
	closed  bool

	nextPoll  time.Time
	failures  int
	polling   chan error // the poll in flight (Next's goroutine only)
	pollAgain bool       // poll again once it is done (Next's goroutine only)
	nodesRead time.Time  // when a poll last read sinfo (mu)
	runNodes  []string   // the nodes of RunPartition, as sinfo last showed them (mu)
	ends      endLog     // Config.EndLog's reader (Next's goroutine only)
	hints     []string   // job IDs the end log named, not yet confirmed (Next's goroutine only)
	confirm   chan bool  // the confirmation in flight: true asks for a poll (Next's goroutine only)
	show      showProc   // the long-lived scontrol of confirmations (showproc.go)

	// Ends confirmed while their job's bind was in flight, to confirm
	// again once it answered (endlog.go); under mu.
	bindWait []string

	// Jobs a confirmation saw COMPLETING: how many times, and when to read
	// them again (endlog.go); under mu.
	completing   map[string]int
	completingAt time.Time
	life         context.Context    // the polls' (Next returns while one runs)
	endLife      context.CancelFunc // Close: ends a poll in flight
	stats        Stats

	// smu orders a grace period's stop (requeuehold, then the move back:
	// Lock) against binds (RLock): a bind of the requeued job made
	// between the two would be undone by the move back, the job left
	// pending in its managed partition while berth books it running.
	smu sync.RWMutex

	bmu     sync.Mutex
	batch   []*bindReq
	leading bool

	// What users see (reasons.go), under mu: the reason last written per
	// job, the next ones to write, jobs held as never runnable, the
	// cluster's topology levels.
	shown       map[string]string
	reasonTodo  [][2]string
	writing     bool
	lastWrite   time.Time
	rejects     []reject
	held        map[string]bool
	levels      []string
	levelsKnown bool

	// gpuModels are the GRES types of the managed nodes, as Cluster last
	// read them (constraint.go); toJob reads them with or without mu.
	gpuModels atomic.Pointer[map[string]bool]

	// GPU indices read in the background (read.go), under mu.
	devRead    map[string]devRead
	devReading bool
	devJSON    bool

	// Power saving (power.go), under mu: the topology's switches per
	// node (read once), and the resume failures reported, by node (the
	// time SLURM set the reason).
	underSw  map[string][]string
	failSeen map[string]int64

	svc *svcState // services and replica jobs (service.go); under mu
	// Jobs LaunchJob submitted: berth ID <-> SLURM ID (b.mu).
	lmu     sync.Mutex // serialises LaunchJob and WithdrawJob
	toSlurm map[string]string
	toBerth map[string]string
}

// Stats counts the backend's work (for benchmarks and logs).
type Stats struct {
	Polls       int
	PollTime    time.Duration // squeue + sinfo, summed
	Binds       int
	BindTime    time.Duration // each BindGang call, summed
	Batches     int           // scontrol processes that ran binds
	BatchTime   time.Duration // their run time, summed
	BatchFails  int           // batches scontrol reported a failure of
	Preemptions int
	DetailReads int           // squeue reads of new jobs' user fields
	DeviceReads int           // scontrol -d reads of started jobs' GPU indices
	JSONReads   int           // polls that read squeue --json (a check failed, or a job berth does not know in RunPartition)
	Confirms    int           // scontrol reads of the jobs end-log lines named (endlog.go)
	ConfirmTime time.Duration // their run time, summed
	Confirmed   int           // ends reported from them (the others: from polls)
	Reasons     int           // reasons written (ShowReasons)
	Rejects     int           // jobs held as never runnable
	PowerUps    int           // nodes ScaleUp asked SLURM to power up
	PowerDowns  int           // nodes ScaleDown asked SLURM to power down
}

// job states as the backend told the engine.
const (
	inPending = iota + 1
	inRunning
	inEnded
)

type tracked struct {
	state     int
	partition string // the managed partition it came from
	nodes     int    // SLURM node count of the job
	bound     bool   // berth moved it to RunPartition and has not seen it run yet
	reqNodes  bool   // pending with a node list of its own (sbatch -w): bound by NodeList
	misplaced bool   // a poll saw it run off its bind's nodes: requeue it
	binding   bool   // a BindGang of it is in flight (a poll then decides nothing of it)
	running   []string
	devices   string // the gres detail last reported
	restarts  int
	// seenRun is 1 + the restart count of the run a poll last saw
	// RUNNING without its GPU indices (needsLocked), 0 for none.
	seenRun   int
	preempted bool      // stopped by berth: its requeue is berth's, not an end
	launched  bool      // submitted by LaunchJob, held: BindGang releases it
	sbatched  time.Time // when LaunchJob's sbatch returned: a poll begun earlier may miss it
	// actedAt is when a BindGang of it last came through, or a
	// preemption's stop handed it back: a poll that read squeue before
	// holds a record older than that change (events.go).
	actedAt time.Time
	// movedBack is when berth last handed it back to its partition after
	// a requeue (moveBack): BindGang waits until requeueGap has passed.
	movedBack time.Time
	// doubt: a BindGang of it failed with an error that is no refusal
	// (a timeout, a lost answer): the update may have been applied, on
	// doubtOn. The Runner holds the bind unknown and decides from
	// RunningNow: it adopts the job if it runs there, else it stops the
	// bind (UnbindMember hands the job back if it waits in RunPartition,
	// and answers an error while it runs, so that the Runner adopts it
	// instead). A poll does not stop it as a ghost: one that sees it
	// started (or ended) in RunPartition takes it as running from that
	// bind (events.go), so its GPU indices and its end are reported.
	// Cleared by a bind that succeeds or a hand-back.
	doubt   bool
	doubtOn []string
}

// New checks cfg and that SLURM's commands are installed, and returns a
// backend. Nothing is read from SLURM yet.
func New(cfg Config) (*Backend, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cl, err := newCLI(c.Bin, c.Env, c.CommandTimeout)
	if err != nil {
		return nil, err
	}
	life, stop := context.WithCancel(context.Background())
	return &Backend{
		cfg: c, cli: cl, life: life, endLife: stop,
		jobs: map[string]*tracked{}, skipped: map[string]bool{}, nodes: map[string]topo.NodeState{},
		inSpec: map[string]bool{}, timers: map[string]*time.Timer{},
		shown: map[string]string{}, held: map[string]bool{}, devRead: map[string]devRead{}, completing: map[string]int{},
		toSlurm: map[string]string{}, toBerth: map[string]string{},
	}, nil
}

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Close stops pending grace-period timers and ends the event stream.
func (b *Backend) Close() {
	b.mu.Lock()
	b.closed = true
	b.endLife() // (kills a confirmation's scontrol in flight: showJobs)
	for id, t := range b.timers {
		t.Stop()
		delete(b.timers, id)
	}
	b.mu.Unlock()
	b.show.close()
}

func (b *Backend) skip(id string, err error) {
	if b.cfg.OnSkip != nil {
		b.cfg.OnSkip(id, err)
	}
}

// ---------------------------------------------------------------- inventory

// Cluster reads the nodes of the managed partitions (sinfo --json) and the
// topology tree (scontrol show topology).
func (b *Backend) Cluster(ctx context.Context) (topo.Spec, error) {
	out, err := b.cli.run(ctx, "sinfo", "--json")
	if err != nil {
		return topo.Spec{}, err
	}
	recs, err := parseSinfo(out)
	if err != nil {
		return topo.Spec{}, err
	}
	tout, err := b.cli.run(ctx, "scontrol", "show", "topology")
	if err != nil {
		return topo.Spec{}, err
	}
	sws, err := parseTopology(tout)
	if err != nil {
		return topo.Spec{}, err
	}
	var spec topo.Spec
	depth := 0
	for _, s := range sws {
		depth = max(depth, s.Level+1)
	}
	if depth > len(b.cfg.Levels) {
		return topo.Spec{}, fmt.Errorf("%w: topology has %d switch levels, Config.Levels names %d", ErrInvalidConfig, depth, len(b.cfg.Levels))
	}
	// node -> switch at each level
	under := map[string][]string{}
	for _, s := range sws {
		for _, n := range s.Nodes {
			if under[n] == nil {
				under[n] = make([]string, depth)
			}
			under[n][s.Level] = s.Name
		}
	}
	for l := depth - 1; l >= 0; l-- {
		spec.Levels = append(spec.Levels, b.cfg.Levels[l])
	}
	seen := map[string]bool{}
	models := map[string]bool{}
	defer b.gpuModels.Store(&models)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.levels, b.levelsKnown = slices.Clone(spec.Levels), true
	b.setRunNodesLocked(recs)
	for _, r := range recs {
		if seen[r.Name] || !b.managedNode(r) {
			continue
		}
		seen[r.Name] = true
		g, ok, err := parseGPUGres(r.Gres)
		if err != nil {
			return topo.Spec{}, fmt.Errorf("node %s: %w", r.Name, err)
		}
		if !ok || g.Count == 0 {
			continue // berth places GPU work only
		}
		ns := topo.NodeSpec{Name: r.Name, GPUs: g.Count, GPUModel: g.Type, State: nodeState(r), Labels: features(r.Features)}
		if g.Type != "" {
			models[g.Type] = true
		}
		if depth > 0 {
			doms := under[r.Name]
			if doms == nil || slices.Contains(doms, "") {
				return topo.Spec{}, fmt.Errorf("%w: node %s is not under a switch at every level of topology.conf", ErrInvalidConfig, r.Name)
			}
			for l := depth - 1; l >= 0; l-- {
				ns.Domains = append(ns.Domains, doms[l])
			}
		}
		spec.Nodes = append(spec.Nodes, ns)
		b.inSpec[r.Name] = true
		b.nodes[r.Name] = ns.State
	}
	if len(spec.Nodes) == 0 {
		return topo.Spec{}, fmt.Errorf("%w: no GPU node in partitions %v", ErrInvalidConfig, slices.Sorted(maps.Keys(b.cfg.Partitions)))
	}
	return spec, nil
}

func (b *Backend) managedNode(r nodeRec) bool {
	for _, p := range r.Partitions {
		if _, ok := b.cfg.Partitions[p]; ok {
			return true
		}
	}
	return false
}

func features(s string) map[string]string {
	if s == "" || s == "(null)" {
		return nil
	}
	m := map[string]string{}
	for _, f := range strings.Split(s, ",") {
		if f != "" {
			m[f] = "true"
		}
	}
	return m
}

// nodeState maps a node's SLURM state to berth's.
func nodeState(r nodeRec) topo.NodeState {
	st := strings.ToLower(r.State)
	flags := strings.ToUpper(strings.Join(r.StateFlags, ","))
	switch {
	case strings.HasPrefix(st, "down"), strings.HasPrefix(st, "fail"), st == "unknown", strings.Contains(flags, "NOT_RESPONDING"):
		return topo.Down
	}
	// Power saving: a node powered down, powering up or powering down is
	// not up (nothing may be placed there); one asked to power down that
	// still runs jobs keeps them (POWER_DOWN_ASAP also drains it).
	switch powerOf(r) {
	case powerOff, powerFailed, powerBooting:
		return topo.Down
	case powerGoing:
		if slices.Contains(r.StateFlags, "POWERING_DOWN") {
			return topo.Down
		}
		return topo.Draining
	}
	switch {
	case strings.Contains(flags, "DRAIN"), strings.HasPrefix(st, "drain"):
		return topo.Draining
	}
	return topo.Ready
}

// Running reads the jobs berth started that run now (squeue --json: jobs
// in RunPartition), with the GPU indices SLURM gave them. (Not from a
// fixed-format read: 22.05's squeue -O has no AdminComment, which marks a
// victim berth was stopping; it prints the field empty and exits 0.) A job berth had
// moved to RunPartition that has not started yet is moved back to its
// managed partition: the Runner places it again (never twice).
func (b *Backend) Running(ctx context.Context) ([]backends.RunningJob, error) {
	// A job berth bound just before it stopped may start between the read
	// and its move back ("no longer pending"): read again, it is running.
	for try := 1; ; try++ {
		out, err := b.running(ctx)
		if err == nil || try == 3 || !errors.Is(err, errStartedMeanwhile) {
			return out, err
		}
	}
}

// errStartedMeanwhile: a job Running found pending in RunPartition
// started before it could be moved back.
var errStartedMeanwhile = errors.New("slurm: a job started while it was moved back")

func (b *Backend) running(ctx context.Context) ([]backends.RunningJob, error) {
	recs, err := b.squeue(ctx)
	if err != nil {
		return nil, err
	}
	var out []backends.RunningJob
	for i := range recs {
		r := &recs[i]
		if r.Partition != b.cfg.RunPartition {
			continue
		}
		if rid, ok := b.replicaRec(r); ok {
			rj, err := b.runningReplica(ctx, rid, r)
			if err != nil {
				return nil, err
			}
			if rj != nil {
				out = append(out, *rj)
			}
			continue
		}
		b.mu.Lock()
		id := b.berthIDLocked(recID(r))
		b.mu.Unlock()
		part := fromPartition(r.AdminComment, b.cfg)
		switch {
		case r.State == "RUNNING":
			j, err := b.runningJob(id, r, part)
			if err != nil {
				return nil, fmt.Errorf("running job %s: %w", id, err)
			}
			ms, err := members(r)
			if err != nil {
				return nil, fmt.Errorf("running job %s: %w", id, err)
			}
			out = append(out, backends.RunningJob{Job: j, Members: ms, Start: unix(r.StartTime)})
			b.mu.Lock()
			b.jobs[id] = &tracked{state: inRunning, partition: part, nodes: r.NodeCount, running: nodeNames(ms), devices: strings.Join(r.GresDetail, ";"), restarts: r.RestartCnt}
			b.mu.Unlock()
		case terminal(r.State) && stopping(r.AdminComment):
			// Preempted by a berth that stopped in the grace period: the
			// SIGTERM ended it, the requeue was not made. Make it now (the
			// engine requeues the job at its deadline, or Pending reports
			// it to a new engine).
			if err := b.stop(ctx, id, part, false); err != nil {
				b.skip(id, fmt.Errorf("requeueing a job preempted before the restart: %w", err))
			}
		case r.State == "PENDING":
			if err := b.moveBack(ctx, id, part); err != nil {
				if started(err) {
					return nil, fmt.Errorf("%w: job %s: %w", errStartedMeanwhile, id, err)
				}
				return nil, err
			}
		}
	}
	return out, nil
}

// RunningNow lists the jobs berth started that run now, as Running does,
// acting on nothing (backends.RunningReporter): one squeue, no job moved
// back, requeued or cancelled, the backend's record of its jobs left as
// it is. The Runner calls it after a bind's call timed out to learn
// whether the bind came through, and to find ghosts (binds that came
// through after the Runner gave them up).
func (b *Backend) RunningNow(ctx context.Context) ([]backends.RunningJob, error) {
	recs, err := b.squeue(ctx)
	if err != nil {
		return nil, err
	}
	var out []backends.RunningJob
	for i := range recs {
		r := &recs[i]
		if r.Partition != b.cfg.RunPartition || r.State != "RUNNING" {
			continue
		}
		if rid, ok := b.replicaRec(r); ok {
			rj, err := b.runningReplica(ctx, rid, r) // (acts only on replicas not running)
			if err != nil {
				return nil, err
			}
			if rj != nil {
				out = append(out, *rj)
			}
			continue
		}
		b.mu.Lock()
		id := b.berthIDLocked(recID(r))
		b.mu.Unlock()
		j, err := b.runningJob(id, r, fromPartition(r.AdminComment, b.cfg))
		if err != nil {
			return nil, fmt.Errorf("running job %s: %w", id, err)
		}
		ms, err := members(r)
		if err != nil {
			return nil, fmt.Errorf("running job %s: %w", id, err)
		}
		out = append(out, backends.RunningJob{Job: j, Members: ms, Start: unix(r.StartTime)})
	}
	return out, nil
}

func nodeNames(ms []engine.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Node)
	}
	return out
}

// members reads where a running job is: one member per node with the GPU
// indices SLURM gave it (gres_detail follows the job's node order).
func members(r *jobRec) ([]engine.Member, error) {
	var names []string
	for _, a := range r.Resources.Allocated {
		names = append(names, a.Name)
	}
	if len(names) != len(r.GresDetail) {
		var err error
		if names, err = expandHostlist(r.Nodes); err != nil {
			return nil, err
		}
	}
	if len(names) != len(r.GresDetail) {
		return nil, fmt.Errorf("%w: job %d: %d nodes, %d GRES details", ErrParse, r.JobID, len(names), len(r.GresDetail))
	}
	ms := make([]engine.Member, len(names))
	for i, n := range names {
		g, _, err := parseGPUGres(r.GresDetail[i])
		if err != nil {
			return nil, err
		}
		ms[i] = engine.Member{Node: n, GPUs: g.IDX}
	}
	return ms, nil
}

func recID(r *jobRec) string {
	if r.ArrayTaskID != nil && r.ArrayJobID > 0 {
		return fmt.Sprintf("%d_%d", r.ArrayJobID, *r.ArrayTaskID)
	}
	return strconv.FormatInt(r.JobID, 10)
}

// recJobs lists the berth jobs one squeue record stands for, with their
// array indices: one, or each task of a pending array's meta record
// ("ARRAY_TASK"; SLURM shows the tasks not yet split off as one record with
// array_task_string). b.mu is held.
func (b *Backend) recJobs(r *jobRec) (ids []string, idx []int, err error) {
	if !arrayMeta(r) {
		return []string{b.berthIDLocked(recID(r))}, []int{taskIndex(r)}, nil
	}
	tasks, err := taskIDs(r.ArrayTaskString)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range tasks {
		ids = append(ids, fmt.Sprintf("%d_%d", r.JobID, k))
		idx = append(idx, k)
	}
	return ids, idx, nil
}

// arrayMeta reports a pending array's meta record: its tasks not yet split
// off, listed in array_task_string.
func arrayMeta(r *jobRec) bool { return r.ArrayTaskID == nil && r.ArrayTaskString != "" }

func taskIndex(r *jobRec) int {
	if r.ArrayTaskID != nil {
		return int(*r.ArrayTaskID)
	}
	return 0
}

const adminTag = "berth:from="

// stoppingTag marks, in a job's admin comment, a job berth preempted and
// will requeue at the end of its grace period (BindGang's update clears
// it).
const stoppingTag = "berth:stopping"

func stopping(admin string) bool { return slices.Contains(strings.Fields(admin), stoppingTag) }

func fromPartition(admin string, cfg Config) string {
	for _, f := range strings.Fields(admin) {
		if p, ok := strings.CutPrefix(f, adminTag); ok {
			if _, managed := cfg.Partitions[p]; managed {
				return p
			}
		}
	}
	return slices.Sorted(maps.Keys(cfg.Partitions))[0]
}

// toJob turns a SLURM job of a managed partition into berth's job:
// account -> queue, partition -> priority and preemption, --time -> limit,
// nodes x GPUs per node -> one group, the comment's berth: token -> the
// topology request, --constraint -> the group's GPU models and selector
// (constraint.go).
func (b *Backend) toJob(id string, r *jobRec, part string, arrayIndex int) (*queue.Job, error) {
	p := b.cfg.Partitions[part]
	if strings.Contains(r.TresPerJob, "gpu") {
		return nil, fmt.Errorf("%w: GPUs per job (--gpus) are not supported; ask --gres=gpu:N per node", ErrBadJob)
	}
	g, _, err := parseGPUGres(strings.TrimPrefix(r.TresPerNode, "gres:"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadJob, err)
	}
	if g.Count == 0 {
		return nil, fmt.Errorf("%w: no GPUs asked (--gres=gpu:N); berth places GPU jobs only", ErrBadJob)
	}
	cr, err := parseComment(r.Comment)
	if err != nil {
		return nil, err
	}
	q := b.cfg.DefaultQueue
	if r.Account != "" {
		q = r.Account
		if m, ok := b.cfg.AccountQueues[r.Account]; ok {
			q = m
		}
	}
	n := max(r.NodeCount, 1)
	grp := gang.Group{Members: n, GPUsPerMember: g.Count}
	if err := b.setConstraint(&grp, g.Type, r.Features); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadJob, err)
	}
	j := &queue.Job{
		ID: id, Queue: q, Priority: p.Priority, Submit: unix(r.SubmitTime), ArrayIndex: arrayIndex,
		Preemptible: p.Preemptible, MinRuntime: p.MinRuntime, GracePeriod: p.GracePeriod,
		Request: gang.Request{
			Groups:   []gang.Group{grp},
			Required: cr.Required, Preferred: cr.Preferred,
		},
	}
	if r.TimeLimit > 0 && r.TimeLimit < 1<<31 {
		j.RuntimeLimit = time.Duration(r.TimeLimit) * time.Minute
	}
	return j, nil
}

// runningJob is toJob for a job that runs already: a --constraint berth
// would not place by (the cluster's models changed, a job started by
// hand) is left out rather than failing the read; it only matters to
// a placement, and a requeued job is read again as pending.
func (b *Backend) runningJob(id string, r *jobRec, part string) (*queue.Job, error) {
	j, err := b.toJob(id, r, part, taskIndex(r))
	if errors.Is(err, backends.ErrModelConstraint) {
		c := *r
		c.Features = ""
		j, err = b.toJob(id, &c, part, taskIndex(r))
	}
	return j, err
}

// squeue reads every job (22.05's --json ignores filters: the backend
// filters itself).
func (b *Backend) squeue(ctx context.Context) ([]jobRec, error) {
	out, err := b.cli.run(ctx, "squeue", "--json")
	if err != nil {
		return nil, err
	}
	return parseSqueue(out)
}

// ---------------------------------------------------------------- actuator

// BindGang starts job on exactly the nodes of members: one `scontrol
// update` moves it from its managed partition to RunPartition with
// NodeList set (and StartTime=now, which clears the delay of a requeue:
// a job handed back after a requeue is bound requeueGap after that at the
// earliest), so SLURM starts it there, choosing the GPU indices inside each node
// itself (they come back as DevicesReported events). A gang is one SLURM
// job: the members must be on distinct nodes, as many as the job's node
// count, with the same GPU count each. Refusals wrap backends.ErrRefused.
func (b *Backend) BindGang(ctx context.Context, job string, ms []engine.Member) error {
	if b.isReplicaJob(job) {
		return b.bindReplica(ctx, job, ms)
	}
	if err := b.waitRequeueGap(ctx, job); err != nil {
		return err
	}
	b.smu.RLock()
	defer b.smu.RUnlock()
	if err := ctx.Err(); err != nil {
		// Given up while it waited (for a stop or a hand-back holding
		// smu): nothing applied. Binding now would start a job the Runner
		// has stopped waiting for (UnbindMember waits for binds in flight,
		// not for those not begun).
		return fmt.Errorf("%w: job %s: %w", backends.ErrRefused, job, err)
	}
	// The record's fields are read under b.mu (the poller writes them).
	b.mu.Lock()
	sid := b.slurmIDLocked(job)
	t := b.jobs[job]
	pending := t != nil && t.state == inPending
	var nodes int
	var part string
	if t != nil {
		nodes, part = t.nodes, t.partition
	}
	b.mu.Unlock()
	if err := checkJobID(sid); err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	if !pending {
		return fmt.Errorf("%w: job %s is not pending in a managed partition", backends.ErrRefused, job)
	}
	per := map[string]int{}
	var order []string
	for _, m := range ms {
		if err := checkNode(m.Node); err != nil {
			return fmt.Errorf("%w: %w", backends.ErrRefused, err)
		}
		if m.Fractional {
			return fmt.Errorf("%w: job %s: fractional GPUs are not supported on SLURM", backends.ErrRefused, job)
		}
		if _, seen := per[m.Node]; !seen {
			order = append(order, m.Node)
		}
		per[m.Node] += len(m.GPUs)
	}
	if len(order) != nodes {
		return fmt.Errorf("%w: job %s asks %d nodes, berth placed its members on %d (a SLURM job has one member per node)", backends.ErrRefused, job, nodes, len(order))
	}
	for _, n := range order {
		if per[n] != per[order[0]] {
			return fmt.Errorf("%w: job %s: %d GPUs on %s, %d on %s (SLURM gives every node the same GRES)", backends.ErrRefused, job, per[n], n, per[order[0]], order[0])
		}
	}
	start := time.Now()
	b.mu.Lock()
	t.binding = true
	exc := ""
	if !t.reqNodes {
		exc = b.excludeFor(order)
	}
	b.mu.Unlock()
	where := "NodeList=" + strings.Join(order, ",")
	if exc != "" {
		where = "ExcNodeList=" + exc // one RPC, not three (excludeFor)
	}
	err := b.bind(ctx, &bindReq{
		id: job, job: sid, nodes: order, exclude: exc, done: make(chan error, 1),
		args: []string{"update", "JobId=" + sid, "Partition=" + b.cfg.RunPartition,
			where, "StartTime=now", "AdminComment=" + adminTag + part},
	})
	b.mu.Lock()
	t.binding = false
	b.stats.Binds++
	b.stats.BindTime += time.Since(start)
	launched := t.launched
	if err != nil && !errors.Is(err, backends.ErrRefused) {
		// The update may have been applied (a lost answer): in doubt
		// until the Runner decides (see doubt). A refusal leaves the
		// doubt of an earlier try as it was: "no longer pending" after
		// a try whose answer was lost says that try started the job.
		t.doubt, t.doubtOn = true, order
	}
	if err == nil {
		t.doubt, t.doubtOn = false, nil
		t.state, t.bound, t.running, t.devices, t.launched = inRunning, true, order, "", false
		// A victim bound again runs a new run: its end is an end, not
		// the preemption's requeue (a preemption that came late marked
		// it while the engine had requeued it already).
		t.preempted, t.actedAt = false, time.Now()
		delete(b.shown, job) // the bind's admin comment replaced the reason
	}
	b.mu.Unlock()
	if err != nil || !launched {
		return err
	}
	// Launched held: moved with its node list, it starts once released.
	if _, rerr := b.cli.run(context.WithoutCancel(ctx), "scontrol", "release", sid); rerr != nil {
		merr := b.moveBack(context.WithoutCancel(ctx), job, part)
		b.mu.Lock()
		t.state, t.bound, t.running, t.launched = inPending, false, nil, merr != nil
		b.mu.Unlock()
		return fmt.Errorf("releasing launched job %s (SLURM %s): %w (moved back: %v)", job, sid, refusal(rerr), merr)
	}
	return nil
}

// refusal classifies a failed command: SLURM's answers about the job or
// the nodes are final refusals, anything else (a timeout, a controller
// that does not answer) transient.
func refusal(err error) error {
	if !errors.Is(err, ErrCommand) {
		return err
	}
	msg := err.Error()
	for _, s := range []string{"Invalid job id", "no longer pending", "already completed", "not available", "Invalid node name", "Requested node configuration", "Access/permission denied", "Job is pending execution"} {
		if strings.Contains(msg, s) {
			return fmt.Errorf("%w: %w", backends.ErrRefused, err)
		}
	}
	return err
}

// BindMember binds a one-member gang. The Runner uses BindGang for this
// backend; BindMember is there for callers that bind members themselves.
func (b *Backend) BindMember(ctx context.Context, job string, m engine.Member) error {
	return b.BindGang(ctx, job, []engine.Member{m})
}

// UnbindMember undoes a bind the Runner gave up (a rollback, or a bind
// whose call timed out that RunningNow did not show running). A SLURM job
// is one gang, never elastic, so any member stands for the whole job. It
// waits for a bind of the job in flight (an abandoned call may still
// come through) and then:
//
//   - returns nil for a job no bind of berth's reached (pending in its
//     managed partition, or not berth's);
//   - hands back a job whose bind was in doubt (its answer lost) and that
//     waits in RunPartition: moved back to its managed partition, so
//     SLURM cannot start it there;
//   - answers an error that is no refusal for a job such a bind started
//     (running, or ended: a poll reports that end): the Runner keeps the
//     bind unknown and adopts it from RunningNow, so no job runs that
//     berth does not account for, and none runs twice;
//   - refuses any other running job: SLURM jobs cannot shrink.
func (b *Backend) UnbindMember(ctx context.Context, job string, _ engine.Member) error {
	b.smu.Lock() // BindGang holds smu.RLock while its update is made
	defer b.smu.Unlock()
	b.mu.Lock()
	t := b.jobs[job]
	switch {
	case t != nil && t.state == inRunning && (t.doubt || t.bound):
		b.mu.Unlock()
		return fmt.Errorf("slurm: job %s was started by a bind that came through: it runs (RunningNow adopts it)", job)
	case t != nil && t.state == inRunning:
		b.mu.Unlock()
		return fmt.Errorf("%w: job %s: SLURM jobs cannot shrink", backends.ErrRefused, job)
	case t == nil || !t.doubt:
		b.mu.Unlock()
		return nil
	}
	part := t.partition
	b.mu.Unlock()
	sid := b.slurmID(job)
	if err := checkJobID(sid); err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	out, err := b.cli.run(ctx, "squeue", "-h", "-t", "all", "-j", sid, "-o", "%T|%P")
	if err != nil {
		return fmt.Errorf("slurm: reading job %s, whose bind is in doubt: %w", job, err)
	}
	st, p, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
	switch {
	case st == "PENDING" && p == b.cfg.RunPartition:
		if err := b.moveBack(ctx, job, part); err != nil {
			// Started meanwhile ("no longer pending"): asked again, it runs.
			return fmt.Errorf("slurm: handing back job %s, whose bind is in doubt: %w", job, err)
		}
	case st == "PENDING", st == "":
		// Handed back already (a poll saw it pending in RunPartition),
		// or gone from slurmctld (a poll reports its end).
	default:
		return fmt.Errorf("slurm: job %s is %s in %s: the bind in doubt came through (RunningNow adopts it)", job, st, p)
	}
	b.mu.Lock()
	if t.state == inPending {
		t.doubt, t.doubtOn = false, nil
		t.actedAt = time.Now()
	}
	b.mu.Unlock()
	return nil
}

// ApplyMIG is refused: SLURM 22.05 knows MIG only through NVML
// autodetection at slurmd start; it cannot be reconfigured from outside.
func (b *Backend) ApplyMIG(context.Context, engine.MIGReconfiguration) error {
	return fmt.Errorf("%w: MIG reconfiguration is not supported on SLURM", backends.ErrRefused)
}

// Preempt stops a running job by its partition's policy: SIGTERM to every
// step and the batch script at once (scancel --signal=TERM --full), then,
// at p.Deadline, requeue and hold it (scontrol requeuehold), move it back
// to its managed partition and release it, so that it waits for berth
// again; or cancel it (Partition.Cancel). A deadline already passed stops
// it at once.
func (b *Backend) Preempt(ctx context.Context, p engine.Preemption) error {
	id := p.Victim
	if b.isReplicaJob(id) {
		return b.preemptReplica(ctx, p)
	}
	// The record's fields are read under b.mu: the poller and the end
	// log's confirmations write them (a data race under -race before).
	b.mu.Lock()
	sid := b.slurmIDLocked(id)
	t := b.jobs[id]
	running, part := t != nil && t.state == inRunning, ""
	if t != nil {
		part = t.partition
	}
	b.mu.Unlock()
	if err := checkJobID(sid); err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	if !running {
		return fmt.Errorf("%w: job %s is not running under berth", backends.ErrRefused, id)
	}
	cancel := b.cfg.Partitions[part].Cancel
	wait := time.Until(p.Deadline)
	if wait > 0 {
		if !cancel {
			// Marked in SLURM, so that a berth started again finds a
			// victim the SIGTERM ended, whose requeue this process's
			// timer was to make, and makes it (Running).
			if _, err := b.cli.run(ctx, "scontrol", "update", "JobId="+sid, "AdminComment="+adminTag+part+" "+stoppingTag); err != nil {
				return refusal(err)
			}
		}
		if _, err := b.cli.run(ctx, "scancel", "--signal=TERM", "--full", sid); err != nil {
			if !cancel { // not preempted (it ended first): no requeue is due
				_, _ = b.cli.run(context.WithoutCancel(ctx), "scontrol", "update", "JobId="+sid, "AdminComment="+adminTag+part)
			}
			return refusal(err)
		}
	}
	b.mu.Lock()
	if !cancel {
		t.preempted = true
	}
	b.stats.Preemptions++
	b.mu.Unlock()
	if wait <= 0 {
		return b.stop(ctx, id, part, cancel)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if old := b.timers[id]; old != nil {
		old.Stop()
	}
	b.timers[id] = time.AfterFunc(wait, func() {
		b.mu.Lock()
		delete(b.timers, id)
		b.mu.Unlock()
		ctx, cancelCtx := context.WithTimeout(context.Background(), 2*b.cfg.CommandTimeout)
		defer cancelCtx()
		if err := b.stop(ctx, id, part, cancel); err != nil {
			b.skip(id, fmt.Errorf("stopping after the grace period: %w", err))
		}
	})
	return nil
}

// stop ends a preempted job now: cancel, or requeue-hold and hand back.
func (b *Backend) stop(ctx context.Context, id, part string, cancel bool) error {
	sid := b.slurmID(id)
	if cancel {
		_, err := b.cli.run(ctx, "scancel", sid)
		return refusal(err)
	}
	// A job that ended in its grace period (SIGTERM often ends it) is
	// requeued too: the engine requeues every preempted job, and SLURM
	// requeues a finished job on request. No bind between the requeue
	// and the move back (smu).
	b.smu.Lock()
	defer b.smu.Unlock()
	if _, err := b.cli.run(ctx, "scontrol", "requeuehold", sid); err != nil {
		return refusal(err)
	}
	if err := b.moveBack(ctx, sid, part); err != nil {
		return err
	}
	// Pending in its partition again: the engine requeues it (at once
	// for a preemption that came after its deadline) and may bind it
	// before a poll reads it; those binds were refused ("not pending"),
	// MaxBindTries of them in half a second held the job for good. It
	// stays marked preempted until a poll sees it back (requeuehold
	// leaves COMPLETED / CANCELLED briefly: no end).
	b.mu.Lock()
	if t := b.jobs[id]; t != nil && t.state == inRunning && t.preempted {
		t.state, t.bound, t.running, t.devices = inPending, false, nil, ""
		// The requeue counts one restart: a bind made before a poll
		// reads the job must not take it for a requeue of the bound run
		// (handBack).
		t.restarts++
		t.actedAt = time.Now()
	}
	b.mu.Unlock()
	return nil
}

// moveBack returns a pending job of RunPartition to its managed partition
// (where SLURM cannot start it), clears its node list and the requeue
// delay, and releases a hold.
func (b *Backend) moveBack(ctx context.Context, id, part string) error {
	sid := b.slurmID(id)
	if err := checkJobID(sid); err != nil {
		return err
	}
	if _, err := b.cli.run(ctx, "scontrol", "update", "JobId="+sid, "Partition="+part, "NodeList=", "ExcNodeList=", "StartTime=now"); err != nil {
		return err
	}
	b.mu.Lock()
	// (id is the berth or the SLURM ID: callers have either.)
	if t := b.jobs[b.berthIDLocked(sid)]; t != nil {
		t.movedBack = time.Now()
	}
	b.mu.Unlock()
	if _, err := b.cli.run(ctx, "scontrol", "release", sid); err != nil && !strings.Contains(err.Error(), "not held") {
		return err
	}
	return nil
}

// requeueGap is how long after a requeue's hand-back (moveBack) a bind of
// the job waits. A requeue revokes the job's credential on the nodes it
// ran on, and slurmd refuses a launch whose credential is not newer than
// the revocation, to the second ("Job credential revoked": the new run
// ends FAILED at once, found by TestIntegrationBindRightAfterLatePreemption
// in CI). SLURM itself delays a requeued job by its credential lifetime
// (120 s), which moveBack clears; two seconds put the new run's
// credential past the revocation's second, with a second for slurmd to
// have acted on the requeue.
const requeueGap = 2 * time.Second

// waitRequeueGap waits until requeueGap has passed since job was last
// handed back after a requeue (at once for any other job). Nothing is
// applied while it waits: a ctx done first is a refusal.
func (b *Backend) waitRequeueGap(ctx context.Context, job string) error {
	b.mu.Lock()
	var wait time.Duration
	if t := b.jobs[job]; t != nil && !t.movedBack.IsZero() {
		wait = requeueGap - time.Since(t.movedBack)
	}
	b.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	if err := (backends.RealClock{}).Sleep(ctx, wait); err != nil {
		return fmt.Errorf("%w: job %s, handed back after a requeue, is bound %v after it at the earliest: %w", backends.ErrRefused, job, requeueGap, err)
	}
	return nil
}

var (
	_ backends.Backend    = (*Backend)(nil)
	_ backends.GangBinder = (*Backend)(nil)
)
