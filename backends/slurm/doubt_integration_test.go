package slurm_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
)

// lostAnswers makes a directory of SLURM's commands for Config.Bin: the
// real ones, except that while dir/fail exists a batch of binds (scontrol
// reading its standard input) is applied and then answers an error, as a
// controller whose answer was lost does, and the batch's own check of
// which binds came through (squeue -j ... -o %i|%P|%n|%x) fails too. The
// bind is then in doubt: applied, and the backend cannot tell.
func lostAnswers(t *testing.T) string {
	return wrappedCommands(t, map[string]string{
		"scontrol": `#!/bin/bash
if [ $# -eq 0 ] && [ -e %[1]q/fail ]; then
	%[2]s
	echo "slurm_update error: Socket timed out on send/recv operation" >&2
	exit 1
fi
exec %[2]s "$@"
`,
		"squeue": `#!/bin/bash
if [ -e %[1]q/fail ] && [[ " $* " == *" %%i|%%P|%%n|%%x "* ]]; then
	echo "squeue: error: Socket timed out on send/recv operation" >&2
	exit 1
fi
exec %[2]s "$@"
`,
	})
}

// bindInDoubt binds job to m through a controller whose answer is lost:
// the bind is applied, BindGang answers an error that is no refusal.
func bindInDoubt(ctx context.Context, t *testing.T, b *slurm.Backend, bin, job string, m []engine.Member) {
	t.Helper()
	flag := filepath.Join(bin, "fail")
	require.NoError(t, os.WriteFile(flag, nil, 0o644))
	err := b.BindGang(ctx, job, m)
	require.NoError(t, os.Remove(flag))
	require.Error(t, err, "the answer was lost")
	require.NotErrorIs(t, err, backends.ErrRefused, "a lost answer is no refusal")
}

// Issue 31 (late results reconciled) on SLURM: a bind whose answer is lost
// (BindGang fails with an error that is no refusal, yet the update was
// applied) is in doubt: the Runner holds it unknown and asks RunningNow.
// Whatever it decides, SLURM must never run the job without berth
// accounting for it.
func TestIntegrationBindInDoubt(t *testing.T) {
	conf := slurmConf(t)
	setup := func(t *testing.T, script string, args ...string) (*slurm.Backend, context.Context, string, string, *events) {
		bin := lostAnswers(t)
		_, b, ctx := wrappedBackend(t, bin)
		ev := &events{}
		id := sbatch(t, conf, append([]string{"-p", "berth", "-N", "1", "--gres=gpu:h100:1", "-t", "1", "--wrap", script}, args...)...)
		waitFor(t, 30*time.Second, "the job submitted", func() bool {
			ev.nextOnce(ctx, t, b)
			return slices.Contains(ev.of(id), engine.EventJobSubmitted)
		})
		return b, ctx, bin, id, ev
	}
	running := func(t *testing.T, id string) func() bool {
		return func() bool { return showJob(t, conf, id).State == "RUNNING" }
	}
	endOf := func(t *testing.T, ev *events, id string) engine.EventKind {
		t.Helper()
		var end engine.EventKind
		waitFor(t, 60*time.Second, "the job's end reported", func() bool {
			for _, k := range ev.of(id) {
				if k == engine.EventJobFinished || k == engine.EventJobCancelled {
					end = k
					return true
				}
			}
			return false
		})
		return end
	}

	// Adopted: the Runner finds it running on its members (RunningNow)
	// and adopts it. The backend must follow: its GPU indices reported,
	// its end a Finished (it was reported Cancelled: the backend still
	// had it pending), and no poll stopping it as a ghost.
	t.Run("adopted", func(t *testing.T) {
		b, ctx, bin, id, ev := setup(t, "sleep 3")
		m := []engine.Member{{Node: "node04", GPUs: []int{0}}}
		bindInDoubt(ctx, t, b, bin, id, m)
		waitFor(t, 30*time.Second, "SLURM to start it", running(t, id))
		ev.collect(ctx, b)
		rs, err := b.RunningNow(ctx)
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(rs, func(r backends.RunningJob) bool { return r.Job.ID == id }), "RunningNow lists it")
		assert.Equal(t, engine.EventJobFinished, endOf(t, ev, id), "events %v", ev.of(id))
		assert.Contains(t, ev.of(id), engine.EventDevicesReported, "its GPU indices")
		ji := showJob(t, conf, id)
		assert.Equal(t, "COMPLETED", ji.State)
		assert.Equal(t, 0, ji.Restarts, "not stopped as a ghost")
		assert.Equal(t, []string{"node04"}, hostnames(t, conf, ji.NodeList))
	})

	// Given up after SLURM started it: the Runner's RunningNow read before
	// the start, so it stops the bind (UnbindMember). UnbindMember was a
	// no-op for a job the backend had pending: the Runner failed the bind
	// and the job ran unseen (a ghost). Now it answers an error that is no
	// refusal: the Runner keeps the bind unknown, finds the job running
	// (RunningNow) and adopts it; the job runs once, and its end is
	// reported.
	t.Run("given up, started", func(t *testing.T) {
		b, ctx, bin, id, ev := setup(t, "sleep 2")
		m := []engine.Member{{Node: "node05", GPUs: []int{0}}}
		bindInDoubt(ctx, t, b, bin, id, m)
		waitFor(t, 30*time.Second, "SLURM to start it", running(t, id))
		err := b.UnbindMember(ctx, id, m[0])
		require.Error(t, err, "it runs")
		require.NotErrorIs(t, err, backends.ErrRefused, "the Runner asks again")
		rs, err := b.RunningNow(ctx)
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(rs, func(r backends.RunningJob) bool { return r.Job.ID == id }), "RunningNow lists it")
		ev.collect(ctx, b)
		assert.Equal(t, engine.EventJobFinished, endOf(t, ev, id), "events %v", ev.of(id))
		ji := showJob(t, conf, id)
		assert.Equal(t, "COMPLETED", ji.State)
		assert.Equal(t, 0, ji.Restarts, "ran once")
		assert.Equal(t, []string{"node05"}, hostnames(t, conf, ji.NodeList))
	})

	// Given up before SLURM could start it (its node drained: it waits in
	// the run partition): moved back, it never starts there.
	t.Run("given up, waiting", func(t *testing.T) {
		b, ctx, bin, id, ev := setup(t, "sleep 1")
		cmd(t, conf, "scontrol", "update", "NodeName=node03", "State=DRAIN", "Reason=berth-test")
		t.Cleanup(func() { _, _ = cmdErr(conf, "scontrol", "update", "NodeName=node03", "State=RESUME") })
		m := []engine.Member{{Node: "node03", GPUs: []int{0}}}
		bindInDoubt(ctx, t, b, bin, id, m)
		require.Equal(t, "berth-run", showJob(t, conf, id).Partition, "the bind was applied")
		require.NoError(t, b.UnbindMember(ctx, id, m[0]))
		cmd(t, conf, "scontrol", "update", "NodeName=node03", "State=RESUME")
		ev.collect(ctx, b)
		time.Sleep(2 * time.Second)
		ji := showJob(t, conf, id)
		assert.Equal(t, "berth", ji.Partition, "handed back")
		assert.Equal(t, "PENDING", ji.State)
		assert.Equal(t, []engine.EventKind{engine.EventJobSubmitted}, ev.of(id), "the engine has it pending all along")
		require.NoError(t, b.BindGang(ctx, id, []engine.Member{{Node: "node08", GPUs: []int{0}}}))
		assert.Equal(t, engine.EventJobFinished, endOf(t, ev, id), "events %v", ev.of(id))
		assert.Equal(t, []string{"node08"}, hostnames(t, conf, showJob(t, conf, id).NodeList))
	})
}
