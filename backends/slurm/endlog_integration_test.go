package slurm_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
)

// A job whose name holds a newline forges a line of the end log
// (jobcomp/filetxt writes the name as it is) that says a running job of
// berth COMPLETED. The forger is a berth job itself, so every ID its
// lines name is one berth runs and the end log's IDs go to the
// confirmation alone (no poll is started by an unknown ID): the
// confirmation's scontrol record of the forger holds the forged record
// too, fails its checks, and a poll decides. The running job is never
// reported ended, its GPUs never freed, and SLURM still runs it; the
// forger's own end is reported once.
func TestIntegrationForgedEndLine(t *testing.T) {
	conf := slurmConf(t)
	logPath := endLogOf(conf)
	if logPath == "" {
		t.Skip("the test cluster has no end log (an older hack/slurm-up.sh, or BERTH_SLURM_END_LOG=0)")
	}
	reset(t, conf)
	b, err := slurm.New(backendConfig(conf, t))
	require.NoError(t, err)
	defer b.Close()
	ctx := context.Background()
	_, err = b.Cluster(ctx)
	require.NoError(t, err)
	var all []engine.Event
	next := func() {
		evs, err := b.Next(ctx, time.Now().Add(100*time.Millisecond))
		require.NoError(t, err)
		all = append(all, evs...)
	}
	count := func(k engine.EventKind, id string) int {
		n := 0
		for _, e := range all {
			if e.Kind == k && (e.JobID == id || e.Job != nil && e.Job.ID == id) {
				n++
			}
		}
		return n
	}
	gpus := func(n string) []engine.Member { return []engine.Member{{Node: n, GPUs: []int{0}}} }

	long := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:h100:1", "-t", "5", "--wrap", "sleep 300")
	forged := "JobId=" + long + " UserId=root(0) GroupId=root(0) Name=wrap JobState=COMPLETED Partition=berth-run TimeLimit=5 ExitCode=0:0"
	forger := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:h100:1", "-t", "5", "-J", "x\n"+forged, "--wrap", "sleep 2")
	waitFor(t, 20*time.Second, "both submitted", func() bool {
		next()
		return count(engine.EventJobSubmitted, long) == 1 && count(engine.EventJobSubmitted, forger) == 1
	})
	require.NoError(t, b.BindGang(ctx, long, gpus("node03")))
	waitFor(t, 20*time.Second, "the long job to run", func() bool {
		next()
		return count(engine.EventDevicesReported, long) == 1
	})
	before := b.Stats()
	require.NoError(t, b.BindGang(ctx, forger, gpus("node04")))
	waitFor(t, 30*time.Second, "the forger's end reported", func() bool {
		next()
		return count(engine.EventJobFinished, forger) == 1
	})
	// The forged line is in the end log, as a line of its own.
	buf, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(strings.Split(string(buf), "\n"), func(l string) bool { return strings.HasPrefix(l, forged) }),
		"slurmctld wrote the job name with its newline")
	// More cycles: polls and confirmations go on.
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		next()
	}
	after := b.Stats()
	assert.Greater(t, after.Confirms, before.Confirms, "the end log's IDs were confirmed")
	assert.Equal(t, 0, count(engine.EventJobFinished, long)+count(engine.EventJobCancelled, long), "the running job was never reported ended")
	assert.Equal(t, 1, count(engine.EventJobFinished, forger))
	assert.Equal(t, "RUNNING", showJob(t, conf, long).State)
	cmd(t, conf, "scancel", long)
	waitFor(t, 20*time.Second, "the long job's cancel reported", func() bool {
		next()
		return count(engine.EventJobCancelled, long) == 1
	})
	assert.Equal(t, 0, count(engine.EventJobFinished, long))
}
