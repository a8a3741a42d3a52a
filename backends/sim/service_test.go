package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// A service through the Runner: scaled up from 2 to 6 replicas (one
// cycle places the four new ones), then down to 3 (three running
// replicas stopped), while a training job comes and goes beside it.
func TestSimServiceScaleUpDown(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Config{Cluster: topo.Uniform([]string{"rack"}, []int{1}, 2, 4, "H100"), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	svc := &engine.Service{
		Name: "chat", Queue: "infer", QoS: engine.QoSBurstable,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}},
		Min:     1, Max: 8, Desired: 2,
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetService(start, svc))
	must(s.ScaleService(start.Add(10*time.Minute), "chat", 6))
	must(s.ScaleService(start.Add(20*time.Minute), "chat", 3))
	must(s.Submit(&queue.Job{ID: "train", Queue: "train", Submit: start.Add(30 * time.Minute),
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 4}}}}, time.Hour))

	type cyc struct {
		at            time.Duration
		binds, stops  int
		running, errs int
	}
	var cycles []cyc
	var recs []backends.JobRecord
	r, err := backends.NewRunner(backends.RunnerConfig{
		Recorder: backends.RecorderFunc(func(rec backends.JobRecord) { recs = append(recs, rec) }),
		Engine:   engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "infer"}, {Name: "train"}}}},
		Backend:  s, Clock: s,
		Observe: func(c backends.Cycle) {
			running := 0
			for _, sv := range c.View.Services {
				running += sv.Running
			}
			binds := 0
			for _, b := range c.Ready.Binds {
				if b.Job != "train" {
					binds++
				}
			}
			for _, e := range c.Errors {
				t.Errorf("cycle at %v: %v", c.Ready.At.Sub(start), e)
			}
			cycles = append(cycles, cyc{c.Ready.At.Sub(start), binds, len(c.Ready.Stops), running, len(c.Errors)})
		},
	})
	must(err)
	must(r.Run(context.Background()))
	t.Logf("cycles: %+v", cycles)

	// The scale-up is one cycle with four binds, the scale-down one with
	// three stops.
	var up, down *cyc
	for i := range cycles {
		switch cycles[i].at {
		case 10 * time.Minute:
			up = &cycles[i]
		case 20 * time.Minute:
			down = &cycles[i]
		}
	}
	if up == nil || up.binds != 4 || up.running != 6 {
		t.Fatalf("scale-up cycle %+v: want 4 binds, 6 running (cycles %+v)", up, cycles)
	}
	if down == nil || down.stops != 3 || down.running != 3 {
		t.Fatalf("scale-down cycle %+v: want 3 stops, 3 running (cycles %+v)", down, cycles)
	}
	// The simulator agrees: 6 replicas were bound, 3 stopped at +20m, 3
	// still run (on 3 GPUs, beside nothing: the training job ended).
	reps := s.Replicas()
	if len(reps) != 6 {
		t.Fatalf("%d replicas bound, want 6: %+v", len(reps), reps)
	}
	stopped := 0
	for _, o := range reps {
		if o.Finished {
			stopped++
			if o.End.Sub(start) != 20*time.Minute {
				t.Errorf("replica %s stopped at %v, want 20m", o.ID, o.End.Sub(start))
			}
		}
	}
	if stopped != 3 {
		t.Fatalf("%d replicas stopped, want 3", stopped)
	}
	run, err := s.Running(context.Background())
	must(err)
	if len(run) != 3 {
		t.Fatalf("%d jobs running at the end, want the 3 replicas: %+v", len(run), run)
	}
	if st := s.State(nil); st.BusyGPUs != 3 {
		t.Fatalf("%d GPUs busy at the end, want 3", st.BusyGPUs)
	}
	if v := s.Violations(); len(v) > 0 {
		t.Fatalf("violations: %v", v)
	}
	// Accounting: six replica starts, three ends for the scale-down.
	starts, ends := 0, 0
	for _, rec := range recs {
		if rec.Job == "train" {
			continue
		}
		switch rec.Kind {
		case backends.RecordStart:
			starts++
		case backends.RecordEnd:
			ends++
			// The newest replicas go (started at +10m): 10 minutes of one GPU.
			if rec.Reason != "stopped: scaled-down" || rec.Time.Sub(start) != 20*time.Minute ||
				rec.RunStart.Sub(start) != 10*time.Minute || rec.GPUMicroseconds != 10*60*1e6 {
				t.Errorf("end record %+v", rec)
			}
		}
	}
	if starts != 6 || ends != 3 {
		t.Fatalf("%d start and %d end records of replicas, want 6 and 3", starts, ends)
	}
	for _, o := range s.Outcomes() {
		if o.ID == "train" && (!o.Finished || o.Start.Sub(start) != 30*time.Minute) {
			t.Fatalf("train: %+v", o)
		}
	}
}
