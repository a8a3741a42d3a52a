package gang

import (
	"slices"

	"github.com/berthsched/berth/topo"
)

// Possible reports whether Place could find a placement for r on s. It
// reads only the snapshot's counters (no node visited, nothing allocated)
// and answers false only when Place would find nothing: the cluster has
// fewer free GPUs than r's whole-GPU members need, or a group of whole GPUs
// without a selector or host resources has no domain of the required level
// with room for its members (or names a GPU model the cluster lacks). For
// single-group gangs of whole GPUs without selectors or host resources it
// is exact; for other requests it is a necessary condition. An unknown
// level answers true, for Place to report.
//
// Schedulers call it before Place to skip hopeless probes cheaply (the
// engine does so along its reservation timeline and in preemption).
func Possible(s *topo.Snapshot, r *Request) bool {
	return PossibleWithout(s, r, nil)
}

// Holdback is a set of free GPUs that a what-if takes away from a snapshot
// without booking them, for PossibleWithout: the engine holds back the
// GPUs of reservations a probe would overlap. The zero value holds nothing;
// Reset empties it for reuse (its memory is kept).
type Holdback struct {
	took   []int32       // per node: how many of its free GPUs are held
	listed []bool        // per node: in nodes
	nodes  []topo.NodeID // nodes that held GPUs since Reset (took may be 0 again)
	total  int
}

// Reset empties h.
func (h *Holdback) Reset() {
	for _, id := range h.nodes {
		h.took[id], h.listed[id] = 0, false
	}
	h.nodes = h.nodes[:0]
	h.total = 0
}

// Hold holds back one free GPU of node id. The caller holds each GPU at
// most once, and only GPUs free in the snapshot it asks about.
func (h *Holdback) Hold(id topo.NodeID) { h.Add(id, 1) }

// Add changes the GPUs held back on node id by d; a negative d gives
// held GPUs back, so that a caller can keep h up to date as GPUs come and
// go instead of building it again. The caller keeps each node's count
// between zero and the node's free GPUs in the snapshot it asks about.
func (h *Holdback) Add(id topo.NodeID, d int) {
	if int(id) >= len(h.took) {
		n := int(id) + 1 - len(h.took)
		h.took = append(h.took, make([]int32, n)...)
		h.listed = append(h.listed, make([]bool, n)...)
	}
	if !h.listed[id] {
		h.listed[id] = true
		h.nodes = append(h.nodes, id)
	}
	h.took[id] += int32(d)
	h.total += d
}

// Len is the number of GPUs held.
func (h *Holdback) Len() int {
	if h == nil {
		return 0
	}
	return h.total
}

// PossibleWithout is Possible on s with the GPUs of h allocated, computed
// from the counters without building that snapshot: a domain's member
// capacity loses, on each node with held GPUs, what those GPUs take from
// it. A nil or empty h is Possible.
func PossibleWithout(s *topo.Snapshot, r *Request, h *Holdback) bool {
	if r.GPUs() > s.Free()-h.Len() {
		return false
	}
	c := s.Cluster()
	lr := 0
	if r.Required != "" {
		l, err := c.Level(r.Required)
		if err != nil {
			return true // Place reports the unknown level
		}
		lr = l
	}
	for gi := range r.Groups {
		g := &r.Groups[gi]
		if g.GPUsPerMember == 0 || len(g.Selector) > 0 || g.CPUMilli > 0 || g.MemoryMiB > 0 {
			continue // the counters do not describe these groups
		}
		if len(g.GPUModels) > 1 {
			if !setHolds(s, lr, g, h) {
				return false
			}
			continue
		}
		model, name := -1, g.GPUModel
		if len(g.GPUModels) == 1 {
			name = g.GPUModels[0]
		}
		if name != "" {
			m, ok := c.ModelIndex(name)
			if !ok {
				return false
			}
			model = m
		}
		if !domainHolds(s, lr, g, model, h) {
			return false
		}
	}
	return true
}

// domainHolds reports whether some domain of level lr has room for g's
// members with h's GPUs held back.
func domainHolds(s *topo.Snapshot, lr int, g *Group, model int, h *Holdback) bool {
	for d := range s.Cluster().NumDomains(lr) {
		if capacityWithout(s, lr, d, g.GPUsPerMember, model, h) >= g.Members {
			return true
		}
	}
	return false
}

// capacityWithout is DomainCapacity(lr, d, per, model) less what h's
// GPUs take from it.
func capacityWithout(s *topo.Snapshot, lr, d, per, model int, h *Holdback) int {
	c := s.Cluster()
	capd := s.DomainCapacity(lr, d, per, model)
	if capd == 0 {
		return 0
	}
	for _, id := range h.heldNodes() {
		if c.DomainOf(id, lr) != d || (model >= 0 && c.NodeModel(id) != model) {
			continue
		}
		a := s.NodeAvailable(id)
		capd -= a/per - max(0, a-int(h.took[id]))/per
	}
	return capd
}

// setHolds is domainHolds for a group with several GPU models: the
// capacities of its models, summed (a member on any of them), or each
// alone (SameModel).
func setHolds(s *topo.Snapshot, lr int, g *Group, h *Holdback) bool {
	c := s.Cluster()
	for d := range c.NumDomains(lr) {
		sum := 0
		for i, name := range g.GPUModels {
			m, ok := c.ModelIndex(name)
			if !ok || slices.Contains(g.GPUModels[:i], name) {
				continue
			}
			n := capacityWithout(s, lr, d, g.GPUsPerMember, m, h)
			if g.SameModel {
				sum = max(sum, n)
			} else {
				sum += n
			}
		}
		if sum >= g.Members {
			return true
		}
	}
	return false
}

func (h *Holdback) heldNodes() []topo.NodeID {
	if h == nil {
		return nil
	}
	return h.nodes
}

// HoldN holds back k free GPUs of node id (k <= 0: none): Hold k times.
func (h *Holdback) HoldN(id topo.NodeID, k int) {
	if k <= 0 {
		return
	}
	h.Add(id, k)
}
