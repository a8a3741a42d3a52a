package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestDescribe(t *testing.T) {
	spec := topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "h100")
	spec.Nodes[0].State = topo.Down
	got := describe("berth-test", "/tmp/x/slurm.conf", spec, map[string]slurm.Partition{
		"berth":    {Preemptible: true, MinRuntime: time.Minute, GracePeriod: 30 * time.Second},
		"berth-hi": {Priority: 10},
	}, []string{"default", "ml"}, time.Second)
	want := `slurm-bridge: SLURM cluster berth-test (/tmp/x/slurm.conf)
slurm-bridge: managed partitions: berth (priority 0, preemptible after 1m0s, grace 30s), berth-hi (priority 10)
slurm-bridge: their nodes: 8 (7 ready), 64 GPUs (64 h100); topology levels rack
slurm-bridge: berth's queues (SLURM accounts): default, ml; squeue and sinfo read every 1s`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A skipped submission names the job (its ID is in ev.Job, not ev.JobID)
// and says why in words.
func TestSkipLine(t *testing.T) {
	job := &queue.Job{ID: "42", Queue: "physics", Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}
	ev := engine.Submitted(time.Now(), job)
	err := fmt.Errorf("%w: %w", engine.ErrInvalidEvent, &queue.FieldError{JobID: "42", Field: "Queue", Err: queue.ErrUnknownQueue, Msg: `"physics"`})
	got := skipLine(ev, err, []string{"default", "ml"})
	want := `job 42 (account "physics") not taken by berth: its account "physics" is not one of berth's queues (default, ml; -queues sets them)`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	err = fmt.Errorf("%w: %w", engine.ErrInvalidEvent, &queue.FieldError{JobID: "42", Field: "Request.Groups[0].Members", Err: queue.ErrInvalidJob, Msg: "must be at least 1"})
	if got := skipLine(ev, err, nil); !strings.HasPrefix(got, "job 42 ") || !strings.Contains(got, "berth cannot run what it asks (Request.Groups[0].Members: must be at least 1)") {
		t.Errorf("got %s", got)
	}
	fin := engine.Finished(time.Now(), "43")
	if got := skipLine(fin, engine.ErrUnknownJob, nil); got != "report about job 43 (job-finished) skipped: engine: unknown job" {
		t.Errorf("got %s", got)
	}
}
