package benchmarks

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// queueOrderSetup builds a cohort of `queues` queues (weights 1..4, some
// nominal quota each) holding `pending` jobs: queue, priority (0..9), size
// (1..8 GPUs) and submit time drawn from SplitMix64(seed 42); every queue
// gets some decayed usage and some running jobs so that shares and Fair
// Tree ranks differ.
func queueOrderSetup(b *testing.B, pending, queues int) (*queue.Tree, *queue.Pending, time.Time) {
	rng := NewSplitMix64(42)
	spec := queue.TreeSpec{
		HalfLife: time.Hour,
		Cohorts: []queue.CohortSpec{{Name: "all", Quota: map[queue.ResourceName]queue.Quota{
			queue.GPUMilli: {Nominal: queue.WholeGPUs(1024)}}}},
	}
	for q := range queues {
		spec.Queues = append(spec.Queues, queue.QueueSpec{
			Name: fmt.Sprintf("q%03d", q), Cohort: "all", Weight: float64(1 + rng.Draw(4)),
			Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(int64(8 * rng.Draw(8)))}},
		})
	}
	tr, err := queue.NewTree(spec)
	if err != nil {
		b.Fatal(err)
	}
	p, err := queue.NewPending(tr, queue.PendingConfig{AgingPeriod: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for q := range queues {
		name := fmt.Sprintf("q%03d", q)
		if err := tr.AddGPUSeconds(name, "", float64(rng.Draw(1_000_000)), t0); err != nil {
			b.Fatal(err)
		}
		j := &queue.Job{ID: "run-" + name, Queue: name, Submit: t0,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1 + int(rng.Draw(16))}}}}
		if err := tr.Adopt(j, t0); err != nil {
			b.Fatal(err)
		}
	}
	for i := range pending {
		j := &queue.Job{
			ID:       fmt.Sprintf("j%06d", i),
			Queue:    fmt.Sprintf("q%03d", rng.Draw(uint64(queues))),
			Priority: int32(rng.Draw(10)),
			Submit:   t0.Add(time.Duration(rng.Draw(86400)) * time.Second),
			Request:  gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1 + int(rng.Draw(8))}}},
		}
		if err := p.Add(j); err != nil {
			b.Fatal(err)
		}
	}
	now := t0.Add(48 * time.Hour)
	tr.Advance(now)
	return tr, p, now
}

// BenchmarkOrder measures the cost of picking the next pending job: one
// op is one Cursor.Next. A new cursor is taken (Policy.Order, once per
// engine cycle) whenever the walk ends, so its set-up is amortized over
// all pending jobs; it is also reported on its own as ns/order.
func BenchmarkOrder(b *testing.B) {
	const pending, queues = 100_000, 100
	for _, pol := range []func() queue.Policy{queue.DRS, queue.FairTree} {
		name := pol().Name()
		b.Run(fmt.Sprintf("pending=%d/queues=%d/policy=%s", pending, queues, name), func(b *testing.B) {
			_, p, now := queueOrderSetup(b, pending, queues)
			policy := pol()
			// Set-up cost of one cursor, measured apart.
			const orders = 50
			start := time.Now()
			for range orders {
				policy.Order(p, now)
			}
			orderNs := float64(time.Since(start).Nanoseconds()) / orders

			cur := policy.Order(p, now)
			picks := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, ok := cur.Next(); !ok {
					cur = policy.Order(p, now)
					cur.Next()
				}
				picks++
			}
			b.ReportMetric(orderNs, "ns/order")
			if sec := b.Elapsed().Seconds(); sec > 0 {
				b.ReportMetric(float64(picks)/sec, "picks/s")
			}
		})
	}
}
