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
		Outcome:  engine.Outcome{RefusedBinds: []string{"c"}, RefusedPreemptions: []string{"w"}},
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
		"berth_cycles_total":                     1,
		"berth_cycle_duration_seconds,count":     1,
		"berth_cycle_duration_seconds,sum":       0.003,
		"berth_decisions_total,kind=bind":        2,
		"berth_decisions_total,kind=backfill":    1,
		"berth_decisions_total,kind=preemption":  2,
		"berth_refusals_total,kind=bind":         1,
		"berth_refusals_total,kind=preemption":   1,
		"berth_preemptions_total,cause=priority": 1,
		"berth_preemptions_total,cause=reclaim":  0,
		"berth_job_wait_seconds,queue=q,count":   2,
		"berth_job_wait_seconds,queue=q,sum":     120,
		"berth_rejected_submissions_total":       1,
		"berth_apply_errors_total":               1,
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
