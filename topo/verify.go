package topo

import (
	"fmt"
	"math/bits"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
)

// Verify recomputes every counter and the free set from the per-node state
// and reports the first disagreement. It costs O(nodes x levels) and exists
// for tests, fuzzers and paranoid callers; a non-nil result is a bug.
func (s *Snapshot) Verify() error {
	c := s.c
	want := c.NewSnapshot() // fresh counters, then replay node state
	free := roaring.New()
	alloc := 0
	for i := range c.nodes {
		id := NodeID(i)
		n := &c.nodes[i]
		st := s.NodeState(id)
		m := s.NodeFreeMask(id)
		if m&^mask(int(n.gpus)) != 0 {
			return fmt.Errorf("node %q: free mask %#x has bits beyond its %d GPUs", n.name, m, n.gpus)
		}
		alloc += int(n.gpus) - bits.OnesCount64(m)
		if n.state0 == Ready {
			want.count(id, bits.OnesCount64(want.NodeFreeMask(id)), -1)
		}
		if err := s.verifyShared(id); err != nil {
			return err
		}
		if st == Ready {
			want.count(id, bits.OnesCount64(m), +1)
			for mm := m; mm != 0; mm &= mm - 1 {
				free.Add(n.base + uint32(bits.TrailingZeros64(mm)))
			}
		}
		cpu, mem := s.NodeHostFree(id)
		if cpu < 0 || cpu > n.cpuMilli || mem < 0 || mem > n.hostMiB {
			return fmt.Errorf("node %q: host free cpu %d mem %d outside [0, %d/%d]", n.name, cpu, mem, n.cpuMilli, n.hostMiB)
		}
	}
	if alloc != s.allocated {
		return fmt.Errorf("allocated count %d, recomputed %d", s.allocated, alloc)
	}
	if fs := s.FreeSet(); !free.Equals(fs) {
		return fmt.Errorf("free set has %d GPUs, recomputed %d", fs.GetCardinality(), free.GetCardinality())
	}
	for l := range c.levels {
		for d := range c.doms[l] {
			got, exp := s.cntR(l, d), want.cntR(l, d)
			for i := range got {
				if got[i] != exp[i] {
					return fmt.Errorf("level %q domain %q: counter %d is %d, recomputed %d", c.levels[l], c.doms[l][d].name, i, got[i], exp[i])
				}
			}
			if int(got[0]) != int(free.CardinalityInRange(uint64(c.doms[l][d].gpuLo), uint64(c.doms[l][d].gpuHi))) {
				return fmt.Errorf("level %q domain %q: free count %d disagrees with the free set", c.levels[l], c.doms[l][d].name, got[0])
			}
		}
	}
	return nil
}

// Uniform returns the spec of a regular cluster: fanout[i] domains of
// Levels[i] inside each domain of the level above, then nodes per finest
// domain, each with gpusPerNode GPUs of one model. Domains are named by
// the first letter of their level and their index inside the parent (b0,
// r3); nodes are named n<ID> and numbered in order, so on a
// block > rack > node cluster node index = (block x racks + rack) x nodes + n.
func Uniform(levels []string, fanout []int, nodesPerDomain, gpusPerNode int, model string) Spec {
	spec := Spec{Levels: append([]string(nil), levels...)}
	total := nodesPerDomain
	for _, f := range fanout {
		total *= f
	}
	spec.Nodes = make([]NodeSpec, total)
	doms := make([]string, len(levels)*total)
	for i := range total {
		rest := i / nodesPerDomain
		for l := len(levels) - 1; l >= 0; l-- {
			prefix := "d"
			if levels[l] != "" {
				prefix = levels[l][:1]
			}
			doms[i*len(levels)+l] = prefix + strconv.Itoa(rest%fanout[l])
			rest /= fanout[l]
		}
		spec.Nodes[i] = NodeSpec{
			Name: "n" + strconv.Itoa(i), Domains: doms[i*len(levels) : (i+1)*len(levels) : (i+1)*len(levels)],
			GPUs: gpusPerNode, GPUModel: model,
		}
	}
	return spec
}
