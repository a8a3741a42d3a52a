package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/replay/metrics"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// ErrInvalid is wrapped by the errors of the replay suite's configuration
// (unknown policy, bad cluster shape, bad estimate factor).
var ErrInvalid = errors.New("replay: invalid configuration")

// Policies returns the policy names of the comparison suite, in the
// order tables show them:
//
//	fifo          strict priority (FIFO among equals), no backfill
//	easy          FIFO with EASY backfill (one reservation)
//	conservative  FIFO with conservative backfill (a reservation per blocked job)
//	fairshare     dominant resource share across queues (DRS) with EASY backfill
//	fairtree      SLURM's Fair Tree across queues with EASY backfill
//	multifactor   SLURM's multifactor priority (age 1, fair share 1) with EASY backfill
func Policies() []string {
	return []string{"fifo", "easy", "conservative", "fairshare", "fairtree", "multifactor"}
}

// DefaultPolicies returns the policies `berth replay` compares when none
// are named.
func DefaultPolicies() []string { return []string{"fifo", "easy", "conservative", "fairshare"} }

// EngineConfig maps a policy name onto the engine's ordering policy
// and backfill mode. Cluster and queues are left empty. Errors wrap
// ErrInvalid.
func EngineConfig(policy string) (engine.Config, error) {
	var c engine.Config
	switch policy {
	case "fifo":
		c.Policy = queue.StrictPriority()
	case "easy":
		c.Policy = queue.StrictPriority()
		c.Backfill.Mode = engine.BackfillEASY
	case "conservative":
		c.Policy = queue.StrictPriority()
		c.Backfill.Mode = engine.BackfillConservative
	case "fairshare":
		c.Policy = queue.DRS()
		c.Backfill.Mode = engine.BackfillEASY
	case "fairtree":
		c.Policy = queue.FairTree()
		c.Backfill.Mode = engine.BackfillEASY
	case "multifactor":
		p, err := queue.Multifactor(queue.Weights{Age: 1, FairShare: 1})
		if err != nil {
			return c, err
		}
		c.Policy = p
		c.Backfill.Mode = engine.BackfillEASY
	default:
		return c, fmt.Errorf("%w: unknown policy %q (want one of %s)", ErrInvalid, policy, strings.Join(Policies(), ", "))
	}
	return c, nil
}

// Cluster is the shape of a replay's cluster: Nodes nodes of
// GPUsPerNode GPUs in Racks racks of equal size (Racks 0 or 1: no rack
// level).
type Cluster struct {
	Nodes       int
	GPUsPerNode int
	Racks       int
}

// GPUs is the cluster's GPU count.
func (c Cluster) GPUs() int { return c.Nodes * c.GPUsPerNode }

// Spec returns the cluster's topology. Errors wrap ErrInvalid.
func (c Cluster) Spec() (topo.Spec, error) {
	switch {
	case c.Nodes < 1 || c.Nodes > 1<<20:
		return topo.Spec{}, fmt.Errorf("%w: nodes must be in 1..%d, got %d", ErrInvalid, 1<<20, c.Nodes)
	case c.GPUsPerNode < 1 || c.GPUsPerNode > 64:
		return topo.Spec{}, fmt.Errorf("%w: GPUs per node must be in 1..64, got %d", ErrInvalid, c.GPUsPerNode)
	case c.Racks < 0 || c.Racks > c.Nodes:
		return topo.Spec{}, fmt.Errorf("%w: racks must be in 0..%d (the node count), got %d", ErrInvalid, c.Nodes, c.Racks)
	case c.Racks > 1 && c.Nodes%c.Racks != 0:
		return topo.Spec{}, fmt.Errorf("%w: %d nodes do not split into %d racks of equal size", ErrInvalid, c.Nodes, c.Racks)
	}
	if c.Racks <= 1 {
		return topo.Uniform(nil, nil, c.Nodes, c.GPUsPerNode, "GPU"), nil
	}
	return topo.Uniform([]string{"rack"}, []int{c.Racks}, c.Nodes/c.Racks, c.GPUsPerNode, "GPU"), nil
}

// Config is one replay: a workload on a cluster under a policy.
type Config struct {
	// Workload names the workload in rows and plots.
	Workload string
	// Jobs are the workload's jobs; Run does not modify them.
	Jobs []workload.Job
	// Source, when set, is the workload instead of Jobs (which must then
	// be empty), for workloads too large to hold, such as a generated
	// month (workload.SyntheticJobs). Run reads it three times (to sort it
	// out, to hand each job to the simulator when it arrives, and for the
	// asks of jobs that never started) and holds none of its jobs. Its
	// jobs must come in order of Submit, and EstimateFactor must be 0 or 1;
	// errors wrap ErrInvalid.
	Source  JobSource
	Cluster Cluster
	Policy  string // one of Policies
	// EstimateFactor sets the runtime estimates the engine sees: 1, exact
	// (the actual runtime); above 1, the runtime times a factor drawn
	// uniformly in [1, EstimateFactor] from EstimateSeed
	// (workload.InflateEstimates); 0, the workload's own estimates (the
	// runtime where it has none).
	EstimateFactor float64
	EstimateSeed   uint64
	// Step is the bucket of the time series; zero: a 200th of the replay.
	Step time.Duration
	// Progress, if set, is called after every cycle with the number of
	// jobs that finished so far (on the replay's goroutine).
	Progress func(finished int)
	// Done, if set, is called once when Run returns (progress bars count
	// replays with it).
	Done func()
	// Observe, if set, sees every cycle (tests read reservations from it).
	// Its Ready.Pending lists only the jobs the cycle's walk reached (the
	// engine's default, see engine.Config.EagerPending) unless AllPending
	// or a Recorder is set (the Runner then completes it with the
	// statuses after the walk's cut, computed on demand);
	// View.EachPending lists every pending job.
	Observe func(backends.Cycle)
	// AllPending sets engine.Config.EagerPending: every cycle walks and
	// explains every pending job (Observe's Ready.Pending is whole), at a
	// cost that grows with the backlog. The results are the same.
	AllPending bool
	// Spec, when it has nodes, is the cluster instead of Cluster's uniform
	// shape: heterogeneous nodes, MIG nodes, shared GPUs, host resources
	// (see OpenbSpec and SyntheticMIG). Jobs are then split over nodes of
	// its largest GPU count, and members ask for the jobs' CPU and memory.
	Spec topo.Spec
	// TickInterval, when positive, runs a cycle at least this often
	// (backends.RunnerConfig.TickInterval): MIG plans are weighed against
	// the time blocked jobs have waited, which only cycles see.
	TickInterval time.Duration
	// Recorder, if set, receives the replay's job records
	// (backends.RunnerConfig.Recorder), e.g. an accounting.Writer.
	Recorder backends.Recorder
	// DisableCaches runs the engine with every cycle cache off
	// (engine.Config.DisableCaches): the same results, slower. Tests use
	// it to check that the caches change nothing.
	DisableCaches bool
	// Placement, when set, is one of Placements: berth's placement with
	// gangs preferring one rack, a topology-blind one, or a Kueue-like
	// greedy one (see PlacementBerth). Empty: the engine's default
	// placement, no preferred level.
	Placement string
	// Price, when set (Price.On), lengthens each run by the racks and
	// blocks it spans (see Price); Result.Price says what it did.
	Price Price
}

// fractional reports whether the cluster takes fractional members: MIG
// nodes, shared nodes, or ShareFreeGPUs.
func replayFractional(sp *topo.Spec) bool {
	if sp.ShareFreeGPUs {
		return true
	}
	for i := range sp.Nodes {
		if sp.Nodes[i].MIG || sp.Nodes[i].Sharing.Mode != mig.Exclusive {
			return true
		}
	}
	return false
}

// replaySpec returns the replay's cluster, its GPU count and the largest
// GPU count of a node.
func replaySpec(cfg *Config) (spec topo.Spec, gpus, per int, err error) {
	if len(cfg.Spec.Nodes) == 0 {
		spec, err = cfg.Cluster.Spec()
		return spec, cfg.Cluster.GPUs(), cfg.Cluster.GPUsPerNode, err
	}
	if err := cfg.Spec.Validate(); err != nil {
		return spec, 0, 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for i := range cfg.Spec.Nodes {
		gpus += cfg.Spec.Nodes[i].GPUs
		per = max(per, cfg.Spec.Nodes[i].GPUs)
	}
	return cfg.Spec, gpus, per, nil
}

// Result is what one replay measured.
type Result struct {
	Workload string
	Result   metrics.Result
	// Series samples utilization and queue length over time.
	Series []metrics.Sample
	// Waits are the sorted waits of the finished jobs (a CDF's points).
	Waits []time.Duration
	// Dropped counts workload jobs left out: no GPUs (CPU-only pods), a
	// fraction of a GPU on a cluster that takes none (or a fraction of
	// several GPUs), more GPUs than the cluster has, or no runtime;
	// NoRuntime is the part of Dropped left out for the last reason
	// (openb pods that never ran).
	Dropped   int
	NoRuntime int
	// DroppedBy counts Dropped by reason: "no runtime", "no GPUs",
	// "fraction the cluster cannot share" (a fraction of several GPUs, or
	// a cluster without shared GPUs), "larger than the cluster".
	DroppedBy map[string]int
	// ClusterGPUs is the cluster's GPU count; utilization is GPU milli
	// held (whole GPUs, shares, MIG instances by compute fraction) over
	// ClusterGPUs x 1000.
	ClusterGPUs int
	// Fractional counts the replayed jobs with fractional members.
	Fractional int
	// MIGDecided counts the MIG reconfigurations the engine emitted;
	// Sim the simulator's MIG and share counters (changes applied and
	// refused, instances created and destroyed, shares bound).
	MIGDecided int
	Sim        sim.Stats
	// Reserved counts the jobs that held a backfill reservation;
	// Delayed lists those that started after the start their first
	// reservation promised.
	Reserved int
	Delayed  []ReservationDelay
	// Violations are impossible binds and MIG changes the simulator
	// refused (a GPU, MIG instance or share booked twice, a bind on an
	// instance that does not exist, a change destroying an instance in
	// use): always empty for a correct engine.
	Violations []error
	// GPUMicroseconds is the usage of the finished jobs' runs: GPU
	// thousandths held x whole milliseconds run, summed (what accounting
	// charges for the same replay).
	GPUMicroseconds int64
	// Price summarises the price of placement (zero unless Config.Price
	// is on).
	Price PriceStats
	// Cycles counts the engine cycles the replay ran. MeanPending is the
	// time-weighted mean of the pending jobs (submitted, not started: the
	// backlog) over the replay, from the first cycle to the last;
	// MaxPending the largest count a cycle saw.
	Cycles      int
	MeanPending float64
	MaxPending  int
}

// ReservationDelay is a reserved job that started later than promised.
type ReservationDelay struct {
	Job      string
	Promised time.Duration // first reservation start, from the trace start
	Started  time.Duration
}

// replayBase is the wall time of trace offset 0.
var replayBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// JobSource is a workload read in order as often as needed, the same jobs
// every time, instead of held in a slice (Config.Source).
type JobSource interface {
	// Len is the number of jobs.
	Len() int
	// Each calls yield with every job and its index (0 to Len-1), in
	// order, until yield returns false. The job is valid during the call
	// only.
	Each(yield func(i int, j *workload.Job) bool)
}

// replayIn is a workload's jobs as the replay takes them: which are
// kept, in which order they arrive, and each converted for the engine only
// when the simulator asks for it (job), so that a month's replay holds no
// queue.Job, gang request or submission event for a job before it arrives.
type replayIn struct {
	src    []workload.Job
	source JobSource // instead of src
	exact  bool      // estimates are runtimes
	total  int       // the cluster's GPUs
	per    int       // the largest GPU count of a node
	custom bool      // Config.Spec: host resources per member
	frac   bool      // the cluster takes fractional members
	width  int       // digits of the job IDs
	// keep lists the workload index of every kept job, in workload order
	// (the order of the outcomes); arrive, when not nil, the positions in
	// keep in order of submission (stable: ties in workload order), when
	// the workload is not sorted by submission.
	keep   []int32
	arrive []int32
	// first is the earliest submission of a kept job (zero: none kept).
	first time.Duration
}

// each calls fn with every job of the workload, in order.
func (in *replayIn) each(fn func(i int, w *workload.Job) bool) {
	if in.source != nil {
		in.source.Each(fn)
		return
	}
	for i := range in.src {
		if !fn(i, &in.src[i]) {
			return
		}
	}
}

// pos is the position in keep of the job that arrives n-th.
func (in *replayIn) pos(n int) int {
	if in.arrive != nil {
		return int(in.arrive[n])
	}
	return n
}

// share reports whether w becomes one fractional member.
func (in *replayIn) share(w *workload.Job) bool { return in.frac && w.Shared() && w.NumGPU == 1 }

// job converts the kept job at position k of keep (Jobs, not Source): the
// engine's job and its runtime.
func (in *replayIn) job(k int) (*queue.Job, time.Duration) {
	i := int(in.keep[k])
	return in.convert(i, &in.src[i])
}

// convert converts w, job i of the workload: the engine's job and its
// runtime.
func (in *replayIn) convert(i int, w *workload.Job) (*queue.Job, time.Duration) {
	g := w.GPUs
	qn := cmp.Or(w.User, w.Queue, "default")
	est := w.Estimate
	if in.exact || est <= 0 {
		est = w.Runtime
	}
	var req gang.Request
	if in.share(w) {
		req = gang.Request{Groups: []gang.Group{{Members: 1, GPUMilli: w.GPUMilli}}}
	} else {
		req = replayRequest(g, in.per)
	}
	if in.custom {
		// Host resources per member, split like the GPUs.
		n := 0
		for _, gr := range req.Groups {
			n += gr.Members
		}
		for k := range req.Groups {
			req.Groups[k].CPUMilli = w.CPUMilli / int64(n)
			req.Groups[k].MemoryMiB = w.MemoryMiB / int64(n)
		}
	}
	return &queue.Job{
		ID: jobID(i, in.width), Queue: qn, User: w.User, Submit: replayBase.Add(w.Submit),
		Request: req, RuntimeEstimate: est,
	}, w.Runtime
}

// jobID is the replay's ID of job i of the workload: "j" and i with
// leading zeros to width digits ("j%0*d"), in one allocation.
func jobID(i, width int) string {
	var b [48]byte
	d := strconv.AppendInt(b[24:24], int64(i), 10)
	z := width - len(d)
	if i < 0 || z > 23 {
		return "j" + fmt.Sprintf("%0*d", width, i)
	}
	z = max(z, 0)
	for k := 24 - z; k < 24; k++ {
		b[k] = '0'
	}
	b[23-z] = 'j'
	return string(b[23-z : 24+len(d)])
}

// gpuMilli is what w asks for, in GPU thousandths.
func (in *replayIn) gpuMilli(w *workload.Job) int64 {
	if in.share(w) {
		return int64(w.GPUMilli)
	}
	return int64(w.GPUs) * 1000
}

// replayRequest splits g whole GPUs into members of at most per GPUs:
// full nodes, then one member with the rest.
func replayRequest(g, per int) gang.Request {
	if g <= per {
		return gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: g}}}
	}
	groups := []gang.Group{{Members: g / per, GPUsPerMember: per}}
	if r := g % per; r > 0 {
		groups = append(groups, gang.Group{Members: 1, GPUsPerMember: r})
	}
	return gang.Request{Groups: groups}
}

// replayJobs sorts out the workload: IDs by position (so ties in FIFO
// order follow the trace), queue by user, else queue, else "default".
// Share pods (a fraction of one GPU) become one fractional member where
// the cluster takes them. The jobs are converted as they arrive
// (replayIn.job).
func replayJobs(cfg *Config, by map[string]int) (in *replayIn, queues []string, dropped, noRuntime int, err error) {
	src := cfg.Jobs
	exact := cfg.EstimateFactor == 1 // estimates are runtimes: no copy of the jobs
	n := len(src)
	if cfg.Source != nil {
		switch {
		case len(src) > 0:
			return nil, nil, 0, 0, fmt.Errorf("%w: both Jobs and Source are set", ErrInvalid)
		case cfg.EstimateFactor != 0 && !exact:
			return nil, nil, 0, 0, fmt.Errorf("%w: estimate factor %v with a Source (want 0 or 1)", ErrInvalid, cfg.EstimateFactor)
		}
		n = cfg.Source.Len()
	}
	if f := cfg.EstimateFactor; f != 0 && !exact {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 1 {
			return nil, nil, 0, 0, fmt.Errorf("%w: estimate factor %v is not 0 or >= 1", ErrInvalid, f)
		}
		src = slices.Clone(src)
		if err := workload.InflateEstimates(src, cfg.EstimateSeed, f); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	spec, total, per, err := replaySpec(cfg)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if n < 0 || n > math.MaxInt32 {
		return nil, nil, 0, 0, fmt.Errorf("%w: %d jobs (at most %d)", ErrInvalid, n, math.MaxInt32)
	}
	in = &replayIn{src: src, source: cfg.Source, exact: exact, total: total, per: per, custom: len(cfg.Spec.Nodes) > 0,
		frac: replayFractional(&spec), width: len(strconv.Itoa(n))}
	seen := map[string]bool{}
	in.keep = make([]int32, 0, n)
	sorted := true
	var last time.Duration
	in.each(func(i int, w *workload.Job) bool {
		if i != len(in.keep)+dropped || i >= n {
			err = fmt.Errorf("%w: the source gave job %d after %d jobs (Len %d)", ErrInvalid, i, len(in.keep)+dropped, n)
			return false
		}
		g := w.GPUs
		if w.Runtime <= 0 {
			dropped++
			noRuntime++
			by["no runtime"]++
			return true
		}
		if (g <= 0 && !in.share(w)) || g > total {
			dropped++
			switch {
			case g > total:
				by["larger than the cluster"]++
			case w.Shared():
				by["fraction the cluster cannot share"]++
			default:
				by["no GPUs"]++
			}
			return true
		}
		qn := cmp.Or(w.User, w.Queue, "default")
		if !seen[qn] {
			seen[qn] = true
			queues = append(queues, qn)
		}
		if len(in.keep) > 0 && w.Submit < last {
			sorted = false
		}
		if len(in.keep) == 0 || w.Submit < in.first {
			in.first = w.Submit
		}
		last = w.Submit
		in.keep = append(in.keep, int32(i))
		return true
	})
	if err == nil && len(in.keep)+dropped != n {
		err = fmt.Errorf("%w: the source gave %d jobs, not Len %d", ErrInvalid, len(in.keep)+dropped, n)
	}
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if !sorted && in.source != nil {
		return nil, nil, 0, 0, fmt.Errorf("%w: the source's jobs are not in order of Submit", ErrInvalid)
	}
	if !sorted {
		in.arrive = make([]int32, len(in.keep))
		for k := range in.arrive {
			in.arrive[k] = int32(k)
		}
		slices.SortStableFunc(in.arrive, func(a, b int32) int {
			return cmp.Compare(src[in.keep[a]].Submit, src[in.keep[b]].Submit)
		})
	}
	slices.Sort(queues)
	return in, queues, dropped, noRuntime, nil
}

// replayQueues is one cohort holding twice the cluster's GPUs, with a
// queue per user (nominal 0, borrowing unbounded): DRS shares are each
// queue's usage over the cohort (in the same order as over the cluster),
// and quota never binds, so every blocked job is blocked by capacity.
// (With the cohort at exactly the cluster's GPUs, quota and capacity run
// out together and the engine, which reserves only for capacity-blocked
// jobs, would hand the reservation of a job that is short of quota to the
// next one, then take it back when a finish frees both: that delays the
// second reservation, though backfill did not.)
func replayQueues(names []string, gpus int) queue.TreeSpec {
	ts := queue.TreeSpec{Cohorts: []queue.CohortSpec{{
		Name:  "cluster",
		Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(2 * int64(gpus))}},
	}}}
	for _, n := range names {
		ts.Queues = append(ts.Queues, queue.QueueSpec{Name: n, Cohort: "cluster"})
	}
	return ts
}

// Run runs cfg's workload through the engine on a simulated cluster,
// driven by a backends.Runner, and measures it. It is deterministic: the
// same config gives the same result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Done != nil {
		defer cfg.Done()
	}
	res := Result{Workload: cfg.Workload}
	ecfg, err := EngineConfig(cfg.Policy)
	if err != nil {
		return res, err
	}
	spec, gpus, per, err := replaySpec(&cfg)
	if err != nil {
		return res, err
	}
	res.DroppedBy = map[string]int{}
	wl, queues, dropped, noRuntime, err := replayJobs(&cfg, res.DroppedBy)
	if err != nil {
		return res, err
	}
	res.Dropped, res.NoRuntime, res.ClusterGPUs = dropped, noRuntime, gpus
	pl, err := newPlaced(&cfg, spec)
	if err != nil {
		return res, err
	}
	spec, ecfg.Scorer = pl.spec, pl.scorer
	ecfg.Queues = replayQueues(queues, gpus)
	ecfg.DisableCaches = cfg.DisableCaches
	// The Runner completes Ready.Pending for the recorder (each waiting
	// job's reason) and for Observe when one is set.
	ecfg.EagerPending = cfg.AllPending
	// Nothing of the replay's reads the bookings a View keeps for its
	// explanations (the observer reads the pending sets and the cycle's
	// reservations): without that copy, each cycle books in place instead
	// of copying every page of state it writes, about half the bytes a
	// month's replay allocated (engine.Config.BareViews; the decisions
	// are the same). An Observe of the caller's sees whole Views.
	ecfg.BareViews = cfg.Observe == nil
	// The observer reads of each View what its cycle decided (pending
	// sets, reservations): no View published again when its binds are
	// applied (engine.Config.CycleViewsOnly).
	ecfg.CycleViewsOnly = cfg.Observe == nil
	// The observer reads each cycle's View (its pending sets) before the
	// next cycle and keeps none: each cycle's queue snapshot reuses the
	// storage of the one two cycles before (queue.PendingConfig.
	// RecycleSnapshots; a quarter of the bytes a month's replay allocated).
	// An Observe of the caller's may keep Views: it gets its own.
	ecfg.Pending.RecycleSnapshots = cfg.Observe == nil
	// The clocks start at the first submission (offsets may be negative).
	ecfg.Start = replayBase
	if t := replayBase.Add(wl.first); len(wl.keep) > 0 && t.Before(ecfg.Start) {
		ecfg.Start = t
	}
	s, err := sim.New(sim.Config{Cluster: spec, Start: ecfg.Start, RuntimeFactor: pl.factor()})
	if err != nil {
		return res, err
	}
	// The jobs arrive as their time comes: the simulator asks for each
	// one when its submission is the next event.
	next := 0
	var pull func() (int, *workload.Job, bool)
	if wl.source != nil {
		var stop func()
		pull, stop = iter.Pull2(iter.Seq2[int, *workload.Job](wl.source.Each))
		defer stop()
	}
	var serr error
	s.Stream(func() (*queue.Job, time.Duration, bool) {
		if next == len(wl.keep) {
			return nil, 0, false
		}
		var q *queue.Job
		var runtime time.Duration
		if pull == nil {
			q, runtime = wl.job(wl.pos(next))
		} else {
			// Sorted: the kept jobs arrive in the source's order.
			for want := int(wl.keep[next]); q == nil; {
				i, w, ok := pull()
				if !ok {
					serr = fmt.Errorf("%w: the source ended before job %d, which it gave before", ErrInvalid, want)
					return nil, 0, false
				}
				if i == want {
					q, runtime = wl.convert(i, w)
				}
			}
		}
		next++
		pl.request(&q.Request)
		if q.Request.Groups[0].GPUMilli > 0 {
			res.Fractional++
		}
		return q, runtime, true
	})

	ob := newObserver(cfg, s, per)
	// The simulator answers every bind at once (no timeouts, no late
	// calls), so the Runner's poll of its running jobs finds nothing to
	// settle; it only forgets the jobs that ended. Once a minute of
	// virtual time it read every running job of a month's replay 43,200
	// times (two thirds of its CPU time); once an hour, it was still 14%
	// of the CPU and of the bytes allocated (a copy of every running
	// job's members from the simulator and from the engine, each poll).
	// Every six hours it was still 6% of a month's CPU (the copies of
	// the running jobs' members, and the engine's for each): every day
	// now. The jobs it forgets are at most a day's ended jobs (about
	// 120,000 IDs in the month at load 95).
	r, err := backends.NewRunner(backends.RunnerConfig{
		// The simulator answers every call at once: no goroutine, context
		// or timer per call (backends.RunnerConfig.Inline).
		Engine: ecfg, Backend: s, Clock: s, Parallelism: 1, Inline: true, RecycleEvents: true, Observe: ob.observe, TickInterval: cfg.TickInterval,
		Recorder: cfg.Recorder, ReconcileInterval: 24 * time.Hour,
		ObserveWalkedOnly: true, // the observer reads reservations and the pending sets
	})
	if err != nil {
		return res, err
	}
	if err := r.Run(ctx); err != nil {
		return res, fmt.Errorf("replay: %s/%s: %w", cfg.Workload, cfg.Policy, err)
	}
	if serr != nil {
		return res, fmt.Errorf("replay: %s/%s: %w", cfg.Workload, cfg.Policy, serr)
	}

	res.Violations = s.Violations()
	res.Sim = s.Stats()
	// The outcomes, read once from the simulator's records (no copy of
	// them all), in workload order: the simulator's is arrival order.
	mo := make([]metrics.Outcome, len(wl.keep))
	var firstSubmit, lastEnd time.Duration
	n, unstarted := 0, 0
	var rerr error
	s.EachOutcome(func(o *sim.Outcome) {
		if n >= len(mo) {
			rerr = fmt.Errorf("replay: the simulator has more outcomes than the %d jobs streamed", len(mo))
			return
		}
		i := wl.pos(n)
		n++
		var held int64 // the ask, filled in below, for a job that never started
		if o.Started {
			held = o.Milli // what the run held: a MIG instance may be larger than the ask
		} else {
			unstarted++
		}
		m := metrics.Outcome{
			ID: o.ID, Submit: o.Submit.Sub(replayBase), GPUMilli: held,
			Started: o.Started, Finished: o.Finished, Preemptions: o.Preemptions, PreemptedRun: o.LostRun,
		}
		if o.Started {
			m.Start = o.Start.Sub(replayBase)
		}
		if o.Finished {
			m.End = o.End.Sub(replayBase)
			lastEnd = max(lastEnd, m.End)
			res.GPUMicroseconds += held * o.End.Sub(o.Start).Milliseconds()
		}
		if i == 0 || m.Submit < firstSubmit {
			firstSubmit = m.Submit
		}
		mo[i] = m
		if p, ok := ob.promised[o.ID]; ok && o.Started && o.Start.After(p) {
			res.Delayed = append(res.Delayed, ReservationDelay{Job: o.ID, Promised: p.Sub(replayBase), Started: o.Start.Sub(replayBase)})
		}
	})
	if rerr == nil && n != len(mo) {
		rerr = fmt.Errorf("replay: %d outcomes for %d jobs", n, len(mo))
	}
	if rerr != nil {
		return res, rerr
	}
	ob.sim = nil // the simulator's records are garbage from here on
	if unstarted > 0 {
		k := 0
		wl.each(func(i int, w *workload.Job) bool {
			if k < len(wl.keep) && int(wl.keep[k]) == i {
				if !mo[k].Started {
					mo[k].GPUMilli = wl.gpuMilli(w)
				}
				k++
			}
			return k < len(wl.keep)
		})
	}
	in := metrics.Input{Policy: cfg.Policy, ClusterGPUs: gpus, Jobs: mo}
	if res.Result, err = metrics.Compute(in); err != nil {
		return res, err
	}
	res.Result.FragFreeGPUs, res.Result.LargestPlaceableGang = ob.fragmentation()
	res.Cycles, res.MaxPending = ob.cycles, ob.maxPending
	res.MeanPending = ob.meanPending()
	res.Reserved = len(ob.promised)
	res.MIGDecided = ob.migDecided
	res.Price = pl.stats()
	res.Waits = metrics.Waits(mo)
	step := cfg.Step
	if step <= 0 {
		step = max(time.Second, (lastEnd-firstSubmit)/200)
	}
	if len(mo) > 0 {
		if res.Series, err = metrics.Series(in, step); err != nil {
			return res, err
		}
	}
	return res, nil
}

// observer follows a replay cycle by cycle: reservations promised,
// and the time-weighted fragmentation.
type observer struct {
	cfg      Config
	sim      *sim.Sim
	per      int                  // the largest GPU count of a node
	promised map[string]time.Time // first reservation start per job

	migDecided int

	buf                  []int
	last                 time.Time
	started              bool
	frag, largest        float64 // current values
	fragArea, largestSum float64 // integrals over time (GPU-seconds)
	span                 float64

	cycles, pending, maxPending int     // pending: the current backlog
	pendingArea                 float64 // its integral over time (job-seconds)
}

func newObserver(cfg Config, s *sim.Sim, per int) *observer {
	return &observer{cfg: cfg, sim: s, per: per, promised: map[string]time.Time{}}
}

func (o *observer) observe(c backends.Cycle) {
	for _, r := range c.Ready.Reservations {
		if r.Preemption {
			continue
		}
		if _, ok := o.promised[r.Job]; !ok {
			o.promised[r.Job] = r.Start
		}
	}
	o.migDecided += len(c.Ready.MIG)
	st := o.sim.Summary(o.buf)
	o.buf = st.FreeHist
	o.integrate(c.Ready.At)
	o.frag, o.largest = o.measure(st.FreeHist, c.View)
	o.cycles++
	o.pending = len(c.Ready.Pending) + c.Ready.Unwalked
	o.maxPending = max(o.maxPending, o.pending)
	if o.cfg.Progress != nil {
		o.cfg.Progress(st.Finished)
	}
	if o.cfg.Observe != nil {
		o.cfg.Observe(c)
	}
}

func (o *observer) integrate(now time.Time) {
	if o.started {
		dt := now.Sub(o.last).Seconds()
		o.fragArea += o.frag * dt
		o.largestSum += o.largest * dt
		o.pendingArea += float64(o.pending) * dt
		o.span += dt
	}
	o.last, o.started = now, true
}

// measure returns the free GPUs no pending job could use (those on nodes
// with fewer free GPUs than the smallest per-node ask of any pending job;
// zero when nothing is pending) and the largest gang that could still be
// placed in the replay's member shapes (whole free nodes plus the freest
// other node, or the freest node alone).
//
// hist[f] is the number of nodes with f free GPUs (sim.State.FreeHist):
// a cycle costs O(GPUs per node), not O(nodes).
func (o *observer) measure(hist []int, v *engine.View) (frag, largest float64) {
	per := o.per
	whole, best, bestPartial := 0, 0, 0
	for f, c := range hist {
		if c == 0 {
			continue
		}
		best = max(best, f)
		if f == per {
			whole += c
		} else {
			bestPartial = max(bestPartial, f)
		}
	}
	largest = float64(max(best, whole*per+bestPartial))
	// The smallest per-member ask among the pending jobs (all of them:
	// the View's pending sets include those after the walk's cut), in
	// O(1): reading the jobs cost a thousand a cycle and more where the
	// one-GPU jobs waited behind the larger ones (the 120% month). A
	// replay's requests ask their smallest member last (replayRequest),
	// and a fractional job counts as asking 1.
	k, some := v.MinPendingPerMember()
	if !some {
		return 0, largest
	}
	ask := max(1, k)
	n := 0
	for f, c := range hist {
		if f < ask {
			n += f * c
		}
	}
	return float64(n), largest
}

// fragmentation returns the time averages over the replay.
func (o *observer) fragmentation() (float64, int) {
	if o.span <= 0 {
		return o.frag, int(o.largest)
	}
	return o.fragArea / o.span, int(math.Round(o.largestSum / o.span))
}

// meanPending returns the time-weighted mean backlog over the replay.
func (o *observer) meanPending() float64 {
	if o.span <= 0 {
		return float64(o.pending)
	}
	return o.pendingArea / o.span
}

// RunMany runs the replays of cfgs, at most parallel at a time (zero:
// GOMAXPROCS), and returns their results in the order of cfgs.
func RunMany(ctx context.Context, cfgs []Config, parallel int) ([]Result, error) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]Result, len(cfgs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range cfgs {
		g.Go(func() error {
			r, err := Run(gctx, cfgs[i])
			out[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// MeanResult averages results of one policy (over seeds): every numeric
// field is the mean, LargestPlaceableGang and the counts rounded. The
// policy is that of the first result.
func MeanResult(rs []metrics.Result) metrics.Result {
	if len(rs) == 0 {
		return metrics.Result{}
	}
	if len(rs) == 1 {
		return rs[0]
	}
	n := float64(len(rs))
	var m metrics.Result
	m.Policy = rs[0].Policy
	var wait, p95, jct, mk float64
	var pre, jobs, fin, lg float64
	for _, r := range rs {
		m.Utilization += r.Utilization / n
		m.AvgBSLD += r.AvgBSLD / n
		m.FragFreeGPUs += r.FragFreeGPUs / n
		wait += float64(r.AvgWait) / n
		p95 += float64(r.P95Wait) / n
		jct += float64(r.AvgJCT) / n
		mk += float64(r.Makespan) / n
		pre += float64(r.Preemptions) / n
		jobs += float64(r.Jobs) / n
		fin += float64(r.Finished) / n
		lg += float64(r.LargestPlaceableGang) / n
	}
	m.AvgWait, m.P95Wait, m.AvgJCT, m.Makespan = time.Duration(wait), time.Duration(p95), time.Duration(jct), time.Duration(mk)
	m.Preemptions, m.Jobs, m.Finished = int(math.Round(pre)), int(math.Round(jobs)), int(math.Round(fin))
	m.LargestPlaceableGang = int(math.Round(lg))
	return m
}

// OpenbSpec builds the cluster of the openb node list for a time replay of
// its pods: one node per listed node with GPUs (CPU-only nodes are left
// out, as are the CPU-only pods), with its GPU model, CPU and memory, and
// topo.Spec.ShareFreeGPUs, the GPU-share model of the trace (a share pod
// takes part of a free GPU, which is then time-sliced with exact
// thousandths). Errors wrap ErrInvalid.
func OpenbSpec(nodes []workload.Node) (topo.Spec, error) {
	sp := topo.Spec{ShareFreeGPUs: true}
	for _, n := range nodes {
		if n.GPUs <= 0 {
			continue
		}
		sp.Nodes = append(sp.Nodes, topo.NodeSpec{Name: n.Name, GPUs: n.GPUs, GPUModel: cmp.Or(n.Model, "GPU"),
			CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB})
	}
	if len(sp.Nodes) == 0 {
		return sp, fmt.Errorf("%w: the openb node list has no GPU node", ErrInvalid)
	}
	if err := sp.Validate(); err != nil {
		return sp, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return sp, nil
}

// SyntheticMIGConfig configures SyntheticMIG.
type SyntheticMIGConfig struct {
	Seed uint64
	// Nodes of 8 H100-80GB GPUs: the first half exclusive (whole-GPU
	// jobs), the rest in MIG mode, every GPU split into seven 1g.10gb
	// instances to begin with. At least 2.
	Nodes int
	// WholeJobs are drawn by workload.Synthetic for the exclusive half
	// (load 0.9); FracJobs fractional jobs arrive over the same span.
	WholeJobs, FracJobs int
}

// DefaultSyntheticMIG is the workload of `--trace synthetic-mig`: 16 nodes
// (64 exclusive GPUs and 64 in MIG mode), 300 whole-GPU jobs and 1,500
// fractional ones.
func DefaultSyntheticMIG() SyntheticMIGConfig {
	return SyntheticMIGConfig{Seed: 42, Nodes: 16, WholeJobs: 300, FracJobs: 1500}
}

// syntheticMIGMilli are the fractional asks and their weights: on an H100
// they resolve to 1g (100), 2g (250), 3g (400) and 4g (500) instances, so
// a cluster split into 1g instances needs re-layouts for most of them.
var syntheticMIGMilli = []workload.SizeWeight{{GPUs: 100, Weight: 4}, {GPUs: 250, Weight: 3}, {GPUs: 400, Weight: 2}, {GPUs: 500, Weight: 1}}

// SyntheticMIG generates a mixed workload and its cluster: whole-GPU jobs
// after ITP cluster04 on the exclusive nodes, and fractional jobs (GPU
// thousandths resolving to 1g..4g MIG instances) arriving uniformly over
// the same span, with log-uniform runtimes over a 24x range scaled for an
// offered load of about 0.8 of the MIG GPUs (in GPU thousandths asked;
// about 1 to 23 hours with the defaults). Seeded and deterministic.
// Errors wrap ErrInvalid.
func SyntheticMIG(c SyntheticMIGConfig) ([]workload.Job, topo.Spec, error) {
	if c.Nodes < 2 || c.Nodes > 1<<16 || c.WholeJobs < 1 || c.FracJobs < 0 {
		return nil, topo.Spec{}, fmt.Errorf("%w: synthetic MIG: %d nodes (want >= 2), %d whole and %d fractional jobs", ErrInvalid, c.Nodes, c.WholeJobs, c.FracJobs)
	}
	plain := c.Nodes / 2
	var sp topo.Spec
	for i := range c.Nodes {
		n := topo.NodeSpec{Name: fmt.Sprintf("n%03d", i), GPUs: 8, GPUModel: "H100-80GB"}
		if i >= plain {
			n.Name = fmt.Sprintf("m%03d", i)
			n.MIG, n.MIGLayout = true, "1g,1g,1g,1g,1g,1g,1g"
		}
		sp.Nodes = append(sp.Nodes, n)
	}
	wc := workload.DefaultSynthetic()
	wc.Seed, wc.Jobs, wc.ClusterGPUs = c.Seed, c.WholeJobs, plain*8
	jobs, err := workload.Synthetic(wc)
	if err != nil {
		return nil, sp, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Fractional jobs arrive over the whole jobs' arrival span; their
	// runtimes are log-uniform over a 24x range scaled so that the
	// offered load on the MIG GPUs is about 0.8 (the mean of log-uniform
	// [lo, hi] is (hi-lo)/ln(hi/lo)).
	var span time.Duration
	for _, j := range jobs {
		span = max(span, j.Submit)
	}
	span = max(span, time.Hour)
	wsum, msum := 0, 0
	for _, w := range syntheticMIGMilli {
		wsum += w.Weight
		msum += w.Weight * w.GPUs
	}
	meanMilli := float64(msum) / float64(wsum)
	lo, hi := float64(time.Minute), float64(24*time.Minute)
	if c.FracJobs > 0 {
		want := 0.8 * float64(span) * float64((c.Nodes-plain)*8) / (float64(c.FracJobs) * meanMilli / 1000)
		lo = max(float64(time.Minute), want*math.Log(24)/23)
		hi = 24 * lo
	}
	rng := workload.NewSplitMix64(c.Seed ^ 0x6d6967) // "mig"
	for i := range c.FracJobs {
		at := time.Duration(rng.Draw(uint64(span/time.Second))) * time.Second
		k := rng.Draw(uint64(wsum))
		milli := 0
		for _, w := range syntheticMIGMilli {
			if k < uint64(w.Weight) {
				milli = w.GPUs
				break
			}
			k -= uint64(w.Weight)
		}
		u := float64(rng.Draw(1<<53)) / (1 << 53)
		rt := max(time.Second, time.Duration(lo*math.Exp(u*math.Log(hi/lo))).Round(time.Second))
		jobs = append(jobs, workload.Job{ID: fmt.Sprintf("f%05d", i), Submit: at, Runtime: rt, Estimate: rt,
			NumGPU: 1, GPUMilli: milli, Queue: fmt.Sprintf("q%d", i%8)})
	}
	slices.SortStableFunc(jobs, func(a, b workload.Job) int { return cmp.Compare(a.Submit, b.Submit) })
	return jobs, sp, nil
}
