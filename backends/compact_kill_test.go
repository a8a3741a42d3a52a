package backends_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// compactChildEnv names the state file of TestCompactKillChild.
const compactChildEnv = "BERTH_COMPACT_CHILD_STATE"

// TestCompactKill kills (SIGKILL) a process that compacts its journal and
// saves it to a FileStore in a loop, at random points, 40 times, and
// restarts it each time. After every kill the state file loads and
// restores, and holds every job of the last save the child reported
// (each job submitted stays live: none ends), and no job it never
// submitted: a kill during a compaction loses nothing.
func TestCompactKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 test: not in -short")
	}
	state := filepath.Join(t.TempDir(), "berth.state")
	store := backends.FileStore{Path: state}
	rng := rand.New(rand.NewPCG(31, 5))
	acked, midSave, compacted := 0, 0, 0
	const kills = 40
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCompactKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), compactChildEnv+"="+state)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		lines := make(chan int, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "saved "); ok {
					if v, err := strconv.Atoi(n); err == nil {
						lines <- v
					}
				}
			}
			close(lines)
		}()
		// Kill at a random point once the child has restored and saved
		// once (a slow start, e.g. under -race, does not end every run
		// before its first save).
		select {
		case v, ok := <-lines:
			if ok {
				acked = max(acked, v)
			}
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("kill %d: the child saved nothing in 2 minutes:\n%s", k, stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		_ = cmd.Process.Kill()
		for v := range lines {
			acked = max(acked, v)
		}
		werr := cmd.Wait()
		if werr == nil {
			t.Fatalf("kill %d: the child ended on its own:\n%s", k, stderr.String())
		}
		if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(state), ".berth.state.tmp-*")); len(tmps) > 0 {
			midSave++
			for _, p := range tmps {
				_ = os.Remove(p)
			}
		}
		st, err := store.Load(context.Background())
		require.NoError(t, err, "kill %d: the state loads", k)
		if st == nil {
			require.Zero(t, acked, "kill %d: no state file after a save was reported", k)
			continue
		}
		if st.Snapshot != nil {
			compacted++
		}
		e, err := engine.Restore(compactChildConfig(), st)
		require.NoError(t, err, "kill %d: the state restores", k)
		pending, running := e.JobIDs()
		n := len(pending) + len(running)
		require.GreaterOrEqual(t, n, acked, "kill %d: every job of the last save is there", k)
		have := map[string]bool{}
		for _, id := range append(pending, running...) {
			have[id] = true
		}
		for i := range n {
			if !have[compactJobID(i)] {
				t.Fatalf("kill %d: job %s lost (%d jobs restored, %d acknowledged)", k, compactJobID(i), n, acked)
			}
		}
		acked = n // the next run starts from here
	}
	t.Logf("%d kills: %d during a save (temporary file left), %d states compacted; %d jobs at the end", kills, midSave, compacted, acked)
	assert.Positive(t, midSave, "some kills landed during a save")
	assert.Positive(t, compacted, "the child compacted")
}

func compactJobID(i int) string { return fmt.Sprintf("j%06d", i) }

func compactChildConfig() engine.Config {
	return engine.Config{
		Cluster: topo.Uniform(nil, nil, 4, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
		Policy:  queue.StrictPriority(),
		Start:   t0,
	}
}

// TestCompactKillChild is the process TestCompactKill kills: it restores
// the engine from the state file (or starts one), then for ever submits a
// job, runs a cycle, and every few cycles compacts the journal and saves
// it, printing "saved N" once N jobs are safely on disk.
func TestCompactKillChild(t *testing.T) {
	state := os.Getenv(compactChildEnv)
	if state == "" {
		t.Skip("the child of TestCompactKill")
	}
	ctx := context.Background()
	store := backends.FileStore{Path: state}
	st, err := store.Load(ctx)
	require.NoError(t, err)
	var e *engine.Engine
	if st == nil {
		e, err = engine.New(compactChildConfig())
		require.NoError(t, err)
		require.NoError(t, e.EnableJournal())
	} else {
		e, err = engine.Restore(compactChildConfig(), st)
		require.NoError(t, err)
	}
	pending, running := e.JobIDs()
	next := len(pending) + len(running)
	rng := rand.New(rand.NewPCG(uint64(next), 9))
	for i := 0; ; i++ {
		now := e.Now().Add(time.Minute)
		if next < 3000 {
			require.NoError(t, e.Step(engine.Submitted(now, job(compactJobID(next), 1, 1+rng.IntN(4)))))
			next++
		} else {
			require.NoError(t, e.Step(engine.Tick(now)))
		}
		rd := e.Ready()
		var out engine.Outcome
		for _, b := range rd.Binds {
			if rng.IntN(4) == 0 {
				out.RefusedBinds = append(out.RefusedBinds, b.Job)
			}
		}
		require.NoError(t, e.Advance(rd, out))
		if i%3 == 0 {
			cur, err := e.Save()
			require.NoError(t, err)
			if len(cur.Records) >= 30 {
				require.NoError(t, e.Compact())
				cur, err = e.Save()
				require.NoError(t, err)
			}
			require.NoError(t, store.Save(ctx, cur))
			fmt.Printf("saved %d\n", next)
		}
	}
}
