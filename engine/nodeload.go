package engine

import (
	"math/bits"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// Request returns the gang request the engine places for the pending job
// (for an elastic job, at its current member count), and false for a
// status not made by the engine. The request is the engine's: read only.
// Node autoscaling (package autoscale) plans nodes from it.
func (s PendingStatus) Request() (gang.Request, bool) {
	if s.js == nil {
		return gang.Request{}, false
	}
	return s.js.req, true
}

// NodeLoad is one node as the engine books it now.
type NodeLoad struct {
	Name  string
	State topo.NodeState
	// GPUs counts the node's GPUs; FreeGPUs its unallocated ones (whole
	// GPUs no job, share or MIG instance holds), whatever its state.
	GPUs, FreeGPUs int
	// Members counts the members of jobs (running, stopping, or being
	// bound) placed on it.
	Members int
	// Reserved: a reservation of the latest cycle (View.Reservations)
	// holds GPUs of it.
	Reserved bool
}

// Idle reports whether nothing runs on the node: no member, every GPU
// free.
func (l NodeLoad) Idle() bool { return l.Members == 0 && l.FreeGPUs == l.GPUs }

// NodeLoads returns every node of the cluster, in cluster order, with
// its bookings now and whether the latest cycle's reservations hold it.
// It walks the jobs the engine holds: call it now and then (node
// autoscaling does, once an interval), not per cycle. Like Step, it is
// for the engine's owner only.
func (e *Engine) NodeLoads() []NodeLoad {
	c := e.cluster
	out := make([]NodeLoad, c.NumNodes())
	for i := range out {
		id := topo.NodeID(i)
		_, n := c.NodeGPUs(id)
		out[i] = NodeLoad{Name: c.NodeName(id), State: e.snap.NodeState(id), GPUs: n,
			FreeGPUs: bits.OnesCount64(e.snap.NodeFreeMask(id))}
	}
	for _, js := range e.jobs {
		if js.place == nil {
			continue
		}
		for _, m := range js.place.members {
			if int(m.node) < len(out) {
				out[m.node].Members++
			}
		}
	}
	if v := e.view.Load(); v != nil {
		for _, r := range v.Reservations {
			if r.GPUs == nil {
				continue
			}
			it := r.GPUs.Iterator()
			for it.HasNext() {
				if id, err := c.NodeOfGPU(it.Next()); err == nil && int(id) < len(out) {
					out[id].Reserved = true
				}
			}
		}
	}
	return out
}
