package engine_test

import (
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestNextWake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := topo.Uniform(nil, nil, 1, 8, "H100")
	e, err := engine.New(engine.Config{Cluster: spec, Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
		Start: t0, Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}, BindRetryBackoff: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := e.NextWake(); ok {
		t.Fatalf("idle engine wakes at %v", w)
	}
	job := func(id string, gpus int, est time.Duration) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: t0, RuntimeEstimate: est,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: gpus}}}}
	}
	step := func(ev engine.Event) {
		t.Helper()
		if err := e.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	step(engine.Submitted(t0, job("a", 8, time.Hour)))
	rd := e.Ready()
	if len(rd.Binds) != 1 {
		t.Fatalf("binds %v", rd.Binds)
	}
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		t.Fatal(err)
	}
	// a runs until t0+1h by its estimate: the engine wants a tick then
	// (a overruns, or b's reservation comes due).
	step(engine.Submitted(t0.Add(time.Minute), job("b", 8, time.Hour)))
	rd = e.Ready()
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		t.Fatal(err)
	}
	if w, ok := e.NextWake(); !ok || !w.Equal(t0.Add(time.Hour)) {
		t.Fatalf("NextWake = %v %v, want %v (a's expected end, b's reservation)", w, ok, t0.Add(time.Hour))
	}
	// a ends; b's bind is refused: the engine wants a tick when the
	// backoff ends.
	t1 := t0.Add(30 * time.Minute)
	step(engine.Finished(t1, "a"))
	rd = e.Ready()
	if len(rd.Binds) != 1 || rd.Binds[0].Job != "b" {
		t.Fatalf("binds %v", rd.Binds)
	}
	if err := e.Advance(rd, engine.Outcome{RefusedBinds: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if w, ok := e.NextWake(); !ok || !w.Equal(t1.Add(10*time.Minute)) {
		t.Fatalf("NextWake = %v %v, want the bind backoff's end %v", w, ok, t1.Add(10*time.Minute))
	}
	// At that tick b is bound; then only its expected end remains.
	step(engine.Tick(t1.Add(10 * time.Minute)))
	rd = e.Ready()
	if len(rd.Binds) != 1 {
		t.Fatalf("after the backoff: binds %v", rd.Binds)
	}
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		t.Fatal(err)
	}
	if w, ok := e.NextWake(); !ok || !w.Equal(t1.Add(70*time.Minute)) {
		t.Fatalf("NextWake = %v %v, want b's expected end %v", w, ok, t1.Add(70*time.Minute))
	}
}
