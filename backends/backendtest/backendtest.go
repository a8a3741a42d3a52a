// Package backendtest is a fault suite that every backend can join: the
// same table of scenarios (binds refused and failing transiently, a
// backend call that hangs, nodes lost mid-gang, the Runner stopped and
// restarted at random points) runs a Runner against the backend, and
// afterwards checks that every job ended exactly once, that the backend
// saw no GPU booked twice (its own Violations), and that no job was bound
// again after it ended.
//
// A backend joins with a test that calls Run with a constructor:
//
//	func TestFaults(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T, s backendtest.Setup) backendtest.Backend {
//			b, err := sim.New(sim.Config{Cluster: s.Cluster, Start: s.Start})
//			require.NoError(t, err)
//			return b
//		})
//	}
//
// The suite injects binds refused, failing and hanging itself (it wraps
// the Actuator), so a backend only provides what it alone can do: run
// jobs on a clock, lose and recover nodes, and report violations.
//
// Not covered yet: killing the berth process itself (kill -9 of a child
// process); the restarts here stop the Runner in-process (its context is
// cancelled) and start a new one on the same backend and state file.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Backend is what the suite needs of a backend under test: the Runner's
// interfaces, its clock (a simulator's virtual one, or the real one), and
// hooks to submit jobs, lose nodes and report what it refused as
// impossible. backends/sim's *Sim is one.
type Backend interface {
	backends.Backend
	backends.Clock
	// Submit makes j arrive at j.Submit and, once bound, run for runtime
	// and then be reported finished.
	Submit(j *queue.Job, runtime time.Duration) error
	// FailNode takes a node down at time at (its jobs stop); RecoverNode
	// brings it back.
	FailNode(at time.Time, node string) error
	RecoverNode(at time.Time, node string) error
	// Violations lists the decisions the backend found impossible (a GPU
	// booked twice, ...), from its own view.
	Violations() []error
}

// Setup is the cluster a scenario needs.
type Setup struct {
	Cluster topo.Spec
	Start   time.Time
}

// Summary counts what Run did.
type Summary struct {
	Scenarios, Faults, Restarts, Jobs int
}

type scenario struct {
	name                          string
	refuse, transient, hang, lose int // jobs with refused / failing / hanging binds; nodes lost
	restarts                      int
}

var scenarios = []scenario{
	{name: "binds-refused", refuse: 20},
	{name: "binds-transient", transient: 20},
	{name: "call-hangs", hang: 4},
	{name: "node-loss-mid-gang", lose: 3},
	{name: "restarts", restarts: 3},
	{name: "everything", refuse: 10, transient: 10, hang: 2, lose: 2, restarts: 2},
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs every scenario against backends made by newBackend (one per
// scenario and seed) and returns the counts.
func Run(t *testing.T, newBackend func(t *testing.T, s Setup) Backend) Summary {
	var sum Summary
	for _, sc := range scenarios {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", sc.name, seed), func(t *testing.T) {
				f, r, j := runScenario(t, sc, seed, newBackend)
				sum.Scenarios++
				sum.Faults += f
				sum.Restarts += r
				sum.Jobs += j
			})
		}
	}
	t.Logf("fault suite: %d scenario runs, %d faults injected, %d restarts, %d jobs", sum.Scenarios, sum.Faults, sum.Restarts, sum.Jobs)
	return sum
}

func runScenario(t *testing.T, sc scenario, seed uint64, newBackend func(*testing.T, Setup) Backend) (faults, restarts, jobs int) {
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	spec := topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "H100")
	be := newBackend(t, Setup{Cluster: spec, Start: t0})
	const n = 150
	ids, _ := submitJobs(t, rng, be, n)
	w := &faulty{inner: be, refuse: map[string]int{}, transient: map[string]int{}, hang: map[string]int{},
		finished: map[string]int{}, ended: map[string]bool{}}
	pickJobs := func(k int, m map[string]int, max int) {
		for range k {
			m[ids[rng.IntN(len(ids))]] = 1 + rng.IntN(max)
			faults++
		}
	}
	pickJobs(sc.refuse, w.refuse, 2)
	pickJobs(sc.transient, w.transient, 4)
	pickJobs(sc.hang, w.hang, 2)
	for range sc.lose {
		node := spec.Nodes[rng.IntN(len(spec.Nodes))].Name
		at := t0.Add(time.Duration(30+rng.IntN(300)) * time.Minute)
		if err := be.FailNode(at, node); err != nil {
			t.Fatalf("FailNode: %v", err)
		}
		if err := be.RecoverNode(at.Add(time.Duration(10+rng.IntN(60))*time.Minute), node); err != nil {
			t.Fatalf("RecoverNode: %v", err)
		}
		faults++
	}
	var backend backends.Backend = w
	if _, ok := be.(backends.PendingReporter); ok {
		backend = faultyPending{w}
	}
	store := backends.FileStore{Path: filepath.Join(t.TempDir(), "berth.state")}
	var stops []time.Time
	for range sc.restarts {
		stops = append(stops, t0.Add(time.Duration(rng.IntN(8*60))*time.Minute))
	}
	slicesSort(stops)
	runOnce := func(stop time.Time) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := backends.RunnerConfig{
			Engine: engine.Config{
				Queues:     queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
				Backfill:   engine.BackfillConfig{Mode: engine.BackfillEASY},
				Preemption: engine.PreemptionConfig{Priority: true},
			},
			Backend: backend, Clock: be, Store: store, SaveInterval: time.Hour,
			CallTimeout: 20 * time.Millisecond,
			Retry:       backends.Retry{Attempts: 2},
		}
		if !stop.IsZero() {
			cfg.Observe = func(backends.Cycle) {
				if !be.Now().Before(stop) {
					cancel()
				}
			}
		}
		r, err := backends.NewRunner(cfg)
		if err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		select {
		case err := <-done:
			if errors.Is(err, context.Canceled) && !stop.IsZero() {
				return nil
			}
			return err
		case <-time.After(5 * time.Minute):
			return errors.New("Run hung")
		}
	}
	for _, stop := range stops {
		if err := runOnce(stop); err != nil {
			t.Fatalf("run stopped at %v: %v", stop, err)
		}
		restarts++
	}
	if err := runOnce(time.Time{}); err != nil {
		t.Fatalf("final run: %v", err)
	}
	// Checks.
	for _, v := range be.Violations() {
		t.Errorf("backend violation: %v", v)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		switch c := w.finished[id]; {
		case c == 0:
			t.Errorf("job %s never finished (the faults are finite: it should have)", id)
		case c > 1:
			t.Errorf("job %s finished %d times", id, c)
		}
	}
	for _, e := range w.rebound {
		t.Errorf("job bound again after it ended: %s", e)
	}
	t.Logf("%d jobs, %d faults, %d restarts; refusals %d, transient %d, hangs %d", n, faults, restarts, w.nRefused, w.nTransient, w.nHung)
	return faults, restarts, n
}

// submitJobs submits n random gang jobs (1-3 members of 1-8 GPUs, a third
// preemptible) arriving over the first 5 hours, and returns their IDs and
// gang sizes (members).
func submitJobs(t *testing.T, rng *rand.Rand, be Backend, n int) ([]string, map[string]int) {
	t.Helper()
	var ids []string
	size := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("j%03d", i)
		members := 1 + rng.IntN(3)
		j := &queue.Job{ID: id, Queue: "q", Submit: t0.Add(time.Duration(rng.IntN(300)) * time.Minute),
			Priority: int32(rng.IntN(3)),
			Request:  gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: []int{1, 2, 4, 8}[rng.IntN(4)]}}}}
		run := time.Duration(10+rng.IntN(80)) * time.Minute
		j.RuntimeEstimate, j.RuntimeLimit = run, run+time.Hour
		if rng.IntN(3) == 0 {
			j.Preemptible, j.GracePeriod = true, 5*time.Minute
		}
		if err := be.Submit(j, run); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		ids = append(ids, id)
		size[id] = members
	}
	return ids, size
}

func slicesSort(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for k := i; k > 0 && ts[k].Before(ts[k-1]); k-- {
			ts[k], ts[k-1] = ts[k-1], ts[k]
		}
	}
}

// faulty wraps a backend: it refuses, fails and hangs binds as the
// scenario says, and watches the events for finishes.
type faulty struct {
	inner Backend

	mu                          sync.Mutex
	refuse, transient, hang     map[string]int // job -> faults left
	finished                    map[string]int
	ended                       map[string]bool
	rebound                     []string
	nRefused, nTransient, nHung int
}

func (f *faulty) take(m map[string]int, job string) bool {
	if m[job] > 0 {
		m[job]--
		return true
	}
	return false
}

func (f *faulty) Cluster(ctx context.Context) (topo.Spec, error) { return f.inner.Cluster(ctx) }
func (f *faulty) Running(ctx context.Context) ([]backends.RunningJob, error) {
	return f.inner.Running(ctx)
}

func (f *faulty) BindMember(ctx context.Context, job string, m engine.Member) error {
	f.mu.Lock()
	if f.ended[job] {
		f.rebound = append(f.rebound, job)
	}
	refuse, transient, hang := f.take(f.refuse, job), false, false
	if !refuse {
		transient = f.take(f.transient, job)
	}
	if !refuse && !transient {
		hang = f.take(f.hang, job)
	}
	switch {
	case refuse:
		f.nRefused++
	case transient:
		f.nTransient++
	case hang:
		f.nHung++
	}
	f.mu.Unlock()
	switch {
	case refuse:
		return fmt.Errorf("%w: injected", backends.ErrRefused)
	case transient:
		return errors.New("backendtest: injected transient failure")
	case hang:
		<-ctx.Done() // until the Runner's call timeout
		return ctx.Err()
	}
	return f.inner.BindMember(ctx, job, m)
}

func (f *faulty) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	return f.inner.UnbindMember(ctx, job, m)
}

func (f *faulty) Preempt(ctx context.Context, p engine.Preemption) error {
	return f.inner.Preempt(ctx, p)
}

func (f *faulty) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	return f.inner.ApplyMIG(ctx, r)
}

func (f *faulty) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	evs, err := f.inner.Next(ctx, wake)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind == engine.EventJobFinished {
			f.finished[ev.JobID]++
			f.ended[ev.JobID] = true
		}
	}
	return evs, err
}

// faultyPending is faulty for backends that report their pending jobs.
type faultyPending struct{ *faulty }

func (f faultyPending) Pending(ctx context.Context) ([]*queue.Job, error) {
	return f.inner.(backends.PendingReporter).Pending(ctx)
}
