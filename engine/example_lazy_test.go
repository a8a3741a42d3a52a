package engine_test

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// By default a cycle under a backlog stops its walk once no later job can
// start: here one node of 8 GPUs runs a job, the first waiting job gets
// EASY's reservation, and the walk stops there. Ready.Pending lists the
// job it reached and Ready.Unwalked counts the others; PendingStatuses
// computes the status of the jobs asked about alone, PendingAll every
// status, as a full walk would have, when they are asked before the next
// event; the View then explains those jobs too.
func ExampleEngine_PendingAll() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{
		Cluster:  topo.Uniform([]string{"rack"}, []int{1}, 1, 8, "H100"),
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Policy:   queue.StrictPriority(),
		Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
		Start:    t0,
	})
	if err != nil {
		panic(err)
	}
	for i, id := range []string{"running", "a", "b", "c", "d"} {
		if err := e.Step(engine.Submitted(t0, job(id, 1, 8, time.Hour, t0.Add(time.Duration(i)*time.Second)))); err != nil {
			panic(err)
		}
	}
	rd := e.Ready() // binds "running"
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		panic(err)
	}
	if err := e.Step(engine.Tick(t0.Add(time.Minute))); err != nil {
		panic(err)
	}
	rd = e.Ready()
	fmt.Println("walked:", len(rd.Pending), "unwalked:", rd.Unwalked)
	one, _ := e.PendingStatuses("d")
	fmt.Println("d alone:", one[0].Reason)
	x, _ := e.View().Explain("d")
	fmt.Println("the View explains d:", x.Kind)
	all, ok := e.PendingAll()
	for _, p := range all {
		fmt.Println(p.Job, p.Reason)
	}
	fmt.Println("complete:", ok)
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		panic(err)
	}
	if err := e.Step(engine.Tick(t0.Add(2 * time.Minute))); err != nil {
		panic(err)
	}
	rd = e.Ready()
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		panic(err)
	}
	if err := e.Step(engine.Tick(t0.Add(3 * time.Minute))); err != nil {
		panic(err)
	}
	head, ok := e.PendingAll()
	fmt.Println("asked after an event:", len(head), ok)
	// Output:
	// walked: 1 unwalked: 3
	// d alone: capacity
	// the View explains d: capacity: whole nodes
	// a reserved
	// b capacity
	// c capacity
	// d capacity
	// complete: true
	// asked after an event: 1 false
}
