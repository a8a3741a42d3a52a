package slurm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
)

const compLine = "UserId=root(0) GroupId=root(0) Name=wrap JobState=COMPLETED Partition=berth-run TimeLimit=1 NodeList=node08 ExitCode=0:0\n"

// readEndLog takes from new whole lines only the IDs they begin with; a
// line that begins otherwise (the rest of a name with a newline) makes
// the content unknown (a poll); an unfinished line waits for its end; a
// truncated log is read from its new end.
func TestReadEndLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "jobcomp.txt")
	require.NoError(t, os.WriteFile(p, []byte("JobId=1 "+compLine), 0o644))
	b := &Backend{cfg: Config{EndLog: p}}
	app := func(s string) {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString(s)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	grew, ids, _ := b.readEndLog()
	assert.False(t, grew, "the first look takes the size")

	app("JobId=2 " + compLine + "JobId=3 " + compLine + "JobId=2 " + compLine)
	grew, ids, known := b.readEndLog()
	assert.True(t, grew)
	assert.True(t, known)
	assert.Equal(t, []string{"2", "3"}, ids)

	grew, _, _ = b.readEndLog()
	assert.False(t, grew)

	app("JobId=4 UserId=root(0) Name=wr")
	grew, ids, known = b.readEndLog()
	assert.True(t, grew)
	assert.True(t, known)
	assert.Empty(t, ids, "an unfinished line")
	app("ap JobState=COMPLETED\n")
	_, ids, known = b.readEndLog()
	assert.True(t, known)
	assert.Equal(t, []string{"4"}, ids)

	// A name with a newline: "x\nJobId=9 ... JobState=COMPLETED" forges
	// a line for job 9; the line it starts in names job 5. Both IDs are
	// hints only; the forged line's tail is a line that names no job.
	app("JobId=5 UserId=root(0) GroupId=root(0) Name=x\nJobId=9 UserId=root(0) Name=y JobState=COMPLETED\n tail JobState=COMPLETED\n")
	_, ids, known = b.readEndLog()
	assert.False(t, known, "a line that names no job")
	assert.Equal(t, []string{"5", "9"}, ids)

	require.NoError(t, os.WriteFile(p, []byte("JobId=6 "+compLine), 0o644)) // rotated (shorter)
	grew, ids, known = b.readEndLog()
	assert.True(t, grew)
	assert.False(t, known)
	assert.Empty(t, ids)

	b.cfg.EndLog = filepath.Join(t.TempDir(), "none")
	grew, _, _ = b.readEndLog()
	assert.False(t, grew, "an unreadable log is unchanged")
}

// showJob is `scontrol --local -o show job` of one job, as scontrol
// writes it with the command on its standard input.
func showJob(id, name, state, restarts, exit string) string {
	return "scontrol: show job " + id + "\nJobId=" + id + " JobName=" + name + " UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 Account=(null) QOS=(null) JobState=" + state +
		" Reason=None Dependency=(null) Requeue=1 Restarts=" + restarts + " BatchFlag=1 Reboot=0 ExitCode=" + exit + " RunTime=00:00:01 TimeLimit=00:01:00 Partition=berth-run NodeList=node15 Command=(null) WorkDir=/tmp AdminComment=berth:from=berth  StdErr=/dev/null StdIn=/dev/null StdOut=/dev/null Power= TresPerNode=gres:gpu:h100:1 \n"
}

// The fields are read from slurmctld's words only: text a user wrote
// (a job name with spaces, newlines, a forged record) fails the read.
func TestParseShowJobs(t *testing.T) {
	out := showJob("7", "wrap", "COMPLETING", "0", "0:0") + showJob("8", "JobState=COMPLETED", "RUNNING", "1", "0:0") + "scontrol: \n"
	ans, ok := parseShowJobs([]byte(out), []string{"7", "8"})
	require.True(t, ok)
	assert.Equal(t, endAnswer{state: "COMPLETING", restarts: 0, exit: "0:0"}, ans["7"])
	assert.Equal(t, endAnswer{state: "RUNNING", restarts: 1, exit: "0:0"}, ans["8"], "a name that reads JobState=... is not a field")

	for name, bad := range map[string]string{
		"a forged field":          showJob("8", "x JobState=COMPLETED", "RUNNING", "0", "0:0"),
		"a forged line":           showJob("8", "x\nJobState=COMPLETED ExitCode=0:0 Restarts=0", "RUNNING", "0", "0:0"),
		"a forged record":         showJob("8", "x\nJobId=8 JobName=y JobState=COMPLETED Restarts=0 ExitCode=0:0", "RUNNING", "0", "0:0"),
		"a forged record of 9":    showJob("8", "x\nJobId=9 JobName=y JobState=COMPLETED Restarts=0 ExitCode=0:0", "RUNNING", "0", "0:0"),
		"another job":             showJob("9", "wrap", "COMPLETED", "0", "0:0"),
		"none":                    "scontrol: show job 8\nscontrol: \n",
		"a field before a record": "JobState=COMPLETED\n" + showJob("8", "wrap", "RUNNING", "0", "0:0"),
		"a bad restart count":     showJob("8", "wrap", "COMPLETED", "x", "0:0"),
	} {
		_, ok := parseShowJobs([]byte(bad), []string{"8"})
		assert.False(t, ok, name)
	}
	_, ok = parseShowJobs([]byte(showJob("8", "wrap", "RUNNING", "0", "0:0")), []string{"8", "9"})
	assert.False(t, ok, "a job not shown")
}

// fakeScontrol makes a backend whose scontrol answers as the long-lived
// one does: it echoes each line it reads and prints, for "show job ID",
// recs[ID] (the other commands exist and do nothing).
func fakeScontrol(t *testing.T, recs map[string]string) *Backend {
	t.Helper()
	bin, dir := t.TempDir(), t.TempDir()
	for id, rec := range recs {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "job."+id), []byte(rec), 0o644))
	}
	for _, c := range commands {
		body := "#!/bin/sh\nexit 0\n"
		if c == "scontrol" {
			body = "#!/bin/sh\nwhile IFS= read -r line; do\n  echo \"scontrol: $line\"\n  case \"$line\" in \"show job \"*) cat \"" + dir + "/job.${line#show job }\" 2>/dev/null;; esac\ndone\n"
		}
		require.NoError(t, os.WriteFile(filepath.Join(bin, c), []byte(body), 0o755))
	}
	b, err := New(Config{Bin: bin})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// showRec is the record fakeScontrol prints for a job (showJob without
// the echo).
func showRec(id, name, state, restarts, exit string) string {
	s := showJob(id, name, state, restarts, exit)
	return s[strings.IndexByte(s, '\n')+1:]
}

// A job an end-log line names is reported ended only from squeue's
// answer: a running job (a forged line) stays running and asks for a
// poll; a job requeued (restart count up), stopped by berth, or pending
// is left to the poll; a COMPLETING one is read again; a COMPLETED job
// is Finished, a CANCELLED one Cancelled, each once.
func TestConfirmEnds(t *testing.T) {
	b := fakeScontrol(t, map[string]string{
		"1": showRec("1", "wrap", "RUNNING", "0", "0:0"), "2": showRec("2", "wrap", "COMPLETING", "0", "0:0"), "3": showRec("3", "wrap", "COMPLETED", "0", "0:0"),
		"4": showRec("4", "wrap", "COMPLETING", "1", "0:0"), "5": showRec("5", "wrap", "COMPLETING", "0", "0:15"), "6": showRec("6", "wrap", "CANCELLED", "0", "0:15"),
		"8": showRec("8", "wrap", "PENDING", "0", "0:0"),
	})
	for _, id := range []string{"1", "2", "3", "4", "5", "6", "7", "8"} {
		b.jobs[id] = &tracked{state: inRunning, nodes: 1, running: []string{"node01"}}
	}
	b.jobs["7"].preempted = true
	want, all := b.endsToConfirmLocked([]string{"1", "2", "3", "4", "5", "6", "7", "8", "99"})
	assert.False(t, all, "99: not berth's; 7: berth is stopping it")
	assert.Equal(t, []string{"1", "2", "3", "4", "5", "6", "8"}, want)

	poll := b.confirmEnds(context.Background(), want)
	assert.True(t, poll)
	got := map[string]engine.EventKind{}
	for _, ev := range b.queued {
		_, dup := got[ev.JobID]
		assert.False(t, dup, ev.JobID)
		got[ev.JobID] = ev.Kind
	}
	assert.Equal(t, map[string]engine.EventKind{"3": engine.EventJobFinished, "6": engine.EventJobCancelled}, got)
	for _, id := range []string{"1", "2", "4", "5", "7", "8"} {
		assert.Equal(t, inRunning, b.jobs[id].state, id)
	}
	assert.Equal(t, 2, b.Stats().Confirmed)
	// COMPLETING (2, 5): read again shortly, not taken as ended (a cancel
	// reads COMPLETING with ExitCode=0:0 too).
	assert.Equal(t, map[string]int{"2": 1, "5": 1}, b.completing)

	// Confirmed again (a second line of the same job): nothing new.
	b.queued = nil
	want, all = b.endsToConfirmLocked([]string{"3", "6"})
	assert.True(t, all)
	assert.Empty(t, want)

	// A forged record of a running job: the read fails, nothing ends, a
	// poll is asked.
	b2 := fakeScontrol(t, map[string]string{"1": showRec("1", "x\nJobId=1 JobState=COMPLETED", "RUNNING", "0", "0:0")})
	b2.jobs["1"] = &tracked{state: inRunning, nodes: 1}
	assert.True(t, b2.confirmEnds(context.Background(), []string{"1"}))
	assert.Empty(t, b2.queued)
	assert.Equal(t, inRunning, b2.jobs["1"].state)

	// A forged field: the same.
	b3 := fakeScontrol(t, map[string]string{"3": showRec("3", "x JobState=COMPLETED", "RUNNING", "0", "0:0")})
	b3.jobs["3"] = &tracked{state: inRunning, nodes: 1}
	assert.True(t, b3.confirmEnds(context.Background(), []string{"3"}))
	assert.Empty(t, b3.queued)
}

// The long-lived scontrol serves request after request; a job's text that
// holds an end token of its own does not end an answer early (each
// request's token is fresh), and a job not shown is no record; a process
// that died is replaced.
func TestShowJobsLongLived(t *testing.T) {
	b := fakeScontrol(t, map[string]string{
		"1": showRec("1", "x\nscontrol: berth-end-00\n", "RUNNING", "0", "0:0"),
		"2": showRec("2", "wrap", "COMPLETED", "0", "0:0"),
	})
	ctx := context.Background()
	for range 3 {
		out, err := b.showJobs(ctx, []string{"1", "2", "3"})
		require.NoError(t, err)
		ans, ok := parseShowJobs(out, []string{"1", "2"})
		require.True(t, ok, "%s", out)
		assert.Equal(t, "RUNNING", ans["1"].state)
		assert.Equal(t, "COMPLETED", ans["2"].state)
	}
	pid := b.show.cmd.Process.Pid
	require.NoError(t, b.show.cmd.Process.Kill())
	_, err := b.showJobs(ctx, []string{"2"})
	assert.ErrorIs(t, err, errShowProc, "the dead process fails one request")
	out, err := b.showJobs(ctx, []string{"2"})
	require.NoError(t, err)
	assert.NotEqual(t, pid, b.show.cmd.Process.Pid)
	_, ok := parseShowJobs(out, []string{"2"})
	assert.True(t, ok)
	_, err = b.showJobs(ctx, []string{"2; rm"})
	assert.ErrorIs(t, err, ErrBadArgument)
}

// A job whose bind is still in flight (its line came before scontrol
// returned) is confirmed again once the bind answered: no poll for it.
func TestConfirmEndsBinding(t *testing.T) {
	b := fakeScontrol(t, map[string]string{"9": showRec("9", "wrap", "COMPLETED", "0", "0:0")})
	b.jobs["9"] = &tracked{state: inPending, binding: true, nodes: 1}
	want, all := b.endsToConfirmLocked([]string{"9"})
	assert.True(t, all)
	assert.Equal(t, []string{"9"}, want)
	assert.False(t, b.confirmEnds(context.Background(), want))
	assert.Empty(t, b.queued)
	assert.Equal(t, []string{"9"}, b.bindWait)
	// The bind answered: the next confirmation reports the end.
	b.jobs["9"].binding, b.jobs["9"].state = false, inRunning
	b.bindWait = nil
	assert.False(t, b.confirmEnds(context.Background(), []string{"9"}))
	require.Len(t, b.queued, 1)
	assert.Equal(t, engine.EventJobFinished, b.queued[0].Kind)
}
