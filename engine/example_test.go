package engine_test

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func job(id string, members, per int, est time.Duration, submit time.Time) *queue.Job {
	return &queue.Job{
		ID: id, Queue: "team", Submit: submit,
		Request:         gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}},
		RuntimeEstimate: est, RuntimeLimit: est,
	}
}

// Two nodes of 8 GPUs. A one-node job runs; a two-node job must wait for
// it and gets a reservation; a short job is backfilled because it ends
// before the reservation starts.
func Example() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{
		Cluster:  topo.Uniform([]string{"rack"}, []int{1}, 2, 8, "H100"),
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Policy:   queue.StrictPriority(),
		Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
		Start:    t0,
	})
	if err != nil {
		panic(err)
	}
	for _, j := range []*queue.Job{
		job("first", 1, 8, 2*time.Hour, t0),
		job("wide", 2, 8, time.Hour, t0.Add(time.Second)),
		job("short", 1, 8, time.Hour, t0.Add(2*time.Second)),
	} {
		if err := e.Step(engine.Submitted(t0.Add(2*time.Second), j)); err != nil {
			panic(err)
		}
	}
	rd := e.Ready()
	for _, b := range rd.Binds {
		fmt.Println("bind", b.Job, b.Members[0].Node, "backfill:", b.Backfill)
	}
	for _, r := range rd.Reservations {
		fmt.Println("reserve", r.Job, "at", r.Start.Sub(t0), "GPUs", r.GPUs.GetCardinality())
	}
	for _, p := range rd.Pending {
		fmt.Println("pending", p.Job, p.Reason, "start", p.Start.Sub(t0))
	}
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		panic(err)
	}
	// Output:
	// bind first n0 backfill: false
	// bind short n1 backfill: true
	// reserve wide at 2h0m2s GPUs 16
	// pending wide reserved start 2h0m2s
}

// A backend refused a bind: the whole gang goes back to pending.
func ExampleEngine_Advance() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, _ := engine.New(engine.Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{1}, 2, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Start:   t0, BindRetryBackoff: time.Minute,
	})
	_ = e.Step(engine.Submitted(t0, job("g", 2, 8, time.Hour, t0)))
	rd := e.Ready()
	fmt.Println("binds:", len(rd.Binds), "free GPUs:", e.View().FreeGPUs)
	_ = e.Advance(rd, engine.Outcome{RefusedBinds: []string{"g"}})
	fmt.Println("free GPUs after refusal:", e.View().FreeGPUs)
	_ = e.Step(engine.Tick(t0.Add(time.Second)))
	rd = e.Ready()
	fmt.Println(rd.Pending[0].Job, rd.Pending[0].Reason)
	// Output:
	// binds: 1 free GPUs: 0
	// free GPUs after refusal: 16
	// g bind-refused
}
