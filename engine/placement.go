package engine

import (
	"fmt"
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// placement is where a job's members are, in cluster GPU indices.
//
// Fractional and MIG members (shared members) hold a MIG instance or a
// share of one GPU (their gpus has that one GPU); the GPU is booked by the
// snapshot's pool, not whole, so it is not in gpus of the placement.
type placement struct {
	members []pmember
	gpus    []uint32 // every whole GPU, ascending
	// sreq is what each shared member asks (single-group gangs only).
	sreq   mig.Request
	shared bool
}

// membersOne holds the Members of a bind of one member of up to eight
// GPUs (toMembers).
type membersOne struct {
	m [1]Member
	l [8]int
}

// placementOne is a placement with room for one member of up to two
// GPUs, allocated together (fromResult).
type placementOne struct {
	placement
	one  [1]pmember
	gbuf [4]uint32
}

type pmember struct {
	group    int32
	node     topo.NodeID
	gpus     []uint32 // cluster indices, ascending
	cpu, mem int64
	// shared: the member holds grant on gpus[0] (zero until booked).
	shared bool
	grant  mig.Grant
}

// sharedRequest is the MIG / share request of a fractional group.
func sharedRequest(g *gang.Group) (mig.Request, bool) {
	if g.GPUMilli > 0 || g.MIGProfile != "" {
		return mig.Request{Milli: g.GPUMilli, Profile: g.MIGProfile, MemoryMiB: g.GPUMemoryMiB}, true
	}
	return mig.Request{}, false
}

// fromResult copies a gang.Result (whose slices belong to the placer) of
// request r.
func fromResult(res *gang.Result, r *gang.Request) *placement {
	all := res.GPUs()
	var p *placement
	// One array: the members' GPUs in member order, then (whole GPUs
	// only) the same sorted.
	var buf []uint32
	if len(res.Members) == 1 && 2*len(all) <= len(placementOne{}.gbuf) {
		// One allocation for a placement of one member of a few GPUs
		// (one pod of a replay, a small job).
		o := &placementOne{}
		p, buf = &o.placement, o.gbuf[:2*len(all)]
		p.members = o.one[:]
	} else {
		p = &placement{members: make([]pmember, len(res.Members))}
		buf = make([]uint32, 2*len(all))
	}
	p.gpus = buf[:len(all):len(all)]
	copy(p.gpus, all)
	for i, m := range res.Members {
		cpu, mem := res.Host(i)
		p.members[i] = pmember{group: m.Group, node: m.Node, cpu: cpu, mem: mem}
		p.members[i].gpus = p.gpus[m.GPULo:m.GPUHi:m.GPUHi]
		if sr, ok := sharedRequest(&r.Groups[m.Group]); ok {
			p.members[i].shared = true
			p.sreq, p.shared = sr, true
		}
	}
	if p.shared {
		p.rebuildAll()
		return p
	}
	p.gpus = append(buf[len(all):len(all)], p.gpus...)
	slices.Sort(p.gpus)
	return p
}

// rebuildAll recomputes the sorted list of whole GPUs from the members.
func (p *placement) rebuildAll() {
	var out []uint32
	if !p.shared {
		out = p.gpus[:0]
	}
	for _, m := range p.members {
		if !m.shared {
			out = append(out, m.gpus...)
		}
	}
	slices.Sort(out)
	p.gpus = out
}

func (p *placement) hasHost() bool {
	for _, m := range p.members {
		if m.cpu != 0 || m.mem != 0 {
			return true
		}
	}
	return false
}

// book allocates the placement on s, all or nothing. Shared members take
// a fresh instance or share of their GPU (AllocateShared); their grants are
// recorded in the members.
func (p *placement) book(s *topo.Snapshot) error {
	return p.bookWith(s, false)
}

// rebook books the placement again on s with the grants its shared members
// hold elsewhere (a rebuilt cluster, an adoption): the same MIG instances
// (claimed), shares of the same size on the same GPUs (new share IDs).
func (p *placement) rebook(s *topo.Snapshot) error {
	return p.bookWith(s, true)
}

func (p *placement) bookWith(s *topo.Snapshot, exact bool) error {
	if len(p.gpus) > 0 {
		if err := s.Allocate(p.gpus); err != nil {
			return err
		}
	}
	if p.shared {
		if err := p.bookShared(s, exact); err != nil {
			_ = s.Release(p.gpus) // booked above
			return err
		}
	}
	if !p.hasHost() {
		return nil
	}
	for i, m := range p.members {
		if err := s.AllocateHost(m.node, m.cpu, m.mem); err != nil {
			for j := i - 1; j >= 0; j-- {
				_ = s.ReleaseHost(p.members[j].node, p.members[j].cpu, p.members[j].mem) // booked above
			}
			p.unbookShared(s)
			_ = s.Release(p.gpus) // booked above
			return err
		}
	}
	return nil
}

// bookShared takes the grants of the shared members, all or nothing.
func (p *placement) bookShared(s *topo.Snapshot, exact bool) error {
	for i := range p.members {
		m := &p.members[i]
		if !m.shared {
			continue
		}
		var gr mig.Grant
		var err error
		if exact && !m.grant.IsShare() && m.grant.Instance.Profile.Valid() {
			gr, err = s.ClaimInstance(m.gpus[0], m.grant.Instance)
			gr.Created = m.grant.Created
		} else {
			gr, err = s.AllocateShared(m.gpus[0], p.sreq)
		}
		if err != nil {
			for j := i - 1; j >= 0; j-- {
				if p.members[j].shared {
					_ = s.ReleaseShared(p.members[j].grant) // granted above
				}
			}
			return err
		}
		m.grant = gr
	}
	return nil
}

// unbookShared gives back the shared members' grants.
func (p *placement) unbookShared(s *topo.Snapshot) {
	for j := len(p.members) - 1; j >= 0; j-- {
		if m := &p.members[j]; m.shared {
			if err := s.ReleaseShared(m.grant); err != nil {
				panic(fmt.Sprintf("engine: broken invariant: release of a grant: %v", err))
			}
		}
	}
}

// unbook releases what book booked. Errors mean the engine's books and the
// snapshot disagree: a broken invariant.
func (p *placement) unbook(s *topo.Snapshot) {
	if len(p.gpus) > 0 {
		if err := s.Release(p.gpus); err != nil {
			panic(fmt.Sprintf("engine: broken invariant: release of a booked placement: %v", err))
		}
	}
	if p.shared {
		p.unbookShared(s)
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
	n := 0
	for _, m := range ms {
		n += len(m.gpus)
	}
	var out []Member
	var locals []int // one array for every member's GPUs
	if len(ms) == 1 && n <= len(membersOne{}.l) {
		o := &membersOne{} // one allocation for a job of one member
		out, locals = o.m[:], o.l[:n:n]
	} else {
		out, locals = make([]Member, len(ms)), make([]int, n)
	}
	for i, m := range ms {
		first, _ := c.NodeGPUs(m.node)
		local := locals[:len(m.gpus):len(m.gpus)]
		locals = locals[len(m.gpus):]
		for k, g := range m.gpus {
			local[k] = int(g - first)
		}
		out[i] = Member{Group: int(m.group), Node: c.NodeName(m.node), GPUs: local, CPUMilli: m.cpu, MemoryMiB: m.mem}
		if m.shared {
			out[i].Fractional = true
			out[i].Instance, out[i].Created, out[i].Share = m.grant.Instance, m.grant.Created, m.grant.Share
			if m.grant.IsShare() {
				out[i].Share.GPU = uint32(local[0])
			}
		}
	}
	return out
}

// fromMembers resolves members given by node name and local indices.
// Fractional members carry their grant (MIG instance or share); sreq is
// what they ask.
func fromMembers(c *topo.Cluster, ms []Member, sreq mig.Request) (*placement, error) {
	p := &placement{members: make([]pmember, len(ms)), sreq: sreq}
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
		if m.Fractional {
			if len(gpus) != 1 {
				return nil, fmt.Errorf("%w: a fractional member on node %q needs exactly one GPU, has %d", ErrInvalidEvent, m.Node, len(gpus))
			}
			p.shared = true
			p.members[i].shared = true
			p.members[i].grant = mig.Grant{GPU: gpus[0], Instance: m.Instance, Created: m.Created, Share: m.Share}
			if m.Share.ID != 0 {
				p.members[i].grant.Share.GPU = gpus[0]
			}
		}
	}
	p.rebuildAll()
	return p, nil
}

// remap moves a placement onto a rebuilt cluster by node name and GPU
// offset within the node.
func remap(old, nw *topo.Cluster, p *placement) (*placement, error) {
	return fromMembers(nw, toMembers(old, p.members), p.sreq)
}

// weight is the GPUs a placement holds, fractional members counted by
// their share of the GPU (MIG instances by compute slices).
func (p *placement) weight() float64 {
	w := float64(len(p.gpus))
	for _, m := range p.members {
		if m.shared {
			w += grantMilli(m.grant, p.sreq) / 1000
		}
	}
	return w
}

// grantMilli is the part of its GPU a grant holds, in thousandths.
func grantMilli(gr mig.Grant, r mig.Request) float64 {
	switch {
	case gr.IsShare():
		return float64(gr.Share.Milli)
	case gr.Instance.Profile.Valid():
		return 1000 * float64(gr.Instance.Profile.ComputeSlices()) / float64(gr.Instance.Profile.Model().ComputeSlices())
	}
	return float64(r.Milli)
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

// whatIf returns p for what-if work: a copy whose grants may change
// (re-booking a share gives it a new ID) when p has shared members, else p
// itself.
func (p *placement) whatIf() *placement {
	if !p.shared {
		return p
	}
	cp := *p
	cp.members = slices.Clone(p.members)
	return &cp
}

// claimGPUs is every GPU a placement uses: its whole GPUs and the GPUs its
// shared members share, ascending, each once.
func (p *placement) claimGPUs() []uint32 {
	if !p.shared {
		return p.gpus
	}
	out := slices.Clone(p.gpus)
	for _, m := range p.members {
		if m.shared {
			out = append(out, m.gpus[0])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// created lists the grants of instances created for this placement.
func (p *placement) created() []mig.Grant {
	var out []mig.Grant
	for _, m := range p.members {
		if m.shared && m.grant.Created {
			out = append(out, m.grant)
		}
	}
	return out
}
