package queue

import (
	"errors"
	"fmt"
	"time"
)

// demand is a job's demand in a tree's dense resource space.
type demand struct {
	tree     *Tree
	job      string // the job's ID
	queue    int32
	account  int32
	vec      []Amount // by resource index; ungoverned resources dropped
	gpuMilli float64  // GPU-time rate for fair share
	// small backs vec when the tree governs at most len(small)
	// resources: one allocation per job, not two.
	small [4]Amount
}

// demandOf returns the job's cached demand for t, computing it once.
func (t *Tree) demandOf(j *Job) (*demand, error) {
	if d := j.dem; d != nil && d.tree == t {
		return d, nil
	}
	if err := t.ValidateJob(j); err != nil {
		return nil, err
	}
	d := &demand{tree: t, job: j.ID, queue: t.nodeIdx[j.Queue], account: t.acctIdx[j.AccountName()]}
	if len(t.res) <= len(d.small) {
		d.vec = d.small[:len(t.res):len(t.res)]
	} else {
		d.vec = make([]Amount, len(t.res))
	}
	// The quantities of Demand, in its order, without its array (one
	// allocation a submission) when a request names at most 8.
	var buf [8]Quantity
	for _, q := range j.appendDemand(buf[:0]) {
		if k, ok := t.resIdx[q.Name]; ok {
			d.vec[k] = q.Amount
		}
		d.gpuMilli += float64(q.Amount) * q.Name.gpuMilliWeight()
	}
	j.dem = d
	return d, nil
}

// Errors of quota accounting.
var (
	// ErrQuotaExceeded: Charge of a job that does not fit (see *QuotaError).
	ErrQuotaExceeded = errors.New("queue: quota exceeded")
	// ErrNotCharged: Release of a job that is not charged.
	ErrNotCharged = errors.New("queue: job not charged")
	// ErrAlreadyCharged: Charge or Adopt of a job ID already charged.
	ErrAlreadyCharged = errors.New("queue: job already charged")
	// ErrUnknownNode: a queue or cohort name the tree does not have.
	ErrUnknownNode = errors.New("queue: unknown queue or cohort")
)

// QuotaError says which resource of which queue stopped a Charge.
type QuotaError struct {
	Queue     string
	Resource  ResourceName
	Need      Amount
	Available Amount
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v: queue %q: %s: need %d, available %d", ErrQuotaExceeded, e.Queue, e.Resource, e.Need, e.Available)
}

func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// Fit is the answer of Tree.Fits: a result with a reason, not an error.
type Fit struct {
	// OK: the job fits now, within the queue's own quota or by borrowing.
	OK bool
	// Borrowing: OK, and the queue then uses more than its own quota of at
	// least one resource (see Tree.Lenders for from whom).
	Borrowing bool
	// When !OK: the first resource (by name) that does not fit, how much
	// the job needs of it and how much the queue can still get.
	Resource  ResourceName
	Need      Amount
	Available Amount
}

// available is Kueue's available(): what node i can still use of resource
// k, from its guaranteed part and from its parent's pool, capped by its
// borrowing limit.
func (t *Tree) available(i int32, k int) Amount {
	n := &t.nodes[i]
	if n.parent == noNode {
		return n.subtree[k].Sub(n.usage[k])
	}
	local := maxAmount(0, n.guaranteed[k].Sub(n.usage[k]))
	parent := t.available(n.parent, k)
	if n.hasBorrow[k] {
		stored := n.subtree[k].Sub(n.guaranteed[k])
		usedInParent := maxAmount(0, n.usage[k].Sub(n.guaranteed[k]))
		parent = minAmount(parent, stored.Sub(usedInParent).Add(n.borrow[k]))
	}
	return local.Add(parent)
}

// potential is Kueue's potentialAvailable(): what node i could use of
// resource k if nothing else were in use.
func (t *Tree) potential(i int32, k int) Amount {
	n := &t.nodes[i]
	if n.parent == noNode {
		return n.subtree[k]
	}
	a := n.guaranteed[k].Add(t.potential(n.parent, k))
	if n.hasBorrow[k] {
		a = minAmount(a, n.subtree[k].Add(n.borrow[k]))
	}
	return a
}

func (t *Tree) addUsage(i int32, k int, v Amount) {
	for i != noNode && v > 0 {
		n := &t.nodes[i]
		local := maxAmount(0, n.guaranteed[k].Sub(n.usage[k]))
		n.usage[k] = n.usage[k].Add(v)
		v = v.Sub(local)
		i = n.parent
	}
}

func (t *Tree) removeUsage(i int32, k int, v Amount) {
	for i != noNode && v > 0 {
		n := &t.nodes[i]
		stored := n.usage[k].Sub(n.guaranteed[k])
		n.usage[k] = n.usage[k].Sub(v)
		if stored <= 0 {
			return
		}
		v = minAmount(v, stored)
		i = n.parent
	}
}

// Fits reports whether j fits in its queue's quota now, borrowing where it
// must. It does not allocate once the job's demand is cached (Pending.Add
// caches it). It returns an error only for a job whose queue or account t
// does not know.
func (t *Tree) Fits(j *Job) (Fit, error) {
	d, err := t.demandOf(j)
	if err != nil {
		return Fit{}, err
	}
	return t.fits(d), nil
}

func (t *Tree) fits(d *demand) Fit {
	f := Fit{OK: true}
	q := &t.nodes[d.queue]
	for k, v := range d.vec {
		if v <= 0 {
			continue
		}
		if a := t.available(d.queue, k); v > a {
			return Fit{Resource: t.res[k], Need: v, Available: maxAmount(0, a)}
		}
		if q.usage[k].Add(v) > q.subtree[k] {
			f.Borrowing = true
		}
	}
	return f
}

// Charge books j's demand against its queue (and, through the pool, its
// cohorts) at time now: call it when the job is bound. It returns a
// *QuotaError (wrapping ErrQuotaExceeded) and changes nothing when the job
// does not fit. GPU-time accrues for decayed usage from now on.
func (t *Tree) Charge(j *Job, now time.Time) error {
	d, err := t.unchargedDemand(j)
	if err != nil {
		return err
	}
	if f := t.fits(d); !f.OK {
		return &QuotaError{Queue: j.Queue, Resource: f.Resource, Need: f.Need, Available: f.Available}
	}
	t.book(d, now)
	return nil
}

// Adopt books j like Charge but without the quota check: for jobs found
// running at start-up, or after quotas shrank. Usage may then exceed quota
// until jobs finish or are preempted.
func (t *Tree) Adopt(j *Job, now time.Time) error {
	d, err := t.unchargedDemand(j)
	if err != nil {
		return err
	}
	t.book(d, now)
	return nil
}

// unchargedDemand returns j's demand, or an error if j cannot be resolved
// against the tree or is charged already.
func (t *Tree) unchargedDemand(j *Job) (*demand, error) {
	d, err := t.demandOf(j)
	if err != nil {
		return nil, err
	}
	if _, dup := t.charged[j.ID]; dup {
		return nil, fmt.Errorf("%w: %q", ErrAlreadyCharged, j.ID)
	}
	return d, nil
}

func (t *Tree) book(d *demand, now time.Time) {
	t.Advance(now)
	t.charged[d.job] = d
	for k, v := range d.vec {
		if v > 0 {
			t.addUsage(d.queue, k, v)
		}
	}
	t.nodes[d.queue].rate += d.gpuMilli
	t.accounts[d.account].rate += d.gpuMilli
	t.version++
	t.charges.note(d.queue)
}

// Release returns the demand charged for the job with j's ID at time now:
// call it when the job finishes or is preempted. It returns an error
// wrapping ErrNotCharged, and changes nothing, when no such job is charged.
func (t *Tree) Release(j *Job, now time.Time) error {
	if j == nil {
		return ErrNilJob
	}
	d, ok := t.charged[j.ID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotCharged, j.ID)
	}
	delete(t.charged, j.ID)
	q := &t.nodes[d.queue]
	t.Advance(now)
	for k, v := range d.vec {
		if v > 0 {
			t.removeUsage(d.queue, k, v)
		}
	}
	dropRate(&q.rate, d.gpuMilli)
	dropRate(&t.accounts[d.account].rate, d.gpuMilli)
	t.version++
	t.charges.note(d.queue)
	return nil
}

// Charged reports whether a job with this ID is charged.
func (t *Tree) Charged(id string) bool {
	_, ok := t.charged[id]
	return ok
}

func dropRate(r *float64, v float64) {
	*r -= v
	if *r < 1e-9 {
		*r = 0
	}
}

func (t *Tree) lookup(name string, r ResourceName) (*node, int, bool) {
	i, ok := t.nodeIdx[name]
	if !ok {
		return nil, 0, false
	}
	k, ok := t.resIdx[r]
	return &t.nodes[i], k, ok
}

// Usage is what the queue or cohort uses of r now (a cohort's usage is what
// its children take from its pool, plus its own). Zero for unknown names and
// ungoverned resources.
func (t *Tree) Usage(name string, r ResourceName) Amount {
	n, k, ok := t.lookup(name, r)
	if !ok {
		return 0
	}
	return n.usage[k]
}

// Nominal is the node's own nominal quota of r.
func (t *Tree) Nominal(name string, r ResourceName) Amount {
	n, k, ok := t.lookup(name, r)
	if !ok {
		return 0
	}
	return n.nominal[k]
}

// SubtreeQuota is the node's nominal quota plus the lendable quota of its
// descendants (a queue's is its nominal quota).
func (t *Tree) SubtreeQuota(name string, r ResourceName) Amount {
	n, k, ok := t.lookup(name, r)
	if !ok {
		return 0
	}
	return n.subtree[k]
}

// Borrowed is how much of r the node uses beyond its subtree quota, i.e.
// borrows from its cohort. A queue with Borrowed > 0 is a reclaim target
// for a sibling below its nominal quota.
func (t *Tree) Borrowed(name string, r ResourceName) Amount {
	n, k, ok := t.lookup(name, r)
	if !ok {
		return 0
	}
	return maxAmount(0, n.usage[k].Sub(n.subtree[k]))
}

// Available is how much more of r the queue could use now, borrowing
// included; zero for unknown names.
func (t *Tree) Available(name string, r ResourceName) Amount {
	i, ok := t.nodeIdx[name]
	k, ok2 := t.resIdx[r]
	if !ok || !ok2 {
		return 0
	}
	return maxAmount(0, t.available(i, k))
}

// Loan attributes borrowed quota to the node that lends it.
type Loan struct {
	From     string // a cohort (its own quota) or a sibling queue/cohort
	Resource ResourceName
	Amount   Amount
}

// Lenders explains whom j would borrow from if charged now: for each
// resource where the queue would go beyond its own quota, the new borrowing
// is attributed greedily to idle lendable quota, nearest cohort first, the
// cohort's own quota before its children, children by name. The pool is
// shared, so this is an explanation (and a reclaim hint), not a ledger. It
// allocates; nil when j does not borrow.
func (t *Tree) Lenders(j *Job) ([]Loan, error) {
	d, err := t.demandOf(j)
	if err != nil {
		return nil, err
	}
	var out []Loan
	q := &t.nodes[d.queue]
	for k, v := range d.vec {
		before := maxAmount(0, q.usage[k].Sub(q.subtree[k]))
		after := maxAmount(0, q.usage[k].Add(v).Sub(q.subtree[k]))
		need := after.Sub(before)
		from := d.queue
		for p := q.parent; p != noNode && need > 0; from, p = p, t.nodes[p].parent {
			pn := &t.nodes[p]
			// What is free in this cohort's pool, attributed to the
			// cohort's own quota first, then to idle siblings.
			poolIdle := maxAmount(0, pn.subtree[k].Sub(pn.usage[k]))
			type lender struct {
				name string
				idle Amount
			}
			cand := []lender{{pn.name, minAmount(pn.nominal[k], poolIdle)}}
			for _, c := range pn.children {
				if c == from {
					continue
				}
				cn := &t.nodes[c]
				lendable := cn.subtree[k].Sub(cn.guaranteed[k])
				cand = append(cand, lender{cn.name, minAmount(lendable, maxAmount(0, cn.subtree[k].Sub(cn.usage[k])))})
			}
			for _, c := range cand {
				if need <= 0 {
					break
				}
				if take := minAmount(minAmount(need, c.idle), poolIdle); take > 0 {
					out = append(out, Loan{From: c.name, Resource: t.res[k], Amount: take})
					need = need.Sub(take)
					poolIdle = poolIdle.Sub(take)
				}
			}
		}
	}
	return out, nil
}

// Borrowers lists, for reclaim, the other queues under the same root
// cohort as queue that borrow r now (usage above their own quota), with the
// amount, by name. It allocates.
func (t *Tree) Borrowers(queue string, r ResourceName) []Loan {
	i, ok := t.nodeIdx[queue]
	k, ok2 := t.resIdx[r]
	if !ok || !ok2 {
		return nil
	}
	root := i
	for t.nodes[root].parent != noNode {
		root = t.nodes[root].parent
	}
	var out []Loan
	for _, qi := range t.queues {
		if qi == i {
			continue
		}
		top := qi
		for t.nodes[top].parent != noNode {
			top = t.nodes[top].parent
		}
		if top != root {
			continue
		}
		n := &t.nodes[qi]
		if b := n.usage[k].Sub(n.subtree[k]); b > 0 {
			out = append(out, Loan{From: n.name, Resource: r, Amount: b})
		}
	}
	return out
}
