// Package benchmarks holds berth's standard work (docs/standard-work.md):
// the standard clusters, the SplitMix64 generator, the random60 and
// skewed60 fills and the standard gangs, with go test benchmarks over
// them. No library code imports it; replays live in package replay.
package benchmarks

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// SplitMix64 is the generator of every standard input: its state starts at
// the seed (docs/standard-work.md).
type SplitMix64 = workload.SplitMix64

// NewSplitMix64 returns a generator seeded with seed.
func NewSplitMix64(seed uint64) *SplitMix64 { return workload.NewSplitMix64(seed) }

// ClusterShape names a standard cluster.
type ClusterShape struct {
	Name          string
	Levels        []string
	Fanout        []int // domains per parent, per level
	NodesPerLeaf  int
	GPUsPerNode   int
	FillSizes     []int // job sizes drawn by the fills
	PreferredName string
}

// Standard clusters.
// B2K is the standard 2,048-node cluster: 16 blocks x 8 racks x 16 nodes
// of 8 GPUs.
func B2K() ClusterShape {
	return ClusterShape{Name: "B2K", Levels: []string{"block", "rack"}, Fanout: []int{16, 8}, NodesPerLeaf: 16, GPUsPerNode: 8, FillSizes: []int{1, 2, 4, 8}, PreferredName: "rack"}
}

// B12K is the standard 12,288-node cluster: 64 blocks x 12 racks x 16
// nodes of 8 GPUs.
func B12K() ClusterShape {
	return ClusterShape{Name: "B12K", Levels: []string{"block", "rack"}, Fanout: []int{64, 12}, NodesPerLeaf: 16, GPUsPerNode: 8, FillSizes: []int{1, 2, 4, 8}, PreferredName: "rack"}
}

// NVL72x128 is 128 NVL72 racks (8 blocks x 16 NVLink domains x 18 nodes
// of 4 GPUs).
func NVL72x128() ClusterShape {
	return ClusterShape{Name: "NVL72x128", Levels: []string{"block", "nvlink"}, Fanout: []int{8, 16}, NodesPerLeaf: 18, GPUsPerNode: 4, FillSizes: []int{1, 2, 4}, PreferredName: "nvlink"}
}

// Scaling returns B2K's shape with the given number of nodes (a multiple of
// 128: racks of 16 nodes, blocks of 8 racks).
func Scaling(nodes int) ClusterShape {
	s := B2K()
	s.Name = fmt.Sprintf("nodes=%d", nodes)
	s.Fanout = []int{nodes / 128, 8}
	return s
}

// Build returns the cluster of a shape (every GPU model "H100").
func (sh ClusterShape) Build() (*topo.Cluster, error) {
	return topo.New(topo.Uniform(sh.Levels, sh.Fanout, sh.NodesPerLeaf, sh.GPUsPerNode, "H100"))
}

// Fill names a standard fill.
type Fill string

const (
	Random60 Fill = "random60"
	Skewed60 Fill = "skewed60"
)

// FillStats summarises a fill.
type FillStats struct {
	Used, Jobs int
	Checksum   uint64
}

// ApplyFill runs a standard fill (seed 42) on an empty snapshot, allocating
// each job's GPUs (its node's lowest free ones).
func ApplyFill(s *topo.Snapshot, sh ClusterShape, f Fill) (FillStats, error) {
	c := s.Cluster()
	nn := c.NumNodes()
	free := make([]int, nn)
	for i := range free {
		free[i] = s.NodeAvailable(topo.NodeID(i))
	}
	// One Fenwick tree per size over "node has >= size free GPUs", so the
	// k-th candidate is a log-time query.
	fw := make([]fenwick, len(sh.FillSizes))
	for si, size := range sh.FillSizes {
		fw[si] = newFenwick(nn)
		for i, f := range free {
			if f >= size {
				fw[si].add(i, 1)
			}
		}
	}
	nodesPerBlock := nn / sh.Fanout[0]
	rng := NewSplitMix64(42)
	target := (c.NumGPUs()*60 + 99) / 100
	st := FillStats{}
	for st.Used < target {
		si := int(rng.Draw(uint64(len(sh.FillSizes))))
		size := sh.FillSizes[si]
		total := fw[si].prefix(nn)
		if total == 0 {
			if size == 1 {
				break
			}
			continue
		}
		var node int
		switch f {
		case Random60:
			node = fw[si].find(int(rng.Draw(uint64(total))))
		case Skewed60:
			w := 0
			for b := range sh.Fanout[0] {
				if fw[si].rangeSum(b*nodesPerBlock, (b+1)*nodesPerBlock) > 0 {
					w += b + 1
				}
			}
			x := int(rng.Draw(uint64(w)))
			run := 0
			for b := range sh.Fanout[0] {
				cnt := fw[si].rangeSum(b*nodesPerBlock, (b+1)*nodesPerBlock)
				if cnt == 0 {
					continue
				}
				run += b + 1
				if run > x {
					before := fw[si].prefix(b * nodesPerBlock)
					node = fw[si].find(before + int(rng.Draw(uint64(cnt))))
					break
				}
			}
		default:
			return st, fmt.Errorf("unknown fill %q", f)
		}
		first, g := c.NodeGPUs(topo.NodeID(node))
		used := g - free[node]
		gpus := make([]uint32, size)
		for i := range gpus {
			gpus[i] = first + uint32(used+i)
		}
		if err := s.Allocate(gpus); err != nil {
			return st, err
		}
		old := free[node]
		free[node] -= size
		for sj, sz := range sh.FillSizes {
			if old >= sz && free[node] < sz {
				fw[sj].add(node, -1)
			}
		}
		st.Used += size
		st.Jobs++
	}
	h := fnv.New64a()
	for i := range nn {
		_, g := c.NodeGPUs(topo.NodeID(i))
		fmt.Fprintf(h, "%d:%d;", i, g-free[i])
	}
	st.Checksum = h.Sum64()
	return st, nil
}

type fenwick []int

func newFenwick(n int) fenwick { return make(fenwick, n+1) }

func (f fenwick) add(i, d int) {
	for i++; i < len(f); i += i & -i {
		f[i] += d
	}
}

// prefix returns the sum of [0, i).
func (f fenwick) prefix(i int) int {
	s := 0
	for ; i > 0; i -= i & -i {
		s += f[i]
	}
	return s
}

func (f fenwick) rangeSum(lo, hi int) int { return f.prefix(hi) - f.prefix(lo) }

// find returns the smallest index i with prefix(i+1) > k (the k-th one, 0-based).
func (f fenwick) find(k int) int {
	pos := 0
	for step := 1 << bits.Len(uint(len(f)-1)); step > 0; step >>= 1 {
		if next := pos + step; next < len(f) && f[next] <= k {
			pos = next
			k -= f[next]
		}
	}
	return pos
}

// Gang returns a standard gang: A, B, C on block > rack clusters, N on
// NVL72x128.
func Gang(name string) (gang.Request, error) {
	switch name {
	case "A":
		return gang.Request{Groups: []gang.Group{{Members: 32, GPUsPerMember: 8}}, Required: "block", Preferred: "rack"}, nil
	case "B":
		return gang.Request{Groups: []gang.Group{{Members: 256, GPUsPerMember: 1}}, Required: "block"}, nil
	case "C":
		return gang.Request{Groups: []gang.Group{{Members: 32, GPUsPerMember: 8}}, Preferred: "rack"}, nil
	case "N":
		return gang.Request{Groups: []gang.Group{{Members: 64, GPUsPerMember: 4}}, Required: "block", Preferred: "nvlink"}, nil
	}
	return gang.Request{}, fmt.Errorf("unknown standard gang %q", name)
}

// Bound returns the best possible spread of a single-group gang at the
// finest level above the node (racks or NVLink domains): the fewest such
// domains whose free capacity, in whole members, holds the gang inside one
// domain of the required level (the whole cluster if none). Zero when no
// placement exists. It is computed independently of gang.Place, from the
// per-node state.
func Bound(s *topo.Snapshot, r gang.Request) int {
	c := s.Cluster()
	g := r.Groups[0]
	lr := 0
	if r.Required != "" {
		lr, _ = c.Level(r.Required)
	}
	lp := len(c.Levels()) - 1
	best := 0
	for d := range c.NumDomains(lr) {
		lo, hi := c.Descendants(lr, d, lp)
		var caps []int
		for p := lo; p < hi; p++ {
			info := c.Domain(lp, p)
			n := 0
			for id := info.FirstNode; id < info.EndNode; id++ {
				n += s.NodeAvailable(id) / g.GPUsPerMember
			}
			caps = append(caps, n)
		}
		// fewest domains: largest first
		for i := range caps {
			for j := i + 1; j < len(caps); j++ {
				if caps[j] > caps[i] {
					caps[i], caps[j] = caps[j], caps[i]
				}
			}
		}
		sum := 0
		for m, cp := range caps {
			sum += cp
			if sum >= g.Members {
				if best == 0 || m+1 < best {
					best = m + 1
				}
				break
			}
		}
	}
	return best
}

// BoundBlocks returns the fewest blocks (domains of level 1, the coarsest
// below the cluster) that a placement of a single-group gang on Bound(s, r)
// racks can use: 1 when the gang requires a block or a finer level, else
// the least k such that some k blocks hold the gang in their Bound(s, r)
// largest racks. Zero when no placement exists. Like Bound it is computed
// from the per-node state, by trying sets of blocks (pruned by the sum of
// the blocks' own best racks), independently of gang.Place.
func BoundBlocks(s *topo.Snapshot, r gang.Request) int {
	m := Bound(s, r)
	if m == 0 {
		return 0
	}
	c := s.Cluster()
	if r.Required != "" {
		if lr, _ := c.Level(r.Required); lr >= 1 {
			return 1
		}
	}
	g := r.Groups[0]
	lp := len(c.Levels()) - 1
	type block struct {
		racks []int // capacities, descending
		top   int   // sum of the m largest
	}
	var blocks []block
	for b := range c.NumDomains(1) {
		lo, hi := c.Descendants(1, b, lp)
		var bl block
		for p := lo; p < hi; p++ {
			info := c.Domain(lp, p)
			n := 0
			for id := info.FirstNode; id < info.EndNode; id++ {
				n += s.NodeAvailable(id) / g.GPUsPerMember
			}
			if n > 0 {
				bl.racks = append(bl.racks, n)
			}
		}
		slices.SortFunc(bl.racks, func(a, b int) int { return b - a })
		for _, v := range bl.racks[:min(m, len(bl.racks))] {
			bl.top += v
		}
		if bl.top > 0 {
			blocks = append(blocks, bl)
		}
	}
	slices.SortStableFunc(blocks, func(a, b block) int { return b.top - a.top })
	topOf := func(set []int) int {
		var all []int
		for _, i := range set {
			all = append(all, blocks[i].racks...)
		}
		slices.SortFunc(all, func(a, b int) int { return b - a })
		sum := 0
		for _, v := range all[:min(m, len(all))] {
			sum += v
		}
		return sum
	}
	var try func(k, from, ub int, set []int) bool
	try = func(k, from, ub int, set []int) bool {
		if len(set) == k {
			return topOf(set) >= g.Members
		}
		for i := from; i <= len(blocks)-(k-len(set)); i++ {
			// blocks are sorted by top: the best completion adds the next ones
			rest := 0
			for j := i; j < i+k-len(set); j++ {
				rest += blocks[j].top
			}
			if ub+rest < g.Members {
				return false
			}
			if try(k, i+1, ub+blocks[i].top, append(set, i)) {
				return true
			}
		}
		return false
	}
	for k := 1; k <= m; k++ {
		if try(k, 0, 0, nil) {
			return k
		}
	}
	return 0
}
