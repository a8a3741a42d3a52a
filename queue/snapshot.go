package queue

import (
	"time"

	"github.com/google/btree"
)

// Snapshot is a read-only view of the pending jobs and the quota usage at
// one moment, published by the owner of a Pending. Any number of
// goroutines may read it at once, while the owner goes on: the pending
// sets are copy-on-write clones of the owner's btrees. Jobs returned must
// not be modified.
type Snapshot struct {
	at      time.Time
	version uint64
	res     []ResourceName
	qIndex  map[string]int
	n       int
	minAsk  int // MinPerMember, -1 when nothing is pending
	// static is what never changes after NewPending (names, cohorts,
	// nominal quota), shared by every snapshot of the Pending.
	static []snapStatic
	// Per queue (in tree order): the pending set, usage (R per queue),
	// share and decayed GPU-time.
	pending    []*btree.BTreeG[*entry]
	usage      []Amount
	share      []float64
	gpuSeconds []float64
	// one holds pending, share and gpuSeconds (and usage, for at most 4
	// resources) when the tree has one queue (replays, single-queue
	// sites): a snapshot is then one allocation.
	one struct {
		pending [1]*btree.BTreeG[*entry]
		f       [2]float64
		usage   [4]Amount // when the tree governs at most 4 resources
	}
}

type snapStatic struct {
	name, cohort string
	nominal      []Amount // shared with the tree: never written after NewTree
}

// Publish makes the current state the snapshot that Snapshot returns and
// returns it. Owner only. It clones (O(1), copy-on-write) only the pending
// sets of queues that changed since the last Publish; the others are
// shared with the previous snapshot, so a queue that did not change costs
// its owner no copy on its next change, and a queue with no pending job
// gets a shared empty set (no clone either). When neither the pending set nor
// the quota tree changed and the time is the same, the previous snapshot
// is returned as it is.
func (p *Pending) Publish(now time.Time) *Snapshot {
	t := p.tree
	version := p.version ^ t.version<<32
	prev := p.snap.Load()
	if prev != nil && prev.version == version && prev.at.Equal(now) && prev.n == len(p.byID) && p.dirtyN == 0 {
		return prev
	}
	R := len(t.res)
	Q := len(t.queues)
	if p.static == nil {
		p.static = make([]snapStatic, Q)
		for i, qi := range t.queues {
			n := &t.nodes[qi]
			cohort := ""
			if n.parent != noNode {
				cohort = t.nodes[n.parent].name
			}
			p.static[i] = snapStatic{name: n.name, cohort: cohort, nominal: n.nominal}
		}
	}
	s := p.spare
	if s != nil && s != prev && len(s.pending) == Q && len(s.usage) == Q*R {
		// PendingConfig.RecycleSnapshots: nobody reads s any more. Every
		// field is written below (the per-queue slices in full).
		s.at, s.version, s.res, s.qIndex, s.n, s.static = now, version, t.res, p.qIndex, len(p.byID), p.static
	} else {
		s = &Snapshot{at: now, version: version, res: t.res, qIndex: p.qIndex, n: len(p.byID), static: p.static}
		var f []float64
		if Q == 1 {
			s.pending, f = s.one.pending[:], s.one.f[:]
		} else {
			s.pending, f = make([]*btree.BTreeG[*entry], Q), make([]float64, 2*Q)
		}
		if Q == 1 && R <= len(s.one.usage) {
			s.usage = s.one.usage[:R:R]
		} else {
			s.usage = make([]Amount, Q*R)
		}
		s.share, s.gpuSeconds = f[:Q:Q], f[Q:]
	}
	if p.recycle {
		p.spare = prev
	}
	for i, qi := range t.queues {
		n := &t.nodes[qi]
		copy(s.usage[i*R:(i+1)*R], n.usage)
		switch {
		case prev != nil && !p.dirty[qi]:
			s.pending[i] = prev.pending[i]
		case p.byQueue[qi].Len() == 0:
			s.pending[i] = p.empty
			p.dirty[qi] = false
		default:
			s.pending[i] = p.byQueue[qi].Clone()
			p.dirty[qi] = false
		}
		s.share[i], s.gpuSeconds[i] = t.share(qi, nil), n.decayed
	}
	s.minAsk = -1
	for k := range p.askMask {
		if p.askMask[k] != 0 {
			s.minAsk = k
			break
		}
	}
	p.dirtyN = 0
	p.snap.Store(s)
	return s
}

// Snapshot returns the latest published snapshot. Safe from any goroutine;
// never nil once NewPending returned.
func (p *Pending) Snapshot() *Snapshot { return p.snap.Load() }

// At is the time passed to Publish.
func (s *Snapshot) At() time.Time { return s.at }

// Len is the number of pending jobs.
func (s *Snapshot) Len() int { return s.n }

// QueueStatus is one queue in a snapshot.
type QueueStatus struct {
	Name       string
	Cohort     string
	Pending    int
	Usage      Resources // governed resources in use
	Nominal    Resources // own nominal quota
	Share      float64   // dominant resource share (DRS) now
	GPUSeconds float64   // decayed GPU-time
}

// Queues lists every leaf queue, by name. It allocates.
func (s *Snapshot) Queues() []QueueStatus {
	out := make([]QueueStatus, len(s.pending))
	for i := range s.pending {
		out[i] = s.status(i)
	}
	return out
}

// Queue returns one queue's status.
func (s *Snapshot) Queue(name string) (QueueStatus, bool) {
	i, ok := s.qIndex[name]
	if !ok {
		return QueueStatus{}, false
	}
	return s.status(i), true
}

func (s *Snapshot) status(i int) QueueStatus {
	q := &s.static[i]
	R := len(s.res)
	usage := s.usage[i*R : (i+1)*R]
	st := QueueStatus{Name: q.name, Cohort: q.cohort, Pending: s.pending[i].Len(), Share: s.share[i], GPUSeconds: s.gpuSeconds[i]}
	for k, r := range s.res {
		if usage[k] != 0 {
			st.Usage = append(st.Usage, Quantity{r, usage[k]})
		}
		if q.nominal[k] != 0 {
			st.Nominal = append(st.Nominal, Quantity{r, q.nominal[k]})
		}
	}
	return st
}

// MinPerMember returns the fewest whole GPUs a member of any pending job
// asks (AskClass.PerMember: 0 for a fractional, MIG or GPU-less member,
// 64 for 64 or more); ok is false when no job is pending. O(1).
func (s *Snapshot) MinPerMember() (k int, ok bool) {
	return s.minAsk, s.minAsk >= 0
}

// Each calls fn for every pending job, queue by queue (in the tree's
// order) and in queue order within each, until fn returns false.
func (s *Snapshot) Each(fn func(*Job) bool) {
	for _, t := range s.pending {
		more := true
		t.Ascend(func(e *entry) bool { more = fn(e.job); return more })
		if !more {
			return
		}
	}
}

// Pending calls fn for the pending jobs of a queue, in queue order, until
// fn returns false. It reports false for an unknown queue.
func (s *Snapshot) Pending(queue string, fn func(*Job) bool) bool {
	i, ok := s.qIndex[queue]
	if !ok {
		return false
	}
	s.pending[i].Ascend(func(e *entry) bool { return fn(e.job) })
	return true
}
