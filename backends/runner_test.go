package backends_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fake is a scripted backend: Next hands out the batches of script, then
// blocks until ctx is done (or returns ErrClosed when closeAtEnd). Binds
// follow the rules set on it; every call is recorded.
type fake struct {
	spec       topo.Spec
	running    []backends.RunningJob
	script     [][]engine.Event
	closeAtEnd bool

	mu         sync.Mutex
	bound      map[string][]engine.Member
	refuseNode map[string]bool // binds on these nodes are refused
	transient  map[string]int  // job -> transient failures left
	block      map[string]bool // binds of these jobs block until ctx is done
	unbinds    []string
	preempted  []string
	refusePre  bool
	inflight   int
	maxFlight  int
	// awaitOverlap holds binds until two have been in flight at once.
	awaitOverlap bool
	calls        atomic.Int64

	refuseMIG    bool // MIG changes are refused
	transientMIG int  // MIG changes fail transiently this many times
	migCalls     int
	migApplied   []engine.MIGReconfiguration
	wakes        []time.Time // the wake of every Next call
}

func newFake(nodes, gpus int) *fake {
	return &fake{
		spec: topo.Uniform(nil, nil, nodes, gpus, "H100"), bound: map[string][]engine.Member{},
		refuseNode: map[string]bool{}, transient: map[string]int{}, block: map[string]bool{},
	}
}

func (f *fake) Cluster(context.Context) (topo.Spec, error)             { return f.spec, nil }
func (f *fake) Running(context.Context) ([]backends.RunningJob, error) { return f.running, nil }

func (f *fake) ApplyMIG(_ context.Context, r engine.MIGReconfiguration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.migCalls++
	if f.refuseMIG {
		return fmt.Errorf("%w: GPU busy", backends.ErrRefused)
	}
	if f.transientMIG > 0 {
		f.transientMIG--
		return errors.New("nvml: timeout")
	}
	f.migApplied = append(f.migApplied, r)
	return nil
}

func (f *fake) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	f.wakes = append(f.wakes, wake)
	if len(f.script) > 0 {
		b := f.script[0]
		f.script = f.script[1:]
		return b, nil
	}
	if f.closeAtEnd {
		return nil, backends.ErrClosed
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fake) BindMember(ctx context.Context, job string, m engine.Member) error {
	f.calls.Add(1)
	f.mu.Lock()
	f.inflight++
	f.maxFlight = max(f.maxFlight, f.inflight)
	block := f.block[job]
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	time.Sleep(time.Millisecond) // let calls overlap
	if f.awaitOverlap {
		// Hold this call until a second one is in flight (once), so that
		// "binds ran in parallel" does not hang on the scheduler's luck on
		// a loaded machine; the minute only bounds a Runner that never
		// overlaps calls, which the test then reports.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			f.mu.Lock()
			overlapped := f.maxFlight > 1
			f.mu.Unlock()
			if overlapped {
				break
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuseNode[m.Node] {
		return fmt.Errorf("%w: node %s", backends.ErrRefused, m.Node)
	}
	if f.transient[job] > 0 {
		f.transient[job]--
		return errors.New("apiserver: timeout")
	}
	f.bound[job] = append(f.bound[job], m)
	return nil
}

func (f *fake) UnbindMember(_ context.Context, job string, m engine.Member) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unbinds = append(f.unbinds, job+"@"+m.Node)
	f.bound[job] = slices.DeleteFunc(f.bound[job], func(b engine.Member) bool { return b.Node == m.Node })
	if len(f.bound[job]) == 0 {
		delete(f.bound, job)
	}
	return nil
}

func (f *fake) Preempt(_ context.Context, p engine.Preemption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refusePre {
		return fmt.Errorf("%w: victim busy", backends.ErrRefused)
	}
	f.preempted = append(f.preempted, p.Victim)
	delete(f.bound, p.Victim)
	return nil
}

func (f *fake) boundJobs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.bound {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// clock is a virtual clock that records the backoff sleeps.
type clock struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *clock) Now() time.Time { return t0 }
func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return ctx.Err()
}

func job(id string, members, per int) *queue.Job {
	return &queue.Job{ID: id, Queue: "q", Submit: t0, Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}}}
}

func config(f *fake, c *clock, cycles *[]backends.Cycle) backends.RunnerConfig {
	return backends.RunnerConfig{
		Engine: engine.Config{
			Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
			Policy: queue.StrictPriority(),
		},
		Backend: f, Clock: c,
		Observe: func(cy backends.Cycle) { *cycles = append(*cycles, cy) },
	}
}

func TestRunnerBindsEveryMemberWithinParallelism(t *testing.T) {
	f := newFake(16, 8)
	f.awaitOverlap = true
	var batch []engine.Event
	for i := range 16 {
		batch = append(batch, engine.Submitted(t0, job(fmt.Sprintf("j%02d", i), 1, 8)))
	}
	f.script = [][]engine.Event{batch}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	cfg := config(f, &clock{}, &cycles)
	cfg.Parallelism = 3
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	require.Len(t, cycles, 1)
	assert.Len(t, cycles[0].Ready.Binds, 16)
	assert.Empty(t, cycles[0].Outcome.RefusedBinds)
	assert.Len(t, f.boundJobs(), 16)
	assert.LessOrEqual(t, f.maxFlight, 3)
	assert.Greater(t, f.maxFlight, 1, "binds ran in parallel")
	require.NotNil(t, r.View())
	assert.Len(t, r.View().Running(), 16)
}

func TestRunnerRollsBackAHalfFailedGang(t *testing.T) {
	f := newFake(2, 4)
	f.refuseNode["n1"] = true
	f.script = [][]engine.Event{{engine.Submitted(t0, job("g", 2, 4))}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	r, err := backends.NewRunner(config(f, &clock{}, &cycles))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	require.NotEmpty(t, cycles)
	c := cycles[0]
	require.Len(t, c.Ready.Binds, 1)
	assert.True(t, c.Outcome.AssumeBinds, "binds are assumed; their outcomes come later")
	assert.Equal(t, []string{"g"}, failedBinds(cycles))
	assert.Empty(t, c.Errors)
	assert.Equal(t, []string{"g@n0"}, f.unbinds, "the member that was bound is unbound")
	assert.Empty(t, f.boundJobs())
	// The engine took the refusal: g is pending again, nothing runs.
	v := r.View()
	assert.Empty(t, v.Running())
	assert.Equal(t, 8, v.FreeGPUs)
}

func TestRunnerRetriesTransientErrorsWithBackoff(t *testing.T) {
	f := newFake(1, 8)
	f.transient["a"] = 2
	f.transient["b"] = 5
	f.script = [][]engine.Event{{engine.Submitted(t0, job("a", 1, 4)), engine.Submitted(t0, job("b", 1, 4))}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	c := &clock{}
	cfg := config(f, c, &cycles)
	cfg.Parallelism = 1
	cfg.Retry = backends.Retry{Attempts: 3, Initial: time.Second, Max: 90 * time.Second}
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	require.NotEmpty(t, cycles)
	assert.Equal(t, []string{"b"}, failedBinds(cycles), "b fails three times: given up")
	assert.Equal(t, []string{"a"}, f.boundJobs())
	// Each bind backs off on its own (they run side by side).
	assert.ElementsMatch(t, []time.Duration{time.Second, 2 * time.Second, time.Second, 2 * time.Second}, c.sleeps)
}

func TestRunnerStopsCleanlyOnCancel(t *testing.T) {
	f := newFake(2, 4)
	f.block["slow"] = true
	f.script = [][]engine.Event{{engine.Submitted(t0, job("fast", 1, 4)), engine.Submitted(t0, job("slow", 1, 4))}}
	var cycles []backends.Cycle
	cfg := config(f, &clock{}, &cycles)
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool { return f.calls.Load() == 2 }, time.Minute, time.Millisecond, "a hang bound, not a timing")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
	require.Len(t, cycles, 1, "the cycle in flight was advanced and observed")
	assert.Equal(t, []string{"fast"}, f.boundJobs(), "a whole gang that was bound stays bound")
	// The bind in flight ended with Run and was withdrawn: slow is
	// pending again (no try counted), fast runs.
	assert.Equal(t, []string{"fast"}, runningIDs(r.View()))
	var pend []string
	for _, p := range r.View().Pending {
		pend = append(pend, p.Job)
	}
	assert.Equal(t, []string{"slow"}, pend)
}

func TestRunnerCancelWhileWaiting(t *testing.T) {
	f := newFake(1, 1)
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}},
		Backend: f,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Run(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, r.Run(ctx), backends.ErrInvalidConfig, "Run runs once")
}

func TestRunnerRefusedPreemption(t *testing.T) {
	f := newFake(1, 4)
	low := job("low", 1, 4)
	low.Preemptible = true
	high := job("high", 1, 4)
	high.Priority = 10
	f.refusePre = true
	f.script = [][]engine.Event{{engine.Submitted(t0, low)}, {engine.Submitted(t0.Add(time.Minute), high)}, {engine.Tick(t0.Add(2 * time.Minute))}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	cfg := config(f, &clock{}, &cycles)
	cfg.Engine.Preemption.Priority = true
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	var refused []string
	var asked int
	for _, c := range cycles {
		asked += len(c.Ready.Preemptions)
		assert.Empty(t, c.Outcome.RefusedPreemptions, "preemptions are assumed: refusals come back as outcomes")
		for _, a := range c.Acts {
			if a.Kind == "preempt" && a.Err != nil {
				refused = append(refused, a.Job)
				assert.ErrorIs(t, a.Err, backends.ErrRefused)
			}
		}
	}
	require.Positive(t, asked, "the engine preempts low for high")
	assert.Equal(t, []string{"low"}, refused[:1])
	assert.Equal(t, []string{"low"}, f.boundJobs(), "low keeps running")
	assert.Equal(t, []string{"low"}, runningIDs(r.View()), "the victim is running again")
	noted := false
	for _, c := range cycles {
		noted = noted || strings.Contains(c.View.Holds["high"], "preemption of low failed")
	}
	assert.True(t, noted, "the next cycle shows the preemptor pending with the failure")
}

func TestRunnerStepErrors(t *testing.T) {
	// By default a bad event is logged and skipped: an unknown job, a
	// submission naming an unknown queue; the run goes on and finishes.
	f := newFake(1, 1)
	stray := job("stray", 1, 1)
	stray.Queue = "no-such-queue"
	f.script = [][]engine.Event{{engine.Finished(t0, "ghost")}, {engine.Submitted(t0, stray)}, {engine.Submitted(t0, job("a", 1, 1))}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	var logs bytes.Buffer
	cfg := config(f, &clock{}, &cycles)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	assert.Equal(t, []string{"a"}, f.boundJobs())
	var rejected, binds []string
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		switch rec["msg"] {
		case "event rejected, skipped":
			rejected = append(rejected, rec["job"].(string))
			assert.NotEmpty(t, rec["err"])
		case "bind":
			binds = append(binds, rec["job"].(string))
		}
	}
	assert.Equal(t, []string{"ghost", "stray"}, rejected, "each bad event is logged with its job ID:\n%s", logs.String())
	assert.Equal(t, []string{"a"}, binds)

	// OnStepError can still stop the run.
	f = newFake(1, 1)
	f.script = [][]engine.Event{{engine.Finished(t0, "ghost")}, {engine.Submitted(t0, job("a", 1, 1))}}
	f.closeAtEnd = true
	cfg = config(f, &clock{}, &cycles)
	cfg.OnStepError = func(ev engine.Event, err error) error { return fmt.Errorf("stop: %w", err) }
	r, err = backends.NewRunner(cfg)
	require.NoError(t, err)
	err = r.Run(context.Background())
	require.ErrorIs(t, err, engine.ErrUnknownJob)

	f = newFake(1, 1)
	f.script = [][]engine.Event{{engine.Finished(t0, "ghost")}, {engine.Submitted(t0, job("a", 1, 1))}}
	f.closeAtEnd = true
	cfg = config(f, &clock{}, &cycles)
	var skipped []string
	cfg.OnStepError = func(ev engine.Event, err error) error {
		skipped = append(skipped, ev.JobID)
		return nil
	}
	r, err = backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	assert.Equal(t, []string{"ghost"}, skipped)
	assert.Equal(t, []string{"a"}, f.boundJobs())
}

func TestRunnerAdoptsRunningJobs(t *testing.T) {
	f := newFake(1, 8)
	f.running = []backends.RunningJob{{Job: job("old", 1, 4), Members: []engine.Member{{Node: "n0", GPUs: []int{0, 1, 2, 3}}}, Start: t0}}
	f.script = [][]engine.Event{{engine.Submitted(t0, job("new", 1, 8))}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	r, err := backends.NewRunner(config(f, &clock{}, &cycles))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.NotEmpty(t, cycles)
	assert.Empty(t, cycles[len(cycles)-1].Ready.Binds, "new does not fit beside old")
	v := r.View()
	require.Len(t, v.Running(), 1)
	assert.Equal(t, "old", v.Running()[0].Job)
}

func TestNewRunnerErrors(t *testing.T) {
	for name, cfg := range map[string]backends.RunnerConfig{
		"no backend":                      {},
		"parallelism":                     {Backend: newFake(1, 1), Parallelism: -1},
		"retry":                           {Backend: newFake(1, 1), Retry: backends.Retry{Initial: -1}},
		"tickInterval":                    {Backend: newFake(1, 1), TickInterval: -time.Second},
		"retry initial above max":         {Backend: newFake(1, 1), Retry: backends.Retry{Initial: time.Second, Max: time.Millisecond}},
		"retry initial above default max": {Backend: newFake(1, 1), Retry: backends.Retry{Initial: time.Minute}},
		"engine config":                   {Backend: newFake(1, 1), Engine: engine.Config{Backfill: engine.BackfillConfig{Depth: -1}}},
		"save interval":                   {Backend: newFake(1, 1), SaveInterval: -time.Second},
		"call timeout":                    {Backend: newFake(1, 1), CallTimeout: -time.Second},
		"engine MIG factor":               {Backend: newFake(1, 1), Engine: engine.Config{MIG: engine.MIGConfig{WaitFactor: math.Inf(1)}}},
	} {
		_, err := backends.NewRunner(cfg)
		assert.ErrorIs(t, err, backends.ErrInvalidConfig, name)
	}
	r, err := backends.NewRunner(backends.RunnerConfig{Backend: newFake(1, 1)})
	require.NoError(t, err)
	assert.Nil(t, r.View(), "no engine before Run")
}

func TestRealClockSleep(t *testing.T) {
	var c backends.RealClock
	require.NoError(t, c.Sleep(context.Background(), time.Microsecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.Canceled)
	assert.False(t, c.Now().IsZero())
}

func TestRunnerClampsLateEvents(t *testing.T) {
	f := newFake(1, 8)
	f.script = [][]engine.Event{
		{engine.Submitted(t0.Add(time.Hour), job("a", 1, 4))},
		{engine.Submitted(t0, job("b", 1, 4))}, // stamped before the engine's clock
	}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	r, err := backends.NewRunner(config(f, &clock{}, &cycles))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Len(t, cycles, 2)
	assert.Equal(t, t0.Add(time.Hour), cycles[1].Ready.At)
	assert.Equal(t, []string{"a", "b"}, f.boundJobs())
}

// migFake is one H100 in MIG mode split into seven 1g instances: a 1g job
// takes one, then a 3g job waits two minutes, so the engine plans a
// reconfiguration of the idle instances at the scripted tick.
func migFake() *fake {
	f := newFake(1, 1)
	f.spec = topo.Spec{Nodes: []topo.NodeSpec{{Name: "m0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g,1g,1g,1g,1g,1g,1g"}}}
	prof := func(id, p string) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: t0, RuntimeEstimate: time.Hour, RuntimeLimit: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: p}}}}
	}
	big := prof("big", "3g.40gb")
	big.Submit = t0.Add(time.Minute)
	f.script = [][]engine.Event{
		{engine.Submitted(t0, prof("small", "1g.10gb"))},
		{engine.Submitted(t0.Add(time.Minute), big)},
		{engine.Tick(t0.Add(3 * time.Minute))},
		{engine.Tick(t0.Add(3 * time.Minute))},
	}
	f.closeAtEnd = true
	return f
}

func TestRunnerAppliesMIGWithRetries(t *testing.T) {
	f := migFake()
	f.transientMIG = 2
	var cycles []backends.Cycle
	c := &clock{}
	cfg := config(f, c, &cycles)
	cfg.Retry = backends.Retry{Attempts: 3, Initial: time.Second}
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	var mig []backends.Cycle
	for _, cy := range cycles {
		if len(cy.Ready.MIG) > 0 {
			mig = append(mig, cy)
		}
	}
	require.Len(t, mig, 1, "one reconfiguration planned")
	assert.Empty(t, mig[0].Outcome.RefusedMIG, "transient failures are retried")
	require.Len(t, mig[0].MIG, 1, "on a virtual clock the change's outcome is stepped in its own cycle")
	assert.NoError(t, mig[0].MIG[0].Err)
	assert.True(t, mig[0].Outcome.AssumeMIG)
	assert.Empty(t, mig[0].Errors)
	assert.Equal(t, 3, f.migCalls)
	require.Len(t, f.migApplied, 1)
	assert.Equal(t, "m0", f.migApplied[0].Node)
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, c.sleeps)
	assert.Contains(t, f.wakes, t0.Add(3*time.Minute), "a cycle right after the applied change")
	assert.Equal(t, []string{"big", "small"}, f.boundJobs(), "the 3g job runs on the new instance")
	var in []string
	for _, m := range f.bound["big"] {
		in = append(in, m.Instance.String())
	}
	assert.Equal(t, []string{f.migApplied[0].Create[0].String()}, in)
}

func TestRunnerReportsRefusedMIG(t *testing.T) {
	for _, name := range []string{"refused", "transient past retries"} {
		t.Run(name, func(t *testing.T) {
			f := migFake()
			if name == "refused" {
				f.refuseMIG = true
			} else {
				f.transientMIG = 100
			}
			var cycles []backends.Cycle
			cfg := config(f, &clock{}, &cycles)
			cfg.Engine.MIG.RetryBackoff = 10 * time.Minute
			r, err := backends.NewRunner(cfg)
			require.NoError(t, err)
			require.NoError(t, r.Run(context.Background()))

			var refused []engine.MIGReconfiguration
			for _, cy := range cycles {
				assert.Empty(t, cy.Outcome.RefusedMIG, "changes are assumed, their failures come back as events")
				for _, m := range cy.MIG {
					require.Error(t, m.Err)
					assert.False(t, m.Unknown)
					refused = append(refused, m.Change)
				}
				assert.Empty(t, cy.Errors)
			}
			require.Len(t, refused, 1)
			assert.Equal(t, "m0", refused[0].Node)
			assert.Empty(t, f.migApplied)
			assert.Equal(t, []string{"small"}, f.boundJobs(), "the 3g job still waits")
			assert.Contains(t, f.wakes, t0.Add(13*time.Minute), "a wake-up at the end of the MIG backoff")
			st := r.View().Pending
			require.Len(t, st, 1)
			assert.Equal(t, "big", st[0].Job)
			assert.NotEqual(t, engine.ReasonReconfiguring, st[0].Reason, "the refused plan was dropped")
		})
	}
}

// gangFake is a fake whose gangs bind whole (GangBinder): BindMember must
// never be called on it.
type gangFake struct {
	*fake
	gangCalls   atomic.Int64
	refuseGang  map[string]bool
	memberCalls atomic.Int64
}

func (g *gangFake) BindMember(context.Context, string, engine.Member) error {
	g.memberCalls.Add(1)
	return errors.New("BindMember called on a GangBinder")
}

func (g *gangFake) BindGang(_ context.Context, job string, ms []engine.Member) error {
	g.gangCalls.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuseGang[job] {
		return fmt.Errorf("%w: gang %s", backends.ErrRefused, job)
	}
	if g.transient[job] > 0 {
		g.transient[job]--
		return errors.New("slurmctld: timeout")
	}
	g.bound[job] = append(g.bound[job], ms...)
	return nil
}

func TestRunnerBindsWholeGangsWithGangBinder(t *testing.T) {
	g := &gangFake{fake: newFake(4, 8), refuseGang: map[string]bool{"bad": true}}
	g.transient["flaky"] = 1
	g.script = [][]engine.Event{{
		engine.Submitted(t0, job("ok", 2, 8)),
		engine.Submitted(t0, job("flaky", 1, 8)),
		engine.Submitted(t0, job("bad", 1, 8)),
	}}
	g.closeAtEnd = true
	var cycles []backends.Cycle
	cfg := config(g.fake, &clock{}, &cycles)
	cfg.Backend = g
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	require.NotEmpty(t, cycles)
	assert.Equal(t, []string{"bad"}, failedBinds(cycles))
	assert.Zero(t, g.memberCalls.Load(), "BindMember is not used when the backend binds gangs")
	assert.Equal(t, int64(4), g.gangCalls.Load(), "one call per gang, plus one retry of flaky")
	assert.Empty(t, g.unbinds, "a refused gang is not rolled back member by member")
	assert.Equal(t, []string{"flaky", "ok"}, g.boundJobs())
	g.mu.Lock()
	assert.Len(t, g.bound["ok"], 2, "both members of the gang in one call")
	g.mu.Unlock()
	assert.ElementsMatch(t, []string{"flaky", "ok"}, runningIDs(r.View()))
}

func runningIDs(v *engine.View) []string {
	var ids []string
	for _, rj := range v.Running() {
		ids = append(ids, rj.Job)
	}
	return ids
}

// hangingInventory's Cluster never returns (it ignores its context).
type hangingInventory struct {
	*fake
	release chan struct{}
}

func (h hangingInventory) Cluster(context.Context) (topo.Spec, error) {
	<-h.release
	return topo.Spec{}, errors.New("released")
}

func TestRunnerInventoryCallTimeout(t *testing.T) {
	h := hangingInventory{fake: newFake(1, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	r, err := backends.NewRunner(backends.RunnerConfig{Backend: h, CallTimeout: 10 * time.Millisecond})
	require.NoError(t, err)
	err = r.Run(context.Background())
	require.ErrorIs(t, err, backends.ErrCallTimeout)
}

// The Runner waits for Engine.NextWake: a running job's expected end (its
// estimate) is a wake-up though no TickInterval is set.
func TestRunnerWakesAtEngineNextWake(t *testing.T) {
	f := newFake(1, 8)
	a := job("a", 1, 8)
	a.RuntimeEstimate = time.Hour
	f.script = [][]engine.Event{{engine.Submitted(t0, a)}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	r, err := backends.NewRunner(config(f, &clock{}, &cycles))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Equal(t, []string{"a"}, f.boundJobs())
	assert.Contains(t, f.wakes, t0.Add(time.Hour), "a wake-up at a's expected end: %v", f.wakes)
}

// A job larger than the cluster is rejected at submission: the Runner
// logs it with its job ID and the limit, and runs the other jobs.
func TestRunnerSkipsJobThatNeverFits(t *testing.T) {
	f := newFake(1, 8)
	f.script = [][]engine.Event{{engine.Submitted(t0, job("huge", 2, 8)), engine.Submitted(t0, job("a", 1, 8))}}
	f.closeAtEnd = true
	var cycles []backends.Cycle
	var logs bytes.Buffer
	cfg := config(f, &clock{}, &cycles)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	assert.Equal(t, []string{"a"}, f.boundJobs())
	assert.Contains(t, logs.String(), `job=huge`)
	assert.Contains(t, logs.String(), `can never fit the cluster`)
}

// stopperFake is fake with StopReplica (backends.ReplicaStopper).
type stopperFake struct {
	*fake
	stopped []string
}

func (f *stopperFake) StopReplica(_ context.Context, st engine.Stop) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, st.Job)
	delete(f.bound, st.Job)
	return nil
}

func serviceScript() [][]engine.Event {
	svc := &engine.Service{
		Name: "web", Queue: "q", Max: 4, Desired: 3,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}},
	}
	return [][]engine.Event{{engine.ServiceSet(t0, svc)}, {engine.ServiceScaled(t0.Add(time.Minute), "web", 1)}}
}

// Stops of replicas reach a backend with StopReplica before the cycle's
// binds; a backend without it gets an error per stop.
func TestRunnerStopsReplicas(t *testing.T) {
	f := &stopperFake{fake: newFake(1, 4)}
	f.script, f.closeAtEnd = serviceScript(), true
	var cycles []backends.Cycle
	cfg := config(f.fake, &clock{}, &cycles)
	cfg.Backend = f
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Len(t, cycles, 2)
	assert.Len(t, cycles[0].Ready.Binds, 3)
	assert.Len(t, cycles[1].Ready.Stops, 2)
	assert.Empty(t, cycles[1].Errors)
	assert.ElementsMatch(t, []string{"web/2", "web/3"}, f.stopped)
	assert.Equal(t, []string{"web/1"}, f.boundJobs())

	g := newFake(1, 4)
	g.script, g.closeAtEnd = serviceScript(), true
	cycles = nil
	r, err = backends.NewRunner(config(g, &clock{}, &cycles))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Len(t, cycles, 2)
	require.Len(t, cycles[1].Errors, 2)
	assert.ErrorContains(t, cycles[1].Errors[0], "cannot stop replicas")
}

// failedBinds lists, in order, the jobs whose binds the cycles report
// failed (not unknown, not withdrawn).
func failedBinds(cycles []backends.Cycle) []string {
	var out []string
	for _, c := range cycles {
		for _, b := range c.Binds {
			if b.Err != nil && !b.Unknown && !b.Withdrawn {
				out = append(out, b.Job)
			}
		}
	}
	return out
}

// liveFake is a backend on the real clock: Next hands out the events the
// test sends; binds of hang block until their context is done; every
// bind that succeeds is recorded with the wall time.
type liveFake struct {
	*fake
	evs     chan []engine.Event
	hang    string
	mu      sync.Mutex
	boundAt map[string]time.Time
	hung    atomic.Int64
}

func (l *liveFake) Next(ctx context.Context, _ time.Time) ([]engine.Event, error) {
	select {
	case b := <-l.evs:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *liveFake) BindMember(ctx context.Context, job string, m engine.Member) error {
	if job == l.hang {
		l.hung.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	if err := l.fake.BindMember(ctx, job, m); err != nil {
		return err
	}
	l.mu.Lock()
	l.boundAt[job] = time.Now()
	l.mu.Unlock()
	return nil
}

// A hung call delays no other job by more than one cycle, on a real
// clock: while the bind of "stuck" hangs (CallTimeout a minute), jobs
// submitted one after another are each bound at once, long before the
// hung call times out: the loop does not wait on it.
func TestRunnerHungBindDelaysNoOtherJob(t *testing.T) {
	l := &liveFake{fake: newFake(4, 8), evs: make(chan []engine.Event), hang: "stuck", boundAt: map[string]time.Time{}}
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:      engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}},
		Backend:     l,
		CallTimeout: time.Minute,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	send := func(j *queue.Job) time.Time {
		j.Submit = time.Now()
		l.evs <- []engine.Event{engine.Submitted(j.Submit, j)}
		return j.Submit
	}
	send(job("stuck", 1, 1))
	require.Eventually(t, func() bool { return l.hung.Load() == 1 }, 10*time.Second, time.Millisecond)
	sent := map[string]time.Time{}
	for i := range 10 {
		id := fmt.Sprintf("j%d", i)
		sent[id] = send(job(id, 1, 1))
		// Each is bound before the next arrives: one cycle, not a
		// CallTimeout.
		require.Eventually(t, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			_, ok := l.boundAt[id]
			return ok
		}, 20*time.Second, time.Millisecond, "%s bound while stuck hangs", id)
	}
	assert.Equal(t, int64(1), l.hung.Load(), "stuck's call still hangs, untried again")
	var reason engine.ReasonCode
	require.Eventually(t, func() bool {
		for _, p := range r.View().Pending {
			if p.Job == "stuck" {
				reason = p.Reason
			}
		}
		return reason == engine.ReasonBinding
	}, 5*time.Second, time.Millisecond, "stuck is visible, binding")
	// The last bind's call can reach the backend before the cycle that
	// issued it publishes its View: the View catches up, without stuck.
	require.Eventually(t, func() bool { return len(r.View().Running()) == 10 }, 5*time.Second, time.Millisecond,
		"the ten jobs running in the View")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// preemptHangFake is liveFake whose preemption of "low" hangs until its
// context ends (CallTimeout, or Run stopping).
type preemptHangFake struct {
	*liveFake
	release chan struct{}
	calls   atomic.Int64
}

func (p *preemptHangFake) Preempt(ctx context.Context, pr engine.Preemption) error {
	if pr.Victim == "low" {
		p.calls.Add(1)
		select { // until the call's context ends (backends/sim's tests ignore it)
		case <-p.release:
		case <-ctx.Done():
		}
		return errors.New("released")
	}
	return p.liveFake.Preempt(ctx, pr)
}

// On a real clock, a preemption that hangs delays no other job: while the
// preemption of "low" hangs (CallTimeout a minute), jobs submitted one
// after another on the other nodes are each bound at once; the victim
// keeps its GPUs booked and the preemptor waits, pending (preempting),
// not bound on them.
func TestRunnerHungPreemptDelaysNoOtherJob(t *testing.T) {
	l := &liveFake{fake: newFake(4, 8), evs: make(chan []engine.Event), boundAt: map[string]time.Time{}}
	for i := range l.spec.Nodes {
		l.spec.Nodes[i].Labels = map[string]string{"pool": "b"}
	}
	l.spec.Nodes[0].Labels["pool"] = "a"
	p := &preemptHangFake{liveFake: l, release: make(chan struct{})}
	t.Cleanup(func() { close(p.release) })
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
			Preemption: engine.PreemptionConfig{Priority: true}, Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}},
		Backend:     p,
		CallTimeout: time.Minute,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	send := func(j *queue.Job, pool string) {
		j.Submit = time.Now()
		j.Request.Groups[0].Selector = map[string]string{"pool": pool}
		l.evs <- []engine.Event{engine.Submitted(j.Submit, j)}
	}
	bound := func(id string) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, ok := l.boundAt[id]
		return ok
	}
	low := job("low", 1, 8)
	low.Preemptible = true
	send(low, "a")
	require.Eventually(t, func() bool { return bound("low") }, 10*time.Second, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // low's start is before high's arrival
	high := job("high", 1, 8)
	high.Priority = 10
	send(high, "a")
	require.Eventually(t, func() bool { return p.calls.Load() == 1 }, 10*time.Second, time.Millisecond, "low's preemption is made, and hangs")
	for i := range 10 {
		id := fmt.Sprintf("j%d", i)
		send(job(id, 1, 1), "b")
		require.Eventually(t, func() bool { return bound(id) }, 20*time.Second, time.Millisecond, "%s bound while the preemption hangs", id)
	}
	assert.False(t, bound("high"), "the preemptor is not bound on the victim's GPUs")
	var reason engine.ReasonCode
	require.Eventually(t, func() bool {
		for _, x := range r.View().Pending {
			if x.Job == "high" {
				reason = x.Reason
			}
		}
		return reason == engine.ReasonPreempting
	}, 5*time.Second, time.Millisecond, "high is visible, preempting (last: %v)", &reason)
	running := runningIDs(r.View())
	assert.Contains(t, running, "low", "the victim keeps its GPUs booked")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// liveMIGFake is liveFake on nodes of 4 whole GPUs and "m0", one MIG GPU
// of seven 1g instances.
func liveMIGFake(nodes int) *liveFake {
	l := &liveFake{fake: newFake(nodes, 4), evs: make(chan []engine.Event), boundAt: map[string]time.Time{}}
	l.spec.Nodes = append(l.spec.Nodes, topo.NodeSpec{Name: "m0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g,1g,1g,1g,1g,1g,1g"})
	return l
}

// runMIGLive runs a Runner of cfg (queue "q", EASY backfill) on a real
// clock and submits "small" (1g) and "big" (3g, which needs a change of
// m0's layout), both waiting an hour already, so that the change is worth
// its cost at once. Cancel stops the Runner; done gets Run's error.
func runMIGLive(t *testing.T, l *liveFake, cfg backends.RunnerConfig) (*backends.Runner, context.CancelFunc, <-chan error) {
	t.Helper()
	cfg.Engine.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	cfg.Engine.Backfill = engine.BackfillConfig{Mode: engine.BackfillEASY}
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	prof := func(id, p string) *queue.Job {
		return &queue.Job{ID: id, Queue: "q", Submit: time.Now().Add(-time.Hour), RuntimeEstimate: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: p}}}}
	}
	l.evs <- []engine.Event{engine.Submitted(time.Now(), prof("small", "1g.10gb")), engine.Submitted(time.Now(), prof("big", "3g.40gb"))}
	return r, cancel, done
}

// migHangFake is liveFake whose MIG changes hang until their context ends
// (CallTimeout, or Run stopping).
type migHangFake struct {
	*liveFake
	migHung atomic.Int64
}

func (m *migHangFake) ApplyMIG(ctx context.Context, _ engine.MIGReconfiguration) error {
	m.migHung.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// On a real clock a MIG change that hangs delays only the binds on its
// GPU's new instances: while the change of m0 hangs (CallTimeout a
// minute), the 3g job placed on the instance it creates is booked but not
// bound (its bind waits behind the change), and jobs submitted one after
// another on the other nodes are each bound at once.
func TestRunnerHungMIGDelaysNoOtherJob(t *testing.T) {
	l := liveMIGFake(2)
	m := &migHangFake{liveFake: l}
	r, cancel, done := runMIGLive(t, l, backends.RunnerConfig{Backend: m, CallTimeout: time.Minute})
	require.Eventually(t, func() bool { return m.migHung.Load() == 1 }, 10*time.Second, time.Millisecond, "the change is called")
	reason := func(id string) engine.ReasonCode {
		for _, p := range r.View().Pending {
			if p.Job == id {
				return p.Reason
			}
		}
		return engine.ReasonNone
	}
	require.Eventually(t, func() bool { return reason("big") == engine.ReasonBinding }, 10*time.Second, time.Millisecond,
		"big is placed on the new instance, its bind waiting behind the change")
	for i := range 8 {
		id := fmt.Sprintf("j%d", i)
		j := job(id, 1, 1)
		j.Submit = time.Now()
		l.evs <- []engine.Event{engine.Submitted(j.Submit, j)}
		require.Eventually(t, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			_, ok := l.boundAt[id]
			return ok
		}, 20*time.Second, time.Millisecond, "%s bound while the MIG change hangs", id)
	}
	assert.Equal(t, int64(1), m.migHung.Load(), "the change still hangs, untried again")
	assert.Equal(t, engine.ReasonBinding, reason("big"))
	assert.NotContains(t, l.boundJobs(), "big", "no bind on an instance not made")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.NotContains(t, l.boundJobs(), "big", "the change was cut short: big's bind was not made")
}

// migLateFake is liveFake with a MIG GPU whose first change hangs until
// commit is closed and then is made (a call that comes through long after
// its timeout); MIGLayout reports the layout (backends.MIGReporter).
type migLateFake struct {
	*liveFake
	commit chan struct{}
	lmu    sync.Mutex
	layout mig.Layout
	calls  []engine.MIGReconfiguration
}

func (m *migLateFake) ApplyMIG(_ context.Context, r engine.MIGReconfiguration) error {
	m.lmu.Lock()
	m.calls = append(m.calls, r)
	first := len(m.calls) == 1
	m.lmu.Unlock()
	if first {
		<-m.commit
	}
	m.lmu.Lock()
	defer m.lmu.Unlock()
	if m.layout != r.From {
		return fmt.Errorf("%w: stale", backends.ErrRefused)
	}
	m.layout = r.To
	return nil
}

func (m *migLateFake) MIGLayout(context.Context, string, int) (mig.Layout, error) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	return m.layout, nil
}

func (m *migLateFake) migCallsSeen() []engine.MIGReconfiguration {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	return slices.Clone(m.calls)
}

// A MIG change whose call has not returned within ReconcileInterval while
// the GPU still has the old layout is given up (failed: the engine books
// the old layout); when the call comes through after all, the Runner
// undoes it with the reverse change, so that the GPU is as booked.
func TestRunnerUndoesMIGGivenUpThatCameThrough(t *testing.T) {
	l := liveMIGFake(1)
	h, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)
	start, err := mig.ParseLayout(h, "1g,1g,1g,1g,1g,1g,1g")
	require.NoError(t, err)
	m := &migLateFake{liveFake: l, commit: make(chan struct{}), layout: start}
	var mu sync.Mutex
	var results []backends.MIGResult
	_, cancel, done := runMIGLive(t, l, backends.RunnerConfig{
		Engine:            engine.Config{MIG: engine.MIGConfig{RetryBackoff: time.Hour}},
		Backend:           m,
		CallTimeout:       50 * time.Millisecond,
		ReconcileInterval: 200 * time.Millisecond,
		Observe: func(c backends.Cycle) {
			mu.Lock()
			results = append(results, c.MIG...)
			mu.Unlock()
		},
	})
	given := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range results {
			if x.Err != nil && !x.Unknown && strings.Contains(x.Err.Error(), "given up") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, given, 20*time.Second, time.Millisecond, "the change is given up")
	require.Len(t, m.migCallsSeen(), 1)
	first := m.migCallsSeen()[0]
	close(m.commit) // it comes through after all
	require.Eventually(t, func() bool { return len(m.migCallsSeen()) == 2 }, 20*time.Second, time.Millisecond, "the Runner undoes it")
	undo := m.migCallsSeen()[1]
	assert.Equal(t, first.To, undo.From)
	assert.Equal(t, first.From, undo.To)
	require.Eventually(t, func() bool {
		got, _ := m.MIGLayout(context.Background(), "m0", 0)
		return got == start
	}, 5*time.Second, time.Millisecond, "the GPU is back at the layout the engine books")
	assert.NotContains(t, l.boundJobs(), "big", "no bind on the instance of a change given up")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
