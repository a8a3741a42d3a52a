package queue

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Advance accrues decayed GPU-time up to now: every running job adds its
// GPUs x seconds, and all usage decays with the tree's half-life (SLURM's
// decay: usage halves every HalfLife; the accrual over an interval is the
// exact integral of the decayed rate). Charge and Release call it; call it
// once per cycle before ordering. A now at or before the last one changes
// nothing (time never runs backwards).
func (t *Tree) Advance(now time.Time) {
	if t.clock.IsZero() || !now.After(t.clock) {
		if t.clock.IsZero() {
			t.clock = now
		}
		return
	}
	dt := now.Sub(t.clock).Seconds()
	t.clock = now
	f, integ := 1.0, dt
	if t.halfLife > 0 {
		h := t.halfLife.Seconds()
		f = math.Exp2(-dt / h)
		integ = h / math.Ln2 * -math.Expm1(-dt/h*math.Ln2)
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.kind == kindQueue {
			n.decayed = n.decayed*f + n.rate/1000*integ
		}
	}
	for i := range t.accounts {
		a := &t.accounts[i]
		a.decayed = a.decayed*f + a.rate/1000*integ
	}
	t.sumCohorts()
	t.version++
}

func (t *Tree) sumCohorts() {
	for i := range t.nodes {
		if t.nodes[i].kind == kindCohort {
			t.nodes[i].decayed = 0
		}
	}
	for _, q := range t.queues {
		v := t.nodes[q].decayed
		for p := t.nodes[q].parent; p != noNode; p = t.nodes[p].parent {
			t.nodes[p].decayed += v
		}
	}
}

// AddGPUSeconds feeds past GPU-time (e.g. history restored at start-up, or
// work accounted outside Charge/Release) into the decayed usage of a queue
// and an account (empty: the queue's own account) at time now.
func (t *Tree) AddGPUSeconds(queue, account string, gpuSeconds float64, now time.Time) error {
	j := Job{ID: "(usage)", Queue: queue, Account: account}
	if err := t.ValidateJob(&j); err != nil {
		return err
	}
	if math.IsNaN(gpuSeconds) || math.IsInf(gpuSeconds, 0) || gpuSeconds < 0 {
		return fmt.Errorf("%w: GPU-seconds must be finite and non-negative, got %v", ErrInvalidJob, gpuSeconds)
	}
	t.Advance(now)
	t.nodes[t.nodeIdx[queue]].decayed += gpuSeconds
	t.accounts[t.acctIdx[j.AccountName()]].decayed += gpuSeconds
	t.sumCohorts()
	t.version++
	return nil
}

// GPUSeconds is the decayed GPU-time of a queue or cohort (a cohort's is
// the sum over its queues), as of the last Advance.
func (t *Tree) GPUSeconds(name string) float64 {
	i, ok := t.nodeIdx[name]
	if !ok {
		return 0
	}
	return t.nodes[i].decayed
}

// AccountGPUSeconds is the decayed GPU-time of an account and its
// sub-accounts, as of the last Advance.
func (t *Tree) AccountGPUSeconds(name string) float64 {
	i, ok := t.acctIdx[name]
	if !ok {
		return 0
	}
	var sum func(a int32) float64
	sum = func(a int32) float64 {
		s := t.accounts[a].decayed
		for _, c := range t.accounts[a].children {
			s += sum(c)
		}
		return s
	}
	return sum(i)
}

// Share is the node's dominant resource share if demand were added to its
// usage: over resources, the largest of (usage beyond subtree quota) /
// (what its parent could lend at most), divided by the node's weight
// (Kueue's DRS). Roots always have share 0.
func (t *Tree) share(i int32, vec []Amount) float64 {
	return t.shareWith(i, t.nodes[i].usage, vec)
}

// shareWith is share with the node's usage given.
func (t *Tree) shareWith(i int32, usage, vec []Amount) float64 {
	n := &t.nodes[i]
	if n.parent == noNode {
		return 0
	}
	var drs float64
	for k := range t.res {
		var d Amount
		if vec != nil {
			d = vec[k]
		}
		b := usage[k].Add(d).Sub(n.subtree[k])
		if b <= 0 {
			continue
		}
		lend := t.potential(n.parent, k)
		if lend <= 0 {
			continue
		}
		if r := float64(b) / float64(lend); r > drs {
			drs = r
		}
	}
	return drs / n.weight
}

// Share is the dominant resource share of a queue or cohort now (see DRS).
func (t *Tree) Share(name string) float64 {
	i, ok := t.nodeIdx[name]
	if !ok {
		return 0
	}
	return t.share(i, nil)
}

// fairTree ranks the accounts by SLURM's Fair Tree: at each level, siblings
// are ordered by level fair share LF = S/U (S: shares over the siblings'
// shares, U: decayed usage over the siblings' usage; no usage ranks first),
// ties by name, and the tree is walked depth first. An account's own jobs
// rank as if they were a child with Shares 1 and the account's own usage;
// that child is left out where the account has no usage of its own and
// hasOwn (nil: never) says it has no jobs. It returns every account exactly
// once, in rank order, appended to out.
func (t *Tree) fairTree(out []int32, sub []float64, hasOwn func(a int32) bool) ([]int32, []float64) {
	A := len(t.accounts)
	sub = slices.Grow(sub[:0], 2*A)[:2*A]
	// sub[a]: subtree usage; sub[A+a]: own usage (the pseudo-child).
	var fill func(a int32) float64
	fill = func(a int32) float64 {
		s := t.accounts[a].decayed
		sub[A+int(a)] = s
		for _, c := range t.accounts[a].children {
			s += fill(c)
		}
		sub[a] = s
		return s
	}
	var roots []int32
	for i := range t.accounts {
		if t.accounts[i].parent == noNode {
			roots = append(roots, int32(i))
			fill(int32(i))
		}
	}
	slices.SortFunc(roots, func(a, b int32) int { return cmp.Compare(t.accounts[a].name, t.accounts[b].name) })
	// Siblings are identified by int32: a >= 0 a real account, -(a+1) the
	// own-jobs pseudo-child of account a.
	type sib struct {
		id     int32
		lf     float64
		name   string
		shares float64
		usage  float64
	}
	var visit func(sibs []int32, self int32)
	visit = func(ids []int32, self int32) {
		sibs := make([]sib, 0, len(ids)+1)
		for _, a := range ids {
			sibs = append(sibs, sib{id: a, name: t.accounts[a].name, shares: t.accounts[a].shares, usage: sub[a]})
		}
		if self != noNode && (sub[A+int(self)] > 0 || t.accounts[self].rate > 0 || (hasOwn != nil && hasOwn(self))) {
			sibs = append(sibs, sib{id: -(self + 1), name: "", shares: 1, usage: sub[A+int(self)]})
		}
		var S, U float64
		for _, s := range sibs {
			S += s.shares
			U += s.usage
		}
		for i := range sibs {
			s := &sibs[i]
			switch {
			case U == 0 || s.usage == 0:
				s.lf = math.Inf(1)
			default:
				s.lf = (s.shares / S) / (s.usage / U)
			}
		}
		slices.SortStableFunc(sibs, func(a, b sib) int {
			if c := cmp.Compare(b.lf, a.lf); c != 0 {
				return c
			}
			// Unused siblings (LF +Inf) rank by shares, then name.
			if c := cmp.Compare(b.shares, a.shares); c != 0 {
				return c
			}
			return cmp.Compare(a.name, b.name)
		})
		for _, s := range sibs {
			switch {
			case s.id < 0:
				out = append(out, -s.id-1)
			case len(t.accounts[s.id].children) == 0:
				out = append(out, s.id)
			default:
				n := len(out)
				visit(t.accounts[s.id].children, s.id)
				if !slices.Contains(out[n:], s.id) {
					// No own jobs or usage: it still appears once, after
					// its sub-accounts.
					out = append(out, s.id)
				}
			}
		}
	}
	visit(roots, noNode)
	return out, sub
}

// FairTreeRanks returns the accounts in Fair Tree rank order, best first.
// It allocates.
func (t *Tree) FairTreeRanks() []string {
	order, _ := t.fairTree(nil, nil, nil)
	out := make([]string, len(order))
	for i, a := range order {
		out[i] = t.accounts[a].name
	}
	return out
}
