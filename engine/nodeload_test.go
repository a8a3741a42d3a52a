package engine_test

import (
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// NodeLoads and PendingStatus.Request: what node autoscaling reads from
// an engine.
func TestNodeLoadsAndPendingRequest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, backfill := range []bool{false, true} {
		cfg := engine.Config{
			Cluster: topo.Uniform([]string{"rack"}, []int{1}, 3, 8, "H100"),
			Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
			Policy:  queue.StrictPriority(),
			Start:   t0,
		}
		if backfill {
			cfg.Backfill = engine.BackfillConfig{Mode: engine.BackfillEASY}
		}
		e, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []*queue.Job{job("first", 1, 8, 2*time.Hour, t0), job("wide", 3, 8, time.Hour, t0.Add(time.Second))} {
			if err := e.Step(engine.Submitted(t0.Add(time.Second), j)); err != nil {
				t.Fatal(err)
			}
		}
		rd := e.Ready()
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.PendingAll(); !ok { // the walk stopped before wide
			t.Fatal("PendingAll: stale")
		}
		v := e.View()
		if len(v.Pending) != 1 || v.Pending[0].Job != "wide" {
			t.Fatalf("pending %+v", v.Pending)
		}
		req, ok := v.Pending[0].Request()
		if !ok || len(req.Groups) != 1 || req.Groups[0].Members != 3 || req.Groups[0].GPUsPerMember != 8 {
			t.Fatalf("Request() = %+v, %v", req, ok)
		}
		if _, ok := (engine.PendingStatus{Job: "x"}).Request(); ok {
			t.Fatal("a status the engine did not make has a request")
		}
		loads := e.NodeLoads()
		if len(loads) != 3 {
			t.Fatalf("loads %+v", loads)
		}
		busy := rd.Binds[0].Members[0].Node
		for _, l := range loads {
			if l.GPUs != 8 || l.State != topo.Ready || l.GPUModel != "H100" {
				t.Fatalf("load %+v", l)
			}
			if l.Name == busy {
				if l.Idle() || l.Members != 1 || l.FreeGPUs != 0 {
					t.Fatalf("busy node %+v", l)
				}
			} else if !l.Idle() {
				t.Fatalf("idle node %+v", l)
			}
			// With backfill the wide job holds a reservation over every node.
			if l.Reserved != backfill {
				t.Fatalf("backfill %v: node %+v (reservations %+v)", backfill, l, v.Reservations)
			}
		}
		if backfill {
			continue
		}
		if v.Pending[0].Reason != engine.ReasonCapacity {
			t.Fatalf("reason %v", v.Pending[0].Reason)
		}
	}
}
