package engine_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// The README's second snippet: the engine loop. Jobs come in through Step
// (on the engine's goroutine) or the lock-free intake (from any
// goroutine); Ready runs one cycle and returns its decisions; Advance
// reports what the cluster refused.
func Example_readme() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "H100") // 2 racks x 4 nodes x 8 GPUs
	tree := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}}
	e, err := engine.New(engine.Config{Cluster: spec, Queues: tree, Start: now,
		Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}})
	if err != nil {
		panic(err)
	}
	train := &queue.Job{ID: "train", Queue: "team", Submit: now, RuntimeEstimate: time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: 4, GPUsPerMember: 8}}, Preferred: "rack"}}
	if err := e.Step(engine.Submitted(now, train)); err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { // any goroutine may submit; the next cycle drains the intake
		_ = e.Intake().Submit(&queue.Job{ID: "eval", Queue: "team", Submit: now,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}}}})
	})
	wg.Wait()

	rd := e.Ready() // binds, preemptions, reservations, reasons, estimates
	for _, b := range rd.Binds {
		fmt.Println("bind", b.Job, "members", len(b.Members), "first on", b.Members[0].Node)
	}
	// apply the decisions, then report what the cluster refused:
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		panic(err)
	}
	fmt.Println("free GPUs:", e.View().FreeGPUs)
	// Output:
	// bind eval members 1 first on n0
	// bind train members 4 first on n4
	// free GPUs: 30
}
