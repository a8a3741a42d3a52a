package backends_test

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

// A Runner drives the engine against the simulator; one node refuses the
// first bind of a 2-node gang, so the whole gang is rolled back, its
// failure comes back to the engine (Cycle.Binds), and it is bound again
// after the engine's retry backoff.
func ExampleRunner() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, 2, 8, "H100"), Start: start})
	_ = s.Submit(&queue.Job{
		ID: "train", Queue: "team", Submit: start,
		Request: gang.Request{Groups: []gang.Group{{Members: 2, GPUsPerMember: 8}}},
	}, time.Hour)
	s.RefuseBinds("train", "n1", 1)

	r, _ := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
			BindRetryBackoff: time.Minute,
		},
		Backend: s,
		Clock:   s,
		Observe: func(c backends.Cycle) {
			// Binds are issued and assumed; their outcomes come back as
			// events (on the simulator's clock, within the cycle).
			if len(c.Ready.Binds) > 0 {
				fmt.Printf("%v: bind %s\n", c.Ready.At.Sub(start), c.Ready.Binds[0].Job)
			}
			for _, b := range c.Binds {
				fmt.Printf("%v: bind of %s: %v\n", c.Ready.At.Sub(start), b.Job, b.Err)
			}
		},
	})
	if err := r.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	o := s.Outcomes()[0]
	fmt.Printf("ran %v .. %v\n", o.Start.Sub(start), o.End.Sub(start))
	// Output:
	// 0s: bind train
	// 0s: bind of train: backends: decision refused: job "train" on n1 (injected)
	// 1m0s: bind train
	// 1m0s: bind of train: <nil>
	// ran 1m0s .. 1h1m0s
}
