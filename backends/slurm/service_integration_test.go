package slurm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// replicaJobs lists the SLURM jobs of service name's replicas that are
// pending or running: replica ID -> job ID, state, partition, nodes.
func replicaJobs(tb testing.TB, conf, name string) map[string][4]string {
	tb.Helper()
	out := map[string][4]string{}
	for _, line := range strings.Split(cmd(tb, conf, "squeue", "-h", "-t", "PD,R,CF", "-o", "%j|%i|%T|%P|%N"), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) == 5 && strings.HasPrefix(f[0], name+"/") {
			out[f[0]] = [4]string{f[1], f[2], f[3], f[4]}
		}
	}
	return out
}

func allRunning(js map[string][4]string, n int) bool {
	if len(js) != n {
		return false
	}
	for _, j := range js {
		if j[1] != "RUNNING" {
			return false
		}
	}
	return true
}

// seenRunning: the backend's poller has seen every replica of js run (so
// no report of theirs is still on its way to the engine).
func seenRunning(rn *run, js map[string][4]string) bool {
	for rid := range js {
		if _, ok := rn.b.ReplicaJob(rid); !ok {
			return false
		}
	}
	return true
}

func serviceStatus(rn *run, name string) (engine.ServiceStatus, bool) {
	v := rn.r.View()
	if v == nil {
		return engine.ServiceStatus{}, false
	}
	for _, s := range v.Services {
		if s.Name == name {
			return s, true
		}
	}
	return engine.ServiceStatus{}, false
}

// A service on SLURM: 2 replicas run as SLURM jobs on the nodes berth
// chose; scaled to 4, two more start; scaled to 1, three are cancelled
// (gone from squeue) and the engine reports none finished; berth
// restarted, the running replica is adopted (same SLURM job, no new one);
// deleted, its last job is cancelled. Like the other tests it starts
// from an empty cluster (reset): jobs left by an earlier test would be
// adopted and hold the GPUs.
func TestIntegrationServiceScaleUpDownAdopt(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	name := fmt.Sprintf("web%d", os.Getpid())
	defer func() {
		for _, j := range replicaJobs(t, conf, name) {
			_, _ = cmdErr(conf, "scancel", j[0])
		}
	}()
	svc := func(desired int) *engine.Service {
		return &engine.Service{
			Name: name, Queue: "ml", QoS: engine.QoSGuaranteed,
			Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2, GPUModel: "h100"}}}},
			Min:     0, Max: 8, Desired: desired,
		}
	}
	run := slurm.ReplicaRun{Wrap: "sleep 600"}

	rn := startRunner(t, conf, nil)
	require.NoError(t, rn.b.SetService(svc(2), run))
	waitFor(t, 30*time.Second, "2 replicas to run", func() bool { return allRunning(replicaJobs(t, conf, name), 2) })

	require.NoError(t, rn.b.ScaleService(name, 4))
	waitFor(t, 30*time.Second, "4 replicas to run", func() bool { return allRunning(replicaJobs(t, conf, name), 4) })
	js := replicaJobs(t, conf, name)
	for i := 1; i <= 4; i++ {
		rid := fmt.Sprintf("%s/%d", name, i)
		j, ok := js[rid]
		require.True(t, ok, "replica %s has a SLURM job", rid)
		assert.Equal(t, "berth-run", j[2])
		jobID, _ := rn.b.ReplicaJob(rid)
		assert.Equal(t, j[0], jobID)
		ms, bound := rn.bound(rid)
		require.True(t, bound, "berth bound %s", rid)
		assert.Equal(t, nodesOf(ms), hostnames(t, conf, j[3]), "replica %s runs on berth's node", rid)
		ji := showJob(t, conf, j[0])
		assert.Len(t, ji.GPUs[j[3]], 2, "2 GPUs")
	}
	waitFor(t, 10*time.Second, "the engine to count 4 running", func() bool {
		s, ok := serviceStatus(rn, name)
		return ok && s.Running == 4 && s.Pending == 0 && seenRunning(rn, js)
	})

	require.NoError(t, rn.b.ScaleService(name, 1))
	waitFor(t, 30*time.Second, "3 replicas to be gone from squeue", func() bool { return allRunning(replicaJobs(t, conf, name), 1) })
	left := replicaJobs(t, conf, name)
	var keep string
	for rid := range left {
		keep = rid
	}
	for _, j := range js {
		if j != js[keep] {
			st := showJob(t, conf, j[0]).State
			assert.Contains(t, []string{"CANCELLED", "COMPLETING"}, st, "job %s cancelled", j[0])
		}
	}
	// The stopped replicas are not reported finished: the engine does not
	// replace them (it would start new ones), and keeps 1.
	time.Sleep(time.Second) // a few polls
	s, ok := serviceStatus(rn, name)
	require.True(t, ok)
	assert.Equal(t, 1, s.Running)
	assert.Equal(t, 0, s.Pending)
	assert.Len(t, replicaJobs(t, conf, name), 1)
	rn.stop(t)

	// Restart: the running replica is adopted, not started again.
	rn2 := startRunner(t, conf, nil)
	require.NoError(t, rn2.b.SetService(svc(1), run))
	waitFor(t, 30*time.Second, "the replica to be adopted", func() bool {
		s, ok := serviceStatus(rn2, name)
		return ok && s.Running == 1 && s.Pending == 0
	})
	time.Sleep(time.Second)
	assert.Equal(t, left, replicaJobs(t, conf, name), "the same SLURM job, no new one")
	jobID, seen := rn2.b.ReplicaJob(keep)
	assert.Equal(t, left[keep][0], jobID)
	assert.True(t, seen, "adopted running")
	_, rebound := rn2.bound(keep)
	assert.False(t, rebound, "adopted, not bound again")

	// Scaled up after the restart: one new job, the adopted one unchanged.
	require.NoError(t, rn2.b.ScaleService(name, 2))
	waitFor(t, 30*time.Second, "2 replicas to run", func() bool {
		js := replicaJobs(t, conf, name)
		return allRunning(js, 2) && seenRunning(rn2, js)
	})
	assert.Equal(t, left[keep], replicaJobs(t, conf, name)[keep])

	require.NoError(t, rn2.b.DeleteService(name))
	waitFor(t, 30*time.Second, "the service's jobs to be cancelled", func() bool { return len(replicaJobs(t, conf, name)) == 0 })
	rn2.stop(t)
}

// Services the backend cannot run are refused with ErrBadService.
func TestServiceSpecErrors(t *testing.T) {
	// New only checks that the commands exist; nothing is run here.
	bin := t.TempDir()
	for _, c := range []string{"scontrol", "squeue", "sinfo", "scancel", "sbatch"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, c), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	}
	b, err := slurm.New(slurm.Config{Bin: bin})
	require.NoError(t, err)
	defer b.Close()
	ok := engine.Service{Name: "s", Queue: "q", Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}}, Max: 1}
	for name, tc := range map[string]struct {
		mod func(*engine.Service, *slurm.ReplicaRun)
	}{
		"nil":      {nil},
		"name":     {func(s *engine.Service, _ *slurm.ReplicaRun) { s.Name = "a b" }},
		"queue":    {func(s *engine.Service, _ *slurm.ReplicaRun) { s.Queue = "" }},
		"mig":      {func(s *engine.Service, _ *slurm.ReplicaRun) { s.Replica.Request.Groups[0].MIGProfile = "1g.10gb" }},
		"fraction": {func(s *engine.Service, _ *slurm.ReplicaRun) { s.Replica.Request.Groups[0].GPUMilli = 500 }},
		"two groups": {func(s *engine.Service, _ *slurm.ReplicaRun) {
			s.Replica.Request.Groups = append(s.Replica.Request.Groups, s.Replica.Request.Groups[0])
		}},
		"no run":    {func(_ *engine.Service, r *slurm.ReplicaRun) { r.Wrap = "" }},
		"both runs": {func(_ *engine.Service, r *slurm.ReplicaRun) { r.Script = "/bin/true" }},
	} {
		t.Run(name, func(t *testing.T) {
			s := ok
			s.Replica.Request.Groups = slices.Clone(ok.Replica.Request.Groups)
			r := slurm.ReplicaRun{Wrap: "sleep 1"}
			sp := &s
			if tc.mod == nil {
				sp = nil
			} else {
				tc.mod(sp, &r)
			}
			assert.ErrorIs(t, b.SetService(sp, r), slurm.ErrBadService)
		})
	}
	assert.NoError(t, b.SetService(&ok, slurm.ReplicaRun{Wrap: "sleep 1"}))
	assert.ErrorIs(t, b.ScaleService("nope", 1), slurm.ErrBadService)
	assert.ErrorIs(t, b.DeleteService("nope"), slurm.ErrBadService)
	assert.NoError(t, b.ScaleService("s", 1))
}

// Best-effort replicas fill the cluster. One replica's job is cancelled by
// hand: the engine replaces it with a new replica. A higher-priority job
// then preempts one replica (SIGTERM, scancel at the end of its grace
// period), runs on its node, and when it ends the preempted replica runs
// again as a new SLURM job with the same replica ID.
func TestIntegrationServiceReplicaReplacedAndPreempted(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	name := fmt.Sprintf("be%d", os.Getpid())
	rn := startRunner(t, conf, nil)
	defer rn.stop(t)
	require.NoError(t, rn.b.SetService(&engine.Service{
		Name: name, Queue: "ml", QoS: engine.QoSBestEffort, GracePeriod: time.Second,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8, GPUModel: "h100"}}}},
		Max:     16, Desired: 16,
	}, slurm.ReplicaRun{Wrap: "sleep 600"}))
	waitFor(t, 60*time.Second, "16 replicas to run", func() bool { return allRunning(replicaJobs(t, conf, name), 16) })

	first := name + "/1"
	cmd(t, conf, "scancel", replicaJobs(t, conf, name)[first][0])
	waitFor(t, 30*time.Second, "a new replica in its place", func() bool {
		js := replicaJobs(t, conf, name)
		_, old := js[first]
		_, repl := js[name+"/17"]
		return !old && repl && allRunning(js, 16)
	})

	before := replicaJobs(t, conf, name)
	high := sbatch(t, conf, "-p", "berth-hi", "-N", "1", "--gres=gpu:h100:8", "-t", "5", "--wrap", "sleep 4")
	waitFor(t, 60*time.Second, "the high job to run", func() bool { return showJob(t, conf, high).State == "RUNNING" })
	during := replicaJobs(t, conf, name)
	var victim string
	for rid, j := range before {
		if during[rid][0] != j[0] || during[rid][1] != "RUNNING" {
			require.Empty(t, victim, "one replica preempted")
			victim = rid
		}
	}
	require.NotEmpty(t, victim, "a replica was preempted")
	assert.Contains(t, []string{"CANCELLED", "FAILED", "COMPLETING"}, showJob(t, conf, before[victim][0]).State, "stopped (SIGTERM ends the script: FAILED)")
	waitFor(t, 60*time.Second, "the victim to run again", func() bool {
		js := replicaJobs(t, conf, name)
		return allRunning(js, 16) && js[victim][0] != before[victim][0] && seenRunning(rn, js)
	})
	assert.Equal(t, "COMPLETED", showJob(t, conf, high).State)
	s, ok := serviceStatus(rn, name)
	require.True(t, ok)
	assert.Equal(t, 16, s.Running)
	require.NoError(t, rn.b.DeleteService(name))
	waitFor(t, 30*time.Second, "the service's jobs to be cancelled", func() bool { return len(replicaJobs(t, conf, name)) == 0 })
}
