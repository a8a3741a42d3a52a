package queue

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func oneGPUJob(id, q string, gpus int, prio int32, submit time.Time) *Job {
	return &Job{ID: id, Queue: q, Priority: prio, Submit: submit,
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: gpus}}}}
}

// checkTreeInvariants checks what Charge promises after every operation:
// no queue uses more than its quota plus its borrowing limit, no pool is
// overdrawn, and every queue can still get its guaranteed (unlendable)
// part: others never borrow beyond a lending limit.
func checkTreeInvariants(t testing.TB, tr *Tree) {
	t.Helper()
	for i := range tr.nodes {
		n := &tr.nodes[i]
		for k, r := range tr.res {
			require.GreaterOrEqual(t, n.usage[k], Amount(0), "%s %s usage", n.name, r)
			if n.hasBorrow[k] && n.parent != noNode {
				require.LessOrEqual(t, n.usage[k], n.subtree[k].Add(n.borrow[k]), "%s %s: usage over quota + borrowing limit", n.name, r)
			}
			if n.parent == noNode {
				require.LessOrEqual(t, n.usage[k], n.subtree[k], "%s %s: pool overdrawn", n.name, r)
			}
			if n.kind == kindQueue {
				want := maxAmount(0, n.guaranteed[k].Sub(n.usage[k]))
				require.GreaterOrEqual(t, tr.available(int32(i), k), want, "%s %s: guaranteed part lent away", n.name, r)
			}
		}
	}
	// A cohort's usage is what its children put in its pool, plus nothing
	// else (nobody charges a cohort directly).
	for i := range tr.nodes {
		n := &tr.nodes[i]
		if n.kind != kindCohort {
			continue
		}
		for k := range tr.res {
			var sum Amount
			for _, c := range n.children {
				cn := &tr.nodes[c]
				sum = sum.Add(maxAmount(0, cn.usage[k].Sub(cn.guaranteed[k])))
			}
			require.Equal(t, sum, n.usage[k], "cohort %s usage", n.name)
		}
	}
}

// flatFits is a plain reference for a tree of one cohort over queues:
// admit d to q iff q stays within nominal + borrowing limit and the pool
// (cohort quota plus everyone's lendable part) is not overdrawn.
func flatFits(tr *Tree, q int32, k int, d Amount) bool {
	n := &tr.nodes[q]
	if n.parent == noNode {
		return n.usage[k]+d <= n.nominal[k]
	}
	if n.hasBorrow[k] && n.usage[k]+d > n.nominal[k]+n.borrow[k] {
		return false
	}
	c := &tr.nodes[n.parent]
	pool := c.nominal[k]
	var used Amount
	for _, ch := range c.children {
		m := &tr.nodes[ch]
		g := Amount(0)
		if m.hasLend[k] {
			g = m.nominal[k] - m.lend[k]
		}
		pool += m.nominal[k] - g
		u := m.usage[k]
		if ch == q {
			u += d
		}
		used += max(0, u-g)
	}
	return used <= pool
}

func randomTree(rng *rand.Rand, nested bool) TreeSpec {
	quota := func() map[ResourceName]Quota {
		m := map[ResourceName]Quota{}
		for _, r := range []ResourceName{GPUMilli, CPUMilli} {
			if rng.IntN(4) == 0 {
				continue
			}
			q := Quota{Nominal: Amount(rng.IntN(6))}
			if rng.IntN(2) == 0 {
				q.BorrowingLimit = Cap(Amount(rng.IntN(4)))
			}
			if rng.IntN(2) == 0 {
				q.LendingLimit = Cap(Amount(rng.IntN(int(q.Nominal) + 1)))
			}
			m[r] = q
		}
		return m
	}
	spec := TreeSpec{Cohorts: []CohortSpec{{Name: "root", Quota: quota()}}}
	parents := []string{"root"}
	if nested {
		for i := range rng.IntN(3) {
			name := fmt.Sprintf("c%d", i)
			spec.Cohorts = append(spec.Cohorts, CohortSpec{Name: name, Parent: parents[rng.IntN(len(parents))], Quota: quota()})
			parents = append(parents, name)
		}
	}
	for i := range 2 + rng.IntN(4) {
		spec.Queues = append(spec.Queues, QueueSpec{Name: fmt.Sprintf("q%d", i), Cohort: parents[rng.IntN(len(parents))], Quota: quota()})
	}
	spec.Queues = append(spec.Queues, QueueSpec{Name: "alone", Quota: quota()})
	return spec
}

func TestQuotaRandomOperations(t *testing.T) {
	for seed := range uint64(120) {
		rng := rand.New(rand.NewPCG(seed, 7))
		nested := seed%2 == 1
		spec := randomTree(rng, nested)
		tr, err := NewTree(spec)
		require.NoError(t, err)
		queues := tr.Queues()
		var running []*Job
		for op := range 200 {
			if len(running) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(running))
				require.NoError(t, tr.Release(running[i], t0))
				running = append(running[:i], running[i+1:]...)
			} else {
				j := &Job{ID: fmt.Sprintf("j%d", op), Queue: queues[rng.IntN(len(queues))], Submit: t0,
					Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(2), GPUMilli: rng.IntN(2) * (1 + rng.IntN(3)), CPUMilli: int64(rng.IntN(3))}}}}
				if j.Request.Groups[0].GPUMilli == 0 && j.Request.Groups[0].CPUMilli == 0 {
					j.Request.Groups[0].CPUMilli = 1
				}
				require.NoError(t, j.Validate())
				f, err := tr.Fits(j)
				require.NoError(t, err)
				if !nested {
					want := true
					d, _ := tr.demandOf(j)
					for k, v := range d.vec {
						if v > 0 && !flatFits(tr, d.queue, k, v) {
							want = false
						}
					}
					require.Equal(t, want, f.OK, "seed %d op %d: Fits disagrees with the flat reference", seed, op)
				}
				err = tr.Charge(j, t0)
				if f.OK {
					require.NoError(t, err)
					running = append(running, j)
				} else {
					require.ErrorIs(t, err, ErrQuotaExceeded)
				}
			}
			checkTreeInvariants(t, tr)
		}
		for _, j := range running {
			require.NoError(t, tr.Release(j, t0))
		}
		for i := range tr.nodes {
			for k := range tr.res {
				require.Zero(t, tr.nodes[i].usage[k], "usage left after releasing everything")
			}
		}
	}
}

// simulate runs two queues weighted 2:1 under one policy with endless
// demand of 1-GPU jobs with random runtimes, and returns the GPU-seconds
// each got.
func simulate(t *testing.T, pol Policy, halfLife time.Duration, steps int) (a, b float64) {
	tr, err := NewTree(TreeSpec{
		HalfLife: halfLife,
		Cohorts:  []CohortSpec{{Name: "all", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(30)}}}},
		Queues:   []QueueSpec{{Name: "a", Cohort: "all", Weight: 2}, {Name: "b", Cohort: "all", Weight: 1}},
	})
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	type run struct {
		j   *Job
		end time.Time
	}
	var running []run
	gpuSec := map[string]float64{}
	next := 0
	const tick = 10 * time.Second
	for step := range steps {
		now := t0.Add(time.Duration(step) * tick)
		kept := running[:0]
		for _, r := range running {
			if !r.end.After(now) {
				require.NoError(t, tr.Release(r.j, r.end))
			} else {
				kept = append(kept, r)
			}
		}
		running = kept
		for _, q := range []string{"a", "b"} {
			for p.QueueLen(q) < 40 {
				require.NoError(t, p.Add(oneGPUJob(fmt.Sprintf("%s%d", q, next), q, 1, 0, now)))
				next++
			}
		}
		tr.Advance(now)
		cur := pol.Order(p, now)
		for j, ok := cur.Next(); ok; j, ok = cur.Next() {
			if f, _ := tr.Fits(j); !f.OK {
				continue
			}
			require.NoError(t, tr.Charge(j, now))
			p.Remove(j.ID)
			d := time.Duration(6+rng.IntN(55)) * tick
			running = append(running, run{j, now.Add(d)})
			gpuSec[j.Queue] += d.Seconds()
		}
	}
	return gpuSec["a"], gpuSec["b"]
}

func TestWeightedShareDRS(t *testing.T) {
	a, b := simulate(t, DRS(), 0, 20000)
	t.Logf("DRS: a=%.0f b=%.0f ratio=%.3f", a, b, a/b)
	assert.InDelta(t, 2.0, a/b, 0.1, "GPU-time ratio under DRS")
}

func TestWeightedShareFairTree(t *testing.T) {
	a, b := simulate(t, FairTree(), time.Hour, 20000)
	t.Logf("Fair Tree: a=%.0f b=%.0f ratio=%.3f", a, b, a/b)
	assert.InDelta(t, 2.0, a/b, 0.1, "GPU-time ratio under Fair Tree")
}

// An old low-priority job reaches the head despite a stream of newer
// higher-priority work, with aging; without aging it starves (so the test
// can fail).
func TestAgingReachesHead(t *testing.T) {
	mf, err := Multifactor(Weights{Age: 10, Priority: 1, MaxAge: time.Hour})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		aging time.Duration
		pol   Policy
		want  bool
	}{
		{"priority/aged", 10 * time.Second, StrictPriority(), true},
		{"priority/no-aging", 0, StrictPriority(), false},
		{"drs/aged", 10 * time.Second, DRS(), true},
		{"fairtree/aged", 10 * time.Second, FairTree(), true},
		{"multifactor", 0, mf, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTree(TreeSpec{Queues: []QueueSpec{{Name: "q", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(1000)}}}}})
			require.NoError(t, err)
			p, err := NewPending(tr, PendingConfig{AgingPeriod: tc.aging})
			require.NoError(t, err)
			require.NoError(t, p.Add(oneGPUJob("old", "q", 1, 0, t0)))
			reached := -1
			for step := 1; step <= 2000 && reached < 0; step++ {
				now := t0.Add(time.Duration(step) * time.Second)
				for i := range 2 {
					require.NoError(t, p.Add(oneGPUJob(fmt.Sprintf("h%d-%d", step, i), "q", 1, 5, now)))
				}
				j, ok := tc.pol.Order(p, now).Next()
				require.True(t, ok)
				if j.ID == "old" {
					reached = step
				}
				p.Remove(j.ID)
			}
			assert.Equal(t, tc.want, reached > 0, "reached head at step %d", reached)
		})
	}
}
