package score

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// State is the allocatable state that the policies read and the
// scheduler books: a *topo.Snapshot holds whole GPUs, host CPU / memory
// and, in its mig.Pool, the inside of shared GPUs.
//
// A GPU that holds any fractional share is booked ("allocated") in topo,
// so whole-GPU requests never take it; inside it the pool tracks the free
// milli (topo time-slices it with 1,000 replicas, so a share of u milli
// holds exactly u). When its last share leaves, topo frees the GPU
// (topo.Spec.ShareFreeGPUs). Scoring reads flat mirrors of both (free milli per
// GPU f_{n,g}, its node sum F_n, free CPU and memory, pod counts), kept in
// step by Bind and Unbind; Check verifies that they agree.
//
// A State is single-owner: not safe for concurrent use. Distinct States
// (over the same immutable *topo.Cluster) may be used by distinct
// goroutines.
type State struct {
	c         *topo.Cluster
	snap      *topo.Snapshot
	nodes     []nodeState
	free      []int16 // f per GPU, by global GPU index
	kinds     []int32 // per node, per Kind 0..maxGPUs: pods of that kind
	stride    int
	models    []string // per node
	maxPods   int
	allocated int64 // Σ_n (1000·G_n − F_n)
	capacity  int64 // Σ_n 1000·G_n
	stamp     uint64
	live      map[*Binding]struct{}
}

type nodeState struct {
	cpu, mem       int64 // free host resources
	cpuCap, memCap int64 // 0: untracked
	cpuFit, memFit int64 // the most a request may ask: free, or MaxInt64 when untracked
	first          uint32
	gpus           int32
	freeMilli      int32 // F_n
	maxFree        int32 // max_g f_{n,g}
	whole          int32 // completely free GPUs
	pods           int32
	distinctKinds  int32
	ready          bool
	version        uint64
}

// Options tune a State.
type Options struct {
	// MaxPods is the most requests one node holds; 0 means no limit. The
	// openb set-up uses 1,001.
	MaxPods int
}

// NewState returns the empty state of cluster c: every ready node
// allocatable, nothing booked. The cluster must be built with
// topo.Spec.ShareFreeGPUs, so that any plain GPU can take shares, and have
// no MIG or statically shared nodes; otherwise it fails with ErrBadCluster.
func NewState(c *topo.Cluster, o Options) (*State, error) {
	n := c.NumNodes()
	s := &State{
		c: c, snap: c.NewSnapshot(),
		nodes: make([]nodeState, n), free: make([]int16, c.NumGPUs()),
		stride: c.MaxGPUsPerNode() + 1, models: make([]string, n),
		maxPods: o.MaxPods, live: make(map[*Binding]struct{}),
	}
	s.kinds = make([]int32, n*s.stride)
	if !c.SharesFreeGPUs() {
		return nil, fmt.Errorf("%w: build the cluster with topo.Spec.ShareFreeGPUs", ErrBadCluster)
	}
	for g := range uint32(c.NumGPUs()) {
		s.free[g] = FullMilli
	}
	for id := range topo.NodeID(n) {
		if _, ok := c.NodeGPUConfig(id); ok {
			return nil, fmt.Errorf("%w: node %q has MIG or configured sharing; this model shares plain GPUs only", ErrBadCluster, c.NodeName(id))
		}
		info := c.Node(id)
		cpu, mem := s.snap.NodeHostFree(id)
		s.nodes[id] = nodeState{
			cpu: cpu, mem: mem, cpuCap: info.CPUMilli, memCap: info.MemoryMiB,
			first: info.FirstGPU, gpus: int32(info.GPUs),
			freeMilli: int32(FullMilli * info.GPUs), maxFree: FullMilli, whole: int32(info.GPUs),
			ready: s.snap.NodeState(id) == topo.Ready,
		}
		s.models[id] = info.GPUModel
		s.nodes[id].setFit()
		s.capacity += int64(FullMilli * info.GPUs)
	}
	return s, nil
}

// Cluster returns the cluster.
func (s *State) Cluster() *topo.Cluster { return s.c }

// Snapshot returns the topo snapshot that books whole GPUs (and GPUs
// booked for sharing) and host resources. Read it; do not book on it
// directly.
func (s *State) Snapshot() *topo.Snapshot { return s.snap }

// Pool returns the sharing state (the snapshot's). Read it; do not book on
// it directly.
func (s *State) Pool() mig.PoolReader { return s.snap.Pool() }

// NumNodes is the number of nodes.
func (s *State) NumNodes() int { return len(s.nodes) }

// NodeGPUs returns the number of GPUs of node n.
func (s *State) NodeGPUs(n topo.NodeID) int { return int(s.nodes[n].gpus) }

// NodeModel returns the GPU model of node n.
func (s *State) NodeModel(n topo.NodeID) string { return s.models[n] }

// FreeCPU returns the free CPU (milli) of node n, c_n. A node whose spec
// does not track CPU reports 0, and CPU requests always fit it.
func (s *State) FreeCPU(n topo.NodeID) int64 { return s.nodes[n].cpu }

// FreeMemory returns the free memory (MiB) of node n, with the same rule
// for untracked memory as FreeCPU.
func (s *State) FreeMemory(n topo.NodeID) int64 { return s.nodes[n].mem }

// GPUFree returns f_{n,g}, the free milli of GPU g (0-based, local to the
// node) of node n.
func (s *State) GPUFree(n topo.NodeID, g int) int {
	return int(s.free[s.nodes[n].first+uint32(g)])
}

// NodeFreeGPUMilli returns F_n = Σ_g f_{n,g}.
func (s *State) NodeFreeGPUMilli(n topo.NodeID) int { return int(s.nodes[n].freeMilli) }

// NodeWholeFree returns the number of completely free GPUs of node n.
func (s *State) NodeWholeFree(n topo.NodeID) int { return int(s.nodes[n].whole) }

// Pods returns the number of requests bound on node n.
func (s *State) Pods(n topo.NodeID) int { return int(s.nodes[n].pods) }

// KindCount returns how many requests of kind k are bound on node n.
func (s *State) KindCount(n topo.NodeID, k Kind) int {
	if k < 0 || int(k) >= s.stride {
		return 0
	}
	return int(s.kinds[int(n)*s.stride+int(k)])
}

// DistinctKinds returns the number of distinct kinds bound on node n (|A_n|
// of GpuClustering).
func (s *State) DistinctKinds(n topo.NodeID) int { return int(s.nodes[n].distinctKinds) }

// Version returns a stamp that changes whenever node n changes (a bind or
// unbind on it); policies use it to cache per-node work. Stamps are
// unique within one State.
func (s *State) Version(n topo.NodeID) uint64 { return s.nodes[n].version }

// Allocated returns the GPU milli allocated in the cluster,
// Σ_n (1000·G_n − F_n).
func (s *State) Allocated() int64 { return s.allocated }

// Capacity returns the cluster's GPU milli, Σ_n 1000·G_n.
func (s *State) Capacity() int64 { return s.capacity }

// nodeGPUs returns the free-milli mirror of node n's GPUs (read only).
func (s *State) nodeGPUs(n topo.NodeID) []int16 {
	ns := &s.nodes[n]
	return s.free[ns.first : ns.first+uint32(ns.gpus)]
}

// Fits reports whether r fits node n (the filter of docs/fgd.md, Scheduling one pod):
// node ready, CPU, memory, pod count, and for GPU requests the model, and
// room on the GPUs (k = 1: some GPU with f >= u; k > 1: at least k GPUs
// with f >= u, the greedy in-order assignment).
func (s *State) Fits(n topo.NodeID, r Request) bool {
	ns := &s.nodes[n]
	if !ns.ready || r.CPUMilli > ns.cpuFit || r.MemoryMiB > ns.memFit ||
		(s.maxPods > 0 && int(ns.pods) >= s.maxPods) {
		return false
	}
	if !r.UsesGPU() {
		return true
	}
	if len(r.Models) > 0 && !r.modelOK(s.models[n]) {
		return false
	}
	u := int32(r.Milli)
	switch {
	case r.GPUs == 1:
		return ns.maxFree >= u
	case u == FullMilli:
		return int(ns.whole) >= r.GPUs
	case r.GPUs > int(ns.gpus):
		return false
	}
	cnt := 0
	for _, f := range s.nodeGPUs(n) {
		if int32(f) >= u {
			cnt++
		}
	}
	return cnt >= r.GPUs
}

// DefaultGPUs returns the GPUs (local indices, ascending) that a request
// of several GPUs or of whole GPUs takes on node n: the lowest-index GPUs
// with f >= u, which for whole GPUs are the lowest-index completely free
// ones (docs/fgd.md, Scheduling one pod). It returns nil when they are not there.
func (s *State) DefaultGPUs(n topo.NodeID, r Request) []int {
	if !r.UsesGPU() {
		return nil
	}
	out := make([]int, 0, r.GPUs)
	for g, f := range s.nodeGPUs(n) {
		if int(f) >= r.Milli {
			out = append(out, g)
			if len(out) == r.GPUs {
				return out
			}
		}
	}
	return nil
}

// BestFitGPU returns the local GPU of node n with the smallest f >= u,
// the lower index on ties ("best" GPU selection), or -1.
func (s *State) BestFitGPU(n topo.NodeID, milli int) int {
	best, bf := -1, int16(math.MaxInt16)
	for g, f := range s.nodeGPUs(n) {
		if int(f) >= milli && f < bf {
			best, bf = g, f
		}
	}
	return best
}

// Placement is where one request goes: a node and, for GPU requests, the
// local GPU indices (len = Request.GPUs).
type Placement struct {
	Node topo.NodeID
	GPUs []int
}

// Binding is a request booked by Bind. Keep it to Unbind.
type Binding struct {
	Placement
	Request Request
	shares  []mig.Grant
	whole   []uint32 // GPUs booked whole in topo
}

// Bind books r at p: host resources, whole GPUs in topo, shares in the
// pool (booking a GPU in topo for sharing when it takes its first share).
// p.GPUs must list r.GPUs distinct local GPUs with room; it is ignored for
// CPU-only requests.
// It is all or nothing: on error (ErrBadRequest, ErrUnknownNode, ErrNoFit,
// or a wrapped topo / mig error) nothing changed.
func (s *State) Bind(p Placement, r Request) (*Binding, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if p.Node < 0 || int(p.Node) >= len(s.nodes) {
		return nil, fmt.Errorf("%w: %d", ErrUnknownNode, p.Node)
	}
	if !s.Fits(p.Node, r) {
		return nil, fmt.Errorf("%w: node %q", ErrNoFit, s.c.NodeName(p.Node))
	}
	ns := &s.nodes[p.Node]
	b := &Binding{Placement: Placement{Node: p.Node}, Request: r}
	if r.UsesGPU() {
		if len(p.GPUs) != r.GPUs {
			return nil, fmt.Errorf("%w: %d GPUs listed for %d", ErrNoFit, len(p.GPUs), r.GPUs)
		}
		var seen uint64
		for _, g := range p.GPUs {
			if g < 0 || g >= int(ns.gpus) || seen&(1<<uint(g)) != 0 {
				return nil, fmt.Errorf("%w: GPU %d of node %q", ErrNoFit, g, s.c.NodeName(p.Node))
			}
			seen |= 1 << uint(g)
			if int(s.free[ns.first+uint32(g)]) < r.Milli {
				return nil, fmt.Errorf("%w: GPU %d of node %q has %d milli free", ErrNoFit, g, s.c.NodeName(p.Node), s.free[ns.first+uint32(g)])
			}
		}
		b.GPUs = append([]int(nil), p.GPUs...)
	}
	if err := s.snap.AllocateHost(p.Node, r.CPUMilli, r.MemoryMiB); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoFit, err)
	}
	if err := s.bookGPUs(b); err != nil {
		_ = s.snap.ReleaseHost(p.Node, r.CPUMilli, r.MemoryMiB)
		return nil, err
	}
	ns.pods++
	if k, ok := r.Kind(); ok && int(k) < s.stride {
		c := &s.kinds[int(p.Node)*s.stride+int(k)]
		if *c == 0 {
			ns.distinctKinds++
		}
		*c++
	}
	s.syncNode(p.Node)
	s.live[b] = struct{}{}
	return b, nil
}

// bookGPUs books b's GPUs; on error it undoes what it booked.
func (s *State) bookGPUs(b *Binding) error {
	r := b.Request
	if !r.UsesGPU() {
		return nil
	}
	first := s.nodes[b.Node].first
	if r.Milli == FullMilli {
		gl := make([]uint32, len(b.GPUs))
		for i, g := range b.GPUs {
			gl[i] = first + uint32(g)
		}
		if err := s.snap.Allocate(gl); err != nil {
			return fmt.Errorf("%w: %w", ErrNoFit, err)
		}
		b.whole = gl
		for _, g := range gl {
			s.free[g] = 0
		}
		return nil
	}
	for _, g := range b.GPUs {
		gg := first + uint32(g)
		// topo books a free GPU for sharing with its first share and
		// releases it with its last (Spec.ShareFreeGPUs).
		gr, err := s.snap.AllocateShared(gg, mig.Request{Milli: r.Milli})
		if err != nil {
			s.unbookShares(b)
			return fmt.Errorf("%w: %w", ErrNoFit, err)
		}
		b.shares = append(b.shares, gr)
		s.free[gg] -= int16(r.Milli)
	}
	return nil
}

func (s *State) unbookShares(b *Binding) {
	first := s.nodes[b.Node].first
	for i, gr := range b.shares {
		if s.snap.ReleaseShared(gr) == nil {
			s.free[first+uint32(b.GPUs[i])] += int16(b.Request.Milli)
		}
	}
	b.shares = nil
}

// Unbind releases a binding made by Bind on this State. A binding not
// held gives ErrNotBound and changes nothing.
func (s *State) Unbind(b *Binding) error {
	if _, ok := s.live[b]; !ok {
		return ErrNotBound
	}
	delete(s.live, b)
	r := b.Request
	if b.whole != nil {
		if err := s.snap.Release(b.whole); err != nil {
			return fmt.Errorf("%w: %w", ErrInconsistent, err)
		}
		for _, g := range b.whole {
			s.free[g] = FullMilli
		}
		b.whole = nil
	}
	s.unbookShares(b)
	if err := s.snap.ReleaseHost(b.Node, r.CPUMilli, r.MemoryMiB); err != nil {
		return fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	ns := &s.nodes[b.Node]
	ns.pods--
	if k, ok := r.Kind(); ok && int(k) < s.stride {
		c := &s.kinds[int(b.Node)*s.stride+int(k)]
		*c--
		if *c == 0 {
			ns.distinctKinds--
		}
	}
	s.syncNode(b.Node)
	return nil
}

func (ns *nodeState) setFit() {
	ns.cpuFit, ns.memFit = ns.cpu, ns.mem
	if ns.cpuCap == 0 {
		ns.cpuFit = math.MaxInt64
	}
	if ns.memCap == 0 {
		ns.memFit = math.MaxInt64
	}
}

// appendFeasible appends to dst the nodes that r fits, in ID order: Fits
// for every node, with the request's fields read once.
func (s *State) appendFeasible(dst []topo.NodeID, r Request) []topo.NodeID {
	cpu, mem := r.CPUMilli, r.MemoryMiB
	maxPods := int32(math.MaxInt32)
	if s.maxPods > 0 {
		maxPods = int32(min(s.maxPods, math.MaxInt32))
	}
	gpu, u, k := r.UsesGPU(), int32(r.Milli), int32(r.GPUs)
	general := gpu && (len(r.Models) > 0 || (k > 1 && u < FullMilli))
	for i := range s.nodes {
		ns := &s.nodes[i]
		if !ns.ready || cpu > ns.cpuFit || mem > ns.memFit || ns.pods >= maxPods {
			continue
		}
		switch {
		case !gpu:
		case general:
			if !s.Fits(topo.NodeID(i), r) {
				continue
			}
		case k == 1:
			if ns.maxFree < u {
				continue
			}
		default: // whole GPUs
			if ns.whole < k {
				continue
			}
		}
		dst = append(dst, topo.NodeID(i))
	}
	return dst
}

// syncNode recomputes node n's derived mirror fields.
func (s *State) syncNode(n topo.NodeID) {
	ns := &s.nodes[n]
	ns.cpu, ns.mem = s.snap.NodeHostFree(n)
	var sum, mx, whole int32
	for _, f := range s.nodeGPUs(n) {
		sum += int32(f)
		mx = max(mx, int32(f))
		if f == FullMilli {
			whole++
		}
	}
	s.allocated += int64(ns.freeMilli - sum)
	ns.freeMilli, ns.maxFree, ns.whole = sum, mx, whole
	ns.setFit()
	s.stamp++
	ns.version = s.stamp
}

// Check verifies that the mirrors agree with topo and the pool: per GPU,
// free in topo exactly when f = 1000, the pool's free milli equal to f on
// shared GPUs, whole-booked GPUs at f = 0 with no share; per node the host
// resources, F_n, the largest f and the completely free count; and the
// cluster total. It returns an error wrapping ErrInconsistent.
func (s *State) Check() error {
	var alloc int64
	for id := range topo.NodeID(len(s.nodes)) {
		ns := &s.nodes[id]
		cpu, mem := s.snap.NodeHostFree(id)
		if cpu != ns.cpu || mem != ns.mem {
			return fmt.Errorf("%w: node %d host %d/%d, mirror %d/%d", ErrInconsistent, id, cpu, mem, ns.cpu, ns.mem)
		}
		mask := s.snap.NodeFreeMask(id)
		var sum, mx, whole int32
		for g := range int(ns.gpus) {
			gg := ns.first + uint32(g)
			f := int32(s.free[gg])
			topoFree := mask&(1<<uint(g)) != 0
			info, err := s.snap.Pool().GPU(gg)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInconsistent, err)
			}
			switch {
			case topoFree && (f != FullMilli || info.Shares != 0):
				return fmt.Errorf("%w: GPU %d free in topo with f=%d and %d shares", ErrInconsistent, gg, f, info.Shares)
			case !topoFree && info.Shares == 0 && f != 0:
				return fmt.Errorf("%w: GPU %d booked whole with f=%d", ErrInconsistent, gg, f)
			case !topoFree && info.Shares > 0 && int32(info.FreeMilli) != f:
				return fmt.Errorf("%w: GPU %d shared: pool %d free, mirror %d", ErrInconsistent, gg, info.FreeMilli, f)
			}
			sum += f
			mx = max(mx, f)
			if f == FullMilli {
				whole++
			}
		}
		if bits.OnesCount64(mask) != int(whole) || sum != ns.freeMilli || mx != ns.maxFree || whole != ns.whole {
			return fmt.Errorf("%w: node %d sums", ErrInconsistent, id)
		}
		alloc += int64(FullMilli*ns.gpus - sum)
	}
	if alloc != s.allocated {
		return fmt.Errorf("%w: allocated %d, mirror %d", ErrInconsistent, alloc, s.allocated)
	}
	if err := s.snap.Pool().Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	return s.snap.Verify()
}
