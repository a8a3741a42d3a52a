package serving_test

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/serving"
	"github.com/berthsched/berth/topo"
)

// An HPA on request rate (one replica per 40 requests per second) scales
// a service in the engine: up at once within the rate limits, down only
// after the 300 s stabilization window, to zero after 5 idle minutes and
// back on the first request.
func ExampleAutoscaler() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, _ := engine.New(engine.Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{1}, 2, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "serving"}}},
		Start:   start,
	})
	_ = e.Step(engine.ServiceSet(start, &engine.Service{
		Name: "llama", Queue: "serving", QoS: engine.QoSBurstable,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}},
		Min:     0, Max: 16, Desired: 1,
	}))
	hpa, _ := serving.NewHPA(serving.HPAConfig{Min: 0, Max: 16,
		Targets: []serving.Target{{Metric: serving.RequestRate, Value: 40}}})
	a := serving.NewAutoscaler()
	_ = a.Add("llama", hpa, 1)
	for _, s := range []struct {
		min  int
		rate float64
	}{{1, 30}, {2, 400}, {3, 400}, {4, 100}, {10, 100}, {11, 0}, {15, 0}, {16, 0}, {20, 50}} {
		at := start.Add(time.Duration(s.min) * time.Minute)
		ev, changed, err := a.Observe(serving.Signal{At: at, Service: "llama", Metric: serving.RequestRate, Value: s.rate})
		if err != nil {
			fmt.Println(err)
			return
		}
		if changed {
			if err := e.Step(ev); err != nil {
				fmt.Println(err)
				return
			}
		}
		n, _ := a.Desired("llama")
		fmt.Printf("minute %2d: %3.0f req/s -> %d replicas\n", s.min, s.rate, n)
	}
	// Output:
	// minute  1:  30 req/s -> 1 replicas
	// minute  2: 400 req/s -> 5 replicas
	// minute  3: 400 req/s -> 10 replicas
	// minute  4: 100 req/s -> 10 replicas
	// minute 10: 100 req/s -> 3 replicas
	// minute 11:   0 req/s -> 3 replicas
	// minute 15:   0 req/s -> 1 replicas
	// minute 16:   0 req/s -> 0 replicas
	// minute 20:  50 req/s -> 2 replicas
}
