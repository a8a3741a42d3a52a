package score

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/berthsched/berth/topo"
)

// Shape is one request shape of a target workload, with its weight.
// Memory is not part of a shape.
type Shape struct {
	CPUMilli int64
	Milli    int
	GPUs     int
	Models   []string // allowed models; nil: any
	// MemoryMiB is the mean memory of the shape's requests (FGD ignores
	// memory; Berth uses it).
	MemoryMiB int64
	Count     int     // requests of this shape in the source workload
	Weight    float64 // Count ÷ the prefix total; the weights sum to 1
}

// Target is the typical workload that FGD measures fragmentation against
// (docs/fgd.md, Procedure step 3): the most popular request shapes and their weights.
type Target struct {
	Shapes []Shape
}

type shapeKey struct {
	cpu         int64
	milli, gpus int
	models      string
}

func keyOf(r Request) shapeKey {
	k := shapeKey{cpu: r.CPUMilli, milli: r.Milli, gpus: r.GPUs}
	if !r.UsesGPU() {
		k.milli, k.gpus = 0, r.GPUs
	}
	if len(r.Models) > 0 {
		k.models = strings.Join(r.Models, "|")
	}
	return k
}

// NewTarget builds the target workload from requests (GetTypicalPods with
// CPU-only requests included): group by shape (CPU, milli, GPUs, models),
// sort by count descending, ties by CPU, then milli, then GPUs, then models,
// each descending; keep the shortest prefix whose count reaches popularity
// (0..1, e.g. 0.95) of all requests; weight = count ÷ prefix count.
func NewTarget(reqs []Request, popularity float64) Target {
	idx := map[shapeKey]int{}
	var shapes []Shape
	for _, r := range reqs {
		k := keyOf(r)
		i, ok := idx[k]
		if !ok {
			i = len(shapes)
			idx[k] = i
			shapes = append(shapes, Shape{CPUMilli: k.cpu, Milli: k.milli, GPUs: k.gpus, Models: r.Models})
		}
		shapes[i].Count++
		shapes[i].MemoryMiB += r.MemoryMiB
	}
	for i := range shapes {
		shapes[i].MemoryMiB /= int64(shapes[i].Count)
	}
	slices.SortStableFunc(shapes, func(a, b Shape) int {
		return cmp.Or(
			cmp.Compare(b.Count, a.Count),
			cmp.Compare(b.CPUMilli, a.CPUMilli),
			cmp.Compare(b.Milli, a.Milli),
			cmp.Compare(b.GPUs, a.GPUs),
			cmp.Compare(strings.Join(b.Models, "|"), strings.Join(a.Models, "|")),
		)
	})
	total, cum := len(reqs), 0
	n := len(shapes)
	for i, sh := range shapes {
		cum += sh.Count
		if float64(cum) >= popularity*float64(total) {
			n = i + 1
			break
		}
	}
	shapes = shapes[:n]
	prefix := 0
	for _, sh := range shapes {
		prefix += sh.Count
	}
	for i := range shapes {
		shapes[i].Weight = float64(shapes[i].Count) / float64(prefix)
	}
	return Target{Shapes: shapes}
}

// Frag is the fragmentation of a node with the given free milli per GPU,
// free CPU and GPU model against the target (NodeGpuShareFragAmount):
// Σ_m w_m·φ_m, where φ_m is the free milli of the GPUs too small for shape
// m when m fits the node otherwise (it asks for GPU, the model is allowed,
// the CPU is there, and at least k_m GPUs have f >= u_m), and all the free
// milli F_n when it does not.
func (t *Target) Frag(gpus []int16, cpu int64, model string) float64 {
	total := 0
	for _, f := range gpus {
		total += int(f)
	}
	sum := 0.0
	for i := range t.Shapes {
		m := &t.Shapes[i]
		phi := total
		if m.Milli > 0 && m.GPUs > 0 && cpu >= m.CPUMilli && (len(m.Models) == 0 || (Request{Models: m.Models}).modelOK(model)) {
			cnt, small := 0, 0
			for _, f := range gpus {
				if int(f) >= m.Milli {
					cnt++
				} else {
					small += int(f)
				}
			}
			if cnt >= m.GPUs {
				phi = small
			}
		}
		sum += m.Weight * float64(phi)
	}
	return sum
}

// NodeFrag is Frag of node n in its current state.
func (t *Target) NodeFrag(s *State, n topo.NodeID) float64 {
	return t.Frag(s.nodeGPUs(n), s.nodes[n].cpu, s.models[n])
}

// FGD is fragmentation gradient descent (docs/fgd.md, FGD's fragmentation): a node's
// score is int(100·σ((Frag(n) − Frag(n′))/1000)), n′ being the node after
// the request; the node whose fragmentation grows least wins. For a share
// request each GPU with room is tried and the node scores the best of
// them; the chosen GPU is the first, by index, reaching that score. Whole
// GPUs come off the first k GPUs in ascending free milli with room.
//
// FGD caches per node and request shape, keyed by State.Version, so a
// decision costs one array read per unchanged node. It belongs to one
// goroutine and, once used, to one State (using it on another State
// clears the cache).
type FGD struct {
	target Target
	cache  fgdCache
}

// NewFGD returns the FGD policy for a target workload.
func NewFGD(t Target) *FGD { return &FGD{target: t} }

// Name implements Policy.
func (*FGD) Name() string { return "fgd" }

// Target returns the target workload.
func (p *FGD) Target() *Target { return &p.target }

// Score implements Policy.
func (p *FGD) Score(s *State, r Request, feasible []topo.NodeID, scores []int64) {
	p.cache.scoreAll(s, r, feasible, scores, p.compute)
}

// ShareGPU implements Policy.
func (p *FGD) ShareGPU(s *State, r Request, n topo.NodeID) int {
	return p.cache.shareGPU(s, r, n, p.compute)
}

func sigmoidScore(delta float64) int {
	return int(MaxScore * (1 / (1 + math.Exp(-delta/1000))))
}

// compute returns node n's score for r and, for a share, the chosen GPU.
func (p *FGD) compute(s *State, r Request, n topo.NodeID) (int64, int) {
	before := p.cache.base(s, n, &p.target)
	gpus := s.nodeGPUs(n)
	model := s.models[n]
	cpu := s.nodes[n].cpu - r.CPUMilli
	var buf [topo.MaxGPUsPerNode]int16
	after := buf[:copy(buf[:], gpus)]
	switch {
	case r.Shared():
		u := int16(r.Milli)
		best, bestScore := -1, -1
		for g, f := range gpus {
			if f < u || slices.Contains(gpus[:g], f) {
				continue // too small, or the same multiset as an earlier GPU
			}
			after[g] -= u
			sc := sigmoidScore(before - p.target.Frag(after, cpu, model))
			after[g] += u
			if sc > bestScore {
				best, bestScore = g, sc
			}
		}
		return int64(bestScore), best
	case r.UsesGPU():
		takeAscending(after, r)
	}
	return int64(sigmoidScore(before - p.target.Frag(after, cpu, model))), -1
}

// takeAscending takes u from each of the first k GPUs in ascending free
// milli (stable by index) that have f >= u, each GPU at most once.
func takeAscending(gpus []int16, r Request) {
	u := int16(r.Milli)
	var taken uint64
	for range r.GPUs {
		best := -1
		for g, f := range gpus {
			if taken&(1<<uint(g)) == 0 && f >= u && (best < 0 || f < gpus[best]) {
				best = g
			}
		}
		if best < 0 {
			return
		}
		taken |= 1 << uint(best)
		gpus[best] -= u
	}
}

type fgdEntry struct {
	version uint64 // State version + 1; 0: empty
	score   int64
	gpu     int32
}

type fgdBaseEntry struct {
	version uint64
	frag    float64
}

// fgdCache holds per-shape, per-node results and per-node base
// fragmentation for one State.
type fgdCache struct {
	state  *State
	shapes map[shapeKey]int
	tabs   [][]fgdEntry
	bases  []fgdBaseEntry
}

func (c *fgdCache) reset(s *State) {
	c.state = s
	c.shapes = map[shapeKey]int{}
	c.tabs = nil
	c.bases = make([]fgdBaseEntry, s.NumNodes())
}

// computeFunc scores node n for r and names the GPU a share would take.
type computeFunc func(s *State, r Request, n topo.NodeID) (score int64, gpu int)

// scoreAll fills scores for the feasible nodes, computing a node again only
// when it changed since its cached answer.
func (c *fgdCache) scoreAll(s *State, r Request, feasible []topo.NodeID, scores []int64, compute computeFunc) {
	tab := c.table(s, r)
	for i, n := range feasible {
		scores[i] = c.eval(s, r, n, tab, compute).score
	}
}

// shareGPU returns the GPU the cached (or fresh) answer for n chose.
func (c *fgdCache) shareGPU(s *State, r Request, n topo.NodeID, compute computeFunc) int {
	return int(c.eval(s, r, n, c.table(s, r), compute).gpu)
}

func (c *fgdCache) eval(s *State, r Request, n topo.NodeID, tab []fgdEntry, compute computeFunc) fgdEntry {
	e := &tab[n]
	if v := s.nodes[n].version + 1; e.version != v {
		sc, g := compute(s, r, n)
		*e = fgdEntry{version: v, score: sc, gpu: int32(g)}
	}
	return *e
}

func (c *fgdCache) table(s *State, r Request) []fgdEntry {
	if c.state != s {
		c.reset(s)
	}
	k := keyOf(r)
	i, ok := c.shapes[k]
	if !ok {
		i = len(c.tabs)
		c.shapes[k] = i
		c.tabs = append(c.tabs, make([]fgdEntry, s.NumNodes()))
	}
	return c.tabs[i]
}

// nodeMeasure is a per-node quantity computed from the State.
type nodeMeasure interface {
	nodeMeasure(s *State, n topo.NodeID) float64
}

func (t *Target) nodeMeasure(s *State, n topo.NodeID) float64 { return t.NodeFrag(s, n) }

// base returns m of node n in its current state, cached by version.
func (c *fgdCache) base(s *State, n topo.NodeID, m nodeMeasure) float64 {
	e := &c.bases[n]
	if v := s.nodes[n].version + 1; e.version != v {
		*e = fgdBaseEntry{version: v, frag: m.nodeMeasure(s, n)}
	}
	return e.frag
}
