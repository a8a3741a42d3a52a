package nvml_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

func member(gpus ...int) engine.Member { return engine.Member{Node: "box", GPUs: gpus} }

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// A job's members see their GPUs' UUIDs; output, exit status and the end
// land in files and events.
func TestLaunchCompletes(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("ok", 1, 2), sh(`echo "devices=$CUDA_VISIBLE_DEVICES job=$BERTH_JOB_ID member=$BERTH_MEMBER"; echo oops >&2; sleep 0.2`))
	require.NoError(t, f.b.BindMember(context.Background(), "ok", member(2, 3)))
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonCompleted, e.Reason)
	assert.Equal(t, 0, e.Code)
	devs := f.b.Devices()
	want := devs[2].UUID + "," + devs[3].UUID
	assert.Equal(t, want, e.Visible)
	assert.Equal(t, "devices="+want+" job=ok member=0\n", readFile(t, e.Stdout))
	assert.Equal(t, "oops\n", readFile(t, e.Stderr))
	var rec nvml.Exit
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(f.dir, "ok", "run-1", "member-0.exit"))), &rec))
	assert.Equal(t, "completed", rec.Reason)
	assert.Equal(t, []int{2, 3}, rec.GPUs)
	evs := f.eventsUntil(t, engine.EventJobFinished, "ok")
	assert.Equal(t, []string{"job-finished:ok"}, kinds(evs))
}

func TestLaunchNonZeroExit(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("bad", 1, 1), sh("exit 3"))
	require.NoError(t, f.b.BindMember(context.Background(), "bad", member(0)))
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonFailed, e.Reason)
	assert.Equal(t, 3, e.Code)
	f.eventsUntil(t, engine.EventJobFinished, "bad")
}

func TestLaunchStartFailure(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("nope", 1, 1), nvml.Command{Args: []string{"/nonexistent/program"}})
	require.NoError(t, f.b.BindMember(context.Background(), "nope", member(0)), "not a refusal: the engine would retry forever")
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonStartFailed, e.Reason)
	assert.Contains(t, e.Error, "/nonexistent/program")
	f.eventsUntil(t, engine.EventJobFinished, "nope")
}

// pidsAlive reports which of the pids in file are still running (zombies
// count as gone).
func pidsAlive(t *testing.T, file string) []int {
	t.Helper()
	var alive []int
	for _, s := range strings.Fields(readFile(t, file)) {
		pid, err := strconv.Atoi(s)
		require.NoError(t, err)
		stat, err := os.ReadFile("/proc/" + s + "/stat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] != "Z" {
			alive = append(alive, pid)
		}
	}
	return alive
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, path+" written", func() bool {
		data, err := os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(data), "\n") && strings.Count(string(data), "\n") >= 2
	})
}

// Preemption: SIGTERM, then SIGKILL of the whole process group at the
// deadline, for a process that ignores SIGTERM and for the children a job
// forked. The job is not reported finished (the engine requeues it).
func TestPreemptKillsIgnorerAndChildren(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	pids := filepath.Join(t.TempDir(), "pids")
	f.submit(t, job("stubborn", 1, 1), sh(`trap "" TERM; sleep 60 & echo $! >> `+pids+`; sleep 60 & echo $! >> `+pids+`; wait`))
	require.NoError(t, f.b.BindMember(context.Background(), "stubborn", member(5)))
	waitFile(t, pids)
	require.Len(t, pidsAlive(t, pids), 2)
	require.NoError(t, f.b.Preempt(context.Background(), engine.Preemption{Victim: "stubborn", Deadline: time.Now().Add(300 * time.Millisecond)}))
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonPreempted, e.Reason)
	assert.Equal(t, "killed", e.Signal, "SIGTERM was ignored: SIGKILL at the deadline")
	assert.Equal(t, -1, e.Code)
	waitFor(t, "forked children killed with the group", func() bool { return len(pidsAlive(t, pids)) == 0 })
	assert.Empty(t, f.events(t, 200*time.Millisecond), "a preempted job is not reported finished")
	// Preempting it again is refused: it is not running.
	err := f.b.Preempt(context.Background(), engine.Preemption{Victim: "stubborn", Deadline: time.Now()})
	require.ErrorIs(t, err, backends.ErrRefused)
	// The engine requeues and binds it again: a new run.
	require.NoError(t, f.b.BindMember(context.Background(), "stubborn", member(5)))
	require.NoError(t, f.b.Preempt(context.Background(), engine.Preemption{Victim: "stubborn", Deadline: time.Now()}))
	e = f.exits.next(t)
	assert.Equal(t, 2, e.Run)
}

// A process that stops on SIGTERM ends before the deadline.
func TestPreemptGraceful(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("polite", 1, 1), nvml.Command{Args: []string{"sleep", "60"}})
	require.NoError(t, f.b.BindMember(context.Background(), "polite", member(1)))
	require.NoError(t, f.b.Preempt(context.Background(), engine.Preemption{Victim: "polite", Deadline: time.Now().Add(time.Minute)}))
	e := f.exits.next(t)
	assert.Equal(t, "terminated", e.Signal)
	assert.Equal(t, nvml.ReasonPreempted, e.Reason)
}

func TestRuntimeLimit(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	j := job("long", 1, 1)
	j.RuntimeLimit = 300 * time.Millisecond
	f.submit(t, j, nvml.Command{Args: []string{"sleep", "60"}})
	require.NoError(t, f.b.BindMember(context.Background(), "long", member(0)))
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonLimit, e.Reason)
	assert.Equal(t, "terminated", e.Signal)
	f.eventsUntil(t, engine.EventJobFinished, "long")
}

// One member of a gang fails: the others are stopped, and the job ends
// once, when the last has exited.
func TestGangMemberFailureStopsTheOthers(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("gang", 2, 2), sh(`if [ "$BERTH_MEMBER" = 1 ]; then sleep 0.3; exit 7; fi; sleep 60`))
	require.NoError(t, f.b.BindMember(context.Background(), "gang", member(0, 1)))
	require.NoError(t, f.b.BindMember(context.Background(), "gang", member(2, 3)))
	first, second := f.exits.next(t), f.exits.next(t)
	assert.Equal(t, 1, first.Member)
	assert.Equal(t, 7, first.Code)
	assert.Equal(t, nvml.ReasonFailed, first.Reason)
	assert.Equal(t, 0, second.Member)
	assert.Equal(t, nvml.ReasonGangFailed, second.Reason)
	evs := f.eventsUntil(t, engine.EventJobFinished, "gang")
	assert.Equal(t, []string{"job-finished:gang"}, kinds(evs))
	assert.Empty(t, f.events(t, 100*time.Millisecond))
}

// A gang rolled back by the Runner: its members are killed, no event.
func TestUnbindRollsBack(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("half", 2, 1), nvml.Command{Args: []string{"sleep", "60"}})
	require.NoError(t, f.b.BindMember(context.Background(), "half", member(0)))
	err := f.b.BindMember(context.Background(), "half", member(0))
	require.NoError(t, err, "binding the same member twice is a no-op")
	err = f.b.BindMember(context.Background(), "other", member(1))
	require.ErrorIs(t, err, backends.ErrRefused, "unknown job")
	require.NoError(t, f.b.UnbindMember(context.Background(), "half", member(0)))
	e := f.exits.next(t)
	assert.Equal(t, "rolled-back", e.Reason)
	assert.Empty(t, f.events(t, 200*time.Millisecond))
	// The GPU is free again.
	f.submit(t, job("next", 1, 1), nvml.Command{Args: []string{"true"}})
	require.NoError(t, f.b.BindMember(context.Background(), "next", member(0)))
	f.eventsUntil(t, engine.EventJobFinished, "next")
}

// A member exits before the rest of its gang is bound, and the gang is
// then rolled back: the Finished event queued for it is taken back (the
// engine has the job pending again).
func TestRollbackAfterQuickExitTakesFinishedBack(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("quick", 2, 1), nvml.Command{Args: []string{"true"}})
	require.NoError(t, f.b.BindMember(context.Background(), "quick", member(0)))
	f.exits.next(t)
	require.NoError(t, f.b.UnbindMember(context.Background(), "quick", member(0)))
	assert.Empty(t, f.events(t, 200*time.Millisecond))
	require.NoError(t, f.b.BindMember(context.Background(), "quick", member(0)))
	require.NoError(t, f.b.BindMember(context.Background(), "quick", member(1)))
	f.exits.next(t)
	f.exits.next(t)
	evs := f.eventsUntil(t, engine.EventJobFinished, "quick")
	assert.Equal(t, []string{"job-finished:quick"}, kinds(evs))
}

func TestBindRefusals(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	f.submit(t, job("a", 1, 1), nvml.Command{Args: []string{"sleep", "60"}})
	f.submit(t, job("b", 1, 1), nvml.Command{Args: []string{"sleep", "60"}})
	ctx := context.Background()
	require.NoError(t, f.b.BindMember(ctx, "a", member(4)))
	for name, m := range map[string]engine.Member{
		"GPU in use":   member(4),
		"no such GPU":  member(8),
		"other node":   {Node: "elsewhere", GPUs: []int{0}},
		"no GPUs":      {Node: "box"},
		"MIG on plain": {Node: "box", GPUs: []int{0}, Fractional: true},
	} {
		assert.ErrorIs(t, f.b.BindMember(ctx, "b", m), backends.ErrRefused, name)
	}
	require.NoError(t, f.b.Cancel(ctx, "a"))
	assert.Equal(t, reasonOf(f.exits.next(t)), "cancelled")
	assert.Equal(t, []string{"job-cancelled:a"}, kinds(f.events(t, 100*time.Millisecond)))
}

func reasonOf(e nvml.Exit) string { return e.Reason }

func TestSubmitValidates(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	ctx := context.Background()
	assert.ErrorIs(t, f.b.Submit(ctx, nil, sh("true")), nvml.ErrInvalid)
	assert.ErrorIs(t, f.b.Submit(ctx, job("../etc", 1, 1), sh("true")), nvml.ErrInvalid)
	assert.ErrorIs(t, f.b.Submit(ctx, job("x", 1, 1), nvml.Command{}), nvml.ErrInvalid)
	require.NoError(t, f.b.Submit(ctx, job("x", 1, 1), sh("true")))
	assert.ErrorIs(t, f.b.Submit(ctx, job("x", 1, 1), sh("true")), nvml.ErrDuplicateJob)
	j := job("y", 1, 1)
	j.Queue = "nope"
	err := f.b.Submit(ctx, j, sh("true"))
	assert.ErrorIs(t, err, nvml.ErrInvalid)
	assert.ErrorIs(t, err, queue.ErrUnknownQueue)
	j = job("z", 0, 1)
	assert.ErrorIs(t, f.b.Submit(ctx, j, sh("true")), nvml.ErrInvalid)
}

// A GPU whose job is being stopped is busy (the Runner retries), not
// refused; once the processes are gone it binds.
func TestBindOnStoppingGPUIsBusy(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	ctx := context.Background()
	f.submit(t, job("old", 1, 1), sh(`trap "" TERM; sleep 60`))
	f.submit(t, job("new", 1, 1), nvml.Command{Args: []string{"true"}})
	require.NoError(t, f.b.BindMember(ctx, "old", member(3)))
	err := f.b.BindMember(ctx, "new", member(3))
	require.ErrorIs(t, err, backends.ErrRefused, "a running job's GPU")
	require.NoError(t, f.b.Preempt(ctx, engine.Preemption{Victim: "old", Deadline: time.Now().Add(time.Second)}))
	err = f.b.BindMember(ctx, "new", member(3))
	require.ErrorIs(t, err, nvml.ErrBusy)
	assert.NotErrorIs(t, err, backends.ErrRefused)
	assert.Equal(t, nvml.ReasonPreempted, f.exits.next(t).Reason)
	require.NoError(t, f.b.BindMember(ctx, "new", member(3)))
	f.eventsUntil(t, engine.EventJobFinished, "new")
}
