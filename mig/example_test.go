package mig_test

import (
	"fmt"

	"github.com/berthsched/berth/mig"
)

func ExampleModel_Resolve() {
	h100, _ := mig.LookupModel("H100-SXM5-80GB")
	for _, r := range []mig.Request{{Milli: 100}, {Milli: 250}, {Milli: 810}, {MemoryMiB: 15 * 1024}, {Profile: "3g"}} {
		p, _ := h100.Resolve(r)
		fmt.Printf("%v -> %v\n", r, p)
	}
	// Output:
	// milli=100 -> 1g.10gb
	// milli=250 -> 2g.20gb
	// milli=810 -> 7g.80gb
	// milli=0,mem=15360MiB -> 1g.20gb
	// 3g -> 3g.40gb
}

func ExampleLayout() {
	a100, _ := mig.LookupModel("A100-40GB")
	l, _ := mig.ParseLayout(a100, "3g.20gb@4 2g.10gb@0")
	fmt.Println(l, l.Len(), fmt.Sprintf("%08b", l.Used()))
	_, err := l.Place(mig.Instance{Profile: l.Instances()[1].Profile, Start: 0})
	fmt.Println(err)
	fmt.Println(len(a100.Layouts()), "valid layouts")
	// Output:
	// A100-40GB[2g.10gb@0 3g.20gb@4] 2 11110011
	// mig: memory slices overlap: 3g.20gb@0
	// 2319 valid layouts
}

func ExamplePool_Plan() {
	h100, _ := mig.LookupModel("H100-80GB")
	a100, _ := mig.LookupModel("A100-80GB")
	pool := mig.NewPool(3)
	l, _ := mig.ParseLayout(h100, "4g.40gb@0 1g.10gb@6")
	_ = pool.Configure(0, mig.GPUConfig{Model: h100, MIG: true, Layout: l})
	_, _ = pool.Allocate(0, mig.Request{Profile: "4g"}, mig.ExistingOnly) // the 4g is busy
	_ = pool.Configure(1, mig.GPUConfig{Model: a100})                     // MIG off
	_ = pool.Configure(2, mig.GPUConfig{Model: h100})                     // MIG off

	// The idle 1g on GPU 0 serves the 1g. Both 2g go on one GPU: GPU 2
	// (Hopper, no reset) rather than GPU 0 (room for one) or GPU 1 (reset).
	plan, _ := pool.Plan([]mig.Demand{
		{Request: mig.Request{Milli: 250}, Count: 2}, // two 2g.20gb
		{Request: mig.Request{Profile: "1g"}, Count: 1},
	}, mig.PlanOptions{EnableMIG: true})
	for _, ch := range plan.Changes {
		fmt.Printf("GPU %d: enable=%v reset=%v %v -> %v\n", ch.GPU, ch.EnableMIG, ch.NeedsReset, ch.From, ch.To)
	}
	fmt.Println("served", plan.Served, "cost", plan.Cost.GPUs, "GPUs", plan.Cost.Time)
	_ = pool.Apply(plan)
	// Output:
	// GPU 2: enable=true reset=false H100-80GB[] -> H100-80GB[2g.20gb@2 2g.20gb@4]
	// served [2 1] cost 1 GPUs 4s
}
