package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// LevelPool is the topology level the federation puts above every member's
// levels: one domain per pool.
const LevelPool = "pool"

// Labels the federation puts on every node of its merged inventory.
const (
	// LabelPool names the pool (member) a node copy belongs to. Jobs of a
	// pool carry it as a selector, so they are placed in their pool only.
	LabelPool = "berth.io/pool"
	// LabelHost names the physical node (the member's own node name).
	LabelHost = "berth.io/host"
)

// Pool is one member backend.
type Pool struct {
	// Name is the pool's name: the domain of LevelPool and the prefix of
	// its nodes' names ("pool/node"). No "/" in it.
	Name    string
	Backend backends.Backend
	// Quota is the pool's target share of the GPUs (0..1). When every pool
	// leaves it zero: 0.6 for the first of two pools and 0.4 for the
	// second (training / inference), or equal shares.
	Quota float64
}

// Config configures a Federation.
type Config struct {
	Pools     []Pool
	Rebalance RebalanceConfig
	// PreemptOnReclaim lets a reclaim (Federation.Reclaim, and the
	// rebalancer's drain moves of busy nodes) empty the node by requeueing
	// the jobs that run on it in the lending system, when that member is a
	// Requeuer, instead of waiting for them to end. Off: a busy node moves
	// only once its jobs have ended (or the move is rolled back after
	// DrainTimeout).
	PreemptOnReclaim bool
	// DrainTimeout bounds how long a lent node may stay busy before the
	// move is rolled back; default 10 minutes.
	DrainTimeout time.Duration
	// PollInterval is the wait between checks of a draining node; default
	// 5 seconds. A drain is given DrainTimeout/PollInterval checks.
	PollInterval time.Duration
	// Clock sleeps between checks and stamps the federation's events;
	// default backends.RealClock.
	Clock backends.Clock
	// Logger receives every move with its reason; default slog.Default().
	Logger *slog.Logger
	// PoolQueues charges every job of a pool to the leaf queue named
	// after the pool (QuotaTree builds that tree), whatever queue its
	// system gave it; jobs any of several pools may take go to AnyQueue.
	// Off: jobs keep their own queues.
	PoolQueues bool
	// Demand, when set, adds what only the engine knows to each round
	// (reserved starts), by pool. It may read a Runner's View.
	Demand func() map[string]PoolDemand
	// Autoscale is the node autoscaling config the Runner is given
	// (RunnerConfig.Autoscale, pools named AutoscalePool(pool,
	// memberpool), labelled by PinAutoscalePools): the shape, GPU model
	// and domain level of each pool, which a scale-up needs to borrow a
	// node of another pool that fits (Federation.ScaleUp). Nil, or a pool
	// not in it: its scale-ups borrow nothing and go to its member's
	// system. A pool not named after a pool of the federation is an
	// error.
	Autoscale *autoscale.Config
}

type member struct {
	Pool
	lender NodeLender
}

type host struct {
	name     string
	pools    []string // pools that know it, in config order
	owner    string
	moving   bool
	movingTo string
	gen      uint64 // lender calls begun and ended on it (odd: one in flight)
	gpus     int
	jobs     map[string]bool // jobs on it, in the owner's system
	lastMove time.Time
	labels   map[string]map[string]string // pool -> labels of its copy
	model    map[string]string            // pool -> GPU model of its copy
	domains  map[string]map[string]string // pool -> level -> domain of its copy
}

// Federation is a backends.Backend over member backends, each a named
// pool. See the package documentation.
type Federation struct {
	cfg     Config
	members []*member
	byName  map[string]*member

	mu       sync.Mutex
	hosts    map[string]*host
	jobPool  map[string]string
	jobHosts map[string][]string
	pending  map[string]pendingJob
	own      map[string]ownJob // jobs submitted with Submit
	moves    []MoveRecord
	wg       sync.WaitGroup
	// When RunRebalancer looks next, and its next periodic round (zero:
	// not running).
	nextCheck, nextRound time.Time

	feed    *backends.Feed
	evMu    sync.Mutex
	closed  int
	errs    []error
	started bool
	last    time.Time
	prov    ProvisionStats // guarded by mu
}

type pendingJob struct {
	pool     string
	gpuHours float64
}

// MoveRecord is one move that was tried, with how it ended.
type MoveRecord struct {
	Move
	At  time.Time
	Err error // nil: done
	// Preempted are the jobs requeued to empty the node (Reclaim with
	// Config.PreemptOnReclaim).
	Preempted []string
}

// New checks cfg and returns a federation. Members are not called until
// Cluster.
func New(cfg Config) (*Federation, error) {
	if len(cfg.Pools) == 0 {
		return nil, fmt.Errorf("%w: no pools", ErrInvalidConfig)
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = backends.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"Hysteresis", cfg.Rebalance.Hysteresis}, {"MinShare", cfg.Rebalance.MinShare}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) {
			return nil, fmt.Errorf("%w: Rebalance.%s must be a finite number, got %v", ErrInvalidConfig, r.name, r.v)
		}
	}
	cfg.Rebalance = cfg.Rebalance.WithDefaults()
	cfg.Pools = slices.Clone(cfg.Pools)
	if cfg.Autoscale != nil {
		ac := *cfg.Autoscale
		ac.Pools = slices.Clone(ac.Pools)
		if _, err := autoscale.Decide(ac, time.Time{}, nil, nil); err != nil {
			return nil, fmt.Errorf("%w: Autoscale: %w", ErrInvalidConfig, err)
		}
		for _, ap := range ac.Pools {
			pool, mp, ok := strings.Cut(ap.Name, "/")
			if !ok || mp == "" || !slices.ContainsFunc(cfg.Pools, func(p Pool) bool { return p.Name == pool }) {
				return nil, fmt.Errorf("%w: Autoscale: pool %q is not named pool/memberpool after a pool of the federation", ErrInvalidConfig, ap.Name)
			}
		}
		cfg.Autoscale = &ac
	}
	var sum float64
	for _, p := range cfg.Pools {
		if p.Quota < 0 || p.Quota > 1 || math.IsNaN(p.Quota) {
			return nil, fmt.Errorf("%w: pool %q: quota %v not in 0..1", ErrInvalidConfig, p.Name, p.Quota)
		}
		sum += p.Quota
	}
	if sum > 1+1e-9 {
		return nil, fmt.Errorf("%w: quotas add up to %v", ErrInvalidConfig, sum)
	}
	if sum == 0 {
		for i := range cfg.Pools {
			cfg.Pools[i].Quota = DefaultQuotas(len(cfg.Pools))[i]
		}
	}
	f := &Federation{cfg: cfg, byName: map[string]*member{}, hosts: map[string]*host{},
		jobPool: map[string]string{}, jobHosts: map[string][]string{}, pending: map[string]pendingJob{},
		own: map[string]ownJob{}, feed: backends.NewFeed()}
	for _, p := range cfg.Pools {
		if p.Name == "" || strings.Contains(p.Name, "/") {
			return nil, fmt.Errorf("%w: pool name %q (empty or with '/')", ErrInvalidConfig, p.Name)
		}
		if p.Backend == nil {
			return nil, fmt.Errorf("%w: pool %q has no backend", ErrInvalidConfig, p.Name)
		}
		if _, dup := f.byName[p.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate pool %q", ErrInvalidConfig, p.Name)
		}
		m := &member{Pool: p}
		m.lender, _ = p.Backend.(NodeLender)
		f.members = append(f.members, m)
		f.byName[p.Name] = m
	}
	return f, nil
}

// DefaultQuotas is the default split of the GPUs among n pools: 60/40
// for two (training first), equal shares otherwise.
func DefaultQuotas(n int) []float64 {
	if n == 2 {
		return []float64{0.6, 0.4}
	}
	q := make([]float64, n)
	for i := range q {
		q[i] = 1 / float64(n)
	}
	return q
}

// NodeName is the federation's name of a member's node: "pool/node".
func NodeName(pool, node string) string { return pool + "/" + node }

// SplitNode splits a federation node name into pool and member node.
func SplitNode(name string) (pool, node string, ok bool) {
	pool, node, ok = strings.Cut(name, "/")
	return pool, node, ok && pool != "" && node != ""
}

func (f *Federation) route(name string) (*member, string, error) {
	p, n, ok := SplitNode(name)
	if !ok {
		return nil, "", fmt.Errorf("%w: %q is not pool/node", ErrUnknownNode, name)
	}
	m := f.byName[p]
	if m == nil {
		return nil, "", fmt.Errorf("%w: no pool %q (node %q)", ErrUnknownNode, p, name)
	}
	return m, n, nil
}

// Cluster merges the members' clusters: every node of pool P is named
// "P/node", labelled LabelPool=P and LabelHost=node, and sits under the
// domain P of the top level LevelPool; the members' levels follow (their
// union, in first-seen order; a node of a member without some level is
// in its pool's own domain there). GPU levels are kept only when every
// member has the same ones.
//
// A node known to several pools (the same host name) gets exactly one
// owner: the first pool, in Config order, where it is schedulable. Every
// other copy is lent (drained, cordoned) there before Cluster returns and
// is cordoned in the merged inventory. A shared node whose member does not
// implement NodeLender is an error (ErrNoLender).
func (f *Federation) Cluster(ctx context.Context) (topo.Spec, error) {
	specs := make([]topo.Spec, len(f.members))
	var levels []string
	sameGPU := true
	for i, m := range f.members {
		sp, err := m.Backend.Cluster(ctx)
		if err != nil {
			return topo.Spec{}, fmt.Errorf("federation: pool %s: %w", m.Name, err)
		}
		specs[i] = sp
		for _, l := range sp.Levels {
			if !slices.Contains(levels, l) {
				levels = append(levels, l)
			}
		}
		if i > 0 && !slices.Equal(sp.GPULevels, specs[0].GPULevels) {
			sameGPU = false
		}
	}
	out := topo.Spec{Levels: append([]string{LevelPool}, levels...)}
	if sameGPU {
		out.GPULevels = slices.Clone(specs[0].GPULevels)
	}
	// The books are built aside and published once every shared node has
	// one owner in the systems too.
	hosts := map[string]*host{}
	type idx struct{ pool, node int }
	var order []idx
	for i, sp := range specs {
		for k, n := range sp.Nodes {
			h := hosts[n.Name]
			if h == nil {
				h = &host{name: n.Name, jobs: map[string]bool{}, labels: map[string]map[string]string{}, gpus: n.GPUs,
					model: map[string]string{}, domains: map[string]map[string]string{}}
				hosts[n.Name] = h
			}
			h.pools = append(h.pools, f.members[i].Name)
			if h.owner == "" && n.State == topo.Ready {
				h.owner = f.members[i].Name
			}
			order = append(order, idx{i, k})
		}
	}
	for _, h := range hosts {
		if h.owner == "" {
			h.owner = h.pools[0]
		}
	}
	// Enforce: every copy but the owner's is lent.
	for i, sp := range specs {
		m := f.members[i]
		for k := range sp.Nodes {
			n := &specs[i].Nodes[k]
			h := hosts[n.Name]
			if len(h.pools) < 2 || h.owner == m.Name {
				continue
			}
			if m.lender == nil {
				return topo.Spec{}, fmt.Errorf("%w: pool %s shares node %s", ErrNoLender, m.Name, n.Name)
			}
			if err := m.lender.LendNode(ctx, n.Name); err != nil {
				return topo.Spec{}, fmt.Errorf("federation: pool %s: lend %s (owned by %s): %w", m.Name, n.Name, h.owner, err)
			}
			if n.State == topo.Ready {
				n.State = topo.Cordoned
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts = hosts
	for _, o := range order {
		m, n := f.members[o.pool], specs[o.pool].Nodes[o.node]
		src := specs[o.pool]
		ns := n
		ns.Name = NodeName(m.Name, n.Name)
		ns.Domains = make([]string, 0, len(out.Levels))
		ns.Domains = append(ns.Domains, m.Name)
		for _, l := range levels {
			if j := slices.Index(src.Levels, l); j >= 0 && j < len(n.Domains) {
				ns.Domains = append(ns.Domains, n.Domains[j])
			} else {
				ns.Domains = append(ns.Domains, m.Name)
			}
		}
		ns.Labels = poolLabels(n.Labels, m.Name, n.Name)
		if !sameGPU {
			ns.GPUDomains = nil
		}
		h := f.hosts[n.Name]
		h.labels[m.Name] = ns.Labels
		h.model[m.Name] = n.GPUModel
		h.domains[m.Name] = map[string]string{}
		for j, l := range src.Levels {
			if j < len(n.Domains) {
				h.domains[m.Name][l] = n.Domains[j]
			}
		}
		out.Nodes = append(out.Nodes, ns)
	}
	return out, nil
}

func poolLabels(l map[string]string, pool, node string) map[string]string {
	out := make(map[string]string, len(l)+2)
	maps.Copy(out, l)
	out[LabelPool] = pool
	out[LabelHost] = node
	return out
}

// Running returns every member's running jobs, on the federation's node
// names.
func (f *Federation) Running(ctx context.Context) ([]backends.RunningJob, error) {
	var out []backends.RunningJob
	for _, m := range f.members {
		rs, err := m.Backend.Running(ctx)
		if err != nil {
			return nil, fmt.Errorf("federation: pool %s: %w", m.Name, err)
		}
		for _, r := range rs {
			r.Members = renameMembers(m.Name, r.Members)
			if r.Job != nil {
				r.Job = f.pin(r.Job, m.Name)
				f.noteRunning(m.Name, r.Job.ID, r.Members)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// RunningNow is backends.RunningReporter: every member's RunningNow, on
// the federation's node names, acting on nothing (no job is pinned or
// noted). It answers only when every member reports: a member without
// RunningNow (or answering errors.ErrUnsupported) makes the whole answer
// errors.ErrUnsupported, since a list that left out a pool's jobs would
// tell the Runner that its unknown binds there did not come through, and
// the Runner would stop them. A member's error is returned, wrapped with
// its pool.
func (f *Federation) RunningNow(ctx context.Context) ([]backends.RunningJob, error) {
	var out []backends.RunningJob
	for _, m := range f.members {
		rr, ok := m.Backend.(backends.RunningReporter)
		if !ok {
			return nil, fmt.Errorf("federation: pool %s reports no running list: %w", m.Name, errors.ErrUnsupported)
		}
		rs, err := rr.RunningNow(ctx)
		if err != nil {
			return nil, fmt.Errorf("federation: pool %s: %w", m.Name, err)
		}
		for _, r := range rs {
			r.Members = renameMembers(m.Name, r.Members)
			out = append(out, r)
		}
	}
	return out, nil
}

func renameMembers(pool string, ms []engine.Member) []engine.Member {
	out := slices.Clone(ms)
	for i := range out {
		out[i].Node = NodeName(pool, out[i].Node)
	}
	return out
}

// pinJob returns a copy of j whose every group selects the nodes of pool:
// a job submitted to one system can only run there.
func pinJob(j *queue.Job, pool string) *queue.Job {
	c := *j
	c.Request.Groups = slices.Clone(j.Request.Groups)
	for i := range c.Request.Groups {
		g := &c.Request.Groups[i]
		sel := make(map[string]string, len(g.Selector)+1)
		maps.Copy(sel, g.Selector)
		sel[LabelPool] = pool
		g.Selector = sel
	}
	return &c
}

// pin is pinJob, charging the job to the pool's queue under PoolQueues.
func (f *Federation) pin(j *queue.Job, pool string) *queue.Job {
	c := pinJob(j, pool)
	if f.cfg.PoolQueues {
		c.Queue = pool
	}
	return c
}

func jobGPUs(r gang.Request) float64 {
	var g float64
	for _, gr := range r.Groups {
		switch {
		case gr.GPUsPerMember > 0:
			g += float64(gr.Members * gr.GPUsPerMember)
		case gr.GPUMilli > 0:
			g += float64(gr.Members*gr.GPUMilli) / 1000
		}
	}
	return g
}

func (f *Federation) notePending(pool string, j *queue.Job) {
	est := j.RuntimeEstimate
	if est <= 0 {
		est = j.RuntimeLimit // a SLURM job's time limit: it runs no longer
	}
	if est <= 0 {
		est = time.Hour
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending[j.ID] = pendingJob{pool: pool, gpuHours: jobGPUs(j.Request) * est.Hours()}
	f.jobPool[j.ID] = pool
}

func (f *Federation) noteRunning(pool, job string, ms []engine.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pending, job)
	f.jobPool[job] = pool
	for _, m := range ms {
		_, n, _ := SplitNode(m.Node)
		if h := f.hosts[n]; h != nil {
			h.jobs[job] = true
			if !slices.Contains(f.jobHosts[job], n) {
				f.jobHosts[job] = append(f.jobHosts[job], n)
			}
		}
	}
}

func (f *Federation) noteEnded(job string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pending, job)
	for _, n := range f.jobHosts[job] {
		if h := f.hosts[n]; h != nil {
			delete(h.jobs, job)
		}
	}
	delete(f.jobHosts, job)
	delete(f.jobPool, job)
}

// checkOwner refuses a bind on a node copy that is not its host's owner,
// or whose host is moving.
func (f *Federation) checkOwner(pool, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hosts[node]
	if h == nil {
		return fmt.Errorf("%w: %w: %s/%s", backends.ErrRefused, ErrUnknownNode, pool, node)
	}
	if h.owner != pool {
		return fmt.Errorf("%w: node %s is owned by pool %s, not %s", backends.ErrRefused, node, h.owner, pool)
	}
	if h.moving {
		return fmt.Errorf("%w: node %s is moving out of pool %s", backends.ErrRefused, node, pool)
	}
	return nil
}

// BindMember routes the bind to the pool that owns m.Node. A node copy
// whose host another pool owns, or that is being lent, is refused.
func (f *Federation) BindMember(ctx context.Context, job string, m engine.Member) error {
	mem, n, err := f.route(m.Node)
	if err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	if err := f.checkOwner(mem.Name, n); err != nil {
		return err
	}
	launched, err := f.launch(ctx, mem, job)
	if err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	lm := m
	lm.Node = n
	if err := mem.Backend.BindMember(ctx, job, lm); err != nil {
		if launched {
			f.unlaunch(ctx, mem, job)
		}
		return err
	}
	f.noteRunning(mem.Name, job, []engine.Member{m})
	return nil
}

// BindGang binds a gang in the one pool that holds all its members (a
// gang across pools is refused): with the member's GangBinder when it has
// one, else member by member, unbinding the bound ones on a failure.
func (f *Federation) BindGang(ctx context.Context, job string, ms []engine.Member) error {
	if len(ms) == 0 {
		return nil
	}
	var mem *member
	local := make([]engine.Member, len(ms))
	for i, m := range ms {
		mm, n, err := f.route(m.Node)
		if err != nil {
			return fmt.Errorf("%w: %w", backends.ErrRefused, err)
		}
		if mem != nil && mm != mem {
			return fmt.Errorf("%w: gang %s spans pools %s and %s", backends.ErrRefused, job, mem.Name, mm.Name)
		}
		mem = mm
		if err := f.checkOwner(mm.Name, n); err != nil {
			return err
		}
		local[i] = m
		local[i].Node = n
	}
	launched, err := f.launch(ctx, mem, job)
	if err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	if gb, ok := mem.Backend.(backends.GangBinder); ok {
		if err := gb.BindGang(ctx, job, local); err != nil {
			if launched {
				f.unlaunch(ctx, mem, job)
			}
			return err
		}
	} else {
		for i, m := range local {
			if err := mem.Backend.BindMember(ctx, job, m); err != nil {
				var errs []error
				for _, b := range local[:i] {
					if uerr := mem.Backend.UnbindMember(ctx, job, b); uerr != nil {
						errs = append(errs, uerr)
					}
				}
				if launched && len(errs) == 0 {
					f.unlaunch(ctx, mem, job)
				}
				return errors.Join(append([]error{err}, errs...)...)
			}
		}
	}
	f.noteRunning(mem.Name, job, ms)
	return nil
}

// UnbindMember routes the unbind to m.Node's pool.
func (f *Federation) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	mem, n, err := f.route(m.Node)
	if err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	lm := m
	lm.Node = n
	if err := mem.Backend.UnbindMember(ctx, job, lm); err != nil {
		return err
	}
	f.mu.Lock()
	if h := f.hosts[n]; h != nil {
		delete(h.jobs, job)
	}
	f.mu.Unlock()
	return nil
}

// Preempt routes the preemption to the pool that runs the victim.
func (f *Federation) Preempt(ctx context.Context, p engine.Preemption) error {
	f.mu.Lock()
	pool := f.jobPool[p.Victim]
	f.mu.Unlock()
	mem := f.byName[pool]
	if mem == nil {
		return fmt.Errorf("%w: no pool runs job %s", backends.ErrRefused, p.Victim)
	}
	return mem.Backend.Preempt(ctx, p)
}

// ApplyMIG routes the change to r.Node's pool.
func (f *Federation) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	mem, n, err := f.route(r.Node)
	if err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	lr := r
	lr.Node = n
	return mem.Backend.ApplyMIG(ctx, lr)
}

// MIGLayout routes the read to node's pool (backends.MIGReporter):
// errors.ErrUnsupported when that pool's backend cannot say.
func (f *Federation) MIGLayout(ctx context.Context, node string, gpu int) (mig.Layout, error) {
	mem, n, err := f.route(node)
	if err != nil {
		return mig.Layout{}, fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	mr, ok := mem.Backend.(backends.MIGReporter)
	if !ok {
		return mig.Layout{}, errors.ErrUnsupported
	}
	return mr.MIGLayout(ctx, n, gpu)
}

var (
	_ backends.Backend         = (*Federation)(nil)
	_ backends.GangBinder      = (*Federation)(nil)
	_ backends.RunningReporter = (*Federation)(nil)
	_ backends.MIGReporter     = (*Federation)(nil)
)
