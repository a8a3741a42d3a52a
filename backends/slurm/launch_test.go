package slurm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

func TestLaunchConfigValidation(t *testing.T) {
	_, err := slurm.New(slurm.Config{LaunchPartition: "nope"})
	require.ErrorIs(t, err, slurm.ErrInvalidConfig)
	_, err = slurm.New(slurm.Config{Scripts: map[string]string{"x": "sleep 1"}})
	require.ErrorIs(t, err, slurm.ErrInvalidConfig)
}

// events collects a backend's events on its own goroutine.
type events struct {
	mu  sync.Mutex
	evs []engine.Event
}

// collect appends b's events until ctx is done or Next fails.
func (e *events) collect(ctx context.Context, b *slurm.Backend) {
	go func() {
		for ctx.Err() == nil {
			evs, err := b.Next(ctx, time.Time{})
			if err != nil {
				return
			}
			e.mu.Lock()
			e.evs = append(e.evs, evs...)
			e.mu.Unlock()
		}
	}()
}

func (e *events) of(job string) []engine.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []engine.EventKind
	for _, ev := range e.evs {
		id := ev.JobID
		if ev.Job != nil {
			id = ev.Job.ID
		}
		if id == job {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// A job launched for a federation becomes a held SLURM job in the managed
// partition, is bound on the nodes berth chose, runs there with its
// BERTH_ environment, and ends; its events carry berth's ID, never its
// submission. A withdrawn job is cancelled in SLURM without an event.
func TestIntegrationLaunchJob(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	bc := backendConfig(conf, t)
	bc.Scripts = map[string]string{"report": "#!/bin/sh\necho \"$BERTH_JOB_ID $BERTH_QUEUE $SLURMD_NODENAME\" > " + dir + "/out.$SLURMD_NODENAME\nsleep 2\n"}
	b, err := slurm.New(bc)
	require.NoError(t, err)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = b.Cluster(ctx)
	require.NoError(t, err)
	var ev events
	ev.collect(ctx, b)

	job := func(id, name string, members, gpus int) *queue.Job {
		return &queue.Job{ID: id, Queue: "train", Name: name, Submit: time.Now(), RuntimeEstimate: 3 * time.Second,
			RuntimeLimit: 2 * time.Minute,
			Request:      gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: gpus, GPUModel: "h100"}}}}
	}
	// Refused: an ID SLURM would confuse with its own, two groups, MIG.
	require.ErrorIs(t, b.LaunchJob(ctx, job("123", "", 1, 1)), backends.ErrRefused)
	two := job("fed-two", "", 1, 1)
	two.Request.Groups = append(two.Request.Groups, gang.Group{Members: 1, GPUsPerMember: 1})
	require.ErrorIs(t, b.LaunchJob(ctx, two), backends.ErrRefused)

	j := job("fed-train-1", "report", 2, 4)
	require.NoError(t, b.LaunchJob(ctx, j))
	sid, ok := b.SlurmJobID(j.ID)
	require.True(t, ok)
	require.NoError(t, b.LaunchJob(ctx, j), "idempotent")
	sid2, _ := b.SlurmJobID(j.ID)
	assert.Equal(t, sid, sid2, "launched once")
	assert.Len(t, strings.Fields(cmd(t, conf, "squeue", "-h", "-n", "report", "-o", "%i")), 1, "one SLURM job")
	ji := showJob(t, conf, sid)
	assert.Equal(t, "PENDING", ji.State)
	assert.Equal(t, "berth", ji.Partition)
	assert.Equal(t, "JobHeldUser", ji.Reason)
	time.Sleep(3 * bc.PollInterval) // polls see the held job
	assert.Empty(t, ev.of(j.ID), "a launched job is not reported submitted")
	assert.Empty(t, ev.of(sid))

	ms := []engine.Member{{Node: "node03", GPUs: []int{0, 1, 2, 3}}, {Node: "node04", GPUs: []int{0, 1, 2, 3}}}
	require.NoError(t, b.BindGang(ctx, j.ID, ms))
	waitFor(t, 20*time.Second, "the launched job to run", func() bool {
		st := showJob(t, conf, sid).State
		return st == "RUNNING" || st == "COMPLETED"
	})
	ji = showJob(t, conf, sid)
	assert.Equal(t, "berth-run", ji.Partition)
	assert.ElementsMatch(t, []string{"node03", "node04"}, hostnames(t, conf, ji.NodeList))
	waitFor(t, 30*time.Second, "the launched job to end", func() bool {
		return slicesHas(ev.of(j.ID), engine.EventJobFinished)
	})
	assert.Equal(t, []engine.EventKind{engine.EventDevicesReported, engine.EventJobFinished}, ev.of(j.ID))
	assert.Empty(t, ev.of(sid), "events carry berth's ID")
	assert.Equal(t, "COMPLETED", showJob(t, conf, sid).State)
	// The batch script ran on the first node, with berth's environment.
	out, err := os.ReadFile(filepath.Join(dir, "out.node03"))
	require.NoError(t, err)
	assert.Equal(t, "fed-train-1 train node03", strings.TrimSpace(string(out)))

	// Withdraw: cancelled in SLURM, no event, not bindable; launched again
	// it is a new SLURM job.
	w := job("fed-withdrawn", "", 1, 8)
	require.NoError(t, b.LaunchJob(ctx, w))
	wsid, _ := b.SlurmJobID(w.ID)
	require.NoError(t, b.WithdrawJob(ctx, w.ID))
	require.NoError(t, b.WithdrawJob(ctx, w.ID), "a second withdraw is a no-op")
	_, ok = b.SlurmJobID(w.ID)
	assert.False(t, ok)
	waitFor(t, 10*time.Second, "the withdrawn job to be cancelled", func() bool {
		return showJob(t, conf, wsid).State == "CANCELLED"
	})
	require.ErrorIs(t, b.BindGang(ctx, w.ID, []engine.Member{{Node: "node05", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}), backends.ErrRefused)
	require.NoError(t, b.LaunchJob(ctx, w))
	wsid2, _ := b.SlurmJobID(w.ID)
	assert.NotEqual(t, wsid, wsid2)
	require.NoError(t, b.WithdrawJob(ctx, w.ID))
	time.Sleep(3 * bc.PollInterval)
	assert.Empty(t, ev.of(w.ID), "a withdrawn job has no events")
	assert.Empty(t, ev.of(wsid))
	assert.Empty(t, ev.of(wsid2))
}

func slicesHas(ks []engine.EventKind, k engine.EventKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}
