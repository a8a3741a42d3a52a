package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berthsched/berth/topo"
)

// ErrDevicesMismatch: a DevicesReported event does not fit the job's
// placement (the job is not running, a node is missing or extra, a node
// reports another GPU count, a GPU is out of range or listed twice, the
// job has fractional members), or the reported GPUs are held by something
// the engine cannot move (a MIG instance, a share). Nothing changed.
var ErrDevicesMismatch = errors.New("engine: reported devices do not match the placement")

// DevicesReported returns an event by which a backend reports the GPUs a
// running job's members actually hold, for backends that choose GPU
// indices inside a node themselves (SLURM). Members name nodes and
// node-local GPU indices; members on the same node may be reported as one
// member holding all of the job's GPUs there. Only whole-GPU members.
//
// The engine books the job onto exactly those GPUs, on the same nodes
// with the same count per node. A GPU it had booked for another running
// job moves that job, on the same node and with the same count, onto the
// GPUs the reporting job gave up, so once every job on a node has
// reported, the books match the backend. Claims of preemptors on the GPUs
// that moved are dropped (the preemptor is placed again). Errors:
// ErrUnknownJob, ErrDevicesMismatch (also wrapping ErrUnknownNode for a
// node the cluster lacks).
func DevicesReported(at time.Time, job string, members []Member) Event {
	return Event{Kind: EventDevicesReported, Time: at, JobID: job, Members: members}
}

// Members returns the members a running or stopping job holds, with node
// names and node-local GPU indices, or false when the job does not run.
// The result is the caller's.
func (e *Engine) Members(job string) ([]Member, bool) {
	js := e.jobs[job]
	if js == nil || js.place == nil {
		return nil, false
	}
	return toMembers(e.cluster, js.place.members), true
}

func (e *Engine) devicesReported(id string, ms []Member) error {
	js, err := e.lookup(id)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: job %q: "+format, append([]any{ErrDevicesMismatch, id}, args...)...)
	}
	if js.place == nil {
		return bad("not running")
	}
	if js.place.shared {
		return bad("fractional members are not re-booked")
	}
	// What the backend reports and what the engine booked, by node.
	want := map[topo.NodeID][]uint32{}
	for _, m := range ms {
		if m.Fractional {
			return bad("fractional member reported on node %q", m.Node)
		}
		nid, ok := e.cluster.NodeByName(m.Node)
		if !ok {
			return fmt.Errorf("%w: %w: %q", ErrDevicesMismatch, ErrUnknownNode, m.Node)
		}
		first, n := e.cluster.NodeGPUs(nid)
		for _, l := range m.GPUs {
			if l < 0 || l >= n {
				return bad("node %q has no GPU %d", m.Node, l)
			}
			want[nid] = append(want[nid], first+uint32(l))
		}
	}
	have := map[topo.NodeID][]uint32{}
	for _, m := range js.place.members {
		have[m.node] = append(have[m.node], m.gpus...)
	}
	var nodes []topo.NodeID
	for nid := range want {
		nodes = append(nodes, nid)
	}
	slices.Sort(nodes)
	for _, nid := range nodes {
		w := want[nid]
		slices.Sort(w)
		if len(slices.Compact(slices.Clone(w))) != len(w) {
			return bad("a GPU listed twice on node %q", e.cluster.NodeName(nid))
		}
		if len(have[nid]) != len(w) {
			return bad("node %q reports %d GPUs, the job holds %d there", e.cluster.NodeName(nid), len(w), len(have[nid]))
		}
	}
	for nid := range have {
		if _, ok := want[nid]; !ok {
			return bad("no report for node %q", e.cluster.NodeName(nid))
		}
	}

	// Other jobs' whole GPUs on these nodes, and the substitutions: a GPU
	// the report takes from another job moves that job onto one the
	// reporting job gave up (ascending with ascending, deterministic).
	// (A whole GPU has one owner; were it booked twice, the job with the
	// greatest ID would be its owner, whatever the map's order.)
	owner := map[uint32]*job{}
	for _, o := range e.active {
		if o == js || o.place == nil {
			continue
		}
		for _, m := range o.place.members {
			if _, ok := want[m.node]; ok && !m.shared {
				for _, g := range m.gpus {
					if p := owner[g]; p == nil || p.j.ID < o.j.ID {
						owner[g] = o
					}
				}
			}
		}
	}
	subst := map[uint32]uint32{}
	moved := map[*job]bool{}
	changed := map[uint32]bool{}
	for _, nid := range nodes {
		h := slices.Sorted(slices.Values(have[nid]))
		w := want[nid]
		var gone, taken []uint32
		for _, g := range h {
			if _, in := slices.BinarySearch(w, g); !in {
				gone = append(gone, g)
			}
		}
		for _, g := range w {
			if _, in := slices.BinarySearch(h, g); !in {
				taken = append(taken, g)
			}
		}
		// Pair the taken GPUs that others hold with the gone ones in order.
		k := 0
		for i, g := range taken {
			changed[g], changed[gone[i]] = true, true
			if o := owner[g]; o != nil {
				subst[g] = gone[k]
				k++
				moved[o] = true
			}
		}
	}
	if len(changed) == 0 {
		return nil // already booked where the backend says
	}

	// The new placements.
	np := &placement{members: slices.Clone(js.place.members), sreq: js.place.sreq}
	next := map[topo.NodeID]int{}
	for i := range np.members {
		m := &np.members[i]
		w := want[m.node]
		m.gpus = slices.Clone(w[next[m.node] : next[m.node]+len(m.gpus)])
		next[m.node] += len(m.gpus)
	}
	np.rebuildAll()
	var others []*job
	for o := range moved {
		others = append(others, o)
	}
	slices.SortFunc(others, func(a, b *job) int {
		if a.j.ID < b.j.ID {
			return -1
		}
		return 1
	})
	newOf := map[*job]*placement{js: np}
	for _, o := range others {
		p := &placement{members: slices.Clone(o.place.members), sreq: o.place.sreq, shared: o.place.shared}
		for i := range p.members {
			m := &p.members[i]
			if m.shared {
				continue
			}
			gs := slices.Clone(m.gpus)
			for k, g := range gs {
				if to, ok := subst[g]; ok {
					gs[k] = to
				}
			}
			slices.Sort(gs)
			m.gpus = gs
		}
		p.rebuildAll()
		newOf[o] = p
	}
	order := append([]*job{js}, others...)

	// Re-book: the nodes of every affected job (a moved job's other
	// members may sit on nodes the report does not name) are made ready
	// for the swap (Allocate books only on ready nodes), every affected
	// job is released, then booked anew; on failure the old books come
	// back.
	touched := slices.Clone(nodes)
	for _, o := range order {
		for _, m := range o.place.members {
			touched = append(touched, m.node)
		}
	}
	slices.Sort(touched)
	nodes = slices.Compact(touched)
	states := make([]topo.NodeState, len(nodes))
	for i, nid := range nodes {
		states[i] = e.snap.NodeState(nid)
		if err := e.snap.SetNodeState(nid, topo.Ready); err != nil {
			panic(fmt.Sprintf("engine: broken invariant: node state: %v", err))
		}
	}
	defer func() {
		for i, nid := range nodes {
			if err := e.snap.SetNodeState(nid, states[i]); err != nil {
				panic(fmt.Sprintf("engine: broken invariant: node state: %v", err))
			}
		}
	}()
	for _, o := range order {
		o.place.unbook(e.snap)
	}
	for i, o := range order {
		if err := newOf[o].rebook(e.snap); err != nil {
			for _, b := range order[:i] {
				newOf[b].unbook(e.snap)
			}
			for _, b := range order {
				if rerr := b.place.rebook(e.snap); rerr != nil {
					panic(fmt.Sprintf("engine: broken invariant: restoring %q: %v", b.j.ID, rerr))
				}
			}
			return bad("%v", err)
		}
	}
	for _, o := range order {
		o.place = newOf[o]
		e.runUpsert(o)
	}
	// A preemptor's claim on GPUs that changed hands no longer matches its
	// victims: it is dropped and the preemptor placed again.
	for _, cid := range sortedKeys(e.claims) {
		for _, g := range e.claims[cid].place.claimGPUs() {
			if changed[g] {
				delete(e.claims, cid)
				break
			}
		}
	}
	return nil
}
