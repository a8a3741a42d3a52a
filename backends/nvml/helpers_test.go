package nvml_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/backends/nvml/nvmlmock"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// exits collects the backend's Exit records.
type exits struct {
	mu  sync.Mutex
	all []nvml.Exit
	ch  chan nvml.Exit
}

func (x *exits) add(e nvml.Exit) {
	x.mu.Lock()
	x.all = append(x.all, e)
	x.mu.Unlock()
	x.ch <- e
}

// next waits for the next exit (at most hangBound: a hang is a failure,
// not a timing assertion).
func (x *exits) next(t *testing.T) nvml.Exit {
	t.Helper()
	select {
	case e := <-x.ch:
		return e
	case <-time.After(hangBound):
		t.Fatalf("no process exit within %v", hangBound)
	}
	return nvml.Exit{}
}

type fixture struct {
	box   *nvmlmock.Box
	b     *nvml.Backend
	exits *exits
	dir   string
}

// open opens the backend on box; mod adjusts the config.
func open(t *testing.T, box *nvmlmock.Box, mod func(*nvml.Config)) *fixture {
	t.Helper()
	f := &fixture{box: box, exits: &exits{ch: make(chan nvml.Exit, 256)}, dir: t.TempDir()}
	cfg := nvml.Config{NVML: box, NodeName: "box", RunDir: f.dir, KillGrace: 200 * time.Millisecond, OnExit: f.exits.add,
		Queues: &queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}, {Name: nvml.DefaultHoldQueue}}}}
	if mod != nil {
		mod(&cfg)
	}
	b, err := nvml.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	f.b = b
	return f
}

func mustBox(t *testing.T, name string) *nvmlmock.Box {
	t.Helper()
	box, err := nvmlmock.New(name)
	require.NoError(t, err)
	return box
}

// events takes the events queued now (Next with a wake a little ahead).
func (f *fixture) events(t *testing.T, wait time.Duration) []engine.Event {
	t.Helper()
	evs, err := f.b.Next(context.Background(), time.Now().Add(wait))
	require.NoError(t, err)
	return evs
}

// waitFor polls cond until it holds. The bound only catches a hang (a
// loaded 2-core machine must never reach it): it is not a timing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never within %v: %s", hangBound, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hangBound bounds every wait of these tests: far beyond what a loaded
// machine takes, so that only a hang reaches it.
const hangBound = time.Minute

// eventsUntil reads events until one of kind k for job arrives.
func (f *fixture) eventsUntil(t *testing.T, k engine.EventKind, job string) []engine.Event {
	t.Helper()
	var all []engine.Event
	deadline := time.Now().Add(hangBound)
	for time.Now().Before(deadline) {
		all = append(all, f.events(t, 100*time.Millisecond)...)
		if slices.ContainsFunc(all, func(e engine.Event) bool { return e.Kind == k && (e.JobID == job || e.Job != nil && e.Job.ID == job) }) {
			return all
		}
	}
	t.Fatalf("no %v event for %q within %v; got %v", k, job, hangBound, kinds(all))
	return nil
}

func kinds(evs []engine.Event) []string {
	var out []string
	for _, e := range evs {
		id := e.JobID
		if e.Job != nil {
			id = e.Job.ID
		}
		out = append(out, e.Kind.String()+":"+id)
	}
	return out
}

func job(id string, members, gpus int) *queue.Job {
	return &queue.Job{ID: id, Queue: "team", Submit: time.Now(),
		Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: gpus}}}}
}

func sh(script string) nvml.Command { return nvml.Command{Args: []string{"/bin/sh", "-c", script}} }

// submit submits j and takes its Submitted event.
func (f *fixture) submit(t *testing.T, j *queue.Job, cmd nvml.Command) {
	t.Helper()
	require.NoError(t, f.b.Submit(context.Background(), j, cmd))
	evs := f.events(t, 10*time.Millisecond)
	require.Equal(t, []string{"job-submitted:" + j.ID}, kinds(evs))
}
