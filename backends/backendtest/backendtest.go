// Package backendtest is a fault suite that every backend can join: the
// same table of scenarios (binds refused and failing transiently, a
// backend call that hangs, nodes lost mid-gang, the Runner stopped and
// restarted at random points, a restore from an empty or mismatched
// state refused, a bind that commits after its timeout, a bind that
// hangs for ever, a backend that restarts between a call and its answer,
// a preemption that commits after its timeout, a preemption that hangs
// for ever, a MIG change that commits after its timeout, a MIG change
// that hangs for ever)
// runs a Runner against the backend, and checks that every job ended
// exactly once (nothing lost, nothing run twice), that the backend saw no
// GPU booked twice (its own Violations), that no job was bound again after
// it ended, that every job a Runner saw is in its View after every cycle
// and when it stops (none invisible), and that when a Runner stops the
// backend runs no job its engine does not account as running or binding
// (no ghost).
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
// The restarts of Run stop the Runner in-process (its context is
// cancelled) and start a new one on the same backend and state file;
// RunKill kills a child process running the Runner with SIGKILL instead.
// Backends on a real clock or with fewer nodes implement Shaper.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
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
	// Preemptions: the scenario tests preemption calls. Every job it
	// submits is preemptible, with a priority of 0 to 2; a backend whose
	// jobs take their priority from somewhere else (SLURM: the partition)
	// should let a job of priority 1 or 2 preempt one of 0.
	Preemptions bool
	// MIG: the scenario tests MIG changes. Cluster then has a MIG node
	// besides the whole-GPU ones ("mig0": two H100-80GB GPUs in MIG mode,
	// seven 1g instances each), and MIG jobs of several profiles are
	// submitted besides the whole-GPU ones, so that the engine plans
	// reconfigurations. A backend whose cluster has no GPU in MIG mode
	// skips the scenario; one that cannot change MIG layouts (no
	// ApplyMIG) says so in Shape.NotApplicable.
	MIG bool
}

// Shape adapts the suite to a backend that cannot run its default: a
// virtual clock, eight 8-GPU nodes, 150 jobs, 3 seeds. A backend that
// implements Shaper is run in its shape; jobs are sized to its cluster
// (Inventory.Cluster), and every duration of a scenario (arrivals,
// runtimes, limits, restarts, node losses) is counted in Units.
type Shape struct {
	// Unit is one minute of a scenario on the backend's clock: a minute
	// on a virtual clock (the default), a few milliseconds on a real one.
	Unit time.Duration
	// Jobs per scenario (default 150) and seeds per scenario (default 3).
	Jobs, Seeds int
	// CallTimeout is the Runner's (default 250ms: the virtual clock's
	// decisions take no time, but a wall-clock bound of 20ms was reached
	// by ordinary calls under -race on a loaded 2-core machine, turning
	// them into unknown binds at random and the runs nondeterministic).
	CallTimeout time.Duration
	// ReconcileInterval is the Runner's (RunnerConfig.ReconcileInterval):
	// how long an unknown bind waits for the backend's running list. Zero:
	// the Runner's default (a minute of the backend's clock, a real minute
	// on a real clock: set it there, or an unknown bind holds its GPUs
	// for a real minute).
	ReconcileInterval time.Duration
	// Queues are leaf queues the engine needs besides the suite's "q"
	// (the NVML backend's hold queue).
	Queues []string
	// NoNodeLoss, when set, says why the backend cannot lose a node: the
	// node-loss scenario is skipped with it, the others lose none.
	NoNodeLoss string
	// NoRestarts, when set, says why the Runner is not restarted: the
	// restarts scenario is skipped with it, the others restart none.
	NoRestarts string
	// WholeNodeGangs: gangs of more than one member ask whole nodes, for
	// backends that cannot put two members of a gang on one node (a SLURM
	// job has one member per node; docs/backends/slurm.md).
	WholeNodeGangs bool
	// OneNodeJobs: every job fits on one node (a gang's members share
	// it: fewer GPUs each), for backends whose jobs are pinned to a pool
	// of one node (a federation of single-node boxes).
	OneNodeJobs bool
	// HangAfter is how long (wall time) one Runner may run before the
	// scenario fails as hung (default 5 minutes).
	HangAfter time.Duration
	// TickInterval is the Runner's (RunnerConfig.TickInterval; default
	// none). A Runner waits for an event before its first cycle: a
	// restored one whose backend reports nothing new (every pending job
	// already reported by Pending, nothing running) places nothing until
	// a tick, as a deployment's Runner does (examples/slurm-bridge ticks).
	TickInterval time.Duration
	// NotApplicable names scenarios the backend cannot pass, each with
	// why: they are skipped with it.
	NotApplicable map[string]string
	// StopOnTime stops each Runner but the last at its stop time with a
	// wall-clock timer, even in a cycle or with no cycle at all (a Runner
	// is otherwise stopped by Observe, after a cycle: one started after
	// its stop time that runs no cycle never stops). Real-clock backends
	// only.
	StopOnTime bool
}

// Shaper is implemented by backends that run the suite in their own Shape.
type Shaper interface {
	Shape() Shape
}

// Reopener is implemented by backends whose client state lives in the
// berth process (the SLURM backend tracks what it reported; a new one
// reads everything from SLURM again): the suite calls Reopen before every
// Runner after the first, as a restarted berth process would make a new
// client. The cluster itself (jobs, nodes) carries on.
type Reopener interface {
	Reopen() error
}

func shapeOf(be Backend) Shape {
	var sh Shape
	if s, ok := be.(Shaper); ok {
		sh = s.Shape()
	}
	if sh.Unit <= 0 {
		sh.Unit = time.Minute
	}
	if sh.Jobs <= 0 {
		sh.Jobs = 150
	}
	if sh.Seeds <= 0 {
		sh.Seeds = 3
	}
	if sh.CallTimeout <= 0 {
		sh.CallTimeout = 250 * time.Millisecond
	}
	if sh.HangAfter <= 0 {
		sh.HangAfter = 5 * time.Minute
	}
	return sh
}

// Summary counts what Run did.
type Summary struct {
	Scenarios, Faults, Restarts, Jobs int
}

type scenario struct {
	name                          string
	refuse, transient, hang, lose int // jobs with refused / failing / hanging binds; nodes lost
	restarts                      int
	mismatch                      bool // restores refused first (mismatch.go)
	// jobs whose bind commits after its call timed out; whose bind hangs
	// for ever (ignoring its context); whose backend restarts between the
	// call and the answer (the bind commits, or is lost, and the answer
	// is an error)
	late, forever, restartMid int
	// the first preemption calls that commit after their timeout; that
	// hang for ever (ignoring their context)
	preemptLate, preemptForever int
	// the first MIG changes (ApplyMIG) that commit after their timeout;
	// that hang for ever (ignoring their context)
	migLate, migForever int
}

var scenarios = []scenario{
	{name: "binds-refused", refuse: 20},
	{name: "binds-transient", transient: 20},
	{name: "call-hangs", hang: 4},
	{name: "node-loss-mid-gang", lose: 3},
	{name: "restarts", restarts: 3},
	{name: "everything", refuse: 10, transient: 10, hang: 2, lose: 2, restarts: 2},
	{name: "restore-mismatched", mismatch: true},
	{name: "bind-commits-after-timeout", late: 6},
	{name: "bind-hangs-forever", forever: 4},
	{name: "backend-restarts-mid-call", restartMid: 10},
	{name: "late-binds-and-restarts", late: 3, forever: 2, restartMid: 4, restarts: 2},
	{name: "preempt-commits-after-timeout", preemptLate: 4},
	{name: "preempt-hangs-forever", preemptForever: 2},
	{name: "mig-commits-after-timeout", migLate: 2},
	{name: "mig-hangs-forever", migForever: 2},
	{name: "mig-late-and-restarts", migLate: 2, migForever: 1, restarts: 2},
}

// NotApplicableMIG is Shape.NotApplicable for a backend that cannot run
// the MIG scenarios (no ApplyMIG, or no GPU in MIG mode next to whole
// ones), each with why.
func NotApplicableMIG(why string) map[string]string {
	out := map[string]string{}
	for _, sc := range scenarios {
		if sc.migLate+sc.migForever > 0 {
			out[sc.name] = why
		}
	}
	return out
}

// migNode is the MIG node of a MIG scenario's cluster (Setup.MIG), in the
// domains of the first whole-GPU node.
func migNode(spec topo.Spec) topo.NodeSpec {
	n := topo.NodeSpec{Name: "mig0", GPUs: 2, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g,1g,1g,1g,1g,1g,1g"}
	if len(spec.Nodes) > 0 {
		n.Domains = slices.Clone(spec.Nodes[0].Domains)
	}
	return n
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs every scenario against backends made by newBackend (one per
// scenario and seed) and returns the counts.
func Run(t *testing.T, newBackend func(t *testing.T, s Setup) Backend) Summary {
	var sum Summary
	seeds := uint64(3)
	for _, sc := range scenarios {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", sc.name, seed), func(t *testing.T) {
				f, r, j := runScenario(t, sc, seed, &seeds, newBackend)
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

func runScenario(t *testing.T, sc scenario, seed uint64, seeds *uint64, newBackend func(*testing.T, Setup) Backend) (faults, restarts, jobs int) {
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	migSc := sc.migLate+sc.migForever > 0
	cluster := topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "H100")
	if migSc {
		cluster.Nodes = append(cluster.Nodes, migNode(cluster))
	}
	be := newBackend(t, Setup{Cluster: cluster, Start: t0,
		Preemptions: sc.preemptLate+sc.preemptForever > 0, MIG: migSc})
	sh := shapeOf(be)
	*seeds = uint64(sh.Seeds)
	if why, ok := sh.NotApplicable[sc.name]; ok {
		t.Skip("not applicable to this backend: " + why)
	}
	if sc.lose > 0 && sh.NoNodeLoss != "" {
		if sc.name == "node-loss-mid-gang" {
			t.Skip("not for this backend: " + sh.NoNodeLoss)
		}
		sc.lose = 0
	}
	if sc.restarts > 0 && sh.NoRestarts != "" {
		if sc.name == "restarts" {
			t.Skip("not for this backend: " + sh.NoRestarts)
		}
		sc.restarts = 0
	}
	spec, err := be.Cluster(context.Background())
	if err != nil {
		t.Fatalf("Cluster: %v", err)
	}
	base, unit := be.Now(), sh.Unit
	n := sh.Jobs
	// The preemption scenarios make every job preemptible (no other draw
	// changes), so that preemptions happen on small clusters too.
	if migSc && !slices.ContainsFunc(spec.Nodes, func(nd topo.NodeSpec) bool { return nd.MIG }) {
		t.Skip("not applicable to this backend: its cluster has no GPU in MIG mode")
	}
	ids, _ := submitJobs(t, rng, be, n, spec, base, unit, sh.WholeNodeGangs, sh.OneNodeJobs, sc.preemptLate+sc.preemptForever > 0)
	if migSc {
		ids = append(ids, submitMIGJobs(t, rng, be, base, unit)...)
	}
	w := &faulty{inner: be, refuse: map[string]int{}, transient: map[string]int{}, hang: map[string]int{},
		late: map[string]int{}, forever: map[string]int{}, restartMid: map[string]int{},
		finished: map[string]int{}, reconciled: map[string]bool{}, ended: map[string]bool{}, seen: map[string]bool{}, shown: map[string]bool{},
		release: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 0x1a7e)),
		preemptLate: sc.preemptLate, preemptForever: sc.preemptForever, migLate: sc.migLate, migForever: sc.migForever}
	faults += sc.preemptLate + sc.preemptForever + sc.migLate + sc.migForever
	t.Cleanup(func() { close(w.release) }) // calls hung for ever return
	pickJobs := func(k int, m map[string]int, max int) {
		for range k {
			m[ids[rng.IntN(len(ids))]] = 1 + rng.IntN(max)
			faults++
		}
	}
	pickJobs(sc.refuse, w.refuse, 2)
	pickJobs(sc.transient, w.transient, 4)
	pickJobs(sc.hang, w.hang, 2)
	pickJobs(sc.late, w.late, 2)
	pickJobs(sc.forever, w.forever, 2)
	pickJobs(sc.restartMid, w.restartMid, 2)
	for range sc.lose {
		node := spec.Nodes[rng.IntN(len(spec.Nodes))].Name
		at := base.Add(time.Duration(30+rng.IntN(300)) * unit)
		if err := be.FailNode(at, node); err != nil {
			t.Fatalf("FailNode: %v", err)
		}
		if err := be.RecoverNode(at.Add(time.Duration(10+rng.IntN(60))*unit), node); err != nil {
			t.Fatalf("RecoverNode: %v", err)
		}
		faults++
	}
	backend := wrap(w)
	store := backends.FileStore{Path: filepath.Join(t.TempDir(), "berth.state")}
	var stops []time.Time
	for range sc.restarts {
		stops = append(stops, base.Add(time.Duration(rng.IntN(8*60))*unit))
	}
	slicesSort(stops)
	queues := []queue.QueueSpec{{Name: "q"}}
	for _, q := range sh.Queues {
		queues = append(queues, queue.QueueSpec{Name: q})
	}
	if sc.mismatch {
		restoreMismatched(t, be, backend, sh, queues)
	}
	runOnce := func(stop time.Time) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var allDone atomic.Bool
		cfg := backends.RunnerConfig{
			Engine: engine.Config{
				Queues:     queue.TreeSpec{Queues: queues},
				Backfill:   engine.BackfillConfig{Mode: engine.BackfillEASY},
				Preemption: engine.PreemptionConfig{Priority: true},
			},
			Backend: backend, Clock: be, Store: store, SaveInterval: time.Hour,
			CompactAfter:      50, // restarts restore from snapshots (a few hundred records a run)
			CallTimeout:       sh.CallTimeout,
			ReconcileInterval: sh.ReconcileInterval,
			TickInterval:      sh.TickInterval,
			Retry:             backends.Retry{Attempts: 2},
		}
		if os.Getenv("BERTH_BACKENDTEST_LOG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		logErrs := os.Getenv("BERTH_BACKENDTEST_LOG") != ""
		// Jobs that ended while no Runner ran are finished by the next
		// one's reconciliation, not by an event: they count as ended (a
		// bind after that is a violation), and their Finished event may
		// still come (the backend queued it for the Runner that stopped).
		var r *backends.Runner
		var counted atomic.Bool
		countReconciled := func() {
			if !counted.Swap(true) {
				w.mu.Lock()
				for _, id := range r.Reconciled().Finished {
					w.reconciled[id] = true
					w.ended[id] = true
				}
				w.mu.Unlock()
			}
		}
		cfg.Observe = func(c backends.Cycle) {
			countReconciled()
			if err := w.invisible(c.View); err != nil {
				t.Errorf("cycle %d: %v", c.Ready.Seq, err)
			}
			if logErrs {
				for _, err := range c.Errors {
					t.Logf("cycle %d: %v", c.Ready.Seq, err)
				}
			}
			// A real backend's event stream never ends: the run ends
			// when every job has finished.
			if w.finishedAll(ids) {
				allDone.Store(true)
				cancel()
			}
			if !stop.IsZero() && !be.Now().Before(stop) {
				cancel()
			}
		}
		var err error
		if r, err = backends.NewRunner(cfg); err != nil {
			return err
		}
		if !stop.IsZero() && sh.StopOnTime {
			tm := time.AfterFunc(stop.Sub(be.Now()), cancel)
			defer tm.Stop()
		}
		if !stop.IsZero() && logErrs {
			t.Logf("Runner until %v (in %v)", stop.Format(time.TimeOnly+".000"), stop.Sub(be.Now()))
		}
		// The Runner's first Next comes after its reconciliation, on Run's
		// goroutine: count the jobs it finished there, so that the watch
		// below sees them when no cycle follows (the last jobs ended while
		// no Runner ran, and nothing is left to place).
		w.mu.Lock()
		w.beforeNext = countReconciled
		w.mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		// The last jobs may end by reconciliation, with no cycle after:
		// watch for the end outside Observe too.
		watchDone := make(chan struct{})
		defer close(watchDone)
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-watchDone:
					return
				case <-tick.C:
					if w.finishedAll(ids) {
						allDone.Store(true)
						cancel()
						return
					}
				}
			}
		}()
		select {
		case err := <-done:
			if r.View() != nil {
				countReconciled() // built, and no cycle ran
				// At quiescence: every job the backend runs is one the
				// engine runs or binds (no ghost), every job it saw is
				// in its View (none invisible).
				if gerr := w.ghosts(r.View()); gerr != nil {
					t.Errorf("Runner stopped: %v", gerr)
				}
				if ierr := w.invisible(r.View()); ierr != nil {
					t.Errorf("Runner stopped: %v", ierr)
				}
			}
			if errors.Is(err, context.Canceled) && (!stop.IsZero() || allDone.Load()) {
				return nil
			}
			return err
		case <-time.After(sh.HangAfter):
			left := w.unfinished(ids)
			if logErrs { // where everything waits
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			}
			cancel()
			return fmt.Errorf("Run hung (not finished: %v)%s", left, engineSays(r.View(), left))
		}
	}
	reopen := func() {
		if ro, ok := be.(Reopener); ok && restarts > 0 {
			if err := ro.Reopen(); err != nil {
				t.Fatalf("Reopen: %v", err)
			}
		}
	}
	for _, stop := range stops {
		reopen()
		if err := runOnce(stop); err != nil {
			t.Fatalf("run stopped at %v: %v", stop, err)
		}
		restarts++
	}
	reopen()
	if err := runOnce(time.Time{}); err != nil {
		t.Fatalf("final run: %v", err)
	}
	// Checks.
	for _, v := range be.Violations() {
		t.Errorf("backend violation: %v", v)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	checkFinishedOnce(t, ids, w.finished, w.reconciled)
	for _, e := range w.rebound {
		t.Errorf("job bound again after it ended: %s", e)
	}
	t.Logf("%d jobs, %d faults, %d restarts; refusals %d, transient %d, hangs %d, late commits %d, hung for ever %d, restarts mid-call %d, preemptions late %d, preemptions hung for ever %d, MIG changes late %d, MIG changes hung for ever %d, MIG changes made %d",
		len(ids), faults, restarts, w.nRefused, w.nTransient, w.nHung, w.nLate, w.nForever, w.nRestartMid, w.nPreemptLate, w.nPreemptForever, w.nMIGLate, w.nMIGForever, w.nMIG)
	if sc.preemptLate+sc.preemptForever > 0 && w.nPreemptLate+w.nPreemptForever == 0 {
		t.Errorf("no preemption call was made: the scenario tested nothing")
	}
	if migSc && w.nMIGLate+w.nMIGForever == 0 {
		t.Errorf("no MIG change was made: the scenario tested nothing")
	}
	return faults, restarts, n
}

// engineSays tells what the engine's latest view says of jobs: running
// (on which members, since when) or pending (its reason), or neither.
func engineSays(v *engine.View, ids []string) string {
	if v == nil {
		return ""
	}
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "\n  %s: ", id)
		found := false
		for _, rj := range v.Running() {
			if rj.Job == id {
				fmt.Fprintf(&b, "running in the engine (%d GPUs) since %v, stopping %v", rj.GPUs, rj.Start.Format(time.TimeOnly), rj.Stopping)
				found = true
			}
		}
		for _, p := range v.Pending {
			if p.Job == id {
				x, _ := v.Explain(id)
				fmt.Fprintf(&b, "pending in the engine: %v (%s)", p, x)
				found = true
			}
		}
		if !found {
			b.WriteString("unknown to the engine")
		}
	}
	return b.String()
}

// checkFinishedOnce checks that every job in ids was reported finished
// exactly once (the faults are finite: each job should have finished).
func checkFinishedOnce(t *testing.T, ids []string, finished map[string]int, reconciled map[string]bool) {
	t.Helper()
	for _, id := range ids {
		switch c := finished[id]; {
		case c == 0 && !reconciled[id]:
			t.Errorf("job %s never finished", id)
		case c > 1:
			t.Errorf("job %s finished %d times", id, c)
		}
	}
}

// finishedAll reports whether every job in ids has been reported finished.
func (f *faulty) finishedAll(ids []string) bool { return len(f.unfinished(ids)) == 0 }

// unfinished lists the jobs of ids not reported finished yet.
func (f *faulty) unfinished(ids []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, id := range ids {
		if f.finished[id] == 0 && !f.reconciled[id] {
			out = append(out, id)
		}
	}
	return out
}

// submitJobs submits n random gang jobs (1-3 members of 1-8 GPUs, within
// what spec's nodes have, all on one node with oneNode; a third
// preemptible) arriving over the first 5
// hours after base (durations in units of a minute), and returns their
// IDs and gang sizes (members).
func submitJobs(t *testing.T, rng *rand.Rand, be Backend, n int, spec topo.Spec, base time.Time, unit time.Duration, wholeNodes, oneNode, allPreemptible bool) ([]string, map[string]int) {
	t.Helper()
	whole := 0
	maxGPUs := 8
	for _, nd := range spec.Nodes {
		if nd.MIG {
			continue // MIG nodes take MIG jobs only (submitMIGJobs)
		}
		whole++
		maxGPUs = min(maxGPUs, nd.GPUs)
	}
	maxMembers := max(1, min(3, whole))
	var ids []string
	size := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("j%03d", i)
		members := 1 + rng.IntN(maxMembers)
		per := []int{1, 2, 4, 8}[rng.IntN(4)]
		for per > maxGPUs {
			per /= 2
		}
		if wholeNodes && members > 1 {
			per = maxGPUs
		}
		for oneNode && per > 1 && per*members > maxGPUs {
			per /= 2
		}
		j := &queue.Job{ID: id, Queue: "q", Submit: base.Add(time.Duration(rng.IntN(300)) * unit),
			Priority: int32(rng.IntN(3)),
			Request:  gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}}}
		run := time.Duration(10+rng.IntN(80)) * unit
		j.RuntimeEstimate, j.RuntimeLimit = run, run+60*unit
		if rng.IntN(3) == 0 || allPreemptible {
			j.Preemptible, j.GracePeriod = true, 5*unit
		}
		if err := be.Submit(j, run); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		ids = append(ids, id)
		size[id] = members
	}
	return ids, size
}

// submitMIGJobs submits 16 one-member MIG jobs of several profiles
// arriving over the first 5 hours after base, and returns their IDs; a
// 3g or 2g job finds no instance of its size in seven 1g ones, so the
// engine plans reconfigurations.
func submitMIGJobs(t *testing.T, rng *rand.Rand, be Backend, base time.Time, unit time.Duration) []string {
	t.Helper()
	profiles := []string{"3g.40gb", "2g.20gb", "1g.10gb", "4g.40gb"}
	var ids []string
	for i := range 16 {
		id := fmt.Sprintf("g%02d", i)
		j := &queue.Job{ID: id, Queue: "q", Submit: base.Add(time.Duration(rng.IntN(300)) * unit),
			Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: profiles[rng.IntN(len(profiles))]}}}}
		run := time.Duration(10+rng.IntN(50)) * unit
		j.RuntimeEstimate, j.RuntimeLimit = run, run+60*unit
		if err := be.Submit(j, run); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
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

	mu                           sync.Mutex
	refuse, transient, hang      map[string]int // job -> faults left
	late, forever, restartMid    map[string]int
	finished                     map[string]int
	reconciled                   map[string]bool // finished by a Runner's reconciliation
	ended                        map[string]bool
	seen                         map[string]bool // submitted to a Runner (Next)
	shown                        map[string]bool // seen, and listed in a View since
	rebound                      []string
	nRefused, nTransient, nHung  int
	nLate, nForever, nRestartMid int
	// preemptLate, preemptForever: preemption calls left to make late or
	// hang for ever; nPreempt*: those made so.
	preemptLate, preemptForever   int
	nPreemptLate, nPreemptForever int
	// migLate, migForever: MIG calls left to make late or hang for ever;
	// nMIG*: those made so, and all MIG calls.
	migLate, migForever         int
	nMIGLate, nMIGForever, nMIG int
	beforeNext                  func()        // called once, by the next Next
	release                     chan struct{} // closed when the scenario ends
	rng                         *rand.Rand
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

// RunningNow is the backend's, or errors.ErrUnsupported when it is no
// backends.RunningReporter.
func (f *faulty) RunningNow(ctx context.Context) ([]backends.RunningJob, error) {
	if rr, ok := f.inner.(backends.RunningReporter); ok {
		return rr.RunningNow(ctx)
	}
	return nil, errors.ErrUnsupported
}

func (f *faulty) BindMember(ctx context.Context, job string, m engine.Member) error {
	return f.bind(ctx, job, func(ctx context.Context) error { return f.inner.BindMember(ctx, job, m) })
}

func (f *faulty) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	return f.inner.UnbindMember(ctx, job, m)
}

func (f *faulty) Preempt(ctx context.Context, p engine.Preemption) error {
	f.mu.Lock()
	late, forever := false, false
	switch {
	case f.preemptLate > 0:
		f.preemptLate--
		f.nPreemptLate++
		late = true
	case f.preemptForever > 0:
		f.preemptForever--
		f.nPreemptForever++
		forever = true
	}
	f.mu.Unlock()
	switch {
	case late:
		// Commits after the Runner gave up on the call.
		<-ctx.Done()
		return f.inner.Preempt(context.WithoutCancel(ctx), p)
	case forever:
		<-f.release
		return errors.New("backendtest: hung preemption released")
	}
	return f.inner.Preempt(ctx, p)
}

func (f *faulty) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	f.mu.Lock()
	f.nMIG++
	late, forever := false, false
	switch {
	case f.migLate > 0:
		f.migLate--
		f.nMIGLate++
		late = true
	case f.migForever > 0:
		f.migForever--
		f.nMIGForever++
		forever = true
	}
	f.mu.Unlock()
	switch {
	case late:
		// Commits after the Runner gave up on the call.
		<-ctx.Done()
		return f.inner.ApplyMIG(context.WithoutCancel(ctx), r)
	case forever:
		<-f.release
		return errors.New("backendtest: hung MIG change released")
	}
	return f.inner.ApplyMIG(ctx, r)
}

// MIGLayout is the backend's, or errors.ErrUnsupported when it is no
// backends.MIGReporter.
func (f *faulty) MIGLayout(ctx context.Context, node string, gpu int) (mig.Layout, error) {
	if mr, ok := f.inner.(backends.MIGReporter); ok {
		return mr.MIGLayout(ctx, node, gpu)
	}
	return mig.Layout{}, errors.ErrUnsupported
}

func (f *faulty) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	f.mu.Lock()
	before := f.beforeNext
	f.beforeNext = nil
	f.mu.Unlock()
	if before != nil {
		before()
	}
	evs, err := f.inner.Next(ctx, wake)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		switch ev.Kind {
		case engine.EventJobFinished:
			f.finished[ev.JobID]++
			f.ended[ev.JobID] = true
		case engine.EventJobSubmitted:
			f.seen[ev.Job.ID] = true
		case engine.EventJobCancelled:
			// Gone from the engine (a backend whose controller makes the
			// job anew, Kubernetes, submits it again): not invisible.
			delete(f.seen, ev.JobID)
			delete(f.shown, ev.JobID)
		}
	}
	return evs, err
}

// inject decides the fault of one bind call of job (a member, or a whole
// gang for a GangBinder) and, for a hang, waits for ctx; it returns the
// injected error, or nil to go on with the real call.
func (f *faulty) inject(ctx context.Context, job string) error {
	f.mu.Lock()
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
	return nil
}

// wrap returns w as the Runner's backend, with the optional interfaces of
// the backend under test: PendingReporter, and GangBinder (whose BindGang
// gets the same faults as BindMember, per gang).
func wrap(w *faulty) backends.Backend {
	_, pending := w.inner.(backends.PendingReporter)
	_, gang := w.inner.(backends.GangBinder)
	switch {
	case pending && gang:
		return faultyGangPending{faultyGang{w}}
	case gang:
		return faultyGang{w}
	case pending:
		return faultyPending{w}
	}
	return w
}

// faultyPending is faulty for backends that report their pending jobs.
type faultyPending struct{ *faulty }

func (f faultyPending) Pending(ctx context.Context) ([]*queue.Job, error) {
	return f.inner.(backends.PendingReporter).Pending(ctx)
}

// faultyGang is faulty for backends that bind a gang as one unit.
type faultyGang struct{ *faulty }

func (f faultyGang) BindGang(ctx context.Context, job string, ms []engine.Member) error {
	return f.bind(ctx, job, func(ctx context.Context) error { return f.inner.(backends.GangBinder).BindGang(ctx, job, ms) })
}

type faultyGangPending struct{ faultyGang }

func (f faultyGangPending) Pending(ctx context.Context) ([]*queue.Job, error) {
	return f.inner.(backends.PendingReporter).Pending(ctx)
}

// bind is one bind call of job (a member, or a whole gang for a
// GangBinder) through the scenario's faults; do is the real call.
//
//   - late: the call hangs until the Runner's timeout, then commits (the
//     backend finished after its client gave up) and returns the timeout;
//   - forever: the call hangs, ignoring its context, until the scenario
//     ends, and never commits;
//   - restartMid: the backend restarts between the call and its answer:
//     the bind commits (or, half the time, is lost with the restart) and
//     the answer is a transient error.
func (f *faulty) bind(ctx context.Context, job string, do func(ctx context.Context) error) error {
	f.mu.Lock()
	late, forever, mid := false, false, false
	if f.late[job] > 0 {
		late = f.take(f.late, job)
		f.nLate++
	} else if f.forever[job] > 0 {
		forever = f.take(f.forever, job)
		f.nForever++
	} else if f.restartMid[job] > 0 {
		mid = f.take(f.restartMid, job)
		f.nRestartMid++
	}
	lose := mid && f.rng.IntN(2) == 0
	f.mu.Unlock()
	switch {
	case late:
		<-ctx.Done()
		if err := f.apply(context.WithoutCancel(ctx), job, do); err != nil {
			return err
		}
		return ctx.Err()
	case forever:
		<-f.release
		return errors.New("backendtest: a call hung for ever returned at the end")
	case mid:
		if !lose {
			if err := f.apply(ctx, job, do); err != nil {
				return err
			}
		}
		return errors.New("backendtest: connection reset: the backend restarted before answering")
	}
	if err := f.inject(ctx, job); err != nil {
		return err
	}
	return f.apply(ctx, job, do)
}

// apply makes the real bind call of job; one the backend applies (nil)
// to a job that had ended before the call started it a second time: a
// violation. A call the backend refuses, or that the Runner makes and the
// backend does not apply, runs nothing.
func (f *faulty) apply(ctx context.Context, job string, do func(ctx context.Context) error) error {
	f.mu.Lock()
	ended := f.ended[job]
	f.mu.Unlock()
	err := do(ctx)
	if err == nil && ended {
		f.mu.Lock()
		f.rebound = append(f.rebound, job)
		f.mu.Unlock()
	}
	return err
}

// invisible returns an error naming the jobs a Runner has seen submitted,
// not finished, that an earlier View listed and v lists in neither Pending
// (nor EachPending after a cut) nor Running. A job the backend reported
// (Next returned it) and no View listed yet is not counted: on a real
// clock the Runner reads events on a goroutine of its own, ahead of the
// loop that steps them, so a View may come from before the job's step.
func (f *faulty) invisible(v *engine.View) error {
	if v == nil {
		return nil
	}
	in := map[string]bool{}
	for _, p := range v.Pending {
		in[p.Job] = true
	}
	for _, rj := range v.Running() {
		in[rj.Job] = true
	}
	if v.Unwalked > 0 {
		v.EachPending(func(j *queue.Job) bool { in[j.ID] = true; return true })
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var lost []string
	for id := range f.seen {
		switch {
		case in[id]:
			f.shown[id] = true
		case f.shown[id] && !f.ended[id]:
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		return fmt.Errorf("jobs invisible (in neither View.Pending nor Running) at %s: %v%s", v.At.Format("15:04:05.000"), lost, engineSays(v, lost))
	}
	return nil
}

// ghosts returns an error naming the jobs the backend runs that v neither
// runs nor binds (ReasonBinding, ReasonBindingUnknown). Backends that are
// no backends.RunningReporter are not checked.
func (f *faulty) ghosts(v *engine.View) error {
	// Only through RunningNow: Inventory.Running may act on what it finds.
	running, err := f.RunningNow(context.Background())
	if err != nil {
		return nil // no RunningReporter, or a backend gone: nothing to compare
	}
	ok := map[string]bool{}
	for _, rj := range v.Running() {
		ok[rj.Job] = true
	}
	for _, p := range v.Pending {
		if p.Reason == engine.ReasonBinding || p.Reason == engine.ReasonBindingUnknown {
			ok[p.Job] = true
		}
	}
	var ghosts []string
	for _, rj := range running {
		if !ok[rj.Job.ID] {
			ghosts = append(ghosts, rj.Job.ID)
		}
	}
	if len(ghosts) > 0 {
		return fmt.Errorf("ghosts: the backend runs %v, which the engine does not account as running", ghosts)
	}
	return nil
}
