package slurm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
)

// adminComment is what `scontrol show job` prints as a job's AdminComment
// (the whole line: the comment may hold spaces).
func adminComment(tb testing.TB, conf, id string) string {
	tb.Helper()
	for _, line := range strings.Split(cmd(tb, conf, "scontrol", "show", "job", id), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "AdminComment="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// squeueReason is the reason column of squeue for a job.
func squeueReason(tb testing.TB, conf, id string) string {
	tb.Helper()
	return cmd(tb, conf, "squeue", "-h", "-j", id, "-o", "%r")
}

// A job berth keeps waiting shows berth's reason where SLURM users look
// (scontrol show job: AdminComment); once bound, the reason is gone.
func TestIntegrationReasonsShown(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	rn := startRunner(t, conf, func(c *slurm.Config) { c.ReasonInterval = 200 * time.Millisecond })
	defer rn.stop(t)
	big := sbatch(t, conf, "-p", "berth", "-N", "16", "--gres=gpu:h100:8", "-t", "5", "--wrap", "sleep 300")
	waitFor(t, 30*time.Second, "the big gang to run", func() bool { return showJob(t, conf, big).State == "RUNNING" })
	waiting := sbatch(t, conf, "-p", "berth", "-N", "4", "--gres=gpu:h100:8", "-t", "5", "--wrap", "sleep 1")
	var ac string
	waitFor(t, 30*time.Second, "berth's reason in the waiting job's AdminComment", func() bool {
		ac = adminComment(t, conf, waiting)
		return strings.Contains(ac, "berth:waiting")
	})
	t.Logf("scontrol show job %s: AdminComment=%s (squeue reason %s)", waiting, ac, squeueReason(t, conf, waiting))
	assert.Contains(t, ac, "berth:from=berth", "the partition it came from is kept")
	_, why, _ := strings.Cut(ac, "berth:waiting")
	assert.NotEmpty(t, strings.TrimSpace(why), "the engine's reason follows the tag")
	cmd(t, conf, "scancel", big)
	waitFor(t, 30*time.Second, "the waiting job to run", func() bool {
		st := showJob(t, conf, waiting).State
		return st == "RUNNING" || st == "COMPLETED"
	})
	ac = adminComment(t, conf, waiting)
	assert.NotContains(t, ac, "berth:waiting", "the reason goes with the bind")
	assert.Positive(t, rn.b.Stats().Reasons)
}

// Jobs berth can never run are held (a user hold: their users may release
// them once fixed) with berth's reason: GPUs per job, a topology level the
// cluster does not have, an account whose queue the engine does not have.
// A fixed job, released, runs. Other jobs run meanwhile.
func TestIntegrationNeverRunnableHeld(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	rn := startRunner(t, conf, nil, func(r *run) { r.rejectSubmits = true })
	defer rn.stop(t)
	perJob := sbatch(t, conf, "-p", "berth", "-N", "1", "--gpus=2", "-t", "5", "--wrap", "sleep 1")
	level := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:h100:1", "--comment", "berth:required=galaxy", "-t", "5", "--wrap", "sleep 1")
	account := sbatch(t, conf, "-p", "berth", "-A", "nosuch", "-N", "1", "--gres=gpu:h100:1", "-t", "5", "--wrap", "sleep 1")
	good := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:h100:1", "-t", "5", "--wrap", "sleep 1")
	for _, c := range []struct{ id, want string }{
		{perJob, "--gpus"},
		{level, "galaxy"},
		{account, "nosuch"},
	} {
		var ac string
		waitFor(t, 30*time.Second, "job "+c.id+" held with berth's reason", func() bool {
			ac = adminComment(t, conf, c.id)
			return showJob(t, conf, c.id).Reason == "JobHeldUser" && strings.Contains(ac, "berth:rejected")
		})
		t.Logf("job %s: squeue reason %s, AdminComment=%s", c.id, squeueReason(t, conf, c.id), ac)
		assert.Contains(t, ac, c.want)
		assert.Equal(t, "PENDING", showJob(t, conf, c.id).State, "held, not cancelled")
		_, bound := rn.bound(c.id)
		assert.False(t, bound)
	}
	waitFor(t, 30*time.Second, "the good job to run", func() bool { return showJob(t, conf, good).State == "COMPLETED" })

	// Fixed and released by its user: berth reads it again and runs it.
	cmd(t, conf, "scontrol", "update", "JobId="+level, "Comment=berth:required=rack")
	cmd(t, conf, "scontrol", "release", level)
	waitFor(t, 30*time.Second, "the fixed job to run", func() bool {
		st := showJob(t, conf, level).State
		return st == "RUNNING" || st == "COMPLETED"
	})
	assert.GreaterOrEqual(t, rn.b.Stats().Rejects, 3)
}

// FIFO survives a restart: a job's submit time is SLURM's SubmitTime, not
// when berth first saw it. B is submitted before C but held; berth (a
// second Runner, after a restart) sees C first, and B only once released;
// B still starts first (both need the whole cluster, freed at once).
func TestIntegrationSubmitOrderSurvivesRestart(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	pending := func(rn *run, id string) bool {
		v := rn.r.View()
		return v != nil && slices.ContainsFunc(v.Pending, func(p engine.PendingStatus) bool { return p.Job == id })
	}
	rn := startRunner(t, conf, nil)
	a := sbatch(t, conf, "-p", "berth", "-N", "16", "--gres=gpu:h100:8", "-t", "5", "--wrap", "sleep 300")
	waitFor(t, 30*time.Second, "A to run", func() bool { return showJob(t, conf, a).State == "RUNNING" })
	b := sbatch(t, conf, "-H", "-p", "berth", "-N", "16", "--gres=gpu:h100:8", "-t", "5", "--wrap", "sleep 2")
	time.Sleep(1200 * time.Millisecond) // SubmitTime counts seconds
	c := sbatch(t, conf, "-p", "berth", "-N", "16", "--gres=gpu:h100:8", "-t", "5", "--wrap", "sleep 2")
	waitFor(t, 30*time.Second, "berth to see C", func() bool { return pending(rn, c) })
	rn.stop(t)

	rn2 := startRunner(t, conf, nil)
	defer rn2.stop(t)
	waitFor(t, 30*time.Second, "the new berth to see C", func() bool { return pending(rn2, c) })
	cmd(t, conf, "scontrol", "release", b)
	waitFor(t, 30*time.Second, "the new berth to see B", func() bool { return pending(rn2, b) })
	cmd(t, conf, "scancel", a)
	waitFor(t, 60*time.Second, "B and C to complete", func() bool {
		return showJob(t, conf, b).State == "COMPLETED" && showJob(t, conf, c).State == "COMPLETED"
	})
	sb, sc := startOf(t, conf, b), startOf(t, conf, c)
	t.Logf("B started %v, C %v", sb, sc)
	require.False(t, sb.IsZero() || sc.IsZero())
	assert.True(t, sb.Before(sc), "B, submitted first, starts first (B %v, C %v)", sb, sc)
}

// startOf is a job's StartTime as scontrol prints it.
func startOf(tb testing.TB, conf, id string) time.Time {
	tb.Helper()
	for _, f := range strings.Fields(cmd(tb, conf, "scontrol", "-o", "show", "job", id)) {
		if v, ok := strings.CutPrefix(f, "StartTime="); ok {
			t, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
			if err == nil {
				return t
			}
		}
	}
	return time.Time{}
}
