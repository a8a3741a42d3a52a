package engine

import (
	"fmt"
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// placement is where a job's members are, in cluster GPU indices.
type placement struct {
	members []pmember
	gpus    []uint32 // every GPU, ascending
}

type pmember struct {
	group    int32
	node     topo.NodeID
	gpus     []uint32 // cluster indices, ascending
	cpu, mem int64
}

// fromResult copies a gang.Result (whose slices belong to the placer).
func fromResult(res *gang.Result) *placement {
	p := &placement{members: make([]pmember, len(res.Members))}
	all := res.GPUs()
	p.gpus = make([]uint32, len(all))
	copy(p.gpus, all)
	for i, m := range res.Members {
		cpu, mem := res.Host(i)
		p.members[i] = pmember{group: m.Group, node: m.Node, cpu: cpu, mem: mem}
		p.members[i].gpus = p.gpus[m.GPULo:m.GPUHi:m.GPUHi]
	}
	p.gpus = slices.Clone(p.gpus)
	slices.Sort(p.gpus)
	return p
}

// rebuildAll recomputes the sorted GPU list from the members.
func (p *placement) rebuildAll() {
	p.gpus = p.gpus[:0]
	for _, m := range p.members {
		p.gpus = append(p.gpus, m.gpus...)
	}
	slices.Sort(p.gpus)
}

func (p *placement) hasHost() bool {
	for _, m := range p.members {
		if m.cpu != 0 || m.mem != 0 {
			return true
		}
	}
	return false
}

// book allocates the placement on s, all or nothing.
func (p *placement) book(s *topo.Snapshot) error {
	if err := s.Allocate(p.gpus); err != nil {
		return err
	}
	if !p.hasHost() {
		return nil
	}
	for i, m := range p.members {
		if err := s.AllocateHost(m.node, m.cpu, m.mem); err != nil {
			for j := i - 1; j >= 0; j-- {
				_ = s.ReleaseHost(p.members[j].node, p.members[j].cpu, p.members[j].mem) // booked above
			}
			_ = s.Release(p.gpus) // booked above
			return err
		}
	}
	return nil
}

// unbook releases what book booked. Errors mean the engine's books and the
// snapshot disagree: a broken invariant.
func (p *placement) unbook(s *topo.Snapshot) {
	if err := s.Release(p.gpus); err != nil {
		panic(fmt.Sprintf("engine: broken invariant: release of a booked placement: %v", err))
	}
	for _, m := range p.members {
		if m.cpu != 0 || m.mem != 0 {
			if err := s.ReleaseHost(m.node, m.cpu, m.mem); err != nil {
				panic(fmt.Sprintf("engine: broken invariant: host release: %v", err))
			}
		}
	}
}

// toMembers renders members with node names and node-local GPU indices.
func toMembers(c *topo.Cluster, ms []pmember) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		first, _ := c.NodeGPUs(m.node)
		local := make([]int, len(m.gpus))
		for k, g := range m.gpus {
			local[k] = int(g - first)
		}
		out[i] = Member{Group: int(m.group), Node: c.NodeName(m.node), GPUs: local, CPUMilli: m.cpu, MemoryMiB: m.mem}
	}
	return out
}

// fromMembers resolves members given by node name and local indices.
func fromMembers(c *topo.Cluster, ms []Member) (*placement, error) {
	p := &placement{members: make([]pmember, len(ms))}
	for i, m := range ms {
		id, ok := c.NodeByName(m.Node)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownNode, m.Node)
		}
		first, n := c.NodeGPUs(id)
		gpus := make([]uint32, len(m.GPUs))
		for k, l := range m.GPUs {
			if l < 0 || l >= n {
				return nil, fmt.Errorf("%w: node %q has no GPU %d", ErrInvalidEvent, m.Node, l)
			}
			gpus[k] = first + uint32(l)
		}
		slices.Sort(gpus)
		if m.CPUMilli < 0 || m.MemoryMiB < 0 {
			return nil, fmt.Errorf("%w: negative host resources on node %q", ErrInvalidEvent, m.Node)
		}
		p.members[i] = pmember{group: int32(m.Group), node: id, gpus: gpus, cpu: m.CPUMilli, mem: m.MemoryMiB}
	}
	p.rebuildAll()
	return p, nil
}

// remap moves a placement onto a rebuilt cluster by node name and GPU
// offset within the node.
func remap(old, nw *topo.Cluster, p *placement) (*placement, error) {
	return fromMembers(nw, toMembers(old, p.members))
}

// onNode reports whether any member runs on node id.
func (p *placement) onNode(id topo.NodeID) bool {
	for _, m := range p.members {
		if m.node == id {
			return true
		}
	}
	return false
}
