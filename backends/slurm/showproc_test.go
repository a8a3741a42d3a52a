package slurm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/berthsched/berth/backends"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeUpdater is a Backend whose scontrol reads commands as the real one
// does: it echoes each line on its standard output, an update of job 9
// or 8 fails with scontrol's messages on its standard error (one line and
// two), another update succeeds silently, any other line is an invalid
// keyword. Run with arguments other than the long-lived process's, it
// appends them to the file alone.log and fails for job 9.
func fakeUpdater(t *testing.T) (*Backend, string) {
	t.Helper()
	bin := t.TempDir()
	alone := filepath.Join(bin, "alone.log")
	for _, c := range commands {
		body := "#!/bin/sh\nexit 0\n"
		if c == "scontrol" {
			body = `#!/bin/sh
if [ "$1" != "--local" ]; then
  echo "$*" >> ` + alone + `
  case "$*" in *JobId=9*) echo "Invalid job id specified" >&2; exit 1;; esac
  exit 0
fi
while IFS= read -r line; do
  echo "scontrol: $line"
  case "$line" in
  "update JobId=9 "*) echo "Invalid job id specified for job 9" >&2;;
  "update JobId=8 "*) echo "Invalid input: b" >&2; echo "Request aborted" >&2;;
  "update "*) ;;
  *) echo "invalid keyword: $line" >&2;;
  esac
done
`
		}
		require.NoError(t, os.WriteFile(filepath.Join(bin, c), []byte(body), 0o755))
	}
	b, err := New(Config{Bin: bin})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, alone
}

// The long-lived update process answers each update of a request: ""
// when scontrol printed nothing about it, its error lines otherwise,
// never another update's and never the complaint about an end token
// (of this request, or the one the last request left in the pipe).
func TestUpdatesLongLived(t *testing.T) {
	b, _ := fakeUpdater(t)
	ctx := context.Background()
	cmds := []string{"update JobId=1 StartTime=now", "update JobId=9 StartTime=now", "update JobId=2 StartTime=now", "update JobId=8 AdminComment=a b"}
	for range 3 {
		texts, err := b.updates(ctx, cmds)
		require.NoError(t, err)
		assert.Equal(t, []string{"", "Invalid job id specified for job 9", "", "Invalid input: b; Request aborted"}, texts)
	}
	texts, err := b.updates(ctx, cmds[:1])
	require.NoError(t, err)
	assert.Equal(t, []string{""}, texts)

	pid := b.upd.cmd.Process.Pid
	require.NoError(t, b.upd.cmd.Process.Kill())
	_, err = b.updates(ctx, cmds)
	assert.ErrorIs(t, err, errShowProc, "the dead process fails one request")
	texts, err = b.updates(ctx, cmds[1:2])
	require.NoError(t, err)
	assert.NotEqual(t, pid, b.upd.cmd.Process.Pid)
	assert.Equal(t, []string{"Invalid job id specified for job 9"}, texts)

	_, err = b.updates(ctx, []string{"update JobId=1 StartTime=now\nshutdown"})
	assert.ErrorIs(t, err, ErrBadArgument)
}

// A batch of binds on the long-lived process: a clean update answers its
// bind at once; a failed one is resolved from squeue (here: not moved,
// so run alone, whose exit status answers).
func TestRunBatchAnswersEach(t *testing.T) {
	b, alone := fakeUpdater(t)
	ok := &bindReq{job: "1", args: []string{"update", "JobId=1", "StartTime=now"}, done: make(chan error, 1)}
	bad := &bindReq{job: "9", args: []string{"update", "JobId=9", "StartTime=now"}, done: make(chan error, 1)}
	b.runBatch(context.Background(), []*bindReq{ok, bad})
	assert.NoError(t, <-ok.done)
	err := <-bad.done
	assert.ErrorIs(t, err, backends.ErrRefused)
	assert.ErrorContains(t, err, "Invalid job id specified")
	log, rerr := os.ReadFile(alone)
	require.NoError(t, rerr)
	assert.Equal(t, "update JobId=9 StartTime=now\n", string(log), "only the failed update runs again, alone")
	st := b.Stats()
	assert.Equal(t, 1, st.Batches)
	assert.Equal(t, 1, st.BatchFails)
}
