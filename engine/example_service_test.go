package engine_test

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// A service of 1-GPU replicas on one node of 8 GPUs: scaled to 10, the
// 8 that fit are placed in one cycle and the other 2 wait with a reason;
// scaled back to 3, the 2 pending replicas go first, then 5 running ones,
// reported as Stops.
func ExampleServiceSet() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{1}, 1, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "serving"}}},
		Start:   t0,
	})
	if err != nil {
		panic(err)
	}
	svc := &engine.Service{
		Name: "llama", Queue: "serving", QoS: engine.QoSGuaranteed,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}},
		Min:     1, Max: 16, Desired: 10,
	}
	if err := e.Step(engine.ServiceSet(t0, svc)); err != nil {
		panic(err)
	}
	rd := e.Ready()
	_ = e.Advance(rd, engine.Outcome{})
	s := e.View().Services[0]
	fmt.Println("binds:", len(rd.Binds), "running:", s.Running, "pending:", s.Pending, "reason:", s.Reason)

	if err := e.Step(engine.ServiceScaled(t0.Add(time.Minute), "llama", 3)); err != nil {
		panic(err)
	}
	rd = e.Ready()
	_ = e.Advance(rd, engine.Outcome{})
	running := 0
	for _, st := range rd.Stops {
		if st.Running {
			running++
		}
	}
	s = e.View().Services[0]
	fmt.Println("stops:", len(rd.Stops), "of running replicas:", running, "running now:", s.Running, "free GPUs:", e.View().FreeGPUs)
	// Output:
	// binds: 8 running: 8 pending: 2 reason: capacity
	// stops: 7 of running replicas: 5 running now: 3 free GPUs: 5
}
