package backends_test

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
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestFileStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := backends.FileStore{Path: filepath.Join(dir, "state.json")}
	st, err := fs.Load(ctx)
	require.NoError(t, err)
	assert.Nil(t, st, "no file: no state")

	e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Start: t0})
	require.NoError(t, err)
	require.NoError(t, e.EnableJournal())
	require.NoError(t, e.Step(engine.Submitted(t0, job("a", 1, 4))))
	saved, err := e.Save()
	require.NoError(t, err)
	require.NoError(t, fs.Save(ctx, saved))
	require.NoError(t, fs.Save(ctx, saved), "overwrites")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary file left behind")

	back, err := fs.Load(ctx)
	require.NoError(t, err)
	e2, err := engine.Restore(engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}}, back)
	require.NoError(t, err)
	pending, _ := e2.JobIDs()
	assert.Equal(t, []string{"a"}, pending)

	require.NoError(t, os.WriteFile(fs.Path, []byte("{not json"), 0o600))
	_, err = fs.Load(ctx)
	assert.Error(t, err, "a corrupt file is an error, not an empty state")

	bad := backends.FileStore{Path: filepath.Join(dir, "missing-dir", "state.json")}
	assert.Error(t, bad.Save(ctx, saved))
}

// At restore the Runner reconciles the saved engine with the backend: a
// node gone from the backend is failed, a job running on other members
// than the engine recorded keeps the backend's, a gang bound in part
// (berth died mid-bind) is unbound and submitted again, and a job on the
// gone node is requeued.
func TestRunnerReconcilesAtRestore(t *testing.T) {
	ctx := context.Background()
	qs := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 3, 8, "H100"), Queues: qs, Start: t0, Policy: queue.StrictPriority()})
	require.NoError(t, err)
	require.NoError(t, e.EnableJournal())
	require.NoError(t, e.Step(engine.Submitted(t0, job("a", 1, 4))))
	require.NoError(t, e.Step(engine.Submitted(t0, job("b", 2, 8))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 2)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	am, ok := e.Members("a")
	require.True(t, ok)
	require.Len(t, am, 1)
	st, err := e.Save()
	require.NoError(t, err)
	store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
	require.NoError(t, store.Save(ctx, st))

	// The backend: n2 is gone (b ran there); a runs on the other half of
	// its node; c is a 2-member gang with one member bound.
	f := newFake(2, 8)
	moved := engine.Member{Node: am[0].Node, GPUs: []int{}}
	for g := range 8 {
		if !slices.Contains(am[0].GPUs, g) {
			moved.GPUs = append(moved.GPUs, g)
		}
	}
	free := "n0"
	if am[0].Node == "n0" {
		free = "n1"
	}
	half := engine.Member{Node: free, GPUs: []int{0, 1, 2, 3}}
	f.running = []backends.RunningJob{
		{Job: job("a", 1, 4), Members: []engine.Member{moved}, Start: t0},
		{Job: job("c", 2, 4), Members: []engine.Member{half}, Start: t0},
	}
	f.bound["a"] = []engine.Member{moved}
	f.bound["c"] = []engine.Member{half}
	f.closeAtEnd = true
	cfg := backends.RunnerConfig{
		Engine:  engine.Config{Queues: qs, Policy: queue.StrictPriority()},
		Backend: f, Clock: &clock{}, Store: store,
	}
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(ctx))
	rec := r.Reconciled()
	assert.True(t, rec.Restored)
	assert.Equal(t, []string{"n2"}, rec.Removed)
	assert.Equal(t, []string{"a"}, rec.Moved)
	assert.Equal(t, []string{"c"}, rec.Stopped)
	assert.Contains(t, f.unbinds, "c@"+free, "the half-bound gang is unbound in the backend")

	back, err := store.Load(ctx)
	require.NoError(t, err)
	e2, err := engine.Restore(engine.Config{Queues: qs, Policy: queue.StrictPriority()}, back)
	require.NoError(t, err)
	got, ok := e2.Members("a")
	require.True(t, ok)
	assert.Equal(t, moved.GPUs, got[0].GPUs, "a is booked where the backend runs it")
	pending, _ := e2.JobIDs()
	assert.Contains(t, pending, "b", "b ran on n2: requeued by its loss (NodeFailure), waits for room")
	if ms, ok := e2.Members("c"); ok {
		// c was submitted again and, on the free GPUs, bound whole.
		assert.Len(t, ms, 2)
	}
	failed := false
	for _, rec := range back.Records {
		if ev := rec.Event; ev != nil && ev.Kind == engine.EventNodeFailed && ev.NodeName == "n2" {
			failed = true
		}
	}
	assert.True(t, failed, "a node gone from the backend is failed in the engine")
}

// TestRunnerCyclesAfterRestore: a restarted Runner whose engine has work
// ready after the reconciliation (here: one job waited for the other's
// GPUs, and that one ended while no Runner ran) places it at once, without waiting for the
// backend's first event (a backend with nothing new to say gives none).
func TestRunnerCyclesAfterRestore(t *testing.T) {
	qs := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Queues: qs, Start: t0, Policy: queue.StrictPriority()})
	require.NoError(t, err)
	require.NoError(t, e.EnableJournal())
	require.NoError(t, e.Step(engine.Submitted(t0, job("x", 1, 8))))
	require.NoError(t, e.Step(engine.Submitted(t0, job("p", 1, 8))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	waiting := "p"
	if rd.Binds[0].Job == "p" {
		waiting = "x"
	}
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	st, err := e.Save()
	require.NoError(t, err)
	store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
	require.NoError(t, store.Save(context.Background(), st))

	f := newFake(1, 8) // runs nothing: the bound job ended while berth was down; Next blocks
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: qs, Policy: queue.StrictPriority()},
		Backend: f, Clock: &clock{}, Store: store,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang bound, not a timing
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	bound := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.bound[waiting]) > 0
	}
	for !bound() && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	assert.True(t, bound(), "%s is bound after the restart without any backend event", waiting)
	assert.Len(t, r.Reconciled().Finished, 1)
}

// Two jobs whose GPUs of one node swapped between the saved state and the
// backend's report (a backend that names devices anew at a restart) are
// both moved: every moved job is cancelled in the engine before any is
// adopted. One at a time, the first adoption found its new GPUs still
// booked for the other job ("GPU already allocated") and the Runner
// stopped a job that ran fine.
func TestRunnerReconcilesSwappedGPUs(t *testing.T) {
	ctx := context.Background()
	qs := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Queues: qs, Start: t0, Policy: queue.StrictPriority()})
	require.NoError(t, err)
	require.NoError(t, e.EnableJournal())
	require.NoError(t, e.Step(engine.Submitted(t0, job("a", 1, 4))))
	require.NoError(t, e.Step(engine.Submitted(t0, job("b", 1, 4))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 2)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	am, _ := e.Members("a")
	bm, _ := e.Members("b")
	require.Len(t, am, 1)
	require.Len(t, bm, 1)
	st, err := e.Save()
	require.NoError(t, err)
	store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
	require.NoError(t, store.Save(ctx, st))

	f := newFake(1, 8)
	f.running = []backends.RunningJob{
		{Job: job("a", 1, 4), Members: bm, Start: t0}, // a where the engine has b
		{Job: job("b", 1, 4), Members: am, Start: t0},
	}
	f.bound["a"], f.bound["b"] = slices.Clone(bm), slices.Clone(am)
	f.closeAtEnd = true
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: qs, Policy: queue.StrictPriority()},
		Backend: f, Clock: &clock{}, Store: store,
	})
	require.NoError(t, err)
	require.NoError(t, r.Run(ctx))
	rec := r.Reconciled()
	assert.Equal(t, []string{"a", "b"}, rec.Moved)
	assert.Empty(t, rec.Stopped, "nothing stopped")
	assert.Empty(t, f.unbinds, "nothing unbound")

	back, err := store.Load(ctx)
	require.NoError(t, err)
	e2, err := engine.Restore(engine.Config{Queues: qs, Policy: queue.StrictPriority()}, back)
	require.NoError(t, err)
	got, ok := e2.Members("a")
	require.True(t, ok)
	assert.Equal(t, bm[0].GPUs, got[0].GPUs, "a is booked where the backend runs it")
	got, ok = e2.Members("b")
	require.True(t, ok)
	assert.Equal(t, am[0].GPUs, got[0].GPUs, "b is booked where the backend runs it")
}

// savedState saves an engine on spec with pending job "a" and running job
// "b" (one 8-GPU node) to a new FileStore.
func savedState(t *testing.T, spec topo.Spec) (backends.FileStore, []byte) {
	t.Helper()
	qs := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	e, err := engine.New(engine.Config{Cluster: spec, Queues: qs, Start: t0, Policy: queue.StrictPriority()})
	require.NoError(t, err)
	require.NoError(t, e.EnableJournal())
	require.NoError(t, e.Step(engine.Submitted(t0, job("b", 1, 8))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	require.NoError(t, e.Step(engine.Submitted(t0, job("a", 1, 4))))
	st, err := e.Save()
	require.NoError(t, err)
	store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
	require.NoError(t, store.Save(context.Background(), st))
	b, err := os.ReadFile(store.Path)
	require.NoError(t, err)
	return store, b
}

// A saved state that cannot be the backend's cluster makes Run return a
// StateMismatchError naming the difference, before any cycle, and leaves
// the store as it was. Before, an empty state was accepted (the backend's
// nodes rejected by the engine, only logged), and Run ran an engine with
// no GPU in which every job waited for ever, then returned nil.
func TestRunnerRejectsMismatchedState(t *testing.T) {
	ctx := context.Background()
	racks := func(levels []string, gpus int, model string) topo.Spec {
		return topo.Uniform(levels, []int{2}, 2, gpus, model)
	}
	bad := racks([]string{"rack"}, 8, "H100")
	bad.Nodes = append(bad.Nodes, topo.NodeSpec{Name: "x", Domains: []string{"r1"}, GPUs: 8, GPUModel: "H100", MIG: true, MIGLayout: "7g"})
	cases := []struct {
		name    string
		saved   func(t *testing.T) (backends.FileStore, []byte)
		backend topo.Spec
		check   func(t *testing.T, m *backends.StateMismatchError)
	}{
		{"empty", func(t *testing.T) (backends.FileStore, []byte) {
			store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
			b := []byte(`{"Version":2}`)
			require.NoError(t, os.WriteFile(store.Path, b, 0o600))
			return store, b
		}, racks([]string{"rack"}, 8, "H100"), func(t *testing.T, m *backends.StateMismatchError) {
			assert.True(t, m.Empty)
		}},
		{"empty-cluster-zero-start", func(t *testing.T) (backends.FileStore, []byte) {
			store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
			st := &engine.State{Version: engine.StateVersion}
			require.NoError(t, store.Save(ctx, st))
			b, err := os.ReadFile(store.Path)
			require.NoError(t, err)
			return store, b
		}, racks([]string{"rack"}, 8, "H100"), func(t *testing.T, m *backends.StateMismatchError) {
			assert.True(t, m.Empty)
		}},
		{"levels-renamed", func(t *testing.T) (backends.FileStore, []byte) {
			return savedState(t, racks([]string{"rack"}, 8, "H100"))
		}, racks([]string{"switch"}, 8, "H100"), func(t *testing.T, m *backends.StateMismatchError) {
			assert.Equal(t, []string{"rack"}, m.Levels)
			assert.Equal(t, []string{"switch"}, m.BackendLevels)
		}},
		{"gpus-changed", func(t *testing.T) (backends.FileStore, []byte) {
			return savedState(t, racks([]string{"rack"}, 8, "H100"))
		}, racks([]string{"rack"}, 4, "A100"), func(t *testing.T, m *backends.StateMismatchError) {
			require.Len(t, m.Changed, 4)
			assert.Contains(t, m.Changed[0], "n0: 8 GPUs, the backend's 4")
			assert.Contains(t, m.Changed[0], `GPU model "H100", the backend's "A100"`)
		}},
		{"nodes-missing", func(t *testing.T) (backends.FileStore, []byte) {
			return savedState(t, racks([]string{"rack"}, 8, "H100"))
		}, func() topo.Spec {
			sp := racks([]string{"rack"}, 8, "H100")
			for i := range sp.Nodes {
				sp.Nodes[i].Name = "other-" + sp.Nodes[i].Name
			}
			return sp
		}(), func(t *testing.T, m *backends.StateMismatchError) {
			assert.Equal(t, []string{"n0", "n1", "n2", "n3"}, m.Missing)
		}},
		{"node-moved", func(t *testing.T) (backends.FileStore, []byte) {
			return savedState(t, racks([]string{"rack"}, 8, "H100"))
		}, func() topo.Spec {
			sp := racks([]string{"rack"}, 8, "H100")
			sp.Nodes[0].Domains = []string{"r1"}
			return sp
		}(), func(t *testing.T, m *backends.StateMismatchError) {
			assert.Equal(t, []string{`n0: rack "r0", the backend's "r1"`}, m.Changed)
		}},
		{"node-rejected", func(t *testing.T) (backends.FileStore, []byte) {
			return savedState(t, racks([]string{"rack"}, 8, "H100"))
		}, bad, func(t *testing.T, m *backends.StateMismatchError) {
			require.Len(t, m.Rejected, 1)
			assert.Contains(t, m.Rejected[0], "x: ")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, before := tc.saved(t)
			f := newFake(1, 8)
			f.spec = tc.backend
			f.closeAtEnd = true
			var cycles []backends.Cycle
			cfg := config(f, &clock{}, &cycles)
			cfg.Store = store
			r, err := backends.NewRunner(cfg)
			require.NoError(t, err)
			err = r.Run(ctx)
			require.ErrorIs(t, err, backends.ErrStateMismatch)
			var m *backends.StateMismatchError
			require.ErrorAs(t, err, &m)
			tc.check(t, m)
			assert.Empty(t, cycles, "no cycle on a mismatched engine")
			after, err := os.ReadFile(store.Path)
			require.NoError(t, err)
			assert.Equal(t, string(before), string(after), "the store is left as it was: nothing lost")
		})
	}
}

// pendingFake is fake that reports its pending jobs (a PendingReporter,
// as the SLURM backend is).
type pendingFake struct {
	*fake
	pending []*queue.Job
}

func (f pendingFake) Pending(context.Context) ([]*queue.Job, error) { return f.pending, nil }

// A state saved while binds were in flight (assumed) meets a backend that
// runs none of them. A backend that lists its pending jobs tells a bind
// that never came through (the job waits there: pending again, placed
// again) from one that did, after which the job ran and ended while no
// Runner ran (listed nowhere: finished, not placed a second time). One
// that does not list them cannot tell: the bind is withdrawn, the job is
// pending again, and nothing is counted finished on a guess.
func TestRunnerRestoresBindsInFlight(t *testing.T) {
	qs := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	save := func(t *testing.T) backends.FileStore {
		e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 2, 8, "H100"), Queues: qs, Start: t0})
		require.NoError(t, err)
		require.NoError(t, e.EnableJournal())
		require.NoError(t, e.Step(engine.Submitted(t0, job("waits", 1, 8))))
		require.NoError(t, e.Step(engine.Submitted(t0, job("ended", 1, 8))))
		rd := e.Ready()
		require.Len(t, rd.Binds, 2)
		require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true}))
		for _, id := range []string{"waits", "ended"} {
			_, _, binding := e.Binding(id)
			require.True(t, binding, id)
		}
		st, err := e.Save()
		require.NoError(t, err)
		store := backends.FileStore{Path: filepath.Join(t.TempDir(), "state.json")}
		require.NoError(t, store.Save(context.Background(), st))
		return store
	}
	run := func(t *testing.T, be backends.Backend, f *fake, store backends.FileStore, bindsOf ...string) *backends.Runner {
		r, err := backends.NewRunner(backends.RunnerConfig{
			Engine:  engine.Config{Queues: qs},
			Backend: be, Clock: &clock{}, Store: store,
		})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang bound, not a timing
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		boundAll := func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, id := range bindsOf {
				if len(f.bound[id]) == 0 {
					return false
				}
			}
			return true
		}
		for !boundAll() && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-done
		require.True(t, boundAll(), "%v bound after the restart", bindsOf)
		return r
	}

	t.Run("pending-reporter", func(t *testing.T) {
		f := newFake(2, 8)
		r := run(t, pendingFake{fake: f, pending: []*queue.Job{job("waits", 1, 8)}}, f, save(t), "waits")
		assert.Equal(t, []string{"ended"}, r.Reconciled().Finished, "listed nowhere: its bind came through and it ended")
		f.mu.Lock()
		defer f.mu.Unlock()
		assert.Empty(t, f.bound["ended"], "an ended job is not placed again")
	})
	t.Run("no-pending-reporter", func(t *testing.T) {
		f := newFake(2, 8)
		r := run(t, f, f, save(t), "waits", "ended")
		assert.Empty(t, r.Reconciled().Finished, "a backend that lists no pending jobs cannot tell an ended job: none counted finished")
	})
}
