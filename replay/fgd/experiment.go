package fgd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// Errors.
var (
	// ErrConfig: an invalid Config (unknown policy, no seeds, bad tune).
	ErrConfig = errors.New("fgd: invalid config")
	// ErrTrace: the trace cannot be replayed (no nodes, a node without
	// GPUs, no pods).
	ErrTrace = errors.New("fgd: unusable trace")
)

// Policies lists the policy names Run accepts, in the published order,
// then berth's own.
var Policies = []string{"random", "dotprod", "clustering", "packing", "bestfit", "fgd", "berth"}

// Trace is the openb cluster and pod list. The replay takes both in name
// order (LoadTrace sorts them; Run sorts a copy of any other Trace).
type Trace struct {
	Nodes []workload.Node
	Pods  []workload.Job
}

// LoadTrace reads the openb node and pod lists from dir: either the
// directory holding openb_node_list_gpu_node.csv and
// openb_pod_list_default.csv, or a traces root with them under
// k8s-gpu-pods/ (as TracesDir gives).
func LoadTrace(dir string) (*Trace, error) {
	nodes, pods := filepath.Join(dir, filepath.Base(workload.OpenbNodes)), filepath.Join(dir, filepath.Base(workload.OpenbPods))
	if _, err := os.Stat(nodes); err != nil {
		nodes, pods = filepath.Join(dir, workload.OpenbNodes), filepath.Join(dir, workload.OpenbPods)
	}
	ns, err := workload.OpenOpenbNodes(nodes)
	if err != nil {
		return nil, err
	}
	pt, err := workload.OpenOpenbPods(pods)
	if err != nil {
		return nil, err
	}
	t := &Trace{Nodes: ns, Pods: pt.Jobs}
	slices.SortStableFunc(t.Nodes, func(a, b workload.Node) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortStableFunc(t.Pods, func(a, b workload.Job) int { return cmp.Compare(a.ID, b.ID) })
	return t, nil
}

// LoadDefaultTrace is LoadTrace of workload.TracesDir.
func LoadDefaultTrace() (*Trace, error) {
	dir, err := workload.TracesDir()
	if err != nil {
		return nil, err
	}
	t, err := LoadTrace(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: the openb trace is not in %s (%w); %s", workload.ErrNoTraces, dir, err, workload.GetTraces)
	}
	return t, err
}

// Config is one experiment: policies x seeds on a trace.
type Config struct {
	Trace    *Trace
	Policies []string // names from Policies
	Seeds    []int64
	// Tune is the arrived GPU demand to reach, as a multiple of the
	// cluster's GPUs; 0 means 1.3.
	Tune float64
	// Popularity is FGD's target-workload cut; 0 means 0.95.
	Popularity float64
	// Parallelism bounds concurrent runs; 0 means GOMAXPROCS.
	Parallelism int
	// Via is how pods are placed: ViaPlacer (empty means it) with a
	// gang.Placer directly, or ViaEngine through an engine.Engine
	// configured with the policy's scorer (see runEngine).
	Via string
}

func (c *Config) defaults() Config {
	d := *c
	if d.Tune == 0 {
		d.Tune = 1.3
	}
	if d.Popularity == 0 {
		d.Popularity = 0.95
	}
	if d.Parallelism <= 0 {
		d.Parallelism = runtime.GOMAXPROCS(0)
	}
	return d
}

// Validate checks the config.
func (c *Config) Validate() error {
	d := c.defaults()
	switch {
	case d.Trace == nil || len(d.Trace.Nodes) == 0 || len(d.Trace.Pods) == 0:
		return fmt.Errorf("%w: no trace", ErrConfig)
	case len(d.Seeds) == 0:
		return fmt.Errorf("%w: no seeds", ErrConfig)
	case len(d.Policies) == 0:
		return fmt.Errorf("%w: no policies", ErrConfig)
	case !(d.Tune > 0 && d.Tune <= 10):
		return fmt.Errorf("%w: tune %v outside (0, 10]", ErrConfig, d.Tune)
	case !(d.Popularity > 0 && d.Popularity <= 1):
		return fmt.Errorf("%w: popularity %v outside (0, 1]", ErrConfig, d.Popularity)
	}
	for _, p := range d.Policies {
		if !slices.Contains(Policies, p) {
			return fmt.Errorf("%w: unknown policy %q (want one of %s)", ErrConfig, p, strings.Join(Policies, ", "))
		}
		if d.Via == ViaEngine && p == gang.ScorerClustering {
			return fmt.Errorf("%w: policy %q does not run through the engine (it counts the kinds bound on each node, which the engine does not report to scorers)", ErrConfig, p)
		}
	}
	switch d.Via {
	case "", ViaPlacer, ViaEngine:
	default:
		return fmt.Errorf("%w: via %q (want %s or %s)", ErrConfig, d.Via, ViaPlacer, ViaEngine)
	}
	return nil
}

// Curve is the result of one run: the allocation columns 0..tune×100.
type Curve struct {
	Policy string
	Seed   int64
	// Columns[k] is the mean GPU allocation (%) over the samples taken
	// when the arrived demand was k% of the cluster (docs/fgd.md, The metric).
	Columns []float64
	// Frag[k] is the mean fragmentation ratio (%) of the same samples:
	// 100·Σ_n Frag(n) / Σ_n F_n against FGD's target workload, each sample
	// rounded to two decimals, the means not rounded (as published).
	Frag   []float64
	Pods   int // pods attempted (originals and tune-up clones)
	Placed int
	// ArrivedPct is the arrived GPU demand at the end, in % of the cluster.
	ArrivedPct float64
	// FirstFail is the arrival index of the first pod that did not fit
	// (every pod before it was placed), Pods when all fit.
	FirstFail int
	// ModelViolations counts the pods placed on a node whose GPU model is
	// not one the pod allows (gpu_spec); the experiment checks every
	// placement, and anything but 0 is a bug.
	ModelViolations int
}

// Row is one policy's summary over the seeds; the JSON of `berth replay
// --experiment fgd`. Values are rounded to two decimals.
type Row struct {
	Policy           string  `json:"policy"`
	AllocPctAt100    float64 `json:"alloc_pct_at_100"`
	AllocPctAt130    float64 `json:"alloc_pct_at_130"`
	AllocPctStdAt130 float64 `json:"alloc_pct_std_at_130"`
	// ModelViolations is the sum of the runs' Curve.ModelViolations: pods
	// placed on a GPU model outside their gpu_spec (0 unless a bug).
	ModelViolations int `json:"model_violations"`
	// Curve is the mean over seeds of each column (arrived demand 0, 1,
	// ... % of the cluster's GPUs), rounded to two decimals: the whole
	// curve, for comparing policies at every arrival level (not in the
	// JSON form, which stays the summary).
	Curve []float64 `json:"-"`
}

// prepared is what every run of one trace shares (read only).
type prepared struct {
	spec    topo.Spec // nodes in name order
	cluster *topo.Cluster
	pods    []pod // name-sorted
	// groups[i] is pods[i].group, read only: runEngine's requests point
	// into it instead of copying a group per arrival.
	groups []gang.Group
	target gang.Target
	demand int64 // Σ D_p of the originals
}

// pod is one openb pod as a one-member gang.
type pod struct {
	group  gang.Group
	demand int64 // GPU milli, D_p
}

// request returns the gang request of one pod. Its group is shared and
// read only.
func (p *pod) request() gang.Request {
	return gang.Request{Groups: []gang.Group{p.group}}
}

// podOf turns an openb pod into a one-member group: k whole GPUs, a share
// of one GPU, or CPU and memory only.
func podOf(j *workload.Job) (pod, error) {
	g := gang.Group{Members: 1, CPUMilli: j.CPUMilli, MemoryMiB: j.MemoryMiB}
	var demand int64
	switch {
	case j.NumGPU < 0 || j.GPUMilli < 0 || j.GPUMilli > gang.FullMilli:
		return pod{}, fmt.Errorf("%d GPUs of %d milli", j.NumGPU, j.GPUMilli)
	case j.NumGPU == 0 || j.GPUMilli == 0: // CPU only
	case j.GPUMilli == gang.FullMilli:
		g.GPUsPerMember, demand = j.NumGPU, int64(j.NumGPU)*gang.FullMilli
	case j.NumGPU == 1:
		g.GPUMilli, demand = j.GPUMilli, int64(j.GPUMilli)
	default:
		return pod{}, fmt.Errorf("%d GPUs of %d milli each: several fractional GPUs per pod are not supported", j.NumGPU, j.GPUMilli)
	}
	switch len(j.GPUModels) {
	case 0:
	case 1:
		g.GPUModel = j.GPUModels[0]
	default:
		g.GPUModels = j.GPUModels // any of them, per pod (gang.Group.GPUModels)
	}
	r := gang.Request{Groups: []gang.Group{g}}
	if err := r.Validate(); err != nil {
		return pod{}, err
	}
	return pod{group: g, demand: demand}, nil
}

// modelAllowed reports whether a member of g may run on a GPU of model m
// (the experiment's own check of every placement, not the placer's).
func modelAllowed(g *gang.Group, m string) bool {
	ms := g.Models()
	return len(ms) == 0 || slices.Contains(ms, m)
}

// prepare builds the cluster and requests of t, nodes and pods in name
// order (the procedure's order whatever the trace's), and FGD's target.
func prepare(t *Trace, popularity float64) (*prepared, error) {
	nodes := slices.Clone(t.Nodes)
	slices.SortStableFunc(nodes, func(a, b workload.Node) int { return cmp.Compare(a.Name, b.Name) })
	pods := slices.Clone(t.Pods)
	slices.SortStableFunc(pods, func(a, b workload.Job) int { return cmp.Compare(a.ID, b.ID) })
	spec := topo.Spec{Nodes: make([]topo.NodeSpec, len(nodes)), ShareFreeGPUs: true}
	for i, n := range nodes {
		if n.GPUs <= 0 {
			return nil, fmt.Errorf("%w: node %q has no GPUs", ErrTrace, n.Name)
		}
		spec.Nodes[i] = topo.NodeSpec{Name: n.Name, GPUs: n.GPUs, GPUModel: n.Model, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB}
	}
	c, err := topo.New(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrace, err)
	}
	p := &prepared{spec: spec, cluster: c, pods: make([]pod, len(pods))}
	groups := make([]gang.Group, len(pods))
	for i := range pods {
		pd, err := podOf(&pods[i])
		if err != nil {
			return nil, fmt.Errorf("%w: pod %q: %w", ErrTrace, pods[i].ID, err)
		}
		p.pods[i], groups[i] = pd, pd.group
		p.demand += pd.demand
	}
	p.groups = groups
	p.target = gang.NewTarget(groups, popularity)
	return p, nil
}

// newScorer returns the gang scorer of a policy. Random draws from the
// run's own stream (the published runs interleave its draws with the
// experiment's).
func newScorer(name string, rng *rand.Rand, p *prepared) (gang.Scorer, error) {
	if name == gang.ScorerRandom {
		return &gang.Random{Rand: rng}, nil
	}
	return gang.NewScorer(p.scorerSpec(name))
}

// scorerSpec is the gang.ScorerSpec of a policy on this trace.
func (p *prepared) scorerSpec(name string) gang.ScorerSpec {
	return gang.ScorerSpec{Name: name, Target: p.target.Shapes}
}

// infoDraws is the number of Int63 draws between the tune-up and the node
// ranks (docs/fgd.md, Procedure step 2.4).
const infoDraws = 10

// arrivals draws the arrival order of one seed (docs/fgd.md, Procedure step 2):
// pod indices into the name-sorted list, and the node ranks.
func arrivals(rng *rand.Rand, p *prepared, tune float64) (order []int, rank []int32) {
	n := len(p.pods)
	_ = rng.Int()
	order = make([]int, n, n+n/2)
	for i := range order {
		order[i] = i
	}
	rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	limit := tune * float64(p.cluster.NumGPUs()*gang.FullMilli)
	sum := p.demand
	for {
		i := rng.Intn(n)
		pd := &p.pods[i]
		u := int64(0) // the milli of one GPU of the pod
		switch g := &pd.group; {
		case g.GPUsPerMember > 0:
			u = gang.FullMilli
		case g.GPUMilli > 0:
			u = int64(g.GPUMilli)
		}
		if float64(sum+u) > limit {
			break
		}
		order = append(order, i)
		sum += pd.demand
	}
	for range infoDraws {
		_ = rng.Int63()
	}
	perm := rng.Perm(p.cluster.NumNodes())
	rank = make([]int32, len(perm))
	for j, v := range perm {
		rank[j] = int32(v)
	}
	return order, rank
}

// runOne replays one (policy, seed) run: each pod placed by a gang.Placer
// with the policy's scorer and the run's node ranks as ties, then booked
// on the run's snapshot (gang.Result.Apply), or dropped.
func runOne(ctx context.Context, p *prepared, policy string, seed int64, tune float64) (Curve, error) {
	rng := rand.New(rand.NewSource(seed))
	order, rank := arrivals(rng, p, tune)
	scorer, err := newScorer(policy, rng, p)
	if err != nil {
		return Curve{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	clustering, _ := scorer.(*gang.GpuClustering)
	snap := p.cluster.NewSnapshot()
	placer := gang.Placer{Scorer: scorer, Ties: rank}
	capacity := int64(p.cluster.NumGPUs()) * gang.FullMilli
	div := float64(capacity) / 100
	frag := make([]float64, p.cluster.NumNodes())
	for id := range frag {
		frag[id] = p.target.NodeFrag(snap, topo.NodeID(id))
	}
	fs := newFragSum(frag)
	fragValues := make([]float64, len(order))
	values := make([]float64, len(order))
	bins := make([]int, len(order))
	var arrived, allocated int64
	cv := Curve{Policy: policy, Seed: seed, Pods: len(order), FirstFail: len(order)}
	var res gang.Result
	reqs := make([]gang.Request, len(p.pods)) // built on first use, one per pod
	for i, pi := range order {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return Curve{}, err
			}
		}
		pd := &p.pods[pi]
		req := &reqs[pi]
		if req.Groups == nil {
			*req = pd.request()
		}
		_ = rng.Intn(100) // metrics sampling in the original: shifts the stream
		if err := placer.PlaceInto(&res, snap, req); err != nil {
			return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: %w", policy, seed, i, err)
		}
		if res.Found {
			if err := res.Apply(snap); err != nil {
				return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: %w", policy, seed, i, err)
			}
			n := res.Members[0].Node
			if !modelAllowed(&pd.group, p.cluster.Node(n).GPUModel) {
				cv.ModelViolations++
			}
			if clustering != nil {
				clustering.Bound(n, &pd.group, 1)
			}
			cv.Placed++
			allocated += pd.demand
			fs.set(int(n), p.target.NodeFrag(snap, n))
		} else {
			_ = rng.Int31n(int32(p.cluster.NumNodes())) // preemption offset
			cv.FirstFail = min(cv.FirstFail, i)
		}
		arrived += pd.demand
		values[i] = round2(float64(allocated) / div)
		bins[i] = int(math.RoundToEven(float64(arrived) / div))
		fragValues[i] = fs.ratio(capacity - allocated)
	}
	if err := checkAllocated(snap, allocated); err != nil {
		return Curve{}, fmt.Errorf("fgd: %s seed %d: %w", policy, seed, err)
	}
	cv.ArrivedPct = float64(arrived) / div
	cv.Columns = binColumns(values, bins, int(math.Round(tune*100)))
	cv.Frag = binMeans(fragValues, bins, int(math.Round(tune*100)), false)
	return cv, nil
}

// checkAllocated verifies the snapshot (topo's own check) and that its
// GPUs hold exactly the demand placed.
func checkAllocated(s *topo.Snapshot, allocated int64) error {
	if err := s.Verify(); err != nil {
		return err
	}
	c := s.Cluster()
	var free int64
	var buf []int16
	for id := range topo.NodeID(c.NumNodes()) {
		for _, f := range gang.NodeGPUMilli(s, id, buf[:0]) {
			free += int64(f)
		}
	}
	if got := int64(c.NumGPUs())*gang.FullMilli - free; got != allocated {
		return fmt.Errorf("%w: %d milli allocated on the snapshot, %d placed", ErrTrace, got, allocated)
	}
	return nil
}

// fragSum keeps Σ_n Frag(n) as fragRatio adds it up (in node order, one
// rounding per node), with the prefix sums, so that changing one node's
// value adds up only the nodes from it on: the same float64 operations in
// the same order, so the same sum.
type fragSum struct {
	frag []float64
	pre  []float64 // pre[i] = (...(frag[0] + frag[1]) + ...) + frag[i], from 0.0
}

func newFragSum(frag []float64) *fragSum {
	f := &fragSum{frag: frag, pre: make([]float64, len(frag))}
	f.from(0)
	return f
}

func (f *fragSum) from(i int) {
	sum := 0.0
	if i > 0 {
		sum = f.pre[i-1]
	}
	for ; i < len(f.frag); i++ {
		sum += f.frag[i]
		f.pre[i] = sum
	}
}

// set changes node n's value.
func (f *fragSum) set(n int, v float64) {
	if f.frag[n] != v || math.Signbit(f.frag[n]) != math.Signbit(v) {
		f.frag[n] = v
		f.from(n)
	}
}

// ratio is fragRatio(frag, free).
func (f *fragSum) ratio(free int64) float64 {
	if free == 0 {
		return 0
	}
	sum := 0.0
	if len(f.pre) > 0 {
		sum = f.pre[len(f.pre)-1]
	}
	return round2(100 * sum / float64(free))
}

// fragRatio is round(100·Σ_n Frag(n) / free, 2), 0 when nothing is free.
func fragRatio(frag []float64, free int64) float64 {
	sum := 0.0
	for _, f := range frag {
		sum += f
	}
	if free == 0 {
		return 0
	}
	return round2(100 * sum / float64(free))
}

// Runs replays every (policy, seed) of cfg, at most cfg.Parallelism at a
// time, and returns the curves ordered by policy (as listed) then seed.
func Runs(ctx context.Context, cfg Config) ([]Curve, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.defaults()
	p, err := prepare(c.Trace, c.Popularity)
	if err != nil {
		return nil, err
	}
	out := make([]Curve, len(c.Policies)*len(c.Seeds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallelism)
	for i, pol := range c.Policies {
		for j, seed := range c.Seeds {
			g.Go(func() error {
				run := runOne
				if c.Via == ViaEngine {
					run = runEngine
				}
				cv, err := run(gctx, p, pol, seed, c.Tune)
				out[i*len(c.Seeds)+j] = cv
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// Run replays every (policy, seed) of cfg and summarises each policy: the
// means over the seeds of columns 100 and tune×100, and the population
// standard deviation of the latter.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	curves, err := Runs(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return Summarize(curves)
}

// Summarize folds curves into one Row per policy, in order of first
// appearance. The "at 130" fields read the last column (130 for tune 1.3).
func Summarize(curves []Curve) ([]Row, error) {
	var rows []Row
	by := map[string][]Curve{}
	for _, cv := range curves {
		if _, ok := by[cv.Policy]; !ok {
			rows = append(rows, Row{Policy: cv.Policy})
		}
		by[cv.Policy] = append(by[cv.Policy], cv)
	}
	for i := range rows {
		cs := by[rows[i].Policy]
		var at100, last []float64
		for _, cv := range cs {
			rows[i].ModelViolations += cv.ModelViolations
			if len(cv.Columns) <= 100 {
				return nil, fmt.Errorf("%w: %s seed %d has %d columns", ErrConfig, cv.Policy, cv.Seed, len(cv.Columns))
			}
			at100 = append(at100, cv.Columns[100])
			last = append(last, cv.Columns[len(cv.Columns)-1])
		}
		ncol := len(cs[0].Columns)
		for _, cv := range cs {
			ncol = min(ncol, len(cv.Columns))
		}
		rows[i].Curve = make([]float64, ncol)
		for k := range ncol {
			col := make([]float64, len(cs))
			for j, cv := range cs {
				col[j] = cv.Columns[k]
			}
			rows[i].Curve[k] = round2(mean(col))
		}
		m100, m130, sd := mean(at100), mean(last), popStd(last)
		if math.IsNaN(m100) || math.IsNaN(m130) {
			return nil, fmt.Errorf("%w: %s: empty bins at 100%% or at the end", ErrTrace, rows[i].Policy)
		}
		rows[i].AllocPctAt100, rows[i].AllocPctAt130, rows[i].AllocPctStdAt130 = round2(m100), round2(m130), round2(sd)
	}
	return rows, nil
}

func mean(v []float64) float64 {
	return pairwiseSum(v) / float64(len(v))
}

func popStd(v []float64) float64 {
	m := mean(v)
	ss := 0.0
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(v)))
}
