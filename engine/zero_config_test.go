package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// TestZeroConfig pins what the zero-value Config does (see its godoc):
// jobs run in order with no backfill, so a job that does not fit now
// blocks the jobs behind it (no reservation, no estimate); a job that can
// never fit is rejected at submission and blocks nothing.
func TestZeroConfig(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 2, 8, "H100"),
		Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Start: t0})
	if err != nil {
		t.Fatal(err)
	}
	job := func(id string, at time.Time, members int) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: at, RuntimeEstimate: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: 8}}}}
	}
	step := func(ev engine.Event) error { return e.Step(ev) }
	if err := step(engine.Submitted(t0, job("first", t0, 1))); err != nil {
		t.Fatal(err)
	}
	if err := step(engine.Submitted(t0, job("huge", t0, 3))); !errors.Is(err, engine.ErrNeverFits) {
		t.Fatalf("a 3-node job on 2 nodes: err = %v, want ErrNeverFits", err)
	}
	if err := step(engine.Submitted(t0, job("wide", t0.Add(time.Second), 2))); err != nil {
		t.Fatal(err)
	}
	if err := step(engine.Submitted(t0, job("small", t0.Add(2*time.Second), 1))); err != nil {
		t.Fatal(err)
	}
	rd := e.Ready()
	if len(rd.Binds) != 1 || rd.Binds[0].Job != "first" {
		t.Fatalf("binds %+v, want only first", rd.Binds)
	}
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		t.Fatal(err)
	}
	// wide does not fit now and blocks small (which would fit): no backfill.
	if len(rd.Reservations) != 0 {
		t.Fatalf("reservations under BackfillNone: %+v", rd.Reservations)
	}
	// The walk stops before wide (nothing can start after first): the
	// statuses come on demand, as a full walk gives them.
	all, ok := e.PendingAll()
	if !ok {
		t.Fatal("PendingAll: stale")
	}
	var order []string
	for _, p := range all {
		order = append(order, p.Job)
		if !p.Start.IsZero() {
			t.Errorf("%s has an estimate under BackfillNone", p.Job)
		}
	}
	if len(order) != 2 || order[0] != "wide" || order[1] != "small" {
		t.Fatalf("pending %v, want [wide small]", order)
	}
	if w, ok := e.NextWake(); !ok || !w.Equal(t0.Add(time.Hour)) {
		t.Fatalf("NextWake = %v %v, want first's expected end", w, ok)
	}
}
