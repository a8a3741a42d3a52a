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
	queues  []snapQueue
	qIndex  map[string]int
	n       int
}

type snapQueue struct {
	name, cohort string
	pending      *btree.BTreeG[*entry]
	usage        []Amount
	nominal      []Amount // shared with the tree: never written after NewTree
	share        float64
	gpuSeconds   float64
}

// Publish makes the current state the snapshot that Snapshot returns and
// returns it. Owner only. It costs one btree Clone (O(1), copy-on-write)
// and one small copy of usage per queue.
func (p *Pending) Publish(now time.Time) *Snapshot {
	t := p.tree
	R := len(t.res)
	s := &Snapshot{at: now, version: p.version ^ t.version<<32, res: t.res, qIndex: p.qIndex, n: len(p.byID)}
	s.queues = make([]snapQueue, len(t.queues))
	usage := make([]Amount, len(t.queues)*R)
	for i, qi := range t.queues {
		n := &t.nodes[qi]
		u := usage[i*R : (i+1)*R : (i+1)*R]
		copy(u, n.usage)
		cohort := ""
		if n.parent != noNode {
			cohort = t.nodes[n.parent].name
		}
		s.queues[i] = snapQueue{
			name: n.name, cohort: cohort, pending: p.byQueue[qi].Clone(),
			usage: u, nominal: n.nominal, share: t.share(qi, nil), gpuSeconds: n.decayed,
		}
	}
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
	out := make([]QueueStatus, len(s.queues))
	for i := range s.queues {
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
	q := &s.queues[i]
	st := QueueStatus{Name: q.name, Cohort: q.cohort, Pending: q.pending.Len(), Share: q.share, GPUSeconds: q.gpuSeconds}
	for k, r := range s.res {
		if q.usage[k] != 0 {
			st.Usage = append(st.Usage, Quantity{r, q.usage[k]})
		}
		if q.nominal[k] != 0 {
			st.Nominal = append(st.Nominal, Quantity{r, q.nominal[k]})
		}
	}
	return st
}

// Pending calls fn for the pending jobs of a queue, in queue order, until
// fn returns false. It reports false for an unknown queue.
func (s *Snapshot) Pending(queue string, fn func(*Job) bool) bool {
	i, ok := s.qIndex[queue]
	if !ok {
		return false
	}
	s.queues[i].pending.Ascend(func(e *entry) bool { return fn(e.job) })
	return true
}
