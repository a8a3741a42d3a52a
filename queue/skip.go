package queue

import (
	"math/bits"
	"slices"
	"sort"
)

// A walk that skips (issue 33): once the engine knows which few pending
// jobs could start at all (the candidates), a DRS cursor can go straight
// to the first of them in its order, passing the jobs before it without
// yielding them, and say later which jobs it passed, in its order.
//
// Why it is exact. With usage fixed (nothing charged between two picks of
// the skip), the cursor is a merge of the queues' sequences: at a cohort
// whose children are all queues, the queue whose head has the least key
// (its share with the head's demand, then the job order) gives the next
// job. Such a merge yields a job x of queue q before a job y of queue r
// exactly when the largest key of q's jobs from its head up to x is below
// the largest key of r's jobs from its head up to y (the job reaching
// that largest key must leave before anything behind it does). So the
// first candidate is the one whose prefix maximum is least, and the jobs
// passed are, in each queue, those whose prefix maximum is below it. A
// range-maximum index per queue (qIndex, rebuilt when the queue's pending
// set or usage changed) answers each prefix maximum in O(1) and each
// queue's cut in O(log n), without reading the jobs passed.
//
// Skip applies to one level of cohorts: a single root with pending jobs,
// itself a queue or a cohort whose children with jobs are all queues.
// Elsewhere it declines and the engine walks job by job.

// Skipper is a Cursor that can pass jobs without yielding them (DRS and
// StrictPriority).
type Skipper interface {
	Cursor
	// Skip moves the cursor, right after Next returned a job j (which was
	// not placed: nothing was charged or removed since), past j and every
	// job after it in the cursor's order up to the first of cands (each a
	// pending job) that comes at or after j: the next Next returns that
	// candidate, returned as first (nil when none comes after: the cursor
	// is then at its end). passed lists the jobs passed (j first). ok is
	// false, with nothing changed, when the cursor cannot skip (the tree
	// has more than one level of cohorts, say) or no job would be passed.
	Skip(cands []*Job) (first *Job, passed *Skipped, ok bool)
}

// Skipped is the jobs a Skip passed.
type Skipped struct {
	p      *Pending
	t      *Tree
	ranges []skipRange
	n      int // -1 until Len counts them (StrictPriority's skip)
	// strict: the jobs are merged by the order within queues alone
	// (StrictPriority); otherwise by share first (DRS).
	strict bool
}

// skipRange is a run of consecutive jobs of one queue passed by a skip
// (first to last, both included), with the queue's usage then (their keys
// in DRS's merge).
type skipRange struct {
	q           int32
	first, last *entry
	n           int // 0 when not counted (StrictPriority's skip)
	usage       []Amount
}

// Len is the number of jobs passed. StrictPriority's skip does not count
// them: the first call does, reading them (the same conditions as Each).
func (s *Skipped) Len() int {
	if s.n < 0 {
		s.n = 0
		for i := range s.ranges {
			s.n += len(s.rangeEnts(&s.ranges[i]))
		}
	}
	return s.n
}

// rangeEnts is the jobs of r, in order.
func (s *Skipped) rangeEnts(r *skipRange) []*entry {
	ents := make([]*entry, 0, r.n)
	s.p.byQueue[r.q].AscendGreaterOrEqual(r.first, func(e *entry) bool {
		if less(r.last, e) {
			return false
		}
		ents = append(ents, e)
		return true
	})
	return ents
}

// Contains reports whether j is one of the jobs passed.
func (s *Skipped) Contains(j *Job) bool {
	e, ok := s.p.byID[j.ID]
	if !ok || e.job != j {
		return false
	}
	for i := range s.ranges {
		r := &s.ranges[i]
		if r.q == e.queue && !less(e, r.first) && !less(r.last, e) {
			return true
		}
	}
	return false
}

// Each calls fn for the jobs passed, in the order the cursor would have
// yielded them, until fn returns false. The jobs must still be pending,
// with no job added among them (the engine computes the statuses of a
// cycle's passed jobs before it changes the pending set).
func (s *Skipped) Each(fn func(*Job) bool) {
	type run struct {
		ents []*entry
		key  []float64
		i    int
	}
	runs := make([]run, len(s.ranges))
	for k := range s.ranges {
		r := &s.ranges[k]
		ents := s.rangeEnts(r)
		key := make([]float64, len(ents)) // StrictPriority: all 0, the job order alone
		if !s.strict {
			for i, e := range ents {
				key[i] = s.t.shareWith(r.q, r.usage, e.vec)
			}
		}
		runs[k] = run{ents: ents, key: key}
	}
	lessRun := func(a, b int32) bool {
		ra, rb := &runs[a], &runs[b]
		ka, kb := ra.key[ra.i], rb.key[rb.i]
		if ka != kb {
			return ka < kb
		}
		return less(ra.ents[ra.i], rb.ents[rb.i])
	}
	h := make([]int32, 0, len(runs))
	for k := range runs {
		if len(runs[k].ents) > 0 {
			h = append(h, int32(k))
		}
	}
	heapInit(h, lessRun)
	for len(h) > 0 {
		r := &runs[h[0]]
		if !fn(r.ents[r.i].job) {
			return
		}
		if r.i++; r.i < len(r.ents) {
			heapFix(h, 0, lessRun, nil)
		} else {
			h = heapPop(h, lessRun)
		}
	}
}

// qIndex is a queue's pending jobs in order with their keys (shares with
// the queue's usage at build) and a sparse table of range maxima.
type qIndex struct {
	built bool
	ver   uint64   // Pending.qver at build
	usage []Amount // the queue's usage at build
	ents  []*entry
	key   []float64
	// sp[l][i] is the index of the largest key in [i, i+2^(l+1)): a key
	// is larger if its share is, then if it comes later (the job order).
	sp [][]int32
}

// bigger is the index of the larger key of a and b.
func (x *qIndex) bigger(a, b int32) int32 {
	if x.key[a] > x.key[b] || x.key[a] == x.key[b] && a > b {
		return a
	}
	return b
}

// rmq is the index of the largest key in [lo, hi].
func (x *qIndex) rmq(lo, hi int) int32 {
	if lo == hi {
		return int32(lo)
	}
	l := bits.Len(uint(hi-lo+1)) - 2 // 2^(l+1) <= hi-lo+1
	return x.bigger(x.sp[l][lo], x.sp[l][hi-(2<<l)+1])
}

// pos is e's index in ents, -1 when absent.
func (x *qIndex) pos(e *entry) int {
	i := sort.Search(len(x.ents), func(i int) bool { return !less(x.ents[i], e) })
	if i < len(x.ents) && x.ents[i] == e {
		return i
	}
	return -1
}

// index returns queue q's index, rebuilt if its pending set or usage
// changed since it was built.
func (c *drsCursor) index(q int32) *qIndex {
	if len(c.idx) != len(c.t.nodes) {
		c.idx = make([]qIndex, len(c.t.nodes))
	}
	x := &c.idx[q]
	usage := c.t.nodes[q].usage
	if x.built && x.ver == c.p.qver[q] && slices.Equal(x.usage, usage) {
		return x
	}
	x.built, x.ver, x.usage = true, c.p.qver[q], append(x.usage[:0], usage...)
	clear(x.ents)
	x.ents = x.ents[:0]
	c.p.byQueue[q].Ascend(func(e *entry) bool {
		x.ents = append(x.ents, e)
		return true
	})
	n := len(x.ents)
	x.key = slices.Grow(x.key[:0], n)[:n]
	for i, e := range x.ents {
		x.key[i] = c.t.share(q, e.vec)
	}
	lv := 0
	for 2<<lv <= n {
		lv++
	}
	for len(x.sp) < lv {
		x.sp = append(x.sp, nil)
	}
	x.sp = x.sp[:lv]
	for l := range lv {
		w := 2 << l // window
		m := n - w + 1
		x.sp[l] = slices.Grow(x.sp[l][:0], m)[:m]
		for i := range m {
			if l == 0 {
				x.sp[l][i] = x.bigger(int32(i), int32(i+1))
			} else {
				h := w / 2
				x.sp[l][i] = x.bigger(x.sp[l-1][i], x.sp[l-1][i+h])
			}
		}
	}
	return x
}

// seek places the walker on e (the next peek returns it).
func (w *walker) seek(e *entry) {
	w.buf, w.i, w.end, w.pivot = append(w.buf[:0], e), 0, false, nil
}

// finish places the walker at its end.
func (w *walker) finish() {
	w.buf, w.i, w.end, w.pivot = w.buf[:0], 0, true, nil
}

// Skip: see Skipper.
func (c *drsCursor) Skip(cands []*Job) (*Job, *Skipped, bool) {
	if c.p == nil || c.p.rebuild {
		return nil, nil, false
	}
	t := c.t
	N := len(t.nodes)
	if len(c.heaps[N]) != 1 {
		return nil, nil, false
	}
	R := c.heaps[N][0]
	qs := append(c.skipQs[:0], R)
	if t.nodes[R].kind != kindQueue {
		qs = append(qs[:0], c.heaps[R]...)
	}
	c.skipQs = qs
	if len(c.skipH) != N {
		c.skipH = make([]int32, N)
	}
	// The heads, their positions, and the check that the heaps are
	// fresh: each queue's candidate is its head, keyed with its usage now.
	for _, q := range qs {
		if t.nodes[q].kind != kindQueue {
			return nil, nil, false
		}
		head := c.ws[q].peek()
		if head == nil || c.cand[q] != head || c.key[q] != t.share(q, head.vec) {
			return nil, nil, false
		}
	}
	for _, q := range qs {
		x := c.index(q)
		h := x.pos(c.ws[q].peek())
		if h < 0 {
			return nil, nil, false // not expected: the index is the queue's set
		}
		c.skipH[q] = int32(h)
	}
	// The first candidate: the least prefix maximum.
	bq, bpos, bm := int32(-1), 0, int32(0)
	for _, j := range cands {
		e, ok := c.p.byID[j.ID]
		if !ok || e.job != j {
			continue
		}
		q := e.queue
		if !(q == R || t.nodes[q].parent == R) || c.pos[q] < 0 {
			continue // no job of its queue is ahead
		}
		x := &c.idx[q]
		h := int(c.skipH[q])
		pe := x.pos(e)
		if pe < h {
			continue // behind the cursor: already yielded
		}
		m := x.rmq(h, pe)
		switch {
		case bq < 0:
		case q == bq && m == bm:
			if pe >= bpos {
				continue
			}
		case !c.mLess(q, m, bq, bm):
			continue
		}
		bq, bpos, bm = q, pe, m
	}
	// Each queue's cut: its first job whose prefix maximum exceeds the
	// first candidate's.
	passed := &Skipped{p: c.p, t: t}
	for _, q := range qs {
		x := &c.idx[q]
		h := int(c.skipH[q])
		cut := len(x.ents)
		switch {
		case q == bq:
			cut = bpos
		case bq >= 0:
			cut = h + sort.Search(len(x.ents)-h, func(k int) bool { return c.mLess(bq, bm, q, x.rmq(h, h+k)) })
		}
		if cut == h {
			continue
		}
		passed.ranges = append(passed.ranges, skipRange{q: q, first: x.ents[h], last: x.ents[cut-1], n: cut - h,
			usage: slices.Clone(x.usage)})
		passed.n += cut - h
	}
	if passed.n == 0 {
		return nil, nil, false
	}
	for _, r := range passed.ranges {
		x := &c.idx[r.q]
		if cut := int(c.skipH[r.q]) + r.n; cut < len(x.ents) {
			c.ws[r.q].seek(x.ents[cut])
		} else {
			c.ws[r.q].finish()
		}
		c.picked.note(r.q)
	}
	for _, r := range passed.ranges {
		c.update(r.q)
	}
	c.last = -1
	if bq < 0 {
		return nil, passed, true
	}
	return c.idx[bq].ents[bpos].job, passed, true
}

// mLess compares two keys, (queue, index into its qIndex): by share, then
// by job order.
func (c *drsCursor) mLess(qa int32, a int32, qb int32, b int32) bool {
	xa, xb := &c.idx[qa], &c.idx[qb]
	if xa.key[a] != xb.key[b] {
		return xa.key[a] < xb.key[b]
	}
	return less(xa.ents[a], xb.ents[b])
}
