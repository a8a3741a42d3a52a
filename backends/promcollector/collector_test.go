package promcollector_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/promcollector"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestObserveCounts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := promcollector.New(promcollector.Options{ConstLabels: prometheus.Labels{"cluster": "c1"}})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	c.Observe(backends.Cycle{
		Ready: engine.Ready{At: t0.Add(time.Minute),
			Binds: []engine.Bind{{Job: "a", Queue: "q", Submit: t0}, {Job: "b", Queue: "q", Submit: t0, Backfill: true},
				{Job: "c", Queue: "r", Submit: t0}},
			Preemptions: []engine.Preemption{{Victim: "v", For: "a", Cause: engine.PreemptPriority}, {Victim: "w", For: "a", Cause: engine.PreemptReclaim}},
			Rejected:    []engine.Rejection{{Job: "x", Err: errors.New("bad")}},
		},
		Outcome: engine.Outcome{RefusedBinds: []string{"c"}, RefusedPreemptions: []string{"w"}},
		Binds: []backends.BindResult{{Job: "e", Err: errors.New("image pull")}, {Job: "f"}, {Job: "g", Unknown: true, Err: backends.ErrCallTimeout},
			{Job: "h", Withdrawn: true, Err: errors.New("stopped")}},
		Acts: []backends.ActResult{{Kind: "preempt", Job: "z", Cause: engine.PreemptPriority}, {Kind: "preempt", Job: "y", Unknown: true},
			{Kind: "preempt", Job: "u", Err: errors.New("refused"), Cause: engine.PreemptReclaim}, {Kind: "grow", Job: "el", Err: errors.New("refused")}},
		Errors:   []error{errors.New("rollback failed")},
		Duration: 3 * time.Millisecond,
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "cluster" {
					key += "," + l.GetName() + "=" + l.GetValue()
				} else if l.GetValue() != "c1" {
					t.Errorf("%s: cluster label %q", key, l.GetValue())
				}
			}
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				got[key+",count"] = float64(m.GetHistogram().GetSampleCount())
				got[key+",sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	for k, v := range map[string]float64{
		"berth_cycles_total":                          1,
		"berth_cycle_duration_seconds,count":          1,
		"berth_cycle_duration_seconds,sum":            0.003,
		"berth_decisions_total,kind=bind":             2,
		"berth_decisions_total,kind=backfill":         1,
		"berth_decisions_total,kind=preemption":       2,
		"berth_refusals_total,kind=bind":              2,
		"berth_bind_outcomes_total,outcome=applied":   1,
		"berth_bind_outcomes_total,outcome=failed":    1,
		"berth_bind_outcomes_total,outcome=unknown":   1,
		"berth_bind_outcomes_total,outcome=withdrawn": 1,
		"berth_refusals_total,kind=preemption":        2, // w in the Outcome (a synchronous caller), u in Acts
		"berth_refusals_total,kind=resize":            1,
		"berth_preemptions_total,cause=priority":      2, // v (synchronous, not refused) and z (Acts, applied)
		"berth_preemptions_total,cause=reclaim":       0,
		"berth_job_wait_seconds,queue=q,count":        2,
		"berth_job_wait_seconds,queue=q,sum":          120,
		"berth_rejected_submissions_total":            1,
		"berth_apply_errors_total":                    1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["berth_job_wait_seconds,queue=r,count"]; ok {
		t.Error("a refused bind's wait was observed")
	}
	for k := range got {
		if !strings.HasPrefix(k, "berth_") {
			t.Errorf("metric %s outside the berth_ namespace", k)
		}
	}
}

// berth_jobs counts every job the engine knows in exactly one state:
// binding, binding-unknown and held included.
func TestJobStates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{
		Cluster:      topo.Uniform(nil, nil, 1, 8, "H100"),
		Queues:       queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
		Start:        t0,
		MaxBindTries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		j := &queue.Job{ID: id, Queue: "q", Submit: t0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}}}}
		if err := e.Step(engine.Submitted(t0, j)); err != nil {
			t.Fatal(err)
		}
	}
	rd := e.Ready() // a-d bound (8 GPUs), e waits
	if err := e.Advance(rd, engine.Outcome{AssumeBinds: true}); err != nil {
		t.Fatal(err)
	}
	runs := map[string]uint64{}
	for _, b := range rd.Binds {
		runs[b.Job] = b.Run
	}
	for _, ev := range []engine.Event{engine.BindApplied(t0, "a", runs["a"]), engine.BindUnknown(t0, "b", runs["b"]),
		engine.BindFailed(t0, "c", runs["c"], "no such image")} {
		if err := e.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	rd = e.Ready()
	if err := e.Advance(rd, engine.Outcome{AssumeBinds: true}); err != nil {
		t.Fatal(err)
	}
	c := promcollector.New(promcollector.Options{})
	c.Observe(backends.Cycle{View: e.View()})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "berth_jobs" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	// a runs; b's bind is unknown; c is held; c's GPUs went to e, which
	// binds with d.
	want := map[string]float64{"running": 1, "binding": 2, "binding-unknown": 1, "held": 1, "retrying": 0, "pending": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("berth_jobs{state=%q} = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
