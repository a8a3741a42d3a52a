package fgd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/berthsched/berth/gang/score"
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
	return LoadTrace(dir)
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
}

// Row is one policy's summary over the seeds; the JSON of `berth replay
// --experiment fgd`. Values are rounded to two decimals.
type Row struct {
	Policy           string  `json:"policy"`
	AllocPctAt100    float64 `json:"alloc_pct_at_100"`
	AllocPctAt130    float64 `json:"alloc_pct_at_130"`
	AllocPctStdAt130 float64 `json:"alloc_pct_std_at_130"`
}

// prepared is what every run of one trace shares (read only).
type prepared struct {
	cluster *topo.Cluster
	reqs    []score.Request // name-sorted
	target  score.Target
	demand  int64 // Σ D_p of the originals
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
	p := &prepared{cluster: c, reqs: make([]score.Request, len(pods))}
	for i := range pods {
		j := &pods[i]
		r := score.Request{GPUs: j.NumGPU, Milli: j.GPUMilli, CPUMilli: j.CPUMilli, MemoryMiB: j.MemoryMiB, Models: j.GPUModels}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%w: pod %q: %w", ErrTrace, j.ID, err)
		}
		p.reqs[i] = r
		p.demand += r.Demand()
	}
	p.target = score.NewTarget(p.reqs, popularity)
	return p, nil
}

func newPolicy(name string, rng *rand.Rand, p *prepared) score.Policy {
	switch name {
	case "random":
		return &score.Random{Rand: rng}
	case "dotprod":
		return score.DotProd{}
	case "clustering":
		return score.GpuClustering{}
	case "packing":
		return score.GpuPacking{}
	case "bestfit":
		return score.BestFit{}
	case "fgd":
		return score.NewFGD(p.target)
	case "berth":
		return score.NewBerth(p.target)
	}
	return nil
}

// MaxPodsPerNode is the openb simulator's pod limit per node.
const MaxPodsPerNode = 1001

// infoDraws is the number of Int63 draws between the tune-up and the node
// ranks (docs/fgd.md, Procedure step 2.4).
const infoDraws = 10

// arrivals draws the arrival order of one seed (docs/fgd.md, Procedure step 2):
// pod indices into the name-sorted list, and the node ranks.
func arrivals(rng *rand.Rand, p *prepared, tune float64) (order []int, rank []int32) {
	n := len(p.reqs)
	_ = rng.Int()
	order = make([]int, n, n+n/2)
	for i := range order {
		order[i] = i
	}
	rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	limit := tune * float64(p.cluster.NumGPUs()*score.FullMilli)
	sum := p.demand
	for {
		i := rng.Intn(n)
		r := &p.reqs[i]
		u := int64(0)
		if r.UsesGPU() {
			u = int64(r.Milli)
		}
		if float64(sum+u) > limit {
			break
		}
		order = append(order, i)
		sum += r.Demand()
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

// runOne replays one (policy, seed) run.
func runOne(ctx context.Context, p *prepared, policy string, seed int64, tune float64) (Curve, error) {
	rng := rand.New(rand.NewSource(seed))
	order, rank := arrivals(rng, p, tune)
	st, err := score.NewState(p.cluster, score.Options{MaxPods: MaxPodsPerNode})
	if err != nil {
		return Curve{}, err
	}
	sc := &score.Scheduler{State: st, Policy: newPolicy(policy, rng, p), Rank: rank}
	div := float64(st.Capacity()) / 100
	frag := make([]float64, st.NumNodes())
	for id := range frag {
		frag[id] = p.target.NodeFrag(st, topo.NodeID(id))
	}
	fragValues := make([]float64, len(order))
	values := make([]float64, len(order))
	bins := make([]int, len(order))
	var arrived int64
	cv := Curve{Policy: policy, Seed: seed, Pods: len(order)}
	for i, pi := range order {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return Curve{}, err
			}
		}
		r := p.reqs[pi]
		_ = rng.Intn(100) // metrics sampling in the original: shifts the stream
		d, _, err := sc.Schedule(r)
		if err != nil {
			return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: %w", policy, seed, i, err)
		}
		if d.Placed {
			cv.Placed++
			frag[d.Placement.Node] = p.target.NodeFrag(st, d.Placement.Node)
		} else {
			_ = rng.Int31n(int32(st.NumNodes())) // preemption offset
		}
		arrived += r.Demand()
		values[i] = round2(float64(st.Allocated()) / div)
		bins[i] = int(math.RoundToEven(float64(arrived) / div))
		fragValues[i] = fragRatio(frag, st)
	}
	if err := st.Check(); err != nil {
		return Curve{}, fmt.Errorf("fgd: %s seed %d: %w", policy, seed, err)
	}
	cv.ArrivedPct = float64(arrived) / div
	cv.Columns = binColumns(values, bins, int(math.Round(tune*100)))
	cv.Frag = binMeans(fragValues, bins, int(math.Round(tune*100)), false)
	return cv, nil
}

// fragRatio is round(100·Σ_n Frag(n) / Σ_n F_n, 2), 0 when nothing is free.
func fragRatio(frag []float64, st *score.State) float64 {
	sum := 0.0
	for _, f := range frag {
		sum += f
	}
	free := st.Capacity() - st.Allocated()
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
				cv, err := runOne(gctx, p, pol, seed, c.Tune)
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
			if len(cv.Columns) <= 100 {
				return nil, fmt.Errorf("%w: %s seed %d has %d columns", ErrConfig, cv.Policy, cv.Seed, len(cv.Columns))
			}
			at100 = append(at100, cv.Columns[100])
			last = append(last, cv.Columns[len(cv.Columns)-1])
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
