package queue

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/btree"
)

// PendingConfig configures a Pending set.
type PendingConfig struct {
	// AgingPeriod is how long a job waits to gain one point of priority in
	// the order within a queue (and in StrictPriority across queues), so
	// that no job starves behind a stream of higher-priority work: a job of
	// priority p submitted at s ranks as p + (now-s)/AgingPeriod. Aging is
	// linear and uncapped, so the order it gives does not change with now
	// and needs no re-sorting. Zero: no aging (priority, then FIFO).
	AgingPeriod time.Duration

	// RebuildOrder makes policies that keep their order across cycles
	// (DRS) rebuild it from scratch on every Order instead. The order is
	// the same either way; this is for checks that say so (the engine sets
	// it with Config.DisableCaches).
	RebuildOrder bool `json:"-"`

	// RecycleSnapshots lets Publish write a new snapshot into the storage
	// of the one published two calls before, instead of allocating one
	// per call (the queue shares, usage and pending sets of a tree of 64
	// queues are about 2 KB, a quarter of the bytes a month's replay
	// allocated). It is for an owner whose readers are done with a
	// Snapshot before the second Publish after it: a Snapshot held longer
	// shows later states, or a mix of two. An engine publishes once per
	// cycle, so with it a View's pending sets and queue statuses (View.
	// EachPending, View.Queues) are to be read before the engine's next
	// cycle; replay.Run sets it when its caller observes no cycle. Off,
	// every Snapshot stays as published.
	RecycleSnapshots bool `json:"-"`
}

// i128 is a signed 128-bit integer, for aging keys that must not overflow.
type i128 struct {
	hi int64
	lo uint64
}

func mul128(a, b int64) i128 {
	hi, lo := bits.Mul64(absU(a), absU(b))
	r := i128{int64(hi), lo}
	if (a < 0) != (b < 0) {
		r = r.neg()
	}
	return r
}

func (x i128) neg() i128 {
	lo, borrow := bits.Sub64(0, x.lo, 0)
	return i128{-x.hi - int64(borrow), lo}
}

func (x i128) sub64(v int64) i128 {
	lo, borrow := bits.Sub64(x.lo, uint64(v), 0)
	return i128{x.hi - v>>63 - int64(borrow), lo}
}

func (x i128) cmp(y i128) int {
	if c := cmp.Compare(x.hi, y.hi); c != 0 {
		return c
	}
	return cmp.Compare(x.lo, y.lo)
}

// entry is a pending job with its precomputed order key and demand. Fields
// other than gone are immutable once the entry is in a tree, so snapshots
// can share entries with the owner.
type entry struct {
	job    *Job
	d      *demand
	key    i128 // larger first: priority (aged)
	submit int64
	gone   bool  // removed; written and read by the owner only
	queue  int32 // d.queue: one cache miss less per DRS pick
	ask    uint8 // askOf(job): its class in Pending.asks
	askT   uint8
	seq    uint64   // order of addition: the tie-break in askBucket.limits
	vec    []Amount // d.vec, or a copy in small: one cache miss less per pick
	small  [4]Amount
}

// less is the order within a queue and an account: aged priority, then
// submit time, then ID.
func less(a, b *entry) bool { return cmpEntry(a, b) < 0 }

// cmpEntry is less as a three-way comparison: the higher key first, then
// the earlier submission, then the job ID.
func cmpEntry(a, b *entry) int {
	if c := a.key.cmp(b.key); c != 0 {
		return -c
	}
	if c := cmp.Compare(a.submit, b.submit); c != 0 {
		return c
	}
	return strings.Compare(a.job.ID, b.job.ID)
}

const btreeDegree = 32

// Rejection is a submitted job that Drain could not add, and why.
type Rejection struct {
	Job *Job
	Err error
}

// Pending is the set of pending jobs of one Tree, ordered within each
// queue and each account by aged priority, then submit time, then ID, in
// google/btree sets. Policies order it across queues (see Policy).
//
// Concurrency: a Pending is owned by one goroutine (the engine); only
// Snapshot may be called from any goroutine. Publish (and Drain) hand a
// read-only, copy-on-write Snapshot to observers through an atomic pointer,
// so readers never block the owner.
type Pending struct {
	tree      *Tree
	aging     int64
	byID      map[string]*entry
	byQueue   []*btree.BTreeG[*entry] // by node index; nil for cohorts
	byAccount []*btree.BTreeG[*entry] // by account index
	snap      atomic.Pointer[Snapshot]
	version   uint64
	drainBuf  []*Job
	rejects   []Rejection
	qIndex    map[string]int // snapshot queue positions, shared by snapshots
	// dirty marks, by node index, the queues whose pending set changed
	// since the last Publish (dirtyN counts the marks set): Publish clones
	// only those.
	dirty  []bool
	dirtyN int
	// changed lists the queues whose pending set changed since a policy
	// last took them (see DRS); rebuild is PendingConfig.RebuildOrder.
	changed changeLog
	rebuild bool
	static  []snapStatic // the snapshots' constant part, built once
	// recycle is PendingConfig.RecycleSnapshots; spare is then the
	// snapshot published before the current one, whose storage the next
	// Publish writes.
	recycle bool
	spare   *Snapshot
	// empty is the pending set Publish gives a queue with no pending job:
	// never written, so it is shared by every snapshot and costs the
	// queue's tree no clone (a cloned tree copies its nodes on its next
	// change).
	empty *btree.BTreeG[*entry]
	// maxVec is, per resource, the largest demand of any job ever added
	// (it never shrinks): QuotaIdle compares it with what every queue
	// could still admit.
	maxVec []Amount
	// asks[k][t] describes the pending jobs of size class (k, t) (askOf);
	// askMask[k] has bit t set when asks[k][t] has jobs. AskClasses reads
	// them.
	asks    [maxAsk + 1][askTotals]askBucket
	askMask [maxAsk + 1]uint32
	seq     uint64
	// classOrder: askBucket.order is kept (turned on by the first
	// StrictPriority SkipTo, for good).
	classOrder bool
	// qver counts, by node index, the changes to each queue's pending set
	// (touch): DRS's skip index (skip.go) rebuilds a queue's part when it
	// moved.
	qver []uint64
}

// maxAsk caps the per-member asks counted: a member asking more counts as
// maxAsk. askTotals is the number of total-size classes: class 1 holds
// the jobs asking one GPU in all, class t >= 2 those asking 2^(t-2)+1 ..
// 2^(t-1) (t = bits.Len(total-1)+1), the last one everything larger.
const (
	maxAsk    = 64
	askTotals = 24
)

type askBucket struct {
	n, unlimited int
	// limits holds every job of the class by limit, those with none
	// last (noLimit): EachLimited lists them. Made on first use.
	limits *btree.BTreeG[limitKey]
	// order holds every job of the class in the order within queues
	// (less), once Pending.classOrder is on (StrictPriority's SkipTo).
	order *btree.BTreeG[*entry]
}

// noLimit is the limit askBucket.limits files a job without one under.
const noLimit = time.Duration(math.MaxInt64)

// filedLimit is j's key in askBucket.limits: its limit, or noLimit.
func filedLimit(j *Job) time.Duration {
	if j.RuntimeLimit <= 0 {
		return noLimit
	}
	return j.RuntimeLimit
}

type limitKey struct {
	lim time.Duration
	seq uint64
	e   *entry // the job (not compared): EachLimited yields it
}

func limitLess(a, b limitKey) bool { return a.lim < b.lim || a.lim == b.lim && a.seq < b.seq }

// askOf is j's size class: the fewest whole GPUs any member asks (at most
// maxAsk; 0 when a member asks a fraction, a MIG instance or no GPU), and
// the class of the whole GPUs it asks in all (with an elastic job's
// fewest members).
func askOf(j *Job) (k, t uint8) {
	a, total := maxAsk, 0
	for i, g := range j.Request.Groups {
		if g.GPUMilli > 0 || g.MIGProfile != "" {
			return 0, 0
		}
		a = min(a, g.GPUsPerMember)
		m := g.Members
		if i == 0 && j.Elastic.MinMembers > 0 {
			m = min(m, j.Elastic.MinMembers)
		}
		total += m * g.GPUsPerMember
	}
	if a <= 0 {
		return 0, 0
	}
	return uint8(a), uint8(min(bits.Len(uint(total-1))+1, askTotals-1))
}

// AskClass describes a class of pending jobs by size (Pending.AskClasses).
type AskClass struct {
	// PerMember is what the smallest member of each job asks, in whole
	// GPUs: 64 stands for 64 or more, 0 for a fractional, MIG or GPU-less
	// member. MinTotal is the fewest whole GPUs a job of the class asks
	// in all (an elastic job with its fewest members).
	PerMember, MinTotal int
	Jobs                int // pending jobs
	Unlimited           int // of them, those with no runtime limit
	// ShortestLimit is the shortest runtime limit of the others; zero
	// when every one is unlimited.
	ShortestLimit time.Duration
}

// AskClasses calls fn for each class of pending jobs with PerMember <=
// maxPerMember, by PerMember then MinTotal, until fn returns false. A job
// can start only on nodes with as many GPUs free as its smallest member
// asks and with at least its total free, and it may use GPUs reserved
// for later only if its runtime limit ends before: the engine's walk
// stops early on these classes (engine.Config.LazyPending). A class costs
// O(log n).
func (p *Pending) AskClasses(maxPerMember int, fn func(AskClass) bool) {
	for k := 0; k <= min(max(maxPerMember, 0), maxAsk); k++ {
		for m := p.askMask[k]; m != 0; m &= m - 1 {
			t := bits.TrailingZeros32(m)
			b := &p.asks[k][t]
			c := AskClass{PerMember: k, Jobs: b.n, Unlimited: b.unlimited}
			if t > 0 {
				c.MinTotal = 1<<(t-1)/2 + 1 // 1 for t == 1
			}
			if b.limits != nil {
				if lk, ok := b.limits.Min(); ok && lk.lim != noLimit {
					c.ShortestLimit = lk.lim
				}
			}
			if !fn(c) {
				return
			}
		}
	}
}

func (b *askBucket) addOrder(e *entry) {
	if b.order == nil {
		b.order = btree.NewG(btreeDegree, less)
	}
	b.order.ReplaceOrInsert(e)
}

// keepClassOrder turns classOrder on, filing the jobs pending now.
func (p *Pending) keepClassOrder() {
	if p.classOrder {
		return
	}
	p.classOrder = true
	for _, e := range p.byID {
		p.asks[e.ask][e.askT].addOrder(e)
	}
}

// bucket is the index of c's jobs in Pending.asks (askOf).
func (c AskClass) bucket() (k, t int) {
	k = c.PerMember
	if c.MinTotal > 0 {
		t = min(bits.Len(uint(c.MinTotal-1))+1, askTotals-1)
	}
	return k, t
}

// Has reports whether j belongs to class c.
func (c AskClass) Has(j *Job) bool {
	k, t := c.bucket()
	jk, jt := askOf(j)
	return int(jk) == k && int(jt) == t
}

// EachLimited calls fn for the pending jobs of class c (as AskClasses
// gave it, with no job added or removed since) that have a runtime limit
// of at most maxLimit, shortest limit first, until fn returns false;
// maxLimit math.MaxInt64 lists every job of the class, those without a
// limit last. It costs O(log n) plus O(1) a job.
func (p *Pending) EachLimited(c AskClass, maxLimit time.Duration, fn func(*Job) bool) {
	k, t := c.bucket()
	if k < 0 || k > maxAsk {
		return
	}
	b := &p.asks[k][t]
	if b.limits == nil {
		return
	}
	b.limits.Ascend(func(lk limitKey) bool {
		if lk.lim > maxLimit {
			return false
		}
		return fn(lk.e.job)
	})
}

// QuotaIdle reports whether quota holds no pending job back: every leaf
// queue could admit now, for each resource, as much as the largest demand
// of any job ever added to p. When it is true, Tree.Fits accepts every
// pending job, and goes on accepting them until usage grows (a Charge or
// an Adopt). It costs O(queues x resources x depth).
func (p *Pending) QuotaIdle() bool {
	t := p.tree
	for _, q := range t.queues {
		for k, v := range p.maxVec {
			if v > 0 && t.available(q, k) < v {
				return false
			}
		}
	}
	return true
}

// NewPending returns an empty pending set over t.
func NewPending(t *Tree, cfg PendingConfig) (*Pending, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil tree", ErrInvalidTree)
	}
	if cfg.AgingPeriod < 0 {
		return nil, fmt.Errorf("%w: AgingPeriod must not be negative, got %v", ErrInvalidTree, cfg.AgingPeriod)
	}
	p := &Pending{
		tree:      t,
		aging:     int64(cfg.AgingPeriod),
		byID:      map[string]*entry{},
		byQueue:   make([]*btree.BTreeG[*entry], len(t.nodes)),
		byAccount: make([]*btree.BTreeG[*entry], len(t.accounts)),
		qIndex:    map[string]int{},
		dirty:     make([]bool, len(t.nodes)),
		changed:   newChangeLog(len(t.nodes)),
		rebuild:   cfg.RebuildOrder,
		recycle:   cfg.RecycleSnapshots,
		empty:     btree.NewG(btreeDegree, less),
		qver:      make([]uint64, len(t.nodes)),
	}
	fl := btree.NewFreeListG[*entry](btree.DefaultFreeListSize)
	for i, q := range t.queues {
		p.byQueue[q] = btree.NewWithFreeListG(btreeDegree, less, fl)
		p.qIndex[t.nodes[q].name] = i
	}
	for i := range t.accounts {
		p.byAccount[i] = btree.NewWithFreeListG(btreeDegree, less, fl)
	}
	p.Publish(time.Time{})
	return p, nil
}

// Tree returns the tree the set belongs to.
func (p *Pending) Tree() *Tree { return p.tree }

// Len is the number of pending jobs.
func (p *Pending) Len() int { return len(p.byID) }

// QueueLen is the number of pending jobs in a queue.
func (p *Pending) QueueLen(queue string) int {
	i, ok := p.tree.nodeIdx[queue]
	if !ok || p.byQueue[i] == nil {
		return 0
	}
	return p.byQueue[i].Len()
}

// Add validates j (Job.Validate and Tree.ValidateJob) and adds it. Errors:
// *FieldError (ErrInvalidJob, ErrUnknownQueue, ErrUnknownAccount), or
// ErrDuplicateJob when a pending job has the same ID. From here on the
// package owns j (see Job).
func (p *Pending) Add(j *Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	d, err := p.tree.demandOf(j)
	if err != nil {
		return err
	}
	if _, dup := p.byID[j.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.ID)
	}
	if len(p.maxVec) != len(d.vec) {
		p.maxVec = make([]Amount, len(d.vec))
	}
	for k, v := range d.vec {
		p.maxVec[k] = max(p.maxVec[k], v)
	}
	sub := j.Submit.UnixNano()
	p.seq++
	e := &entry{job: j, d: d, queue: d.queue, submit: sub, vec: d.vec, seq: p.seq}
	e.ask, e.askT = askOf(j)
	b := &p.asks[e.ask][e.askT]
	b.n++
	p.askMask[e.ask] |= 1 << e.askT
	if b.limits == nil {
		b.limits = btree.NewG(8, limitLess)
	}
	if j.RuntimeLimit <= 0 {
		b.unlimited++
	}
	b.limits.ReplaceOrInsert(limitKey{filedLimit(j), e.seq, e})
	if len(d.vec) <= len(e.small) {
		e.vec = e.small[:len(d.vec):len(d.vec)]
		copy(e.vec, d.vec)
	}
	if p.aging > 0 {
		e.key = mul128(int64(j.Priority), p.aging).sub64(sub)
	} else {
		e.key = i128{hi: int64(j.Priority)}
	}
	p.byID[j.ID] = e
	p.byQueue[d.queue].ReplaceOrInsert(e)
	p.byAccount[d.account].ReplaceOrInsert(e)
	if p.classOrder {
		b.addOrder(e) // keyed: after e.key
	}
	p.touch(d.queue)
	p.version++
	return nil
}

// touch marks queue q's pending set changed since the last Publish.
func (p *Pending) touch(q int32) {
	p.qver[q]++
	if !p.dirty[q] {
		p.dirty[q] = true
		p.dirtyN++
	}
	p.changed.note(q)
}

// Remove takes a job out of the set (bound, cancelled); false when no such
// job is pending. Cursors stay valid and skip removed jobs.
func (p *Pending) Remove(id string) (*Job, bool) {
	e, ok := p.byID[id]
	if !ok {
		return nil, false
	}
	delete(p.byID, id)
	b := &p.asks[e.ask][e.askT]
	if b.n--; b.n == 0 {
		p.askMask[e.ask] &^= 1 << e.askT
	}
	if e.job.RuntimeLimit <= 0 {
		b.unlimited--
	}
	b.limits.Delete(limitKey{filedLimit(e.job), e.seq, nil})
	if p.classOrder {
		b.order.Delete(e)
	}
	p.byQueue[e.d.queue].Delete(e)
	p.byAccount[e.d.account].Delete(e)
	p.touch(e.d.queue)
	e.gone = true
	p.version++
	return e.job, true
}

// Get returns a pending job by ID.
func (p *Pending) Get(id string) (*Job, bool) {
	e, ok := p.byID[id]
	if !ok {
		return nil, false
	}
	return e.job, true
}

// Ascend calls fn for the pending jobs of a queue in queue order until fn
// returns false. fn must not change the set.
func (p *Pending) Ascend(queue string, fn func(*Job) bool) {
	i, ok := p.tree.nodeIdx[queue]
	if !ok || p.byQueue[i] == nil {
		return
	}
	p.byQueue[i].Ascend(func(e *entry) bool { return fn(e.job) })
}

// AscendAccount calls fn for the pending jobs of an account (its own, not
// its sub-accounts') in order until fn returns false.
func (p *Pending) AscendAccount(account string, fn func(*Job) bool) {
	i, ok := p.tree.acctIdx[account]
	if !ok {
		return
	}
	p.byAccount[i].Ascend(func(e *entry) bool { return fn(e.job) })
}

// Before reports whether pending job a comes before pending job b in the
// order within queues (aged priority, submit, ID); for policies written
// outside this package. Unknown IDs compare by ID.
func (p *Pending) Before(a, b *Job) bool {
	ea, ok1 := p.byID[a.ID]
	eb, ok2 := p.byID[b.ID]
	if !ok1 || !ok2 {
		return a.ID < b.ID
	}
	return less(ea, eb)
}

// Drain moves every job waiting in the intake into the set, advances the
// tree's decayed usage to now, and publishes a snapshot. Jobs that cannot
// be added come back as rejections (the engine reports them); the slice is
// reused by the next Drain.
func (p *Pending) Drain(in *Intake, now time.Time) []Rejection {
	p.rejects = p.rejects[:0]
	p.drainBuf = in.Drain(p.drainBuf[:0])
	for i, j := range p.drainBuf {
		if err := p.Add(j); err != nil {
			p.rejects = append(p.rejects, Rejection{Job: j, Err: err})
		}
		p.drainBuf[i] = nil
	}
	p.tree.Advance(now)
	p.Publish(now)
	return p.rejects
}

// walker walks one btree in order, in batches, tolerating removals between
// steps (removed entries are skipped).
type walker struct {
	tr    *btree.BTreeG[*entry]
	buf   []*entry
	i     int
	end   bool
	pivot *entry
	fn    func(*entry) bool
}

const walkBatch = 32

func (w *walker) reset(tr *btree.BTreeG[*entry]) {
	if w.fn == nil {
		w.fn = w.collect
	}
	w.tr, w.buf, w.i, w.pivot = tr, w.buf[:0], 0, nil
	w.end = tr == nil || tr.Len() == 0
}

func (w *walker) collect(e *entry) bool {
	if e == w.pivot {
		return true
	}
	w.buf = append(w.buf, e)
	return len(w.buf) < walkBatch
}

// peek returns the next entry without consuming it; nil at the end.
func (w *walker) peek() *entry {
	for {
		for w.i < len(w.buf) {
			if e := w.buf[w.i]; !e.gone {
				return e
			}
			w.i++
		}
		if w.end {
			return nil
		}
		w.pivot = nil
		if n := len(w.buf); n > 0 {
			w.pivot = w.buf[n-1]
		}
		w.buf, w.i = w.buf[:0], 0
		if w.pivot == nil {
			w.tr.Ascend(w.fn)
		} else {
			w.tr.AscendGreaterOrEqual(w.pivot, w.fn)
		}
		if len(w.buf) < walkBatch {
			w.end = true
		}
	}
}

// advance consumes the entry peek returned.
func (w *walker) advance() { w.i++ }
