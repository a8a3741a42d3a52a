package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Two 8-GPU jobs on one 8-GPU node run one after the other.
func Example() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Start: start})
	for _, id := range []string{"a", "b"} {
		_ = s.Submit(&queue.Job{
			ID: id, Queue: "team", Submit: start,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}},
		}, time.Hour)
	}
	r, _ := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}}},
		Backend: s,
		Clock:   s,
	})
	if err := r.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range s.Outcomes() {
		fmt.Printf("%s ran %v .. %v\n", o.ID, o.Start.Sub(start), o.End.Sub(start))
	}
	// Output:
	// a ran 0s .. 1h0m0s
	// b ran 1h0m0s .. 2h0m0s
}
