package gang

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/berthsched/berth/topo"
)

// Shape is one member shape of a target workload, with its weight.
type Shape struct {
	CPUMilli int64 `json:"cpu_milli,omitempty"`
	// Milli is the thousandths of each GPU (1000: whole GPUs); 0 with GPUs
	// 0 for members that ask for no GPU.
	Milli int `json:"milli,omitempty"`
	GPUs  int `json:"gpus,omitempty"`
	// Model is the GPU model the shape requires, or a set of models its
	// members accept, joined by '|' (ModelSet: "A100-40GB|A100-80GB");
	// empty: any.
	Model string `json:"model,omitempty"`
	// MemoryMiB is the mean memory of the shape's members (FGD ignores
	// memory; Berth uses it).
	MemoryMiB int64 `json:"memory_mib,omitempty"`
	// Count is the members of this shape in the source workload.
	Count int `json:"count,omitempty"`
	// Weight is Count ÷ the prefix total; the weights sum to 1.
	Weight float64 `json:"weight"`
}

// Target is the typical workload that FGD and Berth measure fragmentation
// against: the most popular member shapes and their weights.
type Target struct {
	Shapes []Shape
}

type shapeKey struct {
	cpu         int64
	milli, gpus int
	model       string
}

// keyOf is m's shape; a set of models is named by ModelSet.
func keyOf(m member) shapeKey {
	k := shapeKey{cpu: m.cpu, milli: m.milli, gpus: m.gpus, model: m.model}
	if len(m.models) > 0 {
		k.model = ModelSet(m.models)
	}
	if !m.usesGPU() {
		k.milli = 0
	}
	return k
}

// NewTarget builds the target workload from the groups of a workload
// (GetTypicalPods of the FGD artifact, members that ask for no GPU
// included), each group counting its Members: group by shape (CPU, GPU
// milli, GPUs, model), sort by count descending, ties by CPU, then milli,
// then GPUs, then model, each descending; keep the shortest prefix whose
// count reaches popularity (0..1, e.g. 0.95) of all members; weight =
// count ÷ prefix count.
func NewTarget(groups []Group, popularity float64) Target {
	idx := map[shapeKey]int{}
	var shapes []Shape
	total := 0
	for i := range groups {
		g := &groups[i]
		m := memberOf(g)
		k := keyOf(m)
		j, ok := idx[k]
		if !ok {
			j = len(shapes)
			idx[k] = j
			shapes = append(shapes, Shape{CPUMilli: k.cpu, Milli: k.milli, GPUs: k.gpus, Model: k.model})
		}
		shapes[j].Count += g.Members
		shapes[j].MemoryMiB += int64(g.Members) * m.mem
		total += g.Members
	}
	for i := range shapes {
		if shapes[i].Count > 0 {
			shapes[i].MemoryMiB /= int64(shapes[i].Count)
		}
	}
	slices.SortStableFunc(shapes, func(a, b Shape) int {
		return cmp.Or(
			cmp.Compare(b.Count, a.Count),
			cmp.Compare(b.CPUMilli, a.CPUMilli),
			cmp.Compare(b.Milli, a.Milli),
			cmp.Compare(b.GPUs, a.GPUs),
			cmp.Compare(b.Model, a.Model),
		)
	})
	cum := 0
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

// modelOK reports whether the shape accepts a node of this model: any
// model, the one it names, or one of a set ("A|B", see ModelSet).
func (sh *Shape) modelOK(model string) bool {
	return sh.Model == "" || sh.Model == model || inModelSet(sh.Model, model)
}

// inModelSet reports whether model is one of the '|'-separated names of
// set (a set of one is not searched: the caller compared it whole).
func inModelSet(set, model string) bool {
	if len(set) <= len(model) || strings.IndexByte(set, '|') < 0 {
		return false
	}
	for {
		i := strings.IndexByte(set, '|')
		if i < 0 {
			return set == model
		}
		if set[:i] == model {
			return true
		}
		set = set[i+1:]
	}
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
		if m.Milli > 0 && m.GPUs > 0 && cpu >= m.CPUMilli && m.modelOK(model) {
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

// NodeFrag is Frag of node n on s.
func (t *Target) NodeFrag(s *topo.Snapshot, n topo.NodeID) float64 {
	var buf nodeBuf
	cpu, _ := s.NodeHostFree(n)
	return t.Frag(NodeGPUMilli(s, n, buf[:0]), cpu, s.Cluster().Node(n).GPUModel)
}

// FGD is fragmentation gradient descent (docs/fgd.md): a node's score is
// int(100·σ((Frag(n) − Frag(n′))/1000)), n′ being the node after the
// member; the node whose fragmentation grows least wins. For a fractional
// member each GPU with room is tried and the node scores the best of them;
// the chosen GPU (ShareGPU) is the first, by index, reaching that score.
// Whole GPUs come off the first k GPUs in ascending free milli with room.
//
// FGD caches per node and member shape, keyed by what it last read of the
// node, so a decision costs a read and a compare per unchanged node. It
// belongs to one goroutine.
type FGD struct {
	target Target
	cache  scoreCache
}

// NewFGD returns the FGD scorer for a target workload.
func NewFGD(t Target) *FGD { return &FGD{target: t} }

// Target returns the target workload.
func (p *FGD) Target() *Target { return &p.target }

// Score implements Scorer.
func (p *FGD) Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64) {
	p.cache.scoreAll(s, memberOf(g), nodes, scores, p)
}

// ShareGPU implements ShareChooser.
func (p *FGD) ShareGPU(s *topo.Snapshot, g *Group, n topo.NodeID) int {
	return p.cache.shareGPU(s, memberOf(g), n, p)
}

func sigmoidScore(delta float64) int {
	return int(MaxScore * (1 / (1 + math.Exp(-delta/1000))))
}

func (p *FGD) measure(c *scoreCache, n topo.NodeID) float64 {
	return p.target.Frag(c.gpus(n), c.cpu[n], c.models[n])
}

// compute returns node n's score for r and, for a share, the chosen GPU.
func (p *FGD) compute(c *scoreCache, r member, n topo.NodeID) (int64, int) {
	before := c.base(n, p)
	gpus := c.gpus(n)
	model := c.models[n]
	cpu := c.cpu[n] - r.cpu
	var buf nodeBuf
	after := buf[:copy(buf[:], gpus)]
	switch {
	case r.shared():
		u := int16(r.milli)
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
	case r.usesGPU():
		takeAscending(after, r)
	}
	return int64(sigmoidScore(before - p.target.Frag(after, cpu, model))), -1
}

// takeAscending takes u from each of the first k GPUs in ascending free
// milli (stable by index) that have f >= u, each GPU at most once.
func takeAscending(gpus []int16, r member) {
	u := int16(r.milli)
	var taken uint64
	for range r.gpus {
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

// cachedScorer is FGD or Berth as seen by scoreCache.
type cachedScorer interface {
	// measure is the node's fragmentation measure in its cached state.
	measure(c *scoreCache, n topo.NodeID) float64
	// compute scores node n for r and names the GPU a share would take.
	compute(c *scoreCache, r member, n topo.NodeID) (score int64, gpu int)
}

type cacheEntry struct {
	version uint64 // node version when computed; 0: empty
	score   int64
	gpu     int32
}

type baseEntry struct {
	version uint64
	value   float64
}

// scoreCache mirrors, per node, what FGD and Berth read (free milli per
// GPU, free CPU and memory, model), refreshed from the snapshot on every
// use; a node's version changes when its content does. Scores and base
// measures are cached per node (and member shape) by that version, so the
// cache stays right whatever snapshot (clone, later state) it is shown.
type scoreCache struct {
	c      *topo.Cluster
	off    []uint32 // per node: its first GPU in free
	first  []uint32 // per node: its first GPU in the cluster
	free   []int16
	cpu    []int64
	mem    []int64
	models []string
	ver    []uint64
	stamp  uint64
	nst    []uint64 // per node: the topo.Snapshot.NodeStamp last read

	shapes map[shapeKey]int
	tabs   [][]cacheEntry
	bases  []baseEntry

	// Sets of models seen, by their names in the order given: keyOf's
	// ModelSet without its allocations once a set has been seen.
	sets map[string]string
	kbuf []byte
}

// setName is ModelSet(models), interned: no allocation for a set seen
// before in the same order.
func (c *scoreCache) setName(models []string) string {
	c.kbuf = c.kbuf[:0]
	for _, m := range models {
		c.kbuf = append(append(c.kbuf, m...), '|')
	}
	if name, ok := c.sets[string(c.kbuf)]; ok {
		return name
	}
	if c.sets == nil {
		c.sets = map[string]string{}
	}
	name := ModelSet(models)
	c.sets[string(c.kbuf)] = name
	return name
}

func (c *scoreCache) reset(cl *topo.Cluster) {
	n := cl.NumNodes()
	*c = scoreCache{
		c: cl, off: make([]uint32, n+1), cpu: make([]int64, n), mem: make([]int64, n),
		models: make([]string, n), ver: make([]uint64, n), first: make([]uint32, n), nst: make([]uint64, n),
		shapes: map[shapeKey]int{}, bases: make([]baseEntry, n),
	}
	for id := range topo.NodeID(n) {
		info := cl.Node(id)
		c.off[id+1] = c.off[id] + uint32(info.GPUs)
		c.first[id] = info.FirstGPU
		c.models[id] = info.GPUModel
	}
	c.free = make([]int16, c.off[n])
}

func (c *scoreCache) gpus(n topo.NodeID) []int16 { return c.free[c.off[n]:c.off[n+1]] }

// sync reads node n from s (what NodeGPUMilli reads, into the mirror)
// and returns its version.
func (c *scoreCache) sync(s *topo.Snapshot, n topo.NodeID) uint64 {
	// The same stamp: the node is as it was read last (NodeStamp).
	st := s.NodeStamp(n)
	if st == c.nst[n] && c.ver[n] != 0 {
		return c.ver[n]
	}
	c.nst[n] = st
	cpu, mem := s.NodeHostFree(n)
	changed := c.ver[n] == 0 || cpu != c.cpu[n] || mem != c.mem[n]
	c.cpu[n], c.mem[n] = cpu, mem
	gpus := c.gpus(n)
	first := c.first[n]
	mask := s.NodeFreeMask(n)
	for i := range gpus {
		f := int16(0)
		switch g := first + uint32(i); {
		case mask&(1<<uint(i)) != 0:
			f = FullMilli
		case s.IsSharedGPU(g):
			f = int16(s.SharedFreeMilli(g))
		}
		if gpus[i] != f {
			gpus[i], changed = f, true
		}
	}
	if changed {
		c.stamp++
		c.ver[n] = c.stamp
	}
	return c.ver[n]
}

func (c *scoreCache) table(s *topo.Snapshot, r member) []cacheEntry {
	if c.c != s.Cluster() {
		c.reset(s.Cluster())
	}
	k := shapeKey{cpu: r.cpu, milli: r.milli, gpus: r.gpus, model: r.model}
	if !r.usesGPU() {
		k.milli = 0
	}
	if len(r.models) > 0 {
		k.model = c.setName(r.models)
	}
	i, ok := c.shapes[k]
	if !ok {
		i = len(c.tabs)
		c.shapes[k] = i
		c.tabs = append(c.tabs, make([]cacheEntry, len(c.ver)))
	}
	return c.tabs[i]
}

func (c *scoreCache) eval(s *topo.Snapshot, r member, n topo.NodeID, tab []cacheEntry, p cachedScorer) cacheEntry {
	v := c.sync(s, n)
	e := &tab[n]
	if e.version != v {
		sc, g := p.compute(c, r, n)
		*e = cacheEntry{version: v, score: sc, gpu: int32(g)}
	}
	return *e
}

func (c *scoreCache) scoreAll(s *topo.Snapshot, r member, nodes []topo.NodeID, scores []int64, p cachedScorer) {
	tab := c.table(s, r)
	for i, n := range nodes {
		scores[i] = c.eval(s, r, n, tab, p).score
	}
}

func (c *scoreCache) shareGPU(s *topo.Snapshot, r member, n topo.NodeID, p cachedScorer) int {
	return int(c.eval(s, r, n, c.table(s, r), p).gpu)
}

// base returns p's measure of node n in its synced state, cached by
// version.
func (c *scoreCache) base(n topo.NodeID, p cachedScorer) float64 {
	e := &c.bases[n]
	if v := c.ver[n]; e.version != v {
		*e = baseEntry{version: v, value: p.measure(c, n)}
	}
	return e.value
}
