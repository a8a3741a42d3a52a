package gang

import (
	"math/rand"

	"github.com/berthsched/berth/topo"
)

// The scorers of the FGD paper ("Beware of Fragmentation", USENIX ATC'23)
// as its artifact computes them (docs/fgd.md): integer arithmetic and
// truncations as published, so that the FGD experiment reproduces the
// published curves. They read a node as its free milli per GPU
// (NodeGPUMilli), its free host CPU and memory, and its GPU model.

// Spec constants of the openb simulator (MaxSpecCpu, MaxSpecGpu): the
// normalisation of CPU and GPU milli in DotProd and BestFit.
const (
	MaxSpecCPU = 128000
	MaxSpecGPU = 8000
)

// nodeBuf holds one node's free milli per GPU.
type nodeBuf [topo.MaxGPUsPerNode]int16

// bestGPU is the "best" share-GPU choice: the smallest free milli that
// holds the member, the lower index on ties.
type bestGPU struct{}

// ShareGPU implements ShareChooser.
func (bestGPU) ShareGPU(s *topo.Snapshot, g *Group, n topo.NodeID) int {
	var buf nodeBuf
	return bestFitGPU(NodeGPUMilli(s, n, buf[:0]), memberOf(g).milli)
}

func bestFitGPU(gpus []int16, milli int) int {
	best, bf := -1, int16(FullMilli+1)
	for g, f := range gpus {
		if int(f) >= milli && f < bf {
			best, bf = g, f
		}
	}
	return best
}

// Random picks a node uniformly: one Intn(len(nodes)) draw per scored
// choice; that node scores MaxScore, the others 0. A fractional member's
// GPU is chosen by reservoir sampling over the GPUs that hold it, in index
// order: the j-th such GPU replaces the choice when Intn(j) == 0 (j from 1,
// every draw made).
type Random struct {
	// Rand is the stream the draws come from. Required. It is math/rand
	// v1 because the published FGD runs draw from that exact stream (the
	// experiment shares it with its own draws); no global generator is
	// ever used.
	Rand *rand.Rand
}

// Score implements Scorer.
func (p *Random) Score(_ *topo.Snapshot, _ *Group, nodes []topo.NodeID, scores []int64) {
	scores[p.Rand.Intn(len(nodes))] = MaxScore
}

// ShareGPU implements ShareChooser.
func (p *Random) ShareGPU(s *topo.Snapshot, g *Group, n topo.NodeID) int {
	var buf nodeBuf
	milli := memberOf(g).milli
	choice, j := -1, 0
	for i, f := range NodeGPUMilli(s, n, buf[:0]) {
		if int(f) >= milli {
			j++
			if p.Rand.Intn(j) == 0 {
				choice = i
			}
		}
	}
	return choice
}

// DotProd prefers the node whose free resources align least with the
// member: N = (c_n/128000, F_n/8000), P = (c_p/128000, D_p/8000), score
// int(100·(1 − N·P/2)), c the free CPU, F_n the node's free GPU milli, D_p
// the member's GPU milli. Fractional members take the best-fitting GPU.
type DotProd struct{ bestGPU }

// Score implements Scorer.
func (DotProd) Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64) {
	m := memberOf(g)
	pc := float64(m.cpu) / MaxSpecCPU
	pg := float64(m.demand()) / MaxSpecGPU
	for i, n := range nodes {
		cpu, _ := s.NodeHostFree(n)
		scores[i] = dotProdScore(cpu, nodeFreeMilli(s, n), m.cpu, pc, pg)
	}
}

func dotProdScore(cn, fn, cp int64, pc, pg float64) int64 {
	if cn < cp {
		return 0
	}
	nc := float64(cn) / MaxSpecCPU
	ng := float64(fn) / MaxSpecGPU
	// Explicit conversions keep each product rounded (no fused multiply-add).
	dot := float64(nc*pc) + float64(ng*pg)
	return int64(100 * (1 - dot/2))
}

// GpuClustering groups members of the same kind on the same nodes: the
// kind of a fractional member is "shared", of a whole-GPU member its GPU
// count. Members asking for no GPU score 0 everywhere. With
// b = 25·(8000 − F_n)/8000 (integer), a node scores b+75 when it holds only
// members of this kind, b+50 when it holds this kind among others, b+25
// when it holds no GPU member, else b. Fractional members take the
// best-fitting GPU.
//
// The kinds a node holds are not in a topo.Snapshot: GpuClustering counts
// them itself, from the Bound and Released calls of its caller. A caller
// that does not report its placements gets every node scored as empty.
type GpuClustering struct {
	bestGPU
	nodes []kindCounts
}

type kindCounts struct {
	n        [topo.MaxGPUsPerNode + 1]int32
	distinct int32
}

// NewGpuClustering returns a GpuClustering that has seen no placement.
func NewGpuClustering() *GpuClustering { return &GpuClustering{} }

// Bound counts members of g placed on node n.
func (p *GpuClustering) Bound(n topo.NodeID, g *Group, members int) { p.add(n, g, int32(members)) }

// Released uncounts members of g that left node n.
func (p *GpuClustering) Released(n topo.NodeID, g *Group, members int) {
	p.add(n, g, -int32(members))
}

func (p *GpuClustering) add(n topo.NodeID, g *Group, d int32) {
	k, ok := kindOf(memberOf(g))
	if !ok || n < 0 || d == 0 {
		return
	}
	for int(n) >= len(p.nodes) {
		p.nodes = append(p.nodes, kindCounts{})
	}
	kc := &p.nodes[n]
	before := kc.n[k]
	kc.n[k] = max(before+d, 0)
	switch {
	case before == 0 && kc.n[k] > 0:
		kc.distinct++
	case before > 0 && kc.n[k] == 0:
		kc.distinct--
	}
}

// kindOf is a member's kind: 0 for a share, k for k whole GPUs.
func kindOf(m member) (int, bool) {
	switch {
	case !m.usesGPU() || m.gpus > topo.MaxGPUsPerNode:
		return 0, false
	case m.milli < FullMilli:
		return 0, true
	}
	return m.gpus, true
}

// Score implements Scorer.
func (p *GpuClustering) Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64) {
	k, ok := kindOf(memberOf(g))
	if !ok {
		return
	}
	for i, n := range nodes {
		b := 25 * (MaxSpecGPU - nodeFreeMilli(s, n)) / MaxSpecGPU
		var distinct int32
		has := false
		if int(n) < len(p.nodes) {
			distinct, has = p.nodes[n].distinct, p.nodes[n].n[k] > 0
		}
		switch {
		case has && distinct == 1:
			scores[i] = b + 75
		case has:
			scores[i] = b + 50
		case distinct == 0:
			scores[i] = b + 25
		default:
			scores[i] = b
		}
	}
}

// GpuPacking fills partly used GPUs first, then partly used nodes, then
// whole nodes. Fractional members take the best-fitting GPU.
type GpuPacking struct{ bestGPU }

// Score implements Scorer.
func (GpuPacking) Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64) {
	m := memberOf(g)
	if !m.usesGPU() {
		return
	}
	var buf nodeBuf
	for i, n := range nodes {
		scores[i] = packingScore(NodeGPUMilli(s, n, buf[:0]), m)
	}
}

func packingScore(gpus []int16, m member) int64 {
	g := len(gpus)
	allFree := true
	for _, f := range gpus {
		if f != FullMilli {
			allFree = false
			break
		}
	}
	if allFree {
		return int64(max(33-g, g))
	}
	// Take, in ascending f (stable by index), the first k GPUs with f >= u.
	var sorted nodeBuf
	n := 0
	for _, f := range gpus {
		if int(f) >= m.milli {
			j := n
			for j > 0 && sorted[j-1] > f {
				sorted[j] = sorted[j-1]
				j--
			}
			sorted[j] = f
			n++
		}
	}
	taken := sorted[:min(n, m.gpus)]
	z, sum := 0, 0
	for _, f := range taken {
		if f == FullMilli {
			z++
		}
		sum += int(f) * 100 / FullMilli
	}
	if z > 0 {
		return int64(max(50-z, 33))
	}
	return int64(max(100-sum/10, 50))
}

// BestFit prefers the node with the least leftover:
// r = int(100·(1 − [0.5·(c_n − c_p)/128000 + 0.5·(F_n − D_p)/8000])),
// min-max normalised over the nodes to [0, 100] in integers (all 0 when
// all are equal). Fractional members take the best-fitting GPU.
type BestFit struct{ bestGPU }

// Score implements Scorer.
func (BestFit) Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64) {
	m := memberOf(g)
	d := m.demand()
	lo, hi := int64(1<<62), int64(-1<<62)
	for i, n := range nodes {
		cpu, _ := s.NodeHostFree(n)
		cpuLeft := 0.5 * float64(cpu-m.cpu) / MaxSpecCPU
		gpuLeft := 0.5 * float64(nodeFreeMilli(s, n)-d) / MaxSpecGPU
		v := int64(100 * (1 - (cpuLeft + gpuLeft)))
		scores[i] = v
		lo, hi = min(lo, v), max(hi, v)
	}
	for i := range scores {
		if hi == lo {
			scores[i] = 0
		} else {
			scores[i] = (scores[i] - lo) * MaxScore / (hi - lo)
		}
	}
}
