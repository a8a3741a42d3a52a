package score

import (
	"math/rand"

	"github.com/berthsched/berth/topo"
)

// Spec constants of the openb simulator (MaxSpecCpu, MaxSpecGpu): the
// normalisation of CPU and GPU milli in DotProd and BestFit.
const (
	MaxSpecCPU = 128000
	MaxSpecGPU = 8000
)

// bestGPU is the "best" share-GPU selection: smallest f >= u, lower index
// on ties.
type bestGPU struct{}

func (bestGPU) ShareGPU(s *State, r Request, n topo.NodeID) int { return s.BestFitGPU(n, r.Milli) }

// Random picks a feasible node uniformly (docs/fgd.md, The policies): one
// Intn(len(feasible)) draw per scored decision; that node scores 100, the
// others 0. A share GPU is chosen by reservoir sampling over the fitting
// GPUs in index order: the j-th fitting GPU replaces the choice when
// Intn(j) == 0 (j from 1, every draw made).
type Random struct {
	// Rand is the stream the draws come from, shared with the caller (the
	// experiment interleaves its own draws). Required. It is math/rand v1
	// because the published FGD runs draw from that exact stream; no global
	// generator is ever used.
	Rand *rand.Rand
}

// Name implements Policy.
func (*Random) Name() string { return "random" }

// Score implements Policy.
func (p *Random) Score(_ *State, _ Request, feasible []topo.NodeID, scores []int64) {
	scores[p.Rand.Intn(len(feasible))] = MaxScore
}

// ShareGPU implements Policy.
func (p *Random) ShareGPU(s *State, r Request, n topo.NodeID) int {
	choice, j := -1, 0
	for g, f := range s.nodeGPUs(n) {
		if int(f) >= r.Milli {
			j++
			if p.Rand.Intn(j) == 0 {
				choice = g
			}
		}
	}
	return choice
}

// DotProd prefers the node whose free resources align least with the
// request (docs/fgd.md, The policies): N = (c_n/128000, F_n/8000),
// P = (c_p/128000, D_p/8000), score int(100·(1 − N·P/2)). Share GPUs by
// best fit.
type DotProd struct{ bestGPU }

// Name implements Policy.
func (DotProd) Name() string { return "dotprod" }

// Score implements Policy.
func (DotProd) Score(s *State, r Request, feasible []topo.NodeID, scores []int64) {
	pc := float64(r.CPUMilli) / MaxSpecCPU
	pg := float64(r.Demand()) / MaxSpecGPU
	for i, n := range feasible {
		scores[i] = dotProdScore(s.nodes[n].cpu, int64(s.nodes[n].freeMilli), r.CPUMilli, pc, pg)
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

// GpuClustering groups requests of the same kind on the same nodes
// (docs/fgd.md, The policies). CPU-only requests score 0 everywhere. With
// b = 25·(8000 − F_n)/8000 (integer), the score is b+75 when the node
// holds only requests of this kind, b+50 when it holds this kind among
// others, b+25 when it holds no GPU request, else b. Share GPUs by best
// fit.
type GpuClustering struct{ bestGPU }

// Name implements Policy.
func (GpuClustering) Name() string { return "clustering" }

// Score implements Policy.
func (GpuClustering) Score(s *State, r Request, feasible []topo.NodeID, scores []int64) {
	k, ok := r.Kind()
	if !ok {
		return
	}
	for i, n := range feasible {
		b := int64(25 * (MaxSpecGPU - int64(s.nodes[n].freeMilli)) / MaxSpecGPU)
		distinct := s.DistinctKinds(n)
		has := s.KindCount(n, k) > 0
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
// whole nodes (docs/fgd.md, The policies). Share GPUs by best fit.
type GpuPacking struct{ bestGPU }

// Name implements Policy.
func (GpuPacking) Name() string { return "packing" }

// Score implements Policy.
func (GpuPacking) Score(s *State, r Request, feasible []topo.NodeID, scores []int64) {
	if !r.UsesGPU() {
		return
	}
	for i, n := range feasible {
		scores[i] = packingScore(s.nodeGPUs(n), r)
	}
}

func packingScore(gpus []int16, r Request) int64 {
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
	var sorted [topo.MaxGPUsPerNode]int16
	m := 0
	for _, f := range gpus {
		if int(f) >= r.Milli {
			j := m
			for j > 0 && sorted[j-1] > f {
				sorted[j] = sorted[j-1]
				j--
			}
			sorted[j] = f
			m++
		}
	}
	taken := sorted[:min(m, r.GPUs)]
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

// BestFit prefers the node with the least leftover (docs/fgd.md, The policies):
// r = int(100·(1 − [0.5·(c_n − c_p)/128000 + 0.5·(F_n − D_p)/8000])),
// min-max normalised over the feasible nodes to [0, 100] in integers (all
// 0 when all are equal). Share GPUs by best fit.
type BestFit struct{ bestGPU }

// Name implements Policy.
func (BestFit) Name() string { return "bestfit" }

// Score implements Policy.
func (BestFit) Score(s *State, r Request, feasible []topo.NodeID, scores []int64) {
	d := r.Demand()
	lo, hi := int64(1<<62), int64(-1<<62)
	for i, n := range feasible {
		ns := &s.nodes[n]
		cpuLeft := 0.5 * float64(ns.cpu-r.CPUMilli) / MaxSpecCPU
		gpuLeft := 0.5 * float64(int64(ns.freeMilli)-d) / MaxSpecGPU
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
