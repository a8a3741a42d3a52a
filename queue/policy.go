package queue

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Policy orders pending jobs across queues. Within a queue (and a Fair Tree
// account) jobs always keep the Pending order: aged priority, submit time,
// ID.
//
// The engine asks for a fresh Cursor each cycle and walks it: for each job,
// Tree.Fits, then place, then Tree.Charge and Pending.Remove. A policy value
// reuses one cursor and its buffers, so Order invalidates the cursor the
// same value returned before, and a policy value must not be used by two
// goroutines at once. Policies of this package: StrictPriority, DRS,
// FairTree, Multifactor. Others can be written against the exported
// methods of Pending and Tree.
type Policy interface {
	// Name is a short identifier, e.g. "drs".
	Name() string
	// Order returns a cursor over p's pending jobs, best first, as of now.
	// The cursor stays valid while jobs are removed from p and usage is
	// charged to p's tree; jobs added during the walk may be missed.
	Order(p *Pending, now time.Time) Cursor
}

// Cursor yields pending jobs in a policy's order.
type Cursor interface {
	// Next returns the next job; false at the end.
	Next() (*Job, bool)
}

// ---------------------------------------------------------------- strict

// StrictPriority orders all jobs by aged priority, then submit time (FIFO),
// then ID, whatever their queue: a k-way merge of the queue orders. A pick
// costs O(log queues).
func StrictPriority() Policy { return &strictPolicy{} }

type strictPolicy struct{ c strictCursor }

func (*strictPolicy) Name() string { return "priority" }

type strictCursor struct {
	p    *Pending
	ws   []walker // by leaf queue position
	head []*entry // cached head of each walker, the heap key
	h    []int32
	last int32
	// Skip's (skip_strict.go).
	cands strictCands
	cuts  []strictCut
}

func (sp *strictPolicy) Order(p *Pending, _ time.Time) Cursor {
	c := &sp.c
	t := p.tree
	if len(c.ws) != len(t.queues) {
		c.ws = make([]walker, len(t.queues))
		c.head = make([]*entry, len(t.queues))
	}
	c.p, c.h, c.last = p, c.h[:0], -1
	for i, q := range t.queues {
		c.ws[i].reset(p.byQueue[q])
		if c.head[i] = c.ws[i].peek(); c.head[i] != nil {
			c.h = append(c.h, int32(i))
		}
	}
	heapInit(c.h, c.less)
	return c
}

func (c *strictCursor) less(a, b int32) bool { return less(c.head[a], c.head[b]) }

func (c *strictCursor) Next() (*Job, bool) {
	if c.last >= 0 {
		c.ws[c.last].advance()
		c.last = -1
		c.refreshTop()
	}
	for len(c.h) > 0 {
		top := c.h[0]
		if c.head[top].gone {
			c.refreshTop()
			continue
		}
		c.last = top
		return c.head[top].job, true
	}
	return nil, false
}

// refreshTop re-reads the head of the queue on top of the heap.
func (c *strictCursor) refreshTop() {
	if len(c.h) == 0 {
		return
	}
	top := c.h[0]
	if c.head[top] = c.ws[top].peek(); c.head[top] == nil {
		c.h = heapPop(c.h, c.less)
	} else {
		heapFix(c.h, 0, c.less, nil)
	}
}

// ---------------------------------------------------------------- DRS

// DRS is Kueue's fair sharing: a tournament down the cohort tree where, at
// every cohort, the child with the lowest dominant resource share wins,
// each child's share computed as if its best job were admitted: over
// resources, usage beyond the child's own (subtree) quota divided by what
// the parent could lend at most, divided by the child's weight. Ties go to
// the better job (Pending order). Queues under no cohort, and the roots,
// compete on their jobs' order alone.
//
// After each pick the cursor re-reads the usage of the queue it picked from
// (so a Charge between picks counts) and updates that queue's path to the
// root: a pick costs O(depth x log fan-out) share computations.
//
// The order is kept from one Order to the next, on the same Pending: Order
// redoes only the queues whose pending jobs changed, whose usage changed
// (Charge, Adopt, Release) or that the last cursor picked from, each with
// its path to the root. A share depends only on its node's usage and the
// tree's (fixed) quotas, and siblings compare on a total order (share,
// then the candidate job), so the heaps give the picks a rebuilt cursor
// would (PendingConfig.RebuildOrder rebuilds them, for checks). The cost
// of Order follows what changed, not the number of queues.
func DRS() Policy { return &drsPolicy{} }

type drsPolicy struct{ c drsCursor }

func (*drsPolicy) Name() string { return "drs" }

type drsCursor struct {
	t     *Tree
	ws    []walker  // by node index (queues only)
	cand  []*entry  // by node: candidate job, nil when inactive
	key   []float64 // by node: share with its candidate
	heaps [][]int32 // by node (cohorts), plus the roots' heap at len(nodes)
	pos   []int32   // position of a node in its parent's heap, -1: absent
	last  int32

	// Kept across Order calls: the set the heaps describe, the epochs of
	// its change logs after this cursor's last take, and the queues picked
	// from since the last Order (their walkers have moved).
	p              *Pending
	pEpoch, tEpoch uint64
	picked         changeLog

	// Skip's (skip.go): a range-maximum index per queue, kept across
	// Order calls on the same Pending, and scratch.
	idx           []qIndex
	skipQs, skipH []int32
}

func (dp *drsPolicy) Order(p *Pending, _ time.Time) Cursor {
	c := &dp.c
	t := p.tree
	N := len(t.nodes)
	if c.p == p && c.t == t && !p.rebuild && c.pEpoch == p.changed.epoch && c.tEpoch == t.charges.epoch {
		c.last = -1
		for _, q := range p.changed.take() {
			c.picked.note(q)
		}
		for _, q := range t.charges.take() {
			c.picked.note(q)
		}
		for _, q := range c.picked.take() {
			c.ws[q].reset(p.byQueue[q])
			c.update(q)
		}
		c.pEpoch, c.tEpoch = p.changed.epoch, t.charges.epoch
		return c
	}
	p.changed.take()
	t.charges.take()
	if c.p != p || c.t != t {
		c.idx = nil // another set's jobs
	}
	c.p, c.pEpoch, c.tEpoch = p, p.changed.epoch, t.charges.epoch
	if len(c.heaps) != N+1 || c.t != t { // heaps: one per node plus the roots' (an empty tree has only that)
		c.picked = newChangeLog(N)
		c.ws = make([]walker, N)
		c.cand = make([]*entry, N)
		c.key = make([]float64, N)
		c.heaps = make([][]int32, N+1)
		c.pos = make([]int32, N)
	}
	c.picked.take()
	c.t, c.last = t, -1
	for i := range c.heaps {
		c.heaps[i] = c.heaps[i][:0]
	}
	for i := range N {
		c.pos[i] = -1
		c.cand[i] = nil
	}
	for i := range N {
		if t.nodes[i].parent == noNode {
			if c.build(p, int32(i)) {
				c.heaps[N] = append(c.heaps[N], int32(i))
			}
		}
	}
	c.heapify(N)
	return c
}

// build fills the subtree of node i; it reports whether i has a candidate.
func (c *drsCursor) build(p *Pending, i int32) bool {
	n := &c.t.nodes[i]
	if n.kind == kindQueue {
		c.ws[i].reset(p.byQueue[i])
		c.cand[i] = c.ws[i].peek()
	} else {
		for _, ch := range n.children {
			if c.build(p, ch) {
				c.heaps[i] = append(c.heaps[i], ch)
			}
		}
		c.heapify(int(i))
		if len(c.heaps[i]) > 0 {
			c.cand[i] = c.cand[c.heaps[i][0]]
		}
	}
	if c.cand[i] == nil {
		return false
	}
	c.key[i] = c.t.share(i, c.cand[i].vec)
	return true
}

func (c *drsCursor) less(a, b int32) bool {
	if c.key[a] != c.key[b] {
		return c.key[a] < c.key[b]
	}
	return less(c.cand[a], c.cand[b])
}

func (c *drsCursor) heapify(h int) {
	heapInit(c.heaps[h], c.less)
	for k, n := range c.heaps[h] {
		c.pos[n] = int32(k)
	}
}

func (c *drsCursor) setPos(n int32, k int) { c.pos[n] = int32(k) }

// update re-reads the candidate and share of node i and of every ancestor,
// fixing each in its parent's heap.
func (c *drsCursor) update(i int32) {
	t := c.t
	N := int32(len(t.nodes))
	for n := i; n != noNode; n = t.nodes[n].parent {
		if t.nodes[n].kind == kindQueue {
			c.cand[n] = c.ws[n].peek()
		} else if h := c.heaps[n]; len(h) > 0 {
			c.cand[n] = c.cand[h[0]]
		} else {
			c.cand[n] = nil
		}
		if c.cand[n] != nil {
			c.key[n] = t.share(n, c.cand[n].vec)
		}
		par := t.nodes[n].parent
		if par == noNode {
			par = N
		}
		h := c.heaps[par]
		switch k := c.pos[n]; {
		case c.cand[n] == nil && k >= 0:
			last := len(h) - 1
			if int(k) != last {
				h[k] = h[last]
				c.pos[h[k]] = k
			}
			c.heaps[par] = h[:last]
			c.pos[n] = -1
			if int(k) < last {
				heapFix(c.heaps[par], int(k), c.less, c.setPos)
			}
		case c.cand[n] != nil && k >= 0:
			heapFix(h, int(k), c.less, c.setPos)
		case c.cand[n] != nil:
			c.heaps[par] = append(h, n)
			c.pos[n] = int32(len(h))
			heapFix(c.heaps[par], len(h), c.less, c.setPos)
		}
	}
}

func (c *drsCursor) Next() (*Job, bool) {
	roots := len(c.t.nodes)
	if c.last >= 0 {
		c.ws[c.last].advance()
		c.update(c.last)
		c.last = -1
	}
	for len(c.heaps[roots]) > 0 {
		e := c.cand[c.heaps[roots][0]]
		if e.gone { // removed since it became a candidate
			c.update(e.queue)
			continue
		}
		c.last = e.queue
		c.picked.note(e.queue)
		return e.job, true
	}
	return nil, false
}

// ---------------------------------------------------------------- Fair Tree

// FairTree is SLURM's Fair Tree: accounts are ranked depth first, siblings
// by level fair share (shares over decayed usage, see Tree.FairTreeRanks),
// and jobs are taken account by account in rank order, in Pending order
// within an account. Ranks are computed once per Order (O(accounts x log));
// a pick then costs O(1) amortized.
func FairTree() Policy { return &fairTreePolicy{} }

type fairTreePolicy struct {
	c      fairTreeCursor
	p      *Pending
	hasOwn func(int32) bool
	order  []int32
	sub    []float64
}

func (*fairTreePolicy) Name() string { return "fairtree" }

type fairTreeCursor struct {
	p     *Pending
	order []int32
	i     int
	w     walker
}

func (fp *fairTreePolicy) Order(p *Pending, now time.Time) Cursor {
	if fp.hasOwn == nil {
		fp.hasOwn = func(a int32) bool { return fp.p.byAccount[a].Len() > 0 }
	}
	fp.p = p
	fp.order, fp.sub = p.tree.fairTree(fp.order[:0], fp.sub, fp.hasOwn)
	c := &fp.c
	c.p, c.order, c.i = p, c.order[:0], 0
	for _, a := range fp.order {
		if p.byAccount[a].Len() > 0 {
			c.order = append(c.order, a)
		}
	}
	if len(c.order) > 0 {
		c.w.reset(p.byAccount[c.order[0]])
	}
	return c
}

func (c *fairTreeCursor) Next() (*Job, bool) {
	for c.i < len(c.order) {
		if e := c.w.peek(); e != nil {
			c.w.advance()
			return e.job, true
		}
		if c.i++; c.i < len(c.order) {
			c.w.reset(c.p.byAccount[c.order[c.i]])
		}
	}
	return nil, false
}

// ---------------------------------------------------------------- multifactor

// Weights are the factor weights of Multifactor. Each factor lies in
// [0, 1]; a job's score is the weighted sum.
type Weights struct {
	// Age: waiting time over MaxAge, capped at 1.
	Age    float64
	MaxAge time.Duration // zero: 7 days (SLURM's PriorityMaxAge)
	// Size: the job's GPU demand over the largest pending job's (or one
	// minus that, with FavorSmall).
	Size       float64
	FavorSmall bool
	// FairShare: the job's account's Fair Tree rank, 1 for the best
	// account down to 1/accounts for the worst.
	FairShare float64
	// QueueWeight: the queue's weight over the largest queue weight.
	QueueWeight float64
	// Priority: the job's priority, scaled to [0, 1] over the pending jobs'
	// range.
	Priority float64
}

// Validate checks that weights are finite and non-negative.
func (w Weights) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"Age", w.Age}, {"Size", w.Size}, {"FairShare", w.FairShare}, {"QueueWeight", w.QueueWeight}, {"Priority", w.Priority}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("%w: Weights.%s must be finite and non-negative, got %v", ErrInvalidTree, f.name, f.v)
		}
	}
	if w.MaxAge < 0 {
		return fmt.Errorf("%w: Weights.MaxAge must not be negative, got %v", ErrInvalidTree, w.MaxAge)
	}
	return nil
}

// Multifactor is SLURM's multifactor priority: each job is scored by the
// weighted sum of its age, size, fair-share, queue-weight and priority
// factors, and jobs run by score, then submit time, then ID. Scores change
// with time and usage, so Order re-scores and sorts every pending job:
// O(n log n) per Order (SLURM, likewise, recomputes priorities
// periodically rather than per decision); a pick is then O(1).
func Multifactor(w Weights) (Policy, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if w.MaxAge == 0 {
		w.MaxAge = 7 * 24 * time.Hour
	}
	return &multifactorPolicy{w: w}, nil
}

type scored struct {
	e     *entry
	score float64
}

type multifactorPolicy struct {
	w     Weights
	order []int32
	sub   []float64
	rank  []float64
	c     sliceCursor
}

func (*multifactorPolicy) Name() string { return "multifactor" }

type sliceCursor struct {
	s []scored
	i int
}

func (c *sliceCursor) Next() (*Job, bool) {
	for c.i < len(c.s) {
		e := c.s[c.i].e
		c.i++
		if !e.gone {
			return e.job, true
		}
	}
	return nil, false
}

func (mp *multifactorPolicy) Order(p *Pending, now time.Time) Cursor {
	t := p.tree
	mp.order, mp.sub = t.fairTree(mp.order[:0], mp.sub, func(a int32) bool { return p.byAccount[a].Len() > 0 })
	mp.rank = slices.Grow(mp.rank[:0], len(t.accounts))[:len(t.accounts)]
	for r, a := range mp.order {
		mp.rank[a] = float64(len(mp.order)-r) / float64(len(mp.order))
	}
	var maxW, maxGPU float64
	minP, maxP := int32(math.MaxInt32), int32(math.MinInt32)
	for _, q := range t.queues {
		maxW = max(maxW, t.nodes[q].weight)
	}
	s := mp.c.s[:0]
	for _, q := range t.queues {
		p.byQueue[q].Ascend(func(e *entry) bool {
			s = append(s, scored{e: e})
			maxGPU = max(maxGPU, e.d.gpuMilli)
			minP, maxP = min(minP, e.job.Priority), max(maxP, e.job.Priority)
			return true
		})
	}
	nowNs := now.UnixNano()
	maxAge := float64(mp.w.MaxAge)
	for i := range s {
		e := s[i].e
		var f float64
		if age := float64(nowNs - e.submit); age > 0 {
			f += mp.w.Age * min(1, age/maxAge)
		}
		if maxGPU > 0 {
			size := e.d.gpuMilli / maxGPU
			if mp.w.FavorSmall {
				size = 1 - size
			}
			f += mp.w.Size * size
		}
		f += mp.w.FairShare * mp.rank[e.d.account]
		f += mp.w.QueueWeight * t.nodes[e.d.queue].weight / maxW
		if maxP > minP {
			f += mp.w.Priority * float64(e.job.Priority-minP) / float64(maxP-minP)
		} else {
			f += mp.w.Priority
		}
		s[i].score = f
	}
	slices.SortFunc(s, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.e.submit, b.e.submit); c != 0 {
			return c
		}
		return cmp.Compare(a.e.job.ID, b.e.job.ID)
	})
	mp.c = sliceCursor{s: s}
	return &mp.c
}

// ---------------------------------------------------------------- heap

// A small index heap, so that positions can be tracked (container/heap
// would need an interface value per heap).

func heapInit(h []int32, less func(a, b int32) bool) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i, less, nil)
	}
}

func heapPop(h []int32, less func(a, b int32) bool) []int32 {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	if n > 0 {
		siftDown(h, 0, less, nil)
	}
	return h
}

func heapFix(h []int32, i int, less func(a, b int32) bool, moved func(int32, int)) {
	if !siftDown(h, i, less, moved) {
		siftUp(h, i, less, moved)
	}
}

func siftUp(h []int32, i int, less func(a, b int32) bool, moved func(int32, int)) {
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		if moved != nil {
			moved(h[i], i)
			moved(h[p], p)
		}
		i = p
	}
}

func siftDown(h []int32, i0 int, less func(a, b int32) bool, moved func(int32, int)) bool {
	i := i0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		j := l
		if r := l + 1; r < len(h) && less(h[r], h[l]) {
			j = r
		}
		if !less(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		if moved != nil {
			moved(h[i], i)
			moved(h[j], j)
		}
		i = j
	}
	return i > i0
}
