package topo

import (
	"fmt"
	"maps"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/mig"
)

// NodeID is a node's dense index in a Cluster.
type NodeID int32

// Cluster is the immutable shape of a cluster: levels, domains, nodes and
// the GPU index space. The changing part (what is free, node states) lives
// in a Snapshot. A Cluster is safe for concurrent use.
//
// GPU indices are dense and contiguous per node, and nodes are numbered in
// topology order: every domain at every level covers one contiguous range of
// node IDs and one contiguous range of GPU indices.
type Cluster struct {
	levels    []string // levels[0] is LevelCluster
	levelIdx  map[string]int
	gpuLevels []string

	nodes      []nodeInfo
	nodeByName map[string]NodeID
	nodeDom    []int32 // node*len(levels)+level -> domain index
	gpuNode    []NodeID

	doms [][]domain // per level

	models   []string
	modelIdx map[string]int

	maxGPUs   int
	totalGPUs int
	// shared: some GPUs are in MIG mode or shared, or ShareFreeGPUs is set;
	// snapshots then carry a mig.Pool.
	shared    bool
	shareFree bool
	// stride of one domain's counters: free, whole, hist[h][0..maxGPUs].
	hists   int // number of histograms per domain: 1, or 1+len(models)
	stride  int
	cntBase []int // per level: index of its first counter page
	rec     *recycler
}

type nodeInfo struct {
	name     string
	base     uint32
	gpus     uint8
	model    uint16
	state0   NodeState
	memMiB   int64 // GPU memory per GPU
	cpuMilli int64
	hostMiB  int64
	labels   map[string]string
	sub      [][]uint64     // per GPU level: per group, the GPU mask (bit i = GPU base+i)
	gpuCfg   *mig.GPUConfig // MIG or sharing of every GPU of the node; nil: exclusive
}

type domain struct {
	name           string // full path, e.g. "b0/r3"
	parent         int32
	nodeLo, nodeHi NodeID
	childLo        int32 // range of domains at the next level; equal when leaf
	childHi        int32
	gpuLo, gpuHi   uint32
}

// NodeInfo describes one node. Labels must not be modified.
type NodeInfo struct {
	ID           NodeID
	Name         string
	FirstGPU     uint32 // the node owns GPUs [FirstGPU, FirstGPU+GPUs)
	GPUs         int
	GPUModel     string
	GPUMemoryMiB int64
	CPUMilli     int64
	MemoryMiB    int64
	Labels       map[string]string
}

// DomainInfo describes one domain of one level.
type DomainInfo struct {
	Level  int
	Index  int
	Name   string // the full path, e.g. "b0/r3"
	Parent int    // index at the level above; -1 at level 0
	// Nodes [FirstNode, EndNode) and GPUs [FirstGPU, EndGPU) are the
	// domain's contiguous ranges.
	FirstNode, EndNode NodeID
	FirstGPU, EndGPU   uint32
	// Children [FirstChild, EndChild) are the domains of the next level
	// inside this one (empty at the finest level).
	FirstChild, EndChild int
}

type buildDom struct {
	name     string
	children []*buildDom
	childIdx map[string]*buildDom
	nodes    []int // spec indices, at the finest level only
}

// New validates the spec and builds the cluster.
//
// Nodes are numbered in topology order: domains are ordered by first
// appearance in spec.Nodes, level by level, and nodes keep their spec order
// within their finest domain. A spec listed in that order already (as
// generated clusters usually are) keeps its order.
func New(spec Spec) (*Cluster, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{
		levels:     append([]string{LevelCluster}, spec.Levels...),
		gpuLevels:  append([]string(nil), spec.GPULevels...),
		nodeByName: make(map[string]NodeID, len(spec.Nodes)),
		modelIdx:   make(map[string]int),
		shareFree:  spec.ShareFreeGPUs,
		shared:     spec.ShareFreeGPUs,
		rec:        new(recycler),
	}
	c.levelIdx = make(map[string]int, len(c.levels))
	for i, l := range c.levels {
		c.levelIdx[l] = i
	}
	// Build the domain tree in order of first appearance.
	root := &buildDom{childIdx: map[string]*buildDom{}}
	for i := range spec.Nodes {
		d := root
		for _, name := range spec.Nodes[i].Domains {
			ch := d.childIdx[name]
			if ch == nil {
				ch = &buildDom{name: name, childIdx: map[string]*buildDom{}}
				d.childIdx[name] = ch
				d.children = append(d.children, ch)
			}
			d = ch
		}
		d.nodes = append(d.nodes, i)
	}
	nl := len(c.levels)
	c.doms = make([][]domain, nl)
	c.nodes = make([]nodeInfo, 0, len(spec.Nodes))
	c.nodeDom = make([]int32, 0, len(spec.Nodes)*nl)
	path := make([]int32, nl)
	var walk func(b *buildDom, level int, parent int32, prefix string)
	walk = func(b *buildDom, level int, parent int32, prefix string) {
		idx := int32(len(c.doms[level]))
		name := prefix + b.name
		c.doms[level] = append(c.doms[level], domain{
			name: name, parent: parent,
			nodeLo: NodeID(len(c.nodes)), gpuLo: uint32(c.totalGPUs),
		})
		path[level] = idx
		if level+1 < nl {
			c.doms[level][idx].childLo = int32(len(c.doms[level+1]))
			sep := "/"
			if level == 0 {
				sep, name = "", ""
			}
			for _, ch := range b.children {
				walk(ch, level+1, idx, name+sep)
			}
			c.doms[level][idx].childHi = int32(len(c.doms[level+1]))
		} else {
			for _, si := range b.nodes {
				c.addNode(&spec, si, path)
			}
		}
		c.doms[level][idx].nodeHi = NodeID(len(c.nodes))
		c.doms[level][idx].gpuHi = uint32(c.totalGPUs)
	}
	walk(root, 0, -1, "")
	c.hists = 1
	if len(c.models) > 1 {
		c.hists = 1 + len(c.models)
	}
	c.stride = 2 + c.hists*(c.maxGPUs+1)
	c.cntBase = make([]int, nl)
	for l := 1; l < nl; l++ {
		c.cntBase[l] = c.cntBase[l-1] + (len(c.doms[l-1])+pageSize-1)/pageSize
	}
	return c, nil
}

func (c *Cluster) addNode(spec *Spec, si int, path []int32) {
	n := &spec.Nodes[si]
	id := NodeID(len(c.nodes))
	m, ok := c.modelIdx[n.GPUModel]
	if !ok {
		m = len(c.models)
		c.models = append(c.models, n.GPUModel)
		c.modelIdx[n.GPUModel] = m
	}
	info := nodeInfo{
		name: n.Name, base: uint32(c.totalGPUs), gpus: uint8(n.GPUs), model: uint16(m),
		state0: n.State, memMiB: n.GPUMemoryMiB, cpuMilli: n.CPUMilli, hostMiB: n.MemoryMiB,
	}
	if len(n.Labels) > 0 {
		info.labels = maps.Clone(n.Labels)
	}
	info.gpuCfg, _ = n.gpuConfig() // validated by Spec.Validate
	if info.gpuCfg != nil {
		c.shared = true
	}
	if len(n.GPUDomains) > 0 {
		info.sub = make([][]uint64, len(n.GPUDomains))
		for l, groups := range n.GPUDomains {
			ng := 0
			for _, g := range groups {
				ng = max(ng, g+1)
			}
			masks := make([]uint64, ng)
			for i, g := range groups {
				masks[g] |= 1 << uint(i)
			}
			info.sub[l] = masks
		}
	}
	c.nodes = append(c.nodes, info)
	c.nodeByName[n.Name] = id
	c.nodeDom = append(c.nodeDom, path...)
	for range n.GPUs {
		c.gpuNode = append(c.gpuNode, id)
	}
	c.totalGPUs += n.GPUs
	c.maxGPUs = max(c.maxGPUs, n.GPUs)
}

// Levels returns the level names, coarsest first. Level 0 is always
// LevelCluster, the implicit root with a single domain; the levels of the
// spec follow. The node level is not included. The slice must not be modified.
func (c *Cluster) Levels() []string { return c.levels }

// Level returns the index of a level name in Levels.
func (c *Cluster) Level(name string) (int, error) {
	if i, ok := c.levelIdx[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("%w: %q (levels: %v)", ErrUnknownLevel, name, c.levels)
}

// GPULevels returns the levels below the node, coarsest first.
func (c *Cluster) GPULevels() []string { return c.gpuLevels }

// NumNodes returns the number of nodes.
func (c *Cluster) NumNodes() int { return len(c.nodes) }

// NumGPUs returns the number of GPUs; GPU indices are [0, NumGPUs).
func (c *Cluster) NumGPUs() int { return c.totalGPUs }

// MaxGPUsPerNode returns the GPU count of the largest node.
func (c *Cluster) MaxGPUsPerNode() int { return c.maxGPUs }

// Models returns the GPU models in order of first appearance; a model's
// index there is its model index. The slice must not be modified.
func (c *Cluster) Models() []string { return c.models }

// ModelIndex returns the index of a GPU model.
func (c *Cluster) ModelIndex(model string) (int, bool) {
	m, ok := c.modelIdx[model]
	return m, ok
}

// NodeByName returns the ID of a node.
func (c *Cluster) NodeByName(name string) (NodeID, bool) {
	id, ok := c.nodeByName[name]
	return id, ok
}

// Node describes node id; it panics if id is out of range, like a slice.
func (c *Cluster) Node(id NodeID) NodeInfo {
	n := &c.nodes[id]
	return NodeInfo{
		ID: id, Name: n.name, FirstGPU: n.base, GPUs: int(n.gpus),
		GPUModel: c.models[n.model], GPUMemoryMiB: n.memMiB,
		CPUMilli: n.cpuMilli, MemoryMiB: n.hostMiB, Labels: n.labels,
	}
}

// NodeName returns the name of node id.
func (c *Cluster) NodeName(id NodeID) string { return c.nodes[id].name }

// NodeGPUs returns the GPU count and first GPU index of node id.
func (c *Cluster) NodeGPUs(id NodeID) (first uint32, n int) {
	return c.nodes[id].base, int(c.nodes[id].gpus)
}

// NodeModel returns the model index of node id.
func (c *Cluster) NodeModel(id NodeID) int { return int(c.nodes[id].model) }

// MatchesSelector reports whether node id carries every label of sel.
func (c *Cluster) MatchesSelector(id NodeID, sel map[string]string) bool {
	labels := c.nodes[id].labels
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// NodeOfGPU returns the node owning GPU g.
func (c *Cluster) NodeOfGPU(g uint32) (NodeID, error) {
	if int(g) >= len(c.gpuNode) {
		return 0, fmt.Errorf("%w: %d (cluster has %d GPUs)", ErrUnknownGPU, g, len(c.gpuNode))
	}
	return c.gpuNode[g], nil
}

// NumDomains returns the number of domains at a level.
func (c *Cluster) NumDomains(level int) int { return len(c.doms[level]) }

// DomainOf returns the index of node id's domain at a level.
func (c *Cluster) DomainOf(id NodeID, level int) int {
	return int(c.nodeDom[int(id)*len(c.levels)+level])
}

// Domain describes domain d of a level.
func (c *Cluster) Domain(level, d int) DomainInfo {
	x := &c.doms[level][d]
	return DomainInfo{
		Level: level, Index: d, Name: x.name, Parent: int(x.parent),
		FirstNode: x.nodeLo, EndNode: x.nodeHi, FirstGPU: x.gpuLo, EndGPU: x.gpuHi,
		FirstChild: int(x.childLo), EndChild: int(x.childHi),
	}
}

// DomainGPUs returns a new bitmap of the GPUs of domain d at a level.
func (c *Cluster) DomainGPUs(level, d int) *roaring.Bitmap {
	x := &c.doms[level][d]
	b := roaring.New()
	b.AddRange(uint64(x.gpuLo), uint64(x.gpuHi))
	return b
}

// Descendants returns the range of domains at level `to` inside domain d of
// level `from` (from <= to).
func (c *Cluster) Descendants(from, d, to int) (lo, hi int) {
	lo, hi = d, d+1
	for l := from; l < to; l++ {
		lo = int(c.doms[l][lo].childLo)
		hi = int(c.doms[l][hi-1].childHi)
	}
	return lo, hi
}

// GPUDomainMasks returns, for a level of GPULevels, the masks of node id's
// GPU groups: bit i of a mask is GPU FirstGPU+i. It must not be modified.
func (c *Cluster) GPUDomainMasks(id NodeID, gpuLevel int) []uint64 {
	if c.nodes[id].sub == nil {
		return nil
	}
	return c.nodes[id].sub[gpuLevel]
}

// NodeGPUConfig returns the MIG / sharing configuration of node id's GPUs,
// or false when they are plain exclusive GPUs.
func (c *Cluster) NodeGPUConfig(id NodeID) (mig.GPUConfig, bool) {
	if cfg := c.nodes[id].gpuCfg; cfg != nil {
		return *cfg, true
	}
	return mig.GPUConfig{}, false
}

// SharesFreeGPUs reports whether Spec.ShareFreeGPUs was set.
func (c *Cluster) SharesFreeGPUs() bool { return c.shareFree }
