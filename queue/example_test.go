package queue_test

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

func gpuJob(id, q string, gpus int, submit time.Time) *queue.Job {
	return &queue.Job{
		ID: id, Queue: q, Submit: submit,
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: gpus}}},
	}
}

// A cohort of two teams: each owns 4 GPUs and may borrow the other's idle
// ones, but "research" lends at most 2.
func Example() {
	tree, err := queue.NewTree(queue.TreeSpec{
		Cohorts: []queue.CohortSpec{{Name: "org"}},
		Queues: []queue.QueueSpec{
			{Name: "prod", Cohort: "org", Quota: map[queue.ResourceName]queue.Quota{
				queue.GPUMilli: {Nominal: queue.WholeGPUs(4)}}},
			{Name: "research", Cohort: "org", Quota: map[queue.ResourceName]queue.Quota{
				queue.GPUMilli: {Nominal: queue.WholeGPUs(4), LendingLimit: queue.Cap(queue.WholeGPUs(2))}}},
		},
	})
	if err != nil {
		panic(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	j := gpuJob("big", "prod", 6, t0)
	fit, _ := tree.Fits(j)
	fmt.Println("6 GPUs fit:", fit.OK, "borrowing:", fit.Borrowing)
	loans, _ := tree.Lenders(j)
	fmt.Println("lenders:", loans)
	_ = tree.Charge(j, t0)
	fit, _ = tree.Fits(gpuJob("more", "prod", 1, t0))
	fmt.Println("one more fits:", fit.OK, "short of", fit.Resource)
	// Output:
	// 6 GPUs fit: true borrowing: true
	// lenders: [{research gpu 2000}]
	// one more fits: false short of gpu
}

// The engine's side: submissions from any goroutine, one owner draining
// and walking the DRS order. Queue a has twice b's weight, so of the
// cohort's 3 GPUs it gets 2 (a1 wins the tie of shares on its ID).
func ExamplePending() {
	tree, _ := queue.NewTree(queue.TreeSpec{
		Cohorts: []queue.CohortSpec{{Name: "all", Quota: map[queue.ResourceName]queue.Quota{
			queue.GPUMilli: {Nominal: queue.WholeGPUs(3)}}}},
		Queues: []queue.QueueSpec{{Name: "a", Cohort: "all", Weight: 2}, {Name: "b", Cohort: "all"}},
	})
	in, _ := queue.NewIntake(1024)
	pending, _ := queue.NewPending(tree, queue.PendingConfig{})
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		_ = in.Submit(gpuJob(fmt.Sprintf("a%d", i), "a", 1, t0))
		_ = in.Submit(gpuJob(fmt.Sprintf("b%d", i), "b", 1, t0))
	}
	_ = pending.Drain(in, t0)
	cur := queue.DRS().Order(pending, t0)
	for j, ok := cur.Next(); ok; j, ok = cur.Next() {
		if fit, _ := tree.Fits(j); fit.OK {
			_ = tree.Charge(j, t0)
			pending.Remove(j.ID)
			fmt.Println("run", j.ID)
		}
	}
	fmt.Println("still pending:", pending.Len())
	// Output:
	// run a0
	// run a1
	// run b0
	// still pending: 3
}
