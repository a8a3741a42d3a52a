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

// A GPU in MIG mode split into seven 1g instances, one in use: a 3g job
// needs a re-layout. The engine plans it, the Runner applies it to the
// simulator, and the job runs on the instance it created.
func ExampleSim_ApplyMIG() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := sim.New(sim.Config{Start: start, Cluster: topo.Spec{Nodes: []topo.NodeSpec{
		{Name: "m0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g,1g,1g,1g,1g,1g,1g"}}}})
	for i, p := range []string{"1g.10gb", "3g.40gb"} {
		_ = s.Submit(&queue.Job{
			ID: p, Queue: "team", Submit: start.Add(time.Duration(i) * time.Minute), RuntimeEstimate: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: p}}},
		}, time.Hour)
	}
	r, _ := backends.NewRunner(backends.RunnerConfig{
		Engine:       engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}}},
		Backend:      s,
		Clock:        s,
		TickInterval: time.Minute, // MIG plans are weighed against waiting
	})
	if err := r.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	for _, ch := range s.MIGChanges() {
		fmt.Printf("%s GPU %d: destroy %v, create %v\n", ch.Node, ch.GPU, ch.Destroy, ch.Create)
	}
	l, _ := s.Layout("m0", 0)
	fmt.Println(l)
	for _, o := range s.Outcomes() {
		fmt.Printf("%s ran %v .. %v holding %d milli\n", o.ID, o.Start.Sub(start), o.End.Sub(start), o.Milli)
	}
	fmt.Println("violations:", len(s.Violations()))
	// Output:
	// m0 GPU 0: destroy [1g.10gb@4 1g.10gb@5 1g.10gb@6], create [3g.40gb@4]
	// H100-80GB[1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4]
	// 1g.10gb ran 0s .. 1h0m0s holding 142 milli
	// 3g.40gb ran 2m0s .. 1h2m0s holding 428 milli
	// violations: 0
}
