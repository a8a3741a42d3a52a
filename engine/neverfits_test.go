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

// A job that can never fit the cluster as configured is rejected at
// submission with a typed error naming the limit; one that could fit
// (even if not now) is accepted.
func TestNeverFitsRejectedAtSubmission(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := topo.Uniform([]string{"block"}, []int{2}, 2, 8, "H100") // 2 blocks x 2 nodes x 8 GPUs
	spec.Nodes[0].CPUMilli, spec.Nodes[0].MemoryMiB = 64000, 1<<20
	newEngine := func() *engine.Engine {
		e, err := engine.New(engine.Config{Cluster: spec, Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Start: t0})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	job := func(id string, r gang.Request) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: t0, Request: r}
	}
	g := func(members, per int) gang.Group { return gang.Group{Members: members, GPUsPerMember: per} }
	for _, tc := range []struct {
		name  string
		req   gang.Request
		limit string
		need  int64
		have  int64
	}{
		{"whole cluster", gang.Request{Groups: []gang.Group{g(5, 8)}}, "GPUs", 5, 4},
		{"two groups", gang.Request{Groups: []gang.Group{g(3, 8), g(2, 8)}}, "GPUs", 40, 32},
		{"per node", gang.Request{Groups: []gang.Group{g(1, 16)}}, "GPUs per node", 16, 8},
		{"model", gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, GPUModel: "A100"}}}, "model", 0, 0},
		{"level", gang.Request{Groups: []gang.Group{g(3, 8)}, Required: "block"}, "level", 3, 2},
		{"cpu", gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, CPUMilli: 128000}}}, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine()
			err := e.Step(engine.Submitted(t0, job("j", tc.req)))
			if tc.limit == "" {
				// Nodes 1..3 do not track CPU: a member fits there.
				if err != nil {
					t.Fatalf("rejected a job that fits: %v", err)
				}
				return
			}
			var nf *engine.NeverFitsError
			if !errors.As(err, &nf) || !errors.Is(err, engine.ErrNeverFits) {
				t.Fatalf("err = %v, want a *NeverFitsError", err)
			}
			if nf.Limit != tc.limit || nf.Need != tc.need || nf.Have != tc.have || nf.Job != "j" {
				t.Fatalf("got %+v (%v), want limit %q need %d have %d", nf, err, tc.limit, tc.need, tc.have)
			}
			// Nothing was booked: the same ID may be submitted again.
			if err := e.Step(engine.Submitted(t0, job("j", gang.Request{Groups: []gang.Group{g(1, 8)}}))); err != nil {
				t.Fatalf("resubmission: %v", err)
			}
		})
	}
	// Jobs that fit, though not now, are accepted: the whole cluster; a
	// block-wide gang; an elastic job whose minimum fits.
	e := newEngine()
	for i, r := range []gang.Request{
		{Groups: []gang.Group{g(4, 8)}},
		{Groups: []gang.Group{g(2, 8)}, Required: "block"},
	} {
		if err := e.Step(engine.Submitted(t0, job(string(rune('a'+i)), r))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	el := job("elastic", gang.Request{Groups: []gang.Group{g(6, 8)}})
	el.Elastic = queue.Elastic{MinMembers: 2, MaxMembers: 6}
	if err := e.Step(engine.Submitted(t0, el)); err != nil {
		t.Fatalf("elastic: %v", err)
	}
	// Through the intake, the same check gives a Rejection.
	if err := e.Intake().Submit(job("big", gang.Request{Groups: []gang.Group{g(1, 9)}})); err != nil {
		t.Fatal(err)
	}
	rd := e.Ready()
	if len(rd.Rejected) != 1 || rd.Rejected[0].Job != "big" || !errors.Is(rd.Rejected[0].Err, engine.ErrNeverFits) {
		t.Fatalf("intake rejections: %+v", rd.Rejected)
	}
}

// A request rejected once is rejected again from the memo (no walk of the
// nodes) with the same error as the check gives without caches, naming
// each job; a request that fits is still accepted after one that does
// not.
func TestNeverFitsRemembered(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := topo.Uniform([]string{"block"}, []int{2}, 2, 8, "H100")
	for i := range spec.Nodes {
		spec.Nodes[i].CPUMilli = 64000
	}
	reqs := []gang.Request{
		{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, CPUMilli: 128000}}},
		{Groups: []gang.Group{{Members: 3, GPUsPerMember: 8}}, Required: "block"},
		{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, CPUMilli: 1000}}},
	}
	var got [2][]string
	for k, off := range []bool{false, true} {
		e, err := engine.New(engine.Config{Cluster: spec, Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Start: t0, DisableCaches: off})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 9 {
			j := &queue.Job{ID: "j" + string(rune('a'+i)), Queue: "q", Submit: t0, Request: reqs[i%3]}
			err := e.Step(engine.Submitted(t0, j))
			var nf *engine.NeverFitsError
			switch {
			case i%3 == 2 && err != nil:
				t.Fatalf("caches off %v: %s rejected: %v", off, j.ID, err)
			case i%3 == 2:
				got[k] = append(got[k], "ok")
			case !errors.As(err, &nf) || nf.Job != j.ID:
				t.Fatalf("caches off %v: %s: %v", off, j.ID, err)
			default:
				got[k] = append(got[k], err.Error())
			}
		}
	}
	for i := range got[0] {
		if got[0][i] != got[1][i] {
			t.Fatalf("submission %d: %q with the memo, %q without", i, got[0][i], got[1][i])
		}
	}
}
