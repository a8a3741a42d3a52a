package queue

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
)

// FuzzValidate builds a job from fuzzed fields. Validate must not panic,
// must name a field for every rejection, and a job it accepts must have a
// bounded, non-negative demand that a tree with its queue admits into
// Pending.
func FuzzValidate(f *testing.F) {
	f.Add("j", "q", "", int32(0), uint8(0), 1, 1, 0, "", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, 0, 0, int64(1))
	f.Add("", "q", "a", int32(-5), uint8(3), 0, -1, 1000, "1g", int64(-1), int64(-1), int64(5), int64(1), int64(-1), int64(-2), 3, 1, -1, int64(0))
	f.Add("j", "q", "", int32(9), uint8(2), 4, 0, 500, "", int64(7), int64(9), int64(3600), int64(60), int64(10), int64(5), 2, 6, 0, int64(1<<62))
	f.Fuzz(func(t *testing.T, id, q, acct string, prio int32, class uint8, members, gpus, milli int, mig string,
		cpu, mem, est, limit, minRun, grace int64, emin, emax, arr int, submit int64) {
		j := &Job{
			ID: id, Queue: q, Account: acct, Priority: prio, Class: Class(class),
			Request: gang.Request{Groups: []gang.Group{{
				Members: members, GPUsPerMember: gpus, GPUMilli: milli, MIGProfile: mig,
				CPUMilli: cpu, MemoryMiB: mem,
			}}},
			RuntimeEstimate: time.Duration(est), RuntimeLimit: time.Duration(limit),
			MinRuntime: time.Duration(minRun), GracePeriod: time.Duration(grace),
			Elastic: Elastic{MinMembers: emin, MaxMembers: emax}, ArrayIndex: arr,
		}
		if submit != 0 {
			j.Submit = time.Unix(0, submit)
		}
		err := j.Validate()
		if err != nil {
			fe, ok := errors.AsType[*FieldError](err)
			if !ok || fe.Field == "" || !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("rejection without a field: %v", err)
			}
			return
		}
		for _, qt := range j.Demand() {
			if qt.Amount < 0 || qt.Amount > MaxQuantity {
				t.Fatalf("demand %v out of bounds", qt)
			}
		}
		if j.RuntimeLimit > 0 && j.RuntimeEstimate > j.RuntimeLimit {
			t.Fatal("estimate over limit accepted")
		}
		tr, err := NewTree(TreeSpec{Queues: []QueueSpec{{Name: q}}, Accounts: []AccountSpec{{Name: acct + "\x00x"}}})
		if err != nil {
			return // the fuzzed names collide
		}
		p, _ := NewPending(tr, PendingConfig{AgingPeriod: time.Hour})
		err = p.Add(j)
		switch {
		case acct == "" || acct == q:
			if err != nil {
				t.Fatalf("valid job refused: %v", err)
			}
		case !errors.Is(err, ErrUnknownAccount):
			t.Fatalf("unknown account %q: got %v", acct, err)
		}
	})
}

// FuzzTree drives a small random tree with fuzzed operations (charge,
// release, adopt-free only) and checks the quota invariants after every
// step, Fits against Charge, and that usage returns to zero at the end.
func FuzzTree(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte{255, 0, 255, 0, 7, 7, 7, 1, 2, 200, 100, 50})
	f.Fuzz(func(t *testing.T, data []byte) {
		pos := 0
		next := func(n int) int {
			if pos >= len(data) {
				return 0
			}
			b := int(data[pos])
			pos++
			return b % n
		}
		quota := func() map[ResourceName]Quota {
			m := map[ResourceName]Quota{}
			if next(4) == 0 {
				return m
			}
			q := Quota{Nominal: Amount(next(6))}
			if next(2) == 0 {
				q.BorrowingLimit = Cap(Amount(next(4)))
			}
			if next(2) == 0 {
				q.LendingLimit = Cap(Amount(next(int(q.Nominal) + 1)))
			}
			m[GPUMilli] = q
			return m
		}
		spec := TreeSpec{Cohorts: []CohortSpec{{Name: "root", Quota: quota()}}}
		parents := []string{"root"}
		for i := range next(3) {
			name := fmt.Sprintf("c%d", i)
			spec.Cohorts = append(spec.Cohorts, CohortSpec{Name: name, Parent: parents[next(len(parents))], Quota: quota()})
			parents = append(parents, name)
		}
		nq := 1 + next(4)
		for i := range nq {
			spec.Queues = append(spec.Queues, QueueSpec{Name: fmt.Sprintf("q%d", i), Cohort: parents[next(len(parents))], Weight: float64(1 + next(3)), Quota: quota()})
		}
		tr, err := NewTree(spec)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := NewPending(tr, PendingConfig{})
		var running []*Job
		for op := 0; pos < len(data); op++ {
			switch next(4) {
			case 0:
				if len(running) > 0 {
					i := next(len(running))
					if err := tr.Release(running[i], t0); err != nil {
						t.Fatal(err)
					}
					running = append(running[:i], running[i+1:]...)
				}
			case 1:
				// Walk the DRS order and admit what fits.
				for i := range 3 {
					_ = p.Add(&Job{ID: fmt.Sprintf("p%d-%d", op, i), Queue: fmt.Sprintf("q%d", next(nq)), Submit: t0,
						Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUMilli: 1 + next(3)}}}})
				}
				cur := DRS().Order(p, t0)
				for j, ok := cur.Next(); ok; j, ok = cur.Next() {
					if fit, _ := tr.Fits(j); fit.OK {
						if err := tr.Charge(j, t0); err != nil {
							t.Fatal(err)
						}
						p.Remove(j.ID)
						running = append(running, j)
					}
				}
			default:
				j := &Job{ID: fmt.Sprintf("j%d", op), Queue: fmt.Sprintf("q%d", next(nq)), Submit: t0,
					Request: gang.Request{Groups: []gang.Group{{Members: 1 + next(2), GPUMilli: 1 + next(4)}}}}
				fit, err := tr.Fits(j)
				if err != nil {
					t.Fatal(err)
				}
				err = tr.Charge(j, t0)
				if fit.OK != (err == nil) {
					t.Fatalf("Fits says %v, Charge says %v", fit.OK, err)
				}
				if err == nil {
					running = append(running, j)
				}
			}
			checkTreeInvariants(t, tr)
		}
		for _, j := range running {
			if err := tr.Release(j, t0); err != nil {
				t.Fatal(err)
			}
		}
		for i := range tr.nodes {
			for k := range tr.res {
				if tr.nodes[i].usage[k] != 0 {
					t.Fatalf("usage %d left at %s", tr.nodes[i].usage[k], tr.nodes[i].name)
				}
			}
		}
	})
}
