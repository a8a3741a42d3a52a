package topo

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/mig"
)

// Snapshot is the allocatable state of a Cluster: which GPUs are allocated,
// node states, host resources, and the per-domain counters that make
// placement a matter of array reads.
//
// A Snapshot is owned by one goroutine at a time. Clone is cheap and
// copy-on-write: the clone and the original share pages of state until one
// of them writes a page, so what-if placement (reservations, preemption,
// backfill) can clone, mutate and drop freely; Recycle hands a dropped
// clone's own pages back for later copies to reuse.
type Snapshot struct {
	c     *Cluster
	tok   uint64 // pages with this token are s's alone (see newTok)
	nodes []*nodePage
	cnt   []*cntPage
	// allocated counts GPUs booked (whole, or for MIG / sharing), on nodes
	// of any state.
	allocated int
	// pool holds what is inside GPUs in MIG mode or shared; nil when the
	// cluster has none. Copied on first write after Clone (poolTok).
	pool    *mig.Pool
	poolTok uint64
	// ver counts writes (see Version).
	ver uint64
}

// recycler keeps what Recycle hands back (pages and snapshot shells) for
// later copies of the same cluster to reuse, and numbers the tokens. A
// sync.Pool: snapshots of one cluster may live on several goroutines, and
// the garbage collector may empty it; what it holds is overwritten in
// full before use, so it never affects a result.
type recycler struct {
	tok   atomic.Uint64
	nodes sync.Pool // *nodePage
	// cnt holds *cntPage by the number of domains a page holds (1 to
	// pageSize): a page taken from it has the length it is copied to.
	cnt   [pageSize + 1]sync.Pool
	snaps sync.Pool // *Snapshot, with the capacity of its page slices
}

// newTok returns a token no page of the cluster holds yet. A page belongs
// to the snapshot whose tok it carries; Clone gives both the original and
// the copy new tokens, so every page they share carries neither.
func (c *Cluster) newTok() uint64 { return c.rec.tok.Add(1) }

const pageShift = 6
const pageSize = 1 << pageShift

type nodePage struct {
	tok   uint64
	free  [pageSize]uint64 // unallocated GPUs, bit i = GPU base+i
	state [pageSize]NodeState
	auto  [pageSize]uint64 // GPUs booked because ShareFreeGPUs made them shared
	cpu   [pageSize]int64  // free host CPU milli
	mem   [pageSize]int64  // free host memory MiB
	// st are the nodes' stamps (NodeStamp), pst the page's: the latest
	// of them (NodeBlockStamp).
	st  [pageSize]uint64
	pst uint64
}

// cntPage holds the counters of pageSize domains of one level, and their
// stamps (DomainStamp).
type cntPage struct {
	tok uint64
	v   []int32 // stride values per domain of the page (up to pageSize)
	st  [pageSize]uint64
}

// NewSnapshot returns the state of a cluster with nothing allocated and
// every node in the state its spec gave.
func (c *Cluster) NewSnapshot() *Snapshot {
	s := &Snapshot{c: c, tok: c.newTok()}
	s.nodes = make([]*nodePage, (len(c.nodes)+pageSize-1)/pageSize)
	for i := range s.nodes {
		s.nodes[i] = &nodePage{tok: s.tok}
	}
	nl := len(c.levels)
	s.cnt = make([]*cntPage, 0)
	for l := range nl {
		// A page holds the counters of its domains only: a level of one
		// domain (the root) has a page of one stride, not 64, and a
		// write after Clone copies that much.
		for lo := 0; lo < len(c.doms[l]); lo += pageSize {
			n := min(pageSize, len(c.doms[l])-lo)
			s.cnt = append(s.cnt, &cntPage{tok: s.tok, v: make([]int32, n*c.stride)})
		}
	}
	if c.shared {
		s.pool, s.poolTok = mig.NewPool(c.totalGPUs), s.tok
	}
	st0 := c.newTok() // every node's first stamp (NodeStamp)
	for i := range c.nodes {
		n := &c.nodes[i]
		p := s.nodes[i>>pageShift]
		free := mask(int(n.gpus))
		if n.gpuCfg != nil {
			// MIG or shared GPUs are never handed out whole.
			free = 0
			s.allocated += int(n.gpus)
			for g := n.base; g < n.base+uint32(n.gpus); g++ {
				_ = s.pool.Configure(g, *n.gpuCfg) // validated by Spec.Validate
			}
		}
		p.free[i&(pageSize-1)] = free
		p.state[i&(pageSize-1)] = n.state0
		p.cpu[i&(pageSize-1)] = n.cpuMilli
		p.mem[i&(pageSize-1)] = n.hostMiB
		p.st[i&(pageSize-1)], p.pst = st0, st0
		if n.state0 == Ready {
			s.count(NodeID(i), bits.OnesCount64(free), +1)
		}
	}
	return s
}

func mask(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(n) - 1
}

// Cluster returns the cluster this is a snapshot of.
func (s *Snapshot) Cluster() *Cluster { return s.c }

// Clone returns a copy-on-write copy. Both s and the clone may be written
// afterwards without affecting each other; each copies a page of state the
// first time it writes it. Cost: O(nodes/64 + domains/64) pointer copies.
func (s *Snapshot) Clone() *Snapshot {
	c := s.c
	s.tok = c.newTok() // every page is now shared: copy before writing
	w, _ := c.rec.snaps.Get().(*Snapshot)
	if w == nil {
		w = new(Snapshot)
	}
	*w = Snapshot{
		c: c, tok: c.newTok(),
		nodes:     append(w.nodes[:0], s.nodes...),
		cnt:       append(w.cnt[:0], s.cnt...),
		allocated: s.allocated,
		pool:      s.pool,
		// A recycled shell goes on counting: the same pointer never
		// shows a Version it showed before.
		ver: w.ver + 1,
	}
	return w
}

// Recycle declares s dropped: the pages that s alone holds (those it wrote
// since it was made or last cloned) and s itself are kept for later
// copies of the cluster's snapshots to reuse, instead of left to the
// garbage collector. Pages s shares with other snapshots are left alone.
// Neither s nor anything read from it (Pool) may be used afterwards:
// Clone may hand s out again. For callers that drop many what-if clones
// per decision (the engine's reservations and backfill probes).
func (s *Snapshot) Recycle() {
	c := s.c
	if c == nil {
		return
	}
	for _, p := range s.nodes {
		if p.tok == s.tok {
			c.rec.nodes.Put(p)
		}
	}
	for _, p := range s.cnt {
		if p.tok == s.tok {
			c.rec.cnt[len(p.v)/c.stride].Put(p)
		}
	}
	clear(s.nodes)
	clear(s.cnt)
	*s = Snapshot{nodes: s.nodes[:0], cnt: s.cnt[:0], ver: s.ver}
	c.rec.snaps.Put(s)
}

// Version changes with every write to s (booking, release, node state,
// host resources, MIG and shares); a Clone does not change it. Callers
// that derive data from a snapshot compare the pointer and Version to
// know whether it still holds.
func (s *Snapshot) Version() uint64 { return s.ver }

func (s *Snapshot) nodePageW(id NodeID) *nodePage {
	s.ver++
	i := int(id) >> pageShift
	p := s.nodes[i]
	if p.tok != s.tok {
		cp, _ := s.c.rec.nodes.Get().(*nodePage)
		if cp == nil {
			cp = new(nodePage)
		}
		*cp = *p
		cp.tok = s.tok
		p = cp
		s.nodes[i] = p
	}
	st := s.c.newTok() // a number no stamp holds yet (NodeStamp)
	p.st[int(id)&(pageSize-1)], p.pst = st, st
	return p
}

// NodeStamp identifies the state of node id: its free GPUs, state, host
// resources, and what the pool holds of its GPUs (MIG and shares). Every
// write to one of them gives the node a stamp no snapshot of the cluster
// held before, and Clone keeps it; so two snapshots of one cluster
// (clones of each other or not) that show a node the same stamp show it
// the same. For caches of what is computed from one node's state (the
// node index of gang.Placer, the scorers' caches). Never 0.
//
// Like the Domain accessors it does not check its argument.
func (s *Snapshot) NodeStamp(id NodeID) uint64 {
	return s.nodes[int(id)>>pageShift].st[int(id)&(pageSize-1)]
}

// NodeBlockSize is the number of nodes a NodeBlockStamp covers.
const NodeBlockSize = pageSize

// NodeBlockStamp identifies the nodes b*NodeBlockSize up to
// (b+1)*NodeBlockSize-1 together: it changes whenever the NodeStamp of one
// of them does, and two snapshots of one cluster that show a block the
// same stamp show each of its nodes the same NodeStamp. b must be in
// 0..(NumNodes-1)/NodeBlockSize.
func (s *Snapshot) NodeBlockStamp(b int) uint64 { return s.nodes[b].pst }

// touch gives node id a new stamp (a write to what the pool holds of its
// GPUs).
func (s *Snapshot) touch(id NodeID) { s.nodePageW(id) }

// touchGPU is touch for the node of GPU g (nothing for a bad index).
func (s *Snapshot) touchGPU(g uint32) {
	if int(g) < len(s.c.gpuNode) {
		s.touch(s.c.gpuNode[g])
	}
}

// cntBase returns the page index and offset of a domain's counters.
func (s *Snapshot) cntAt(level, d int) (page, off int) {
	return s.c.cntBase[level] + d>>pageShift, (d & (pageSize - 1)) * s.c.stride
}

func (s *Snapshot) cntW(level, d int) []int32 {
	s.ver++
	pi, off := s.cntAt(level, d)
	p := s.cnt[pi]
	if p.tok != s.tok {
		cp, _ := s.c.rec.cnt[len(p.v)/s.c.stride].Get().(*cntPage)
		if cp == nil {
			cp = new(cntPage)
		}
		cp.tok, cp.v, cp.st = s.tok, append(cp.v[:0], p.v...), p.st
		p = cp
		s.cnt[pi] = p
	}
	return p.v[off : off+s.c.stride]
}

func (s *Snapshot) cntR(level, d int) []int32 {
	pi, off := s.cntAt(level, d)
	return s.cnt[pi].v[off : off+s.c.stride]
}

// count adds (sign +1) or removes (-1) a ready node with k free GPUs from
// the counters of every domain above it.
func (s *Snapshot) count(id NodeID, k int, sign int32) {
	c := s.c
	n := &c.nodes[id]
	whole := int32(0)
	if k == int(n.gpus) {
		whole = sign
	}
	nl := len(c.levels)
	h0 := 2 + k
	hm := -1
	if c.hists > 1 {
		hm = 2 + (1+int(n.model))*(c.maxGPUs+1) + k
	}
	st := c.newTok() // a number no stamp holds yet (DomainStamp)
	for l := range nl {
		d := int(c.nodeDom[int(id)*nl+l])
		v := s.cntW(l, d)
		s.cnt[c.cntBase[l]+d>>pageShift].st[d&(pageSize-1)] = st
		v[0] += sign * int32(k)
		v[1] += whole
		v[h0] += sign
		if hm >= 0 {
			v[hm] += sign
		}
	}
}

// NodeState returns the state of a node.
func (s *Snapshot) NodeState(id NodeID) NodeState {
	return s.nodes[int(id)>>pageShift].state[int(id)&(pageSize-1)]
}

// NodeFreeMask returns the unallocated GPUs of a node (whatever its state)
// as a mask: bit i is GPU FirstGPU+i.
func (s *Snapshot) NodeFreeMask(id NodeID) uint64 {
	return s.nodes[int(id)>>pageShift].free[int(id)&(pageSize-1)]
}

// NodeAvailable returns the allocatable free GPUs of a node: its
// unallocated GPUs if it is ready, else 0.
func (s *Snapshot) NodeAvailable(id NodeID) int {
	p := s.nodes[int(id)>>pageShift]
	if p.state[int(id)&(pageSize-1)] != Ready {
		return 0
	}
	return bits.OnesCount64(p.free[int(id)&(pageSize-1)])
}

// NodeHostFree returns a node's free host CPU (milli) and memory (MiB).
// Nodes whose spec tracks neither return zeros.
func (s *Snapshot) NodeHostFree(id NodeID) (cpuMilli, memMiB int64) {
	p := s.nodes[int(id)>>pageShift]
	return p.cpu[int(id)&(pageSize-1)], p.mem[int(id)&(pageSize-1)]
}

// HostFits reports whether a node has room for n members of the given host
// request. Untracked resources (zero capacity in the spec) always fit.
func (s *Snapshot) HostFits(id NodeID, cpuMilli, memMiB int64) int {
	n := &s.c.nodes[id]
	p := s.nodes[int(id)>>pageShift]
	fit := int(^uint(0) >> 1)
	if cpuMilli > 0 && n.cpuMilli > 0 {
		fit = min(fit, int(p.cpu[int(id)&(pageSize-1)]/cpuMilli))
	}
	if memMiB > 0 && n.hostMiB > 0 {
		fit = min(fit, int(p.mem[int(id)&(pageSize-1)]/memMiB))
	}
	return fit
}

// HostHolds reports whether node id has the host CPU and memory of one
// more member (HostFits >= 1), without dividing.
func (s *Snapshot) HostHolds(id NodeID, cpuMilli, memMiB int64) bool {
	n := &s.c.nodes[id]
	p := s.nodes[int(id)>>pageShift]
	if cpuMilli > 0 && n.cpuMilli > 0 && p.cpu[int(id)&(pageSize-1)] < cpuMilli {
		return false
	}
	return memMiB <= 0 || n.hostMiB <= 0 || p.mem[int(id)&(pageSize-1)] >= memMiB
}

// DomainFree returns the allocatable free GPUs of domain d of a level.
//
// Like the other Domain accessors it is on the placement's hot path and
// does not check its arguments: level must be in 0..len(Cluster.Levels())-1
// and d in 0..Cluster.NumDomains(level)-1. Out of range is a programming error
// and panics, like indexing a slice out of range.
func (s *Snapshot) DomainFree(level, d int) int { return int(s.cntR(level, d)[0]) }

// DomainStamp identifies the counters of domain d of a level and of every
// domain inside it (DomainFree, DomainWholeNodes, DomainHistogram,
// DomainCapacity): every write to one of them gives the domain a stamp no
// snapshot of the cluster held before, and Clone keeps it. So two
// snapshots of one cluster (clones of each other or not) that show a
// domain the same stamp show it, and every domain inside it, the same
// counters. Those writes are also every change of a ready node's count of
// free GPUs (NodeAvailable) and every change of state into or out of
// Ready, so the stamp covers the per-node counts inside the domain too.
// What it does not cover: which of a node's GPUs are free, host
// resources, MIG and shares. For caches of answers computed from counts
// alone (gang.Placer.Memo).
func (s *Snapshot) DomainStamp(level, d int) uint64 {
	return s.cnt[s.c.cntBase[level]+d>>pageShift].st[d&(pageSize-1)]
}

// DomainWholeNodes returns the number of ready nodes of a domain with all
// their GPUs free.
func (s *Snapshot) DomainWholeNodes(level, d int) int { return int(s.cntR(level, d)[1]) }

// DomainHistogram returns, for domain d of a level, h[k] = the number of
// ready nodes with exactly k free GPUs, k = 0..MaxGPUsPerNode(); model < 0
// counts every model, else only nodes of that model index. The slice is a
// view that must not be modified and is valid until the next write to s.
func (s *Snapshot) DomainHistogram(level, d, model int) []int32 {
	v := s.cntR(level, d)
	g := s.c.maxGPUs + 1
	h := 0
	if model >= 0 && s.c.hists > 1 {
		h = 1 + model
	}
	return v[2+h*g : 2+(h+1)*g]
}

// DomainCapacity returns how many members of `per` GPUs each (per >= 1)
// fit in domain d of a level, on nodes of the model (model < 0: any),
// counting whole members per node: sum over k of h[k] * floor(k/per).
func (s *Snapshot) DomainCapacity(level, d, per, model int) int {
	if per == 1 && (model < 0 || s.c.hists == 1) {
		return int(s.cntR(level, d)[0])
	}
	h := s.DomainHistogram(level, d, model)
	n := 0
	for k := per; k < len(h); k++ {
		n += int(h[k]) * (k / per)
	}
	return n
}

// DomainCapacities writes DomainCapacity(level, d, per, model) into
// dst[d-lo] for the domains lo..hi-1 of a level (len(dst) >= hi-lo), in
// one pass over their counters: for callers that read a whole range. A
// capacity never exceeds the domain's free GPUs, so it fits an int32.
func (s *Snapshot) DomainCapacities(level, lo, hi, per, model int, dst []int32) {
	c := s.c
	dst = dst[:hi-lo]
	if per > c.maxGPUs {
		clear(dst)
		return
	}
	// The counters read, at offset at of each domain's: its free GPUs
	// (per 1, any model), else its histogram of the model from k = per.
	at, kn := 0, 1
	if per > 1 || (model >= 0 && c.hists > 1) {
		at, kn = 2+per, c.maxGPUs+1-per
		if model >= 0 && c.hists > 1 {
			at += (1 + model) * (c.maxGPUs + 1)
		}
	}
	for d := lo; d < hi; {
		v := s.cnt[c.cntBase[level]+d>>pageShift].v
		end := min(hi, (d|(pageSize-1))+1) // past the page's last domain
		off := (d&(pageSize-1))*c.stride + at
		if kn == 1 { // one counter, weight 1
			for ; d < end; d, off = d+1, off+c.stride {
				dst[d-lo] = v[off]
			}
			continue
		}
		for ; d < end; d, off = d+1, off+c.stride {
			n := int32(0)
			for i, x := range v[off : off+kn] {
				n += x * int32((per+i)/per)
			}
			dst[d-lo] = n
		}
	}
}

// AvailableWithin reports whether everything allocatable on s is
// allocatable on o too: every node ready on s is ready on o, every GPU
// free on a ready node of s is free on o, and no node has more free host
// CPU or memory on s than on o. False for snapshots of different
// clusters. Pages the two share are equal and skipped, so it costs what
// they do not share. MIG instances and shares are not compared.
func (s *Snapshot) AvailableWithin(o *Snapshot) bool {
	if s.c != o.c {
		return false
	}
	n := len(s.c.nodes)
	for pi, p := range s.nodes {
		q := o.nodes[pi]
		if p == q {
			continue
		}
		for j := range min(pageSize, n-pi*pageSize) {
			if p.state[j] != Ready {
				continue // nothing allocatable on s
			}
			if q.state[j] != Ready || p.free[j]&^q.free[j] != 0 || p.cpu[j] > q.cpu[j] || p.mem[j] > q.mem[j] {
				return false
			}
		}
	}
	return true
}

// Free returns the number of allocatable free GPUs of the cluster.
func (s *Snapshot) Free() int { return s.DomainFree(0, 0) }

// Allocated returns the number of allocated GPUs (on nodes of any state).
func (s *Snapshot) Allocated() int { return s.allocated }

// FreeSet returns a new bitmap of the allocatable free GPUs (unallocated,
// on ready nodes), owned by the caller. It costs O(nodes).
func (s *Snapshot) FreeSet() *roaring.Bitmap {
	words := make([]uint64, (s.c.totalGPUs+63)/64)
	for i := range s.c.nodes {
		p := s.nodes[i>>pageShift]
		if p.state[i&(pageSize-1)] != Ready {
			continue
		}
		m, base := p.free[i&(pageSize-1)], s.c.nodes[i].base
		w, off := base/64, base%64
		words[w] |= m << off
		if off != 0 && int(off)+int(s.c.nodes[i].gpus) > 64 {
			words[w+1] |= m >> (64 - off)
		}
	}
	return roaring.FromDense(words, false)
}

// FreeInRange returns a new bitmap of the allocatable free GPUs of domain d
// of a level.
func (s *Snapshot) FreeInDomain(level, d int) *roaring.Bitmap {
	b := roaring.New()
	x := &s.c.doms[level][d]
	for id := x.nodeLo; id < x.nodeHi; id++ {
		if s.NodeState(id) != Ready {
			continue
		}
		base := s.c.nodes[id].base
		for m := s.NodeFreeMask(id); m != 0; m &= m - 1 {
			b.Add(base + uint32(bits.TrailingZeros64(m)))
		}
	}
	return b
}

// IsFree reports whether GPU g is allocatable and free.
func (s *Snapshot) IsFree(g uint32) bool {
	if int(g) >= len(s.c.gpuNode) {
		return false
	}
	id := s.c.gpuNode[g]
	return s.NodeState(id) == Ready && s.NodeFreeMask(id)&(1<<(g-s.c.nodes[id].base)) != 0
}

// Allocate books the listed GPUs, all or nothing: it fails without change if
// a GPU is unknown, listed twice, already allocated or on a node that is not
// ready. The slice is not retained.
func (s *Snapshot) Allocate(gpus []uint32) error {
	if err := s.check(gpus, true); err != nil {
		return err
	}
	s.apply(gpus, true)
	return nil
}

// Release returns the listed GPUs, all or nothing: it fails without change
// if a GPU is unknown, listed twice or not allocated. GPUs of nodes that are
// not ready are released but do not become allocatable.
func (s *Snapshot) Release(gpus []uint32) error {
	if err := s.check(gpus, false); err != nil {
		return err
	}
	s.apply(gpus, false)
	return nil
}

// check validates gpus without writing. Lists grouped by node in ascending
// node order (as placements are) are checked in one pass; other orders fall
// back to a map of per-node masks.
func (s *Snapshot) check(gpus []uint32, alloc bool) error {
	c := s.c
	var lastNode NodeID = -1
	var seen uint64
	var multi map[NodeID]uint64
	for i, g := range gpus {
		if int(g) >= len(c.gpuNode) {
			return fmt.Errorf("%w: %d (cluster has %d GPUs)", ErrUnknownGPU, g, len(c.gpuNode))
		}
		id := c.gpuNode[g]
		bit := uint64(1) << (g - c.nodes[id].base)
		if id != lastNode {
			if id < lastNode && multi == nil {
				// Out of order: rebuild the masks seen so far.
				multi = make(map[NodeID]uint64)
				for _, h := range gpus[:i] {
					hid := c.gpuNode[h]
					multi[hid] |= 1 << (h - c.nodes[hid].base)
				}
			} else if multi != nil && lastNode >= 0 {
				multi[lastNode] = seen
			}
			lastNode = id
			if multi != nil {
				seen = multi[id]
			} else {
				seen = 0
			}
		}
		if seen&bit != 0 {
			return fmt.Errorf("%w: %d", ErrDuplicateInSet, g)
		}
		seen |= bit
		free := s.NodeFreeMask(id)&bit != 0
		if alloc {
			if !free {
				return fmt.Errorf("%w: GPU %d on node %q", ErrAllocated, g, c.nodes[id].name)
			}
			if st := s.NodeState(id); st != Ready {
				return fmt.Errorf("%w: node %q is %v", ErrNodeNotReady, c.nodes[id].name, st)
			}
		} else if free {
			return fmt.Errorf("%w: GPU %d on node %q", ErrNotAllocated, g, c.nodes[id].name)
		} else if c.nodes[id].gpuCfg != nil || s.nodes[int(id)>>pageShift].auto[int(id)&(pageSize-1)]&bit != 0 {
			return fmt.Errorf("%w: GPU %d on node %q: release its shares instead", ErrSharedGPU, g, c.nodes[id].name)
		}
	}
	return nil
}

// apply flips the GPUs, node by node, keeping counters in step.
func (s *Snapshot) apply(gpus []uint32, alloc bool) {
	c := s.c
	for i := 0; i < len(gpus); {
		id := c.gpuNode[gpus[i]]
		base := c.nodes[id].base
		var m uint64
		j := i
		for ; j < len(gpus) && c.gpuNode[gpus[j]] == id; j++ {
			m |= 1 << (gpus[j] - base)
		}
		s.flip(id, m, alloc)
		i = j
	}
}

func (s *Snapshot) flip(id NodeID, m uint64, alloc bool) {
	p := s.nodePageW(id)
	slot := int(id) & (pageSize - 1)
	old := p.free[slot]
	nw := old | m
	if alloc {
		nw = old &^ m
		s.allocated += bits.OnesCount64(m)
	} else {
		s.allocated -= bits.OnesCount64(m)
	}
	p.free[slot] = nw
	if p.state[slot] != Ready {
		return
	}
	s.count(id, bits.OnesCount64(old), -1)
	s.count(id, bits.OnesCount64(nw), +1)
}

// SetNodeState changes a node's state. Leaving Ready takes its free GPUs out
// of the allocatable set; entering Ready puts them back. Allocations on the
// node are untouched.
func (s *Snapshot) SetNodeState(id NodeID, st NodeState) error {
	if id < 0 || int(id) >= len(s.c.nodes) {
		return fmt.Errorf("%w: id %d", ErrUnknownNode, id)
	}
	if st >= numStates {
		return fmt.Errorf("%w: %d", ErrBadState, st)
	}
	old := s.NodeState(id)
	if old == st {
		return nil
	}
	p := s.nodePageW(id)
	slot := int(id) & (pageSize - 1)
	p.state[slot] = st
	k := bits.OnesCount64(p.free[slot])
	switch {
	case old == Ready:
		s.count(id, k, -1)
	case st == Ready:
		s.count(id, k, +1)
	}
	return nil
}

// AllocateHost books host CPU and memory on a node. Untracked resources
// (zero capacity in the spec) are not booked.
func (s *Snapshot) AllocateHost(id NodeID, cpuMilli, memMiB int64) error {
	return s.host(id, cpuMilli, memMiB, true)
}

// ReleaseHost returns host CPU and memory booked by AllocateHost.
func (s *Snapshot) ReleaseHost(id NodeID, cpuMilli, memMiB int64) error {
	return s.host(id, cpuMilli, memMiB, false)
}

func (s *Snapshot) host(id NodeID, cpuMilli, memMiB int64, alloc bool) error {
	if id < 0 || int(id) >= len(s.c.nodes) {
		return fmt.Errorf("%w: id %d", ErrUnknownNode, id)
	}
	if cpuMilli < 0 || memMiB < 0 {
		return fmt.Errorf("%w: cpu %d memory %d", ErrBadResource, cpuMilli, memMiB)
	}
	n := &s.c.nodes[id]
	if n.cpuMilli == 0 {
		cpuMilli = 0
	}
	if n.hostMiB == 0 {
		memMiB = 0
	}
	if cpuMilli == 0 && memMiB == 0 {
		return nil
	}
	slot := int(id) & (pageSize - 1)
	r := s.nodes[int(id)>>pageShift]
	if alloc {
		if r.cpu[slot] < cpuMilli || r.mem[slot] < memMiB {
			return fmt.Errorf("%w: node %q has cpu %d memory %d, asked %d / %d",
				ErrInsufficient, n.name, r.cpu[slot], r.mem[slot], cpuMilli, memMiB)
		}
		cpuMilli, memMiB = -cpuMilli, -memMiB
	} else if r.cpu[slot]+cpuMilli > n.cpuMilli || r.mem[slot]+memMiB > n.hostMiB {
		return fmt.Errorf("%w: node %q", ErrOverRelease, n.name)
	}
	p := s.nodePageW(id)
	p.cpu[slot] += cpuMilli
	p.mem[slot] += memMiB
	return nil
}
