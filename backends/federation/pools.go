package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// AnyPool in the pools a job names (Federation.Submit) means every pool
// may take it: the engine chooses among them.
const AnyPool = "*"

// AnyQueue is the leaf queue QuotaTree adds for jobs any pool may take:
// it has no quota of its own and borrows what the pools leave idle.
const AnyQueue = "any-pool"

// DefaultCohort is the cohort QuotaTree puts the pools' queues under.
const DefaultCohort = "federation"

// SplitGPUs splits total GPUs among pools by quotas (shares of the
// whole, 0..1), rounding by largest remainder so that the parts add up to
// total x the sum of the quotas, rounded (all of total when the quotas add
// up to 1). Ties go to the earlier pool. Negative or NaN quotas count as 0.
func SplitGPUs(total int, quotas []float64) []int {
	out := make([]int, len(quotas))
	if total <= 0 || len(quotas) == 0 {
		return out
	}
	var sum float64
	exact := make([]float64, len(quotas))
	for i, q := range quotas {
		if q < 0 || math.IsNaN(q) {
			q = 0
		}
		exact[i] = q * float64(total)
		sum += q
	}
	want := int(math.Round(math.Min(sum, 1) * float64(total)))
	got := 0
	for i, x := range exact {
		out[i] = int(math.Floor(x + 1e-9))
		got += out[i]
	}
	order := make([]int, len(quotas))
	for i := range order {
		order[i] = i
	}
	frac := func(i int) float64 { return exact[i] - float64(out[i]) }
	sort.SliceStable(order, func(a, b int) bool { return frac(order[a]) > frac(order[b]) })
	for k := 0; got < want && k < len(order); k++ {
		out[order[k]]++
		got++
	}
	return out
}

// TotalGPUs is the GPUs of every physical host the federation knows, each
// counted once (a host shared by two pools is one host). Zero before
// Cluster.
func (f *Federation) TotalGPUs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, h := range f.hosts {
		n += h.gpus
	}
	return n
}

// PoolGPUs returns the GPUs each pool owns now, by the federation's books:
// a host counts for its owner only (a host being moved still counts for
// the pool it leaves, until the move is done). Every pool is in the map.
func (f *Federation) PoolGPUs() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.members))
	for _, m := range f.members {
		out[m.Name] = 0
	}
	for _, h := range f.hosts {
		out[h.owner] += h.gpus
	}
	return out
}

// Quotas returns each pool's quota (its target share of the GPUs), with
// the defaults applied (DefaultQuotas).
func (f *Federation) Quotas() map[string]float64 {
	out := make(map[string]float64, len(f.members))
	for _, m := range f.members {
		out[m.Name] = m.Quota
	}
	return out
}

// QuotaTreeOptions tunes Federation.QuotaTree.
type QuotaTreeOptions struct {
	// Cohort is the name of the cohort above the pools' queues; default
	// DefaultCohort.
	Cohort string
	// FromOwnership: each pool's nominal quota is the GPUs it owns now
	// (PoolGPUs) instead of its quota's share of all GPUs (SplitGPUs).
	FromOwnership bool
	// NoBorrowing: a pool's queue may not use more than its own nominal
	// quota (BorrowingLimit 0); default: it borrows what the others leave
	// idle in the cohort.
	NoBorrowing bool
}

// QuotaTree returns the federation's pools as a queue tree for
// engine.Config.Queues: under one cohort, a leaf queue per pool, named
// after it, whose nominal GPU quota (queue.GPUMilli) is the pool's quota's
// share of all GPUs (SplitGPUs of TotalGPUs: 60% / 40% by default), plus
// AnyQueue with no quota of its own for jobs any pool may take. Jobs of a
// pool are charged to its queue when Config.PoolQueues is set.
//
// The engine's tree is fixed when the engine is built. A node move
// changes at once which nodes a pool's jobs can use (ownership), not the
// nominal quotas: those follow the moves at the next start, when the tree
// is built again (with FromOwnership, from the ownership then). Call it
// after Cluster (before, it returns ErrInvalidConfig: no GPUs known).
func (f *Federation) QuotaTree(opt QuotaTreeOptions) (queue.TreeSpec, error) {
	total := f.TotalGPUs()
	if total == 0 {
		return queue.TreeSpec{}, fmt.Errorf("%w: QuotaTree: no GPUs known (call Cluster first)", ErrInvalidConfig)
	}
	cohort := opt.Cohort
	if cohort == "" {
		cohort = DefaultCohort
	}
	var nominal []int
	if opt.FromOwnership {
		owned := f.PoolGPUs()
		for _, m := range f.members {
			nominal = append(nominal, owned[m.Name])
		}
	} else {
		qs := make([]float64, len(f.members))
		for i, m := range f.members {
			qs[i] = m.Quota
		}
		nominal = SplitGPUs(total, qs)
	}
	spec := queue.TreeSpec{Cohorts: []queue.CohortSpec{{Name: cohort}}}
	for i, m := range f.members {
		if m.Name == cohort || m.Name == AnyQueue {
			return queue.TreeSpec{}, fmt.Errorf("%w: QuotaTree: pool %q has the name of the cohort or of AnyQueue", ErrInvalidConfig, m.Name)
		}
		q := queue.Quota{Nominal: queue.WholeGPUs(int64(nominal[i]))}
		if opt.NoBorrowing {
			q.BorrowingLimit = queue.Cap(0)
		}
		spec.Queues = append(spec.Queues, queue.QueueSpec{Name: m.Name, Cohort: cohort,
			Weight: math.Max(m.Quota, 1e-3), Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: q}})
	}
	spec.Queues = append(spec.Queues, queue.QueueSpec{Name: AnyQueue, Cohort: cohort,
		Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: {}}})
	if _, err := queue.NewTree(spec); err != nil {
		return queue.TreeSpec{}, fmt.Errorf("%w: QuotaTree: %w", ErrInvalidConfig, err)
	}
	return spec, nil
}

// Partitions returns one engine partition per pool, named after it, of
// the nodes labelled LabelPool=pool (engine.SiteConfig.Partitions). Jobs
// submitted with Submit to several pools name these partitions, and the
// engine places each in one of them.
func (f *Federation) Partitions() []engine.Partition {
	out := make([]engine.Partition, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, engine.Partition{Name: m.Name, Selector: map[string]string{LabelPool: m.Name}})
	}
	return out
}

// Launcher is the optional interface a member backend implements to run
// jobs submitted to the federation itself (Federation.Submit) rather than
// to the member's own system: when the engine binds such a job on one of
// the member's nodes, the federation launches it there first, then binds
// it. The member's own event stream must not report a launched job as
// submitted again (the federation drops such a report); it reports its
// end as for any job.
type Launcher interface {
	// LaunchJob creates j in this system, ready to be bound. Called once
	// per bind attempt; idempotent for a job already launched here.
	LaunchJob(ctx context.Context, j *queue.Job) error
	// WithdrawJob removes a launched job whose bind failed (it was not
	// started), so that it may be launched elsewhere.
	WithdrawJob(ctx context.Context, job string) error
}

// ErrNoLauncher: Submit named a pool whose member cannot run jobs
// submitted to the federation (it does not implement Launcher).
var ErrNoLauncher = errors.New("federation: member cannot launch submitted jobs")

// Submit adds a job submitted to the federation itself, naming the pools
// that may take it: one pool, several, or AnyPool (every pool). Each
// pool's member must be a Launcher (ErrNoLauncher). With one pool
// the job is pinned to it by a selector, as the members' own jobs are;
// with several, it names their partitions (j.Partitions; the engine must
// have Partitions in its Site config, else it refuses the job) and the
// engine chooses among them. The job reaches the engine through Next as a
// submission at the clock's now. j is not changed.
//
// Demand: a job of one pool counts in that pool's pending demand for the
// rebalancer; a job several pools may take does not (it needs no node to
// move: the engine places it where there is room).
//
// Errors: ErrInvalidJob-wrapping queue errors are not checked here (the
// engine checks the job); ErrUnknownNode for an unknown pool, ErrNoLauncher
// for a pool whose member is not a Launcher, ErrInvalidConfig for a
// duplicate job ID or no pools.
func (f *Federation) Submit(j *queue.Job, pools ...string) error {
	if j == nil || j.ID == "" {
		return fmt.Errorf("%w: Submit: a job with an ID is needed", ErrInvalidConfig)
	}
	if len(pools) == 0 {
		return fmt.Errorf("%w: Submit %s: no pools named (AnyPool for any)", ErrInvalidConfig, j.ID)
	}
	var names []string
	for _, p := range pools {
		if p == AnyPool {
			names = names[:0]
			for _, m := range f.members {
				names = append(names, m.Name)
			}
			break
		}
		if f.byName[p] == nil {
			return fmt.Errorf("%w: Submit %s: no pool %q", ErrUnknownNode, j.ID, p)
		}
		if !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	for _, p := range names {
		if _, ok := f.byName[p].Backend.(Launcher); !ok {
			return fmt.Errorf("%w: Submit %s: pool %s", ErrNoLauncher, j.ID, p)
		}
	}
	var sub *queue.Job
	if len(names) == 1 {
		sub = pinJob(j, names[0])
		if f.cfg.PoolQueues {
			sub.Queue = names[0]
		}
	} else {
		c := *j
		c.Partitions = names
		if f.cfg.PoolQueues {
			c.Queue = AnyQueue
		}
		sub = &c
	}
	f.mu.Lock()
	if _, dup := f.own[j.ID]; dup {
		f.mu.Unlock()
		return fmt.Errorf("%w: Submit: job %s already submitted", ErrInvalidConfig, j.ID)
	}
	f.own[j.ID] = ownJob{job: sub, pools: names}
	f.mu.Unlock()
	if len(names) == 1 {
		f.notePending(names[0], sub)
	}
	f.push(engine.Submitted(f.cfg.Clock.Now(), sub))
	return nil
}

// ownJob is a job submitted with Submit.
type ownJob struct {
	job      *queue.Job
	pools    []string
	launched string // pool it is launched in; "" none
}

// launch launches a job of the federation's own in pool mem before a bind
// there; other jobs: nothing. It returns whether it launched it now (so a
// failed bind withdraws it).
func (f *Federation) launch(ctx context.Context, mem *member, job string) (bool, error) {
	f.mu.Lock()
	oj, ok := f.own[job]
	f.mu.Unlock()
	if !ok {
		return false, nil
	}
	if !slices.Contains(oj.pools, mem.Name) {
		return false, fmt.Errorf("job %s may not run in pool %s (pools %v)", job, mem.Name, oj.pools)
	}
	if oj.launched == mem.Name {
		return false, nil
	}
	l, _ := mem.Backend.(Launcher)
	if l == nil {
		return false, fmt.Errorf("%w: pool %s", ErrNoLauncher, mem.Name)
	}
	if oj.launched != "" {
		if prev, _ := f.byName[oj.launched].Backend.(Launcher); prev != nil {
			if err := prev.WithdrawJob(ctx, job); err != nil {
				return false, fmt.Errorf("withdraw job %s from pool %s: %w", job, oj.launched, err)
			}
		}
	}
	if err := l.LaunchJob(ctx, oj.job); err != nil {
		return false, fmt.Errorf("launch job %s in pool %s: %w", job, mem.Name, err)
	}
	f.mu.Lock()
	oj.launched = mem.Name
	f.own[job] = oj
	f.mu.Unlock()
	return true, nil
}

// unlaunch withdraws a job launched for a bind that failed.
func (f *Federation) unlaunch(ctx context.Context, mem *member, job string) {
	l, _ := mem.Backend.(Launcher)
	if l == nil {
		return
	}
	if err := l.WithdrawJob(ctx, job); err != nil {
		f.cfg.Logger.Warn("federation: withdraw after a failed bind", "job", job, "pool", mem.Name, "err", err)
		return
	}
	f.mu.Lock()
	if oj, ok := f.own[job]; ok && oj.launched == mem.Name {
		oj.launched = ""
		f.own[job] = oj
	}
	f.mu.Unlock()
}

// ownSubmitted reports whether a member's submission is of a job the
// federation launched there (its own Submit already told the engine).
func (f *Federation) ownSubmitted(job string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.own[job]
	return ok
}

// forgetOwn drops an own job that ended.
func (f *Federation) forgetOwn(job string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.own, job)
}

// Cancel withdraws a job submitted with Submit that no pool has launched
// yet: the engine gets its cancellation through Next. A job launched in a
// pool belongs to that pool's system from then on, and is cancelled there
// (backends.ErrRefused here); an unknown job is ErrUnknownJob.
func (f *Federation) Cancel(job string) error {
	f.mu.Lock()
	oj, ok := f.own[job]
	if ok && oj.launched == "" {
		delete(f.own, job)
		delete(f.pending, job)
	}
	f.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("%w: %s was not submitted to the federation (or has ended)", ErrUnknownJob, job)
	case oj.launched != "":
		return fmt.Errorf("%w: job %s runs in pool %s: cancel it in that system", backends.ErrRefused, job, oj.launched)
	}
	f.push(engine.Cancelled(f.cfg.Clock.Now(), job))
	return nil
}
