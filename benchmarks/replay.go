package benchmarks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/benchmarks/metrics"
	"github.com/berthsched/berth/benchmarks/workload"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// ErrReplay is wrapped by the errors of the replay suite's configuration
// (unknown policy, bad cluster shape, bad estimate factor).
var ErrReplay = errors.New("benchmarks: invalid replay")

// ReplayPolicies lists the policy names of the comparison suite, in the
// order tables show them:
//
//	fifo          strict priority (FIFO among equals), no backfill
//	easy          FIFO with EASY backfill (one reservation)
//	conservative  FIFO with conservative backfill (a reservation per blocked job)
//	fairshare     dominant resource share across queues (DRS) with EASY backfill
//	fairtree      SLURM's Fair Tree across queues with EASY backfill
//	multifactor   SLURM's multifactor priority (age 1, fair share 1) with EASY backfill
var ReplayPolicies = []string{"fifo", "easy", "conservative", "fairshare", "fairtree", "multifactor"}

// DefaultReplayPolicies are the policies `berth replay` compares when none
// are named.
var DefaultReplayPolicies = []string{"fifo", "easy", "conservative", "fairshare"}

// ReplayEngineConfig maps a policy name onto the engine's ordering policy
// and backfill mode. Cluster and queues are left empty. Errors wrap
// ErrReplay.
func ReplayEngineConfig(policy string) (engine.Config, error) {
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
		return c, fmt.Errorf("%w: unknown policy %q (want one of %s)", ErrReplay, policy, strings.Join(ReplayPolicies, ", "))
	}
	return c, nil
}

// ReplayCluster is the shape of a replay's cluster: Nodes nodes of
// GPUsPerNode GPUs in Racks racks of equal size (Racks 0 or 1: no rack
// level).
type ReplayCluster struct {
	Nodes       int
	GPUsPerNode int
	Racks       int
}

// GPUs is the cluster's GPU count.
func (c ReplayCluster) GPUs() int { return c.Nodes * c.GPUsPerNode }

// Spec returns the cluster's topology. Errors wrap ErrReplay.
func (c ReplayCluster) Spec() (topo.Spec, error) {
	switch {
	case c.Nodes < 1 || c.Nodes > 1<<20:
		return topo.Spec{}, fmt.Errorf("%w: nodes must be in 1..%d, got %d", ErrReplay, 1<<20, c.Nodes)
	case c.GPUsPerNode < 1 || c.GPUsPerNode > 64:
		return topo.Spec{}, fmt.Errorf("%w: GPUs per node must be in 1..64, got %d", ErrReplay, c.GPUsPerNode)
	case c.Racks < 0 || c.Racks > c.Nodes:
		return topo.Spec{}, fmt.Errorf("%w: racks must be in 0..%d (the node count), got %d", ErrReplay, c.Nodes, c.Racks)
	case c.Racks > 1 && c.Nodes%c.Racks != 0:
		return topo.Spec{}, fmt.Errorf("%w: %d nodes do not split into %d racks of equal size", ErrReplay, c.Nodes, c.Racks)
	}
	if c.Racks <= 1 {
		return topo.Uniform(nil, nil, c.Nodes, c.GPUsPerNode, "GPU"), nil
	}
	return topo.Uniform([]string{"rack"}, []int{c.Racks}, c.Nodes/c.Racks, c.GPUsPerNode, "GPU"), nil
}

// ReplayConfig is one replay: a workload on a cluster under a policy.
type ReplayConfig struct {
	// Workload names the workload in rows and plots.
	Workload string
	// Jobs are the workload's jobs; Replay does not modify them.
	Jobs    []workload.Job
	Cluster ReplayCluster
	Policy  string // one of ReplayPolicies
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
	// Observe, if set, sees every cycle (tests read reservations from it).
	Observe func(backends.Cycle)
}

// ReplayResult is what one replay measured.
type ReplayResult struct {
	Workload string
	Result   metrics.Result
	// Series samples utilization and queue length over time.
	Series []metrics.Sample
	// Waits are the sorted waits of the finished jobs (a CDF's points).
	Waits []time.Duration
	// Dropped counts workload jobs left out: no whole GPUs (CPU-only or
	// shared-GPU pods), or more GPUs than the cluster has.
	Dropped int
	// Reserved counts the jobs that held a backfill reservation;
	// Delayed lists those that started after the start their first
	// reservation promised.
	Reserved int
	Delayed  []ReservationDelay
	// Violations are impossible binds the simulator refused (a GPU booked
	// twice): always empty for a correct engine.
	Violations []error
}

// ReservationDelay is a reserved job that started later than promised.
type ReservationDelay struct {
	Job      string
	Promised time.Duration // first reservation start, from the trace start
	Started  time.Duration
}

// replayBase is the wall time of trace offset 0.
var replayBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// replayJob is a workload job converted for the engine.
type replayJob struct {
	q        *queue.Job
	runtime  time.Duration
	minPer   int // smallest GPU count the job asks of one node
	gpuMilli int64
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

// replayJobs converts the workload: IDs by position (so ties in FIFO
// order follow the trace), queue by user, else queue, else "default".
func replayJobs(cfg *ReplayConfig) (jobs []replayJob, queues []string, dropped int, err error) {
	src := cfg.Jobs
	if f := cfg.EstimateFactor; f != 0 {
		if math.IsNaN(f) || f < 1 {
			return nil, nil, 0, fmt.Errorf("%w: estimate factor %v is not 0 or >= 1", ErrReplay, f)
		}
		src = slices.Clone(src)
		if err := workload.InflateEstimates(src, cfg.EstimateSeed, f); err != nil {
			return nil, nil, 0, fmt.Errorf("%w: %w", ErrReplay, err)
		}
	}
	total := cfg.Cluster.GPUs()
	per := cfg.Cluster.GPUsPerNode
	width := len(strconv.Itoa(len(src)))
	seen := map[string]bool{}
	jobs = make([]replayJob, 0, len(src))
	for i := range src {
		w := &src[i]
		g := w.GPUs
		if g <= 0 || g > total || w.Runtime <= 0 {
			dropped++
			continue
		}
		qn := cmp.Or(w.User, w.Queue, "default")
		if !seen[qn] {
			seen[qn] = true
			queues = append(queues, qn)
		}
		est := w.Estimate
		if est <= 0 {
			est = w.Runtime
		}
		req := replayRequest(g, per)
		minPer := req.Groups[len(req.Groups)-1].GPUsPerMember
		jobs = append(jobs, replayJob{
			q: &queue.Job{
				ID: "j" + fmt.Sprintf("%0*d", width, i), Queue: qn, Submit: replayBase.Add(w.Submit),
				Request: req, RuntimeEstimate: est,
			},
			runtime: w.Runtime, minPer: minPer, gpuMilli: int64(g) * 1000,
		})
	}
	slices.Sort(queues)
	return jobs, queues, dropped, nil
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

// Replay runs cfg's workload through the engine on a simulated cluster,
// driven by a backends.Runner, and measures it. It is deterministic: the
// same config gives the same result.
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayResult, error) {
	res := ReplayResult{Workload: cfg.Workload}
	ecfg, err := ReplayEngineConfig(cfg.Policy)
	if err != nil {
		return res, err
	}
	spec, err := cfg.Cluster.Spec()
	if err != nil {
		return res, err
	}
	jobs, queues, dropped, err := replayJobs(&cfg)
	if err != nil {
		return res, err
	}
	res.Dropped = dropped
	ecfg.Queues = replayQueues(queues, cfg.Cluster.GPUs())
	// The clocks start at the first submission (offsets may be negative).
	ecfg.Start = replayBase
	for _, j := range jobs {
		if j.q.Submit.Before(ecfg.Start) {
			ecfg.Start = j.q.Submit
		}
	}
	s, err := sim.New(sim.Config{Cluster: spec, Start: ecfg.Start})
	if err != nil {
		return res, err
	}
	minPer := make(map[string]int, len(jobs))
	for _, j := range jobs {
		if err := s.Submit(j.q, j.runtime); err != nil {
			return res, err
		}
		minPer[j.q.ID] = j.minPer
	}

	ob := newReplayObserver(cfg, s, minPer)
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: ecfg, Backend: s, Clock: s, Parallelism: 1, Observe: ob.observe,
	})
	if err != nil {
		return res, err
	}
	if err := r.Run(ctx); err != nil {
		return res, fmt.Errorf("benchmarks: replay %s/%s: %w", cfg.Workload, cfg.Policy, err)
	}

	outs := s.Outcomes()
	mo := make([]metrics.Outcome, len(outs))
	var firstSubmit, lastEnd time.Duration
	for i, o := range outs {
		m := metrics.Outcome{
			ID: o.ID, Submit: o.Submit.Sub(replayBase), GPUMilli: jobs[i].gpuMilli,
			Started: o.Started, Finished: o.Finished, Preemptions: o.Preemptions, PreemptedRun: o.LostRun,
		}
		if o.Started {
			m.Start = o.Start.Sub(replayBase)
		}
		if o.Finished {
			m.End = o.End.Sub(replayBase)
			lastEnd = max(lastEnd, m.End)
		}
		if i == 0 || m.Submit < firstSubmit {
			firstSubmit = m.Submit
		}
		mo[i] = m
		if p, ok := ob.promised[o.ID]; ok && o.Started && o.Start.After(p) {
			res.Delayed = append(res.Delayed, ReservationDelay{Job: o.ID, Promised: p.Sub(replayBase), Started: o.Start.Sub(replayBase)})
		}
	}
	in := metrics.Input{Policy: cfg.Policy, ClusterGPUs: cfg.Cluster.GPUs(), Jobs: mo}
	if res.Result, err = metrics.Compute(in); err != nil {
		return res, err
	}
	res.Result.FragFreeGPUs, res.Result.LargestPlaceableGang = ob.fragmentation()
	res.Reserved = len(ob.promised)
	res.Violations = s.Violations()
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

// replayObserver follows a replay cycle by cycle: reservations promised,
// and the time-weighted fragmentation.
type replayObserver struct {
	cfg      ReplayConfig
	sim      *sim.Sim
	minPer   map[string]int
	promised map[string]time.Time // first reservation start per job

	buf                  []int
	last                 time.Time
	started              bool
	frag, largest        float64 // current values
	fragArea, largestSum float64 // integrals over time (GPU-seconds)
	span                 float64
}

func newReplayObserver(cfg ReplayConfig, s *sim.Sim, minPer map[string]int) *replayObserver {
	return &replayObserver{cfg: cfg, sim: s, minPer: minPer, promised: map[string]time.Time{}}
}

func (o *replayObserver) observe(c backends.Cycle) {
	for _, r := range c.Ready.Reservations {
		if r.Preemption {
			continue
		}
		if _, ok := o.promised[r.Job]; !ok {
			o.promised[r.Job] = r.Start
		}
	}
	st := o.sim.State(o.buf)
	o.buf = st.NodeFree
	o.integrate(c.Ready.At)
	o.frag, o.largest = o.measure(st.NodeFree, c.Ready.Pending)
	if o.cfg.Progress != nil {
		o.cfg.Progress(st.Finished)
	}
	if o.cfg.Observe != nil {
		o.cfg.Observe(c)
	}
}

func (o *replayObserver) integrate(now time.Time) {
	if o.started {
		dt := now.Sub(o.last).Seconds()
		o.fragArea += o.frag * dt
		o.largestSum += o.largest * dt
		o.span += dt
	}
	o.last, o.started = now, true
}

// measure returns the free GPUs no pending job could use (those on nodes
// with fewer free GPUs than the smallest per-node ask of any pending job;
// zero when nothing is pending) and the largest gang that could still be
// placed in the replay's member shapes (whole free nodes plus the freest
// other node, or the freest node alone).
func (o *replayObserver) measure(free []int, pending []engine.PendingStatus) (frag, largest float64) {
	per := o.cfg.Cluster.GPUsPerNode
	whole, best, bestPartial := 0, 0, 0
	for _, f := range free {
		best = max(best, f)
		if f == per {
			whole++
		} else {
			bestPartial = max(bestPartial, f)
		}
	}
	largest = float64(max(best, whole*per+bestPartial))
	if len(pending) == 0 {
		return 0, largest
	}
	ask := per + 1
	for _, p := range pending {
		if m, ok := o.minPer[p.Job]; ok && m < ask {
			ask = m
			if ask == 1 {
				break
			}
		}
	}
	n := 0
	for _, f := range free {
		if f < ask {
			n += f
		}
	}
	return float64(n), largest
}

// fragmentation returns the time averages over the replay.
func (o *replayObserver) fragmentation() (float64, int) {
	if o.span <= 0 {
		return o.frag, int(o.largest)
	}
	return o.fragArea / o.span, int(math.Round(o.largestSum / o.span))
}

// ReplayMany runs the replays of cfgs, at most parallel at a time (zero:
// GOMAXPROCS), and returns their results in the order of cfgs.
func ReplayMany(ctx context.Context, cfgs []ReplayConfig, parallel int) ([]ReplayResult, error) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]ReplayResult, len(cfgs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range cfgs {
		g.Go(func() error {
			r, err := Replay(gctx, cfgs[i])
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
