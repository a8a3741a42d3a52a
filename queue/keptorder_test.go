package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
)

// keptOrderWorld is one tree and pending set driven by the kept-order
// check: the same operations go to two worlds, one whose DRS policy keeps
// its order across Order calls, one that rebuilds it every time.
type keptOrderWorld struct {
	tr      *Tree
	p       *Pending
	pol     Policy
	running []*Job
}

// checkKeptOrder drives a random cohort tree with random operations (add,
// remove, charge and release jobs outside any walk, walks that admit what
// fits and stop at a random point) and requires the DRS picks of a kept
// order to equal those of a rebuilt one at every walk. It returns the
// number of picks compared.
func checkKeptOrder(t testing.TB, seed uint64, ops int) int {
	rng := rand.New(rand.NewPCG(seed, seed^0xd75))
	quota := func() map[ResourceName]Quota {
		m := map[ResourceName]Quota{}
		if rng.IntN(4) == 0 {
			return m
		}
		q := Quota{Nominal: Amount(rng.IntN(12))}
		if rng.IntN(2) == 0 {
			q.BorrowingLimit = Cap(Amount(rng.IntN(8)))
		}
		if rng.IntN(2) == 0 {
			q.LendingLimit = Cap(Amount(rng.IntN(int(q.Nominal) + 1)))
		}
		m[GPUMilli] = q
		return m
	}
	spec := TreeSpec{Cohorts: []CohortSpec{{Name: "root", Quota: quota()}}}
	parents := []string{"root"}
	for i := range rng.IntN(5) {
		name := fmt.Sprintf("c%d", i)
		spec.Cohorts = append(spec.Cohorts, CohortSpec{Name: name, Parent: parents[rng.IntN(len(parents))], Quota: quota()})
		parents = append(parents, name)
	}
	nq := 1 + rng.IntN(8)
	for i := range nq {
		// Some queues stand alone (no cohort): they compete as roots.
		cohort := parents[rng.IntN(len(parents))]
		if rng.IntN(6) == 0 {
			cohort = ""
		}
		spec.Queues = append(spec.Queues, QueueSpec{Name: fmt.Sprintf("q%d", i), Cohort: cohort, Weight: float64(1 + rng.IntN(3)), Quota: quota()})
	}
	var w [2]keptOrderWorld
	aging := time.Duration(rng.IntN(2)) * time.Minute
	for i := range w {
		tr, err := NewTree(spec)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPending(tr, PendingConfig{AgingPeriod: aging, RebuildOrder: i == 1})
		if err != nil {
			t.Fatal(err)
		}
		w[i] = keptOrderWorld{tr: tr, p: p, pol: DRS()}
	}
	now := t0
	picks := 0
	var ids []string
	for op := range ops {
		now = now.Add(time.Duration(rng.IntN(3)) * time.Second)
		switch k := rng.IntN(10); {
		case k < 4: // submissions
			for i := range 1 + rng.IntN(4) {
				j := Job{ID: fmt.Sprintf("p%d-%d", op, i), Queue: fmt.Sprintf("q%d", rng.IntN(nq)), Priority: int32(rng.IntN(3)),
					Submit:  now.Add(-time.Duration(rng.IntN(600)) * time.Second),
					Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(2), GPUMilli: 1 + rng.IntN(4)}}}}
				for i := range w {
					cp := j
					if err := w[i].p.Add(&cp); err != nil {
						t.Fatal(err)
					}
				}
				ids = append(ids, j.ID)
			}
		case k == 4: // a cancellation
			if len(ids) > 0 {
				id := ids[rng.IntN(len(ids))]
				for i := range w {
					w[i].p.Remove(id)
				}
			}
		case k == 5: // a job ends
			if n := len(w[0].running); n > 0 {
				x := rng.IntN(n)
				for i := range w {
					if err := w[i].tr.Release(w[i].running[x], now); err != nil {
						t.Fatal(err)
					}
					w[i].running = slices.Delete(w[i].running, x, x+1)
				}
			}
		case k == 6: // a charge from outside the walk (adopted at start-up)
			j := Job{ID: fmt.Sprintf("a%d", op), Queue: fmt.Sprintf("q%d", rng.IntN(nq)), Submit: now,
				Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUMilli: 1 + rng.IntN(3)}}}}
			for i := range w {
				cp := j
				if err := w[i].tr.Adopt(&cp, now); err != nil {
					t.Fatal(err)
				}
				w[i].running = append(w[i].running, &cp)
			}
		default: // a walk, cut at a random pick
			stop := rng.IntN(12)
			admit := rng.Uint64()
			var seq [2][]string
			for i := range w {
				cur := w[i].pol.Order(w[i].p, now)
				for n := 0; n < stop; n++ {
					j, ok := cur.Next()
					if !ok {
						break
					}
					seq[i] = append(seq[i], j.ID)
					if admit>>(n%64)&1 == 0 {
						continue // considered, left pending
					}
					if fit, _ := w[i].tr.Fits(j); fit.OK {
						if err := w[i].tr.Charge(j, now); err != nil {
							t.Fatal(err)
						}
						w[i].p.Remove(j.ID)
						w[i].running = append(w[i].running, j)
					}
				}
			}
			if !slices.Equal(seq[0], seq[1]) {
				t.Fatalf("seed %d op %d: kept order picks %v, rebuilt order picks %v", seed, op, seq[0], seq[1])
			}
			picks += len(seq[0])
		}
	}
	return picks
}

// TestDRSKeptOrder: the DRS order kept across cycles picks what a rebuilt
// one picks.
func TestDRSKeptOrder(t *testing.T) {
	picks := 0
	for seed := range uint64(300) {
		picks += checkKeptOrder(t, seed, 300)
	}
	if picks < 10000 {
		t.Fatalf("only %d picks compared", picks)
	}
	t.Logf("%d picks compared", picks)
}

func FuzzDRSKeptOrder(f *testing.F) {
	f.Add(uint64(1), uint16(200))
	f.Fuzz(func(t *testing.T, seed uint64, ops uint16) {
		checkKeptOrder(t, seed, int(ops%1000))
	})
}

// BenchmarkDRSOrder times one cycle's use of the DRS order with 200
// queues under 20 cohorts and 100,000 pending jobs: Order, ten picks (the
// first admitted), a job ending and a job submitted. rebuild=true is the
// order rebuilt at every Order (PendingConfig.RebuildOrder).
func BenchmarkDRSOrder(b *testing.B) {
	for _, rebuild := range []bool{false, true} {
		b.Run(fmt.Sprintf("rebuild=%v", rebuild), func(b *testing.B) {
			spec := TreeSpec{}
			for c := range 20 {
				spec.Cohorts = append(spec.Cohorts, CohortSpec{Name: fmt.Sprintf("c%d", c),
					Quota: map[ResourceName]Quota{GPUMilli: {Nominal: 1 << 40}}})
			}
			for q := range 200 {
				spec.Queues = append(spec.Queues, QueueSpec{Name: fmt.Sprintf("q%d", q), Cohort: fmt.Sprintf("c%d", q%20),
					Quota: map[ResourceName]Quota{GPUMilli: {Nominal: Amount(1000 * (1 + q%7))}}})
			}
			tr, err := NewTree(spec)
			if err != nil {
				b.Fatal(err)
			}
			p, _ := NewPending(tr, PendingConfig{RebuildOrder: rebuild})
			rng := rand.New(rand.NewPCG(1, 2))
			job := func(id int) *Job {
				return &Job{ID: fmt.Sprintf("j%d", id), Queue: fmt.Sprintf("q%d", rng.IntN(200)), Priority: int32(rng.IntN(4)),
					Submit: t0.Add(time.Duration(id) * time.Second), Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1 + rng.IntN(8)}}}}
			}
			for i := range 100000 {
				if err := p.Add(job(i)); err != nil {
					b.Fatal(err)
				}
			}
			pol := DRS()
			var running []*Job
			next := 100000
			b.ResetTimer()
			for range b.N {
				cur := pol.Order(p, t0)
				for n := range 10 {
					j, ok := cur.Next()
					if !ok {
						break
					}
					if n == 0 && tr.Charge(j, t0) == nil {
						p.Remove(j.ID)
						running = append(running, j)
					}
				}
				if len(running) > 50 {
					_ = tr.Release(running[0], t0)
					running = running[1:]
				}
				_ = p.Add(job(next))
				next++
			}
		})
	}
}
