package gang

import (
	"math"
	"math/bits"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// nodeIndex keeps the nodes of a cluster in bitsets by what they have
// free (ready; at least k free GPUs; a GPU with at least t thousandths for
// a share; at least c host CPU), so that a scored placement visits only
// the nodes that may hold a member instead of every node. The sets are a
// bound: a node left out cannot hold a member (nodeCap would be 0); the
// nodes in them are still checked by nodeCap, so the nodes collected, and
// their order (ascending IDs), are those of the full scan.
//
// It is brought up to date from the node stamps (topo.Snapshot.NodeStamp):
// only the nodes whose stamp changed since the last placement are read
// again, so it serves any snapshot of the cluster (clones, what-if
// copies) without a full rebuild.
type nodeIndex struct {
	c     *topo.Cluster
	nw    int      // words per bitset
	bst   []uint64 // block stamps seen (0: never)
	st    []uint64 // node stamps seen (0: never)
	track []bool   // the node tracks host CPU
	tmem  []bool   // the node tracks host memory
	// Per node, as of its stamp: free host CPU and memory (MaxInt64 where
	// the node does not track them) and shareBound (0 when not ready).
	hcpu, hmem []int64
	shr        []int32
	maxG       int
	rows       []uint64 // bitsets, nw words each (rowReady, rowAvail, ...)
	model0     int      // first row of the models' sets (static)
}

// shareStep is the step, in thousandths, of the share bounds: row
// rowShare+t-1 holds the nodes with a GPU that may give a share of
// t*shareStep thousandths, t = 1..shareRows.
const (
	shareStep = 50
	shareRows = FullMilli / shareStep
)

// cpuSteps are the host CPU bounds (milli): row rowCPU+i holds the nodes
// with at least cpuSteps[i] free (or that do not track CPU).
var cpuSteps = [...]int64{1000, 2000, 4000, 8000, 16000, 32000, 64000}

const (
	rowReady = 0
	rowCPU   = 1
	rowShare = rowCPU + len(cpuSteps)
	rowAvail = rowShare + shareRows // + k-1 for at least k free GPUs
)

func (x *nodeIndex) row(r int) []uint64 { return x.rows[r*x.nw : (r+1)*x.nw] }

func (x *nodeIndex) reset(c *topo.Cluster) {
	n := c.NumNodes()
	nw := (n + 63) / 64
	x.c, x.nw, x.maxG = c, nw, c.MaxGPUsPerNode()
	x.bst = make([]uint64, (n+topo.NodeBlockSize-1)/topo.NodeBlockSize)
	x.st = make([]uint64, n)
	x.track = make([]bool, n)
	x.hcpu, x.hmem, x.shr = make([]int64, n), make([]int64, n), make([]int32, n)
	x.tmem = make([]bool, n)
	x.model0 = rowAvail + x.maxG
	x.rows = make([]uint64, (x.model0+len(c.Models()))*nw)
	for id := range topo.NodeID(n) {
		info := c.Node(id)
		x.track[id], x.tmem[id] = info.CPUMilli > 0, info.MemoryMiB > 0
		if m := c.NodeModel(id); m >= 0 && m < len(c.Models()) {
			x.row(x.model0 + m)[id/64] |= 1 << (id % 64)
		}
	}
}

// sync brings the index up to date with s.
func (x *nodeIndex) sync(s *topo.Snapshot) {
	if x.c != s.Cluster() {
		x.reset(s.Cluster())
	}
	n := len(x.st)
	for b := range x.bst {
		bs := s.NodeBlockStamp(b)
		if bs == x.bst[b] {
			continue
		}
		x.bst[b] = bs
		for id := b * topo.NodeBlockSize; id < min(n, (b+1)*topo.NodeBlockSize); id++ {
			if st := s.NodeStamp(topo.NodeID(id)); st != x.st[id] {
				x.st[id] = st
				x.read(s, topo.NodeID(id))
			}
		}
	}
}

// read files node id under what it has free on s.
func (x *nodeIndex) read(s *topo.Snapshot, id topo.NodeID) {
	w, bit := int(id)/64, uint64(1)<<(uint(id)%64)
	set := func(r int, in bool) {
		if in {
			x.rows[r*x.nw+w] |= bit
		} else {
			x.rows[r*x.nw+w] &^= bit
		}
	}
	ready := s.NodeState(id) == topo.Ready
	set(rowReady, ready)
	avail := s.NodeAvailable(id)
	for k := 1; k <= x.maxG; k++ {
		set(rowAvail+k-1, avail >= k)
	}
	cpu, mem := s.NodeHostFree(id)
	if !x.track[id] {
		cpu = math.MaxInt64
	}
	if !x.tmem[id] {
		mem = math.MaxInt64
	}
	x.hcpu[id], x.hmem[id] = cpu, mem
	for i, c := range cpuSteps {
		set(rowCPU+i, cpu >= c)
	}
	share := 0
	if ready {
		share = shareBound(s, id)
	}
	x.shr[id] = int32(share)
	for t := 1; t <= shareRows; t++ {
		set(rowShare+t-1, share >= t*shareStep)
	}
}

// shareBound is at least the largest share (thousandths, no MIG profile)
// a GPU of ready node id can give: SharedFits of a request of more is 0.
// A free GPU under Spec.ShareFreeGPUs gives a whole one; a time-sliced GPU
// at most its free thousandths (FitCount needs ceil(milli*units/1000)
// units of its free ones); GPUs in MIG mode or shared otherwise count as
// whole ones (no bound).
func shareBound(s *topo.Snapshot, id topo.NodeID) int {
	c := s.Cluster()
	if c.SharesFreeGPUs() && s.NodeFreeMask(id) != 0 {
		return FullMilli
	}
	first, _ := c.NodeGPUs(id)
	b := 0
	for m := s.NodeSharedMask(id); m != 0; m &= m - 1 {
		info, err := s.Pool().GPU(first + uint32(bits.TrailingZeros64(m)))
		switch {
		case err != nil:
		case info.MIG || info.Sharing.Mode != mig.TimeSlicing:
			return FullMilli
		default:
			b = max(b, info.FreeMilli)
		}
	}
	return b
}

// query lists the rows whose intersection bounds the nodes that may hold
// a member of group gi (nodeCap > 0), or returns false where the index
// does not help.
func (x *nodeIndex) query(gi *groupInfo, rows *[4]int) (int, bool) {
	if gi.noModel {
		return 0, false
	}
	g := gi.g
	n := 0
	rows[n], n = rowReady, n+1
	if gi.model >= 0 && gi.model < len(x.c.Models()) {
		rows[n], n = x.model0+gi.model, n+1
	}
	switch {
	case gi.frac:
		if gi.mreq.Profile == "" && gi.mreq.Milli > 0 {
			if t := min(gi.mreq.Milli/shareStep, shareRows); t >= 1 {
				rows[n], n = rowShare+t-1, n+1
			}
		}
	case gi.per > x.maxG:
		return 0, false // no node holds one: the full scan is as quick
	case gi.per > 0:
		rows[n], n = rowAvail+gi.per-1, n+1
	}
	if c := g.CPUMilli; c > 0 && c >= cpuSteps[0] {
		i := 0
		for i+1 < len(cpuSteps) && cpuSteps[i+1] <= c {
			i++
		}
		rows[n], n = rowCPU+i, n+1
	}
	return n, true
}

// word is word w of the intersection of rows, limited to nodes [lo, hi).
func (x *nodeIndex) word(w, lo, hi int, rows []int) uint64 {
	v := ^uint64(0)
	for _, r := range rows {
		v &= x.rows[r*x.nw+w]
	}
	if w*64 < lo {
		v &^= 1<<(uint(lo)%64) - 1
	}
	if end := (w + 1) * 64; end > hi {
		v &= 1<<(uint(hi)%64) - 1
	}
	return v
}

// each calls f for every node in [lo, hi) in all of rows, ascending.
func (x *nodeIndex) each(lo, hi int, rows []int, f func(topo.NodeID)) {
	for w := lo / 64; w*64 < hi; w++ {
		for v := x.word(w, lo, hi, rows); v != 0; v &= v - 1 {
			f(topo.NodeID(w*64 + bits.TrailingZeros64(v)))
		}
	}
}

// hostHolds is topo.Snapshot.HostHolds of node id as of the last sync.
func (x *nodeIndex) hostHolds(id topo.NodeID, cpuMilli, memMiB int64) bool {
	return (cpuMilli <= 0 || x.hcpu[id] >= cpuMilli) && (memMiB <= 0 || x.hmem[id] >= memMiB)
}

// capOne is nodeCap(id, gi) for a group of one member that the index
// answers exactly (exactOne), among the nodes of its rows: those are
// ready, of the group's model, with the GPUs a member asks; what is left
// is the host. For a share, the host and the node's share bound reject
// nodes before nodeCap is asked.
func (p *Placer) capOne(id topo.NodeID, gi *groupInfo, exact bool) int {
	x := &p.ix
	if !x.hostHolds(id, gi.g.CPUMilli, gi.g.MemoryMiB) {
		return 0
	}
	if exact {
		return 1
	}
	if gi.frac && gi.mreq.Profile == "" && gi.mreq.Milli > 0 {
		if int(x.shr[id]) < gi.mreq.Milli {
			return 0
		}
		// A free GPU under Spec.ShareFreeGPUs gives 1000/Milli >= 1
		// shares (shareFits' first case): the node holds the member.
		if gi.models.n == 0 && x.c.SharesFreeGPUs() {
			// The first free GPU is not shared (IsSharedGPU, read from
			// the node's mask: one read of the page at hand).
			if m := p.s.NodeFreeMask(id); m != 0 && p.s.NodeState(id) == topo.Ready && p.s.NodeSharedMask(id)&(m&-m) == 0 {
				return 1
			}
		}
	}
	return p.nodeCap(id, gi)
}

// exactOne reports whether, for group gi, a node in the index's rows
// holds a member exactly when its host does (nodeCap's answer is then 1
// or 0): one member, whole GPUs or none, no node selector, at most one
// model, and host resources asked (nodeCap's slow path).
func exactOne(gi *groupInfo) bool {
	g := gi.g
	return g.Members == 1 && gi.slow && !gi.frac && !gi.noModel && gi.models.n == 0 && len(g.Selector) == 0
}

// collectOne is collectScored's scan of the nodes in [lo, hi) for a group
// of one member without a node selector: the nodes in all of rows, each
// asked capOne, appended to p.snodes / p.scaps. It returns the members
// they hold.
func (p *Placer) collectOne(lo, hi int, rows []int, gi *groupInfo, exact bool) int {
	x := &p.ix
	total := 0
	for w := lo / 64; w*64 < hi; w++ {
		for v := x.word(w, lo, hi, rows); v != 0; v &= v - 1 {
			n := topo.NodeID(w*64 + bits.TrailingZeros64(v))
			if c := p.capOne(n, gi, exact); c > 0 {
				p.snodes = append(p.snodes, n)
				p.scaps = append(p.scaps, int32(c))
				total += c
			}
		}
	}
	return total
}
