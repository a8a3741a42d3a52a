package benchmarks

import (
	"fmt"
	"testing"

	"github.com/berthsched/berth/mig"
)

// B2K: 2,048 nodes x 8 GPUs.
const migB2KGPUs = 2048 * 8

// migRand is the standard SplitMix64 generator of docs/standard-work.md.
// migRand draws ints from the standard SplitMix64.
type migRand struct{ *SplitMix64 }

func (r migRand) draw(n int) int { return int(r.Draw(uint64(n))) }

func migModel(b *testing.B, name string) mig.Model {
	m, err := mig.LookupModel(name)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkMIGAllocate: 10,000 "1g" requests (1g.10gb on H100-80GB), each
// to the tightest GPU of the whole B2K pool (16,384 H100-80GB GPUs, all in
// MIG mode) through Pool.AllocateIn. ns/op is for the 10,000; ns/request
// divides it. The pool is restored between iterations with the timer
// stopped.
//   - layout=all-balanced: every GPU has gpu-operator's all-balanced layout
//     (3g.40gb, 2g.20gb, 2 x 1g.10gb); requests take idle instances.
//   - layout=empty: no instances; every request creates one (MayCreate).
func BenchmarkMIGAllocate(b *testing.B) {
	h100 := migModel(b, "H100-80GB")
	balanced, err := mig.ParseLayout(h100, "3g 2g 1g 1g")
	if err != nil {
		b.Fatal(err)
	}
	const requests = 10000
	for _, tc := range []struct {
		name   string
		layout mig.Layout
		mode   mig.AllocMode
	}{
		{"layout=all-balanced", balanced, mig.ExistingOnly},
		{"layout=empty", mig.EmptyLayout(h100), mig.MayCreate},
	} {
		b.Run(tc.name, func(b *testing.B) {
			base := mig.NewPool(migB2KGPUs)
			for g := range uint32(migB2KGPUs) {
				if err := base.Configure(g, mig.GPUConfig{Model: h100, MIG: true, Layout: tc.layout}); err != nil {
					b.Fatal(err)
				}
			}
			req := mig.Request{Profile: "1g"}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				pool := base.Clone()
				b.StartTimer()
				for range requests {
					if _, err := pool.AllocateIn(nil, req, tc.mode); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/requests, "ns/request")
		})
	}
}

// migPlanPool builds a seeded, realistic pool of n GPUs: 70% H100-80GB and
// 30% A100-80GB; 85% in MIG mode with a common layout (all-1g, all-balanced,
// 4g+3g, 3g+3g, 7g, 2g x3 + 1g, empty), each instance in use with
// probability 1/2; the rest idle with MIG off.
func migPlanPool(b *testing.B, n int, seed uint64) *mig.Pool {
	r := migRand{NewSplitMix64(seed)}
	h100, a100 := migModel(b, "H100-80GB"), migModel(b, "A100-80GB")
	specs := []string{"1g 1g 1g 1g 1g 1g 1g", "3g 2g 1g 1g", "4g 3g", "3g 3g", "7g", "2g 2g 2g 1g", ""}
	pool := mig.NewPool(n)
	for g := range uint32(n) {
		m := h100
		if r.draw(10) < 3 {
			m = a100
		}
		if r.draw(100) >= 85 {
			if err := pool.Configure(g, mig.GPUConfig{Model: m}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		l, err := mig.ParseLayout(m, specs[r.draw(len(specs))])
		if err != nil {
			b.Fatal(err)
		}
		if err := pool.Configure(g, mig.GPUConfig{Model: m, MIG: true, Layout: l}); err != nil {
			b.Fatal(err)
		}
		for in := range l.All() {
			if r.draw(2) == 0 {
				if _, err := pool.Allocate(g, mig.Request{Profile: in.Profile.Name()}, mig.ExistingOnly); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	return pool
}

// BenchmarkMIGPlan: one Pool.Plan pass over n GPUs (see migPlanPool) for a
// pending queue of mixed profiles and fractions sized to the pool, with
// MIG mode switches allowed.
func BenchmarkMIGPlan(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			pool := migPlanPool(b, n, 42)
			k := n / 100
			demand := []mig.Demand{
				{Request: mig.Request{Profile: "1g"}, Count: 60 * k},
				{Request: mig.Request{Profile: "2g"}, Count: 20 * k},
				{Request: mig.Request{Profile: "3g"}, Count: 10 * k},
				{Request: mig.Request{Profile: "4g"}, Count: 3 * k},
				{Request: mig.Request{Milli: 250}, Count: 15 * k},
				{Request: mig.Request{Milli: 500, MemoryMiB: 30 * 1024}, Count: 5 * k},
				{Request: mig.Request{Milli: 1000}, Count: 5 * k},
			}
			want := 0
			for _, d := range demand {
				want += d.Count
			}
			o := mig.PlanOptions{EnableMIG: true}
			var plan mig.Plan
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if plan, err = pool.Plan(demand, o); err != nil {
					b.Fatal(err)
				}
			}
			served := 0
			for _, s := range plan.Served {
				served += s
			}
			b.ReportMetric(float64(plan.Cost.GPUs), "gpus-touched")
			b.ReportMetric(float64(served), "served")
			b.ReportMetric(float64(want), "demand")
			b.ReportMetric(float64(plan.Cost.Resets), "resets")
		})
	}
}
