package sim_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// actSim is the simulator with the preemptions, replica stops or member
// unbinds of one job hanging (ignoring their context): for ever (commit
// false: until the test ends, then they fail), or for hold (wall time)
// after which the call is made on the simulator (it commits after its
// timeout).
type actSim struct {
	*sim.Sim
	job    string
	hangOn string // "preempt", "stop" or "unbind"
	commit bool
	hold   time.Duration
	done   chan struct{}
	calls  atomic.Int64
	binds  sync.Map // job -> *atomic.Int64: BindMember calls that bound
}

func (h *actSim) hang(what, job string) bool {
	if what != h.hangOn || job != h.job {
		return false
	}
	h.calls.Add(1)
	if !h.commit {
		<-h.done
		return true
	}
	time.Sleep(h.hold)
	return false
}

func (h *actSim) Preempt(ctx context.Context, p engine.Preemption) error {
	if h.hang("preempt", p.Victim) {
		return fmt.Errorf("hung preemption of %s released", p.Victim)
	}
	return h.Sim.Preempt(context.WithoutCancel(ctx), p)
}

func (h *actSim) StopReplica(ctx context.Context, st engine.Stop) error {
	if h.hang("stop", st.Job) {
		return fmt.Errorf("hung stop of %s released", st.Job)
	}
	return h.Sim.StopReplica(context.WithoutCancel(ctx), st)
}

func (h *actSim) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	if h.hang("unbind", job) {
		return fmt.Errorf("hung unbind of %s released", job)
	}
	return h.Sim.UnbindMember(context.WithoutCancel(ctx), job, m)
}

func (h *actSim) BindMember(ctx context.Context, job string, m engine.Member) error {
	err := h.Sim.BindMember(ctx, job, m)
	if err == nil {
		n, _ := h.binds.LoadOrStore(job, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	return err
}

func (h *actSim) bound(job string) int64 {
	if n, ok := h.binds.Load(job); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// poolSim is a simulator with node a0 (label pool=a) and nodes b0, b1
// (pool=b), 8 GPUs each.
func poolSim(t *testing.T) *sim.Sim {
	t.Helper()
	spec := topo.Uniform(nil, nil, 3, 8, "H100")
	for i, name := range []string{"a0", "b0", "b1"} {
		spec.Nodes[i].Name = name
		spec.Nodes[i].Labels = map[string]string{"pool": name[:1]}
	}
	s, err := sim.New(sim.Config{Cluster: spec, Start: t0})
	require.NoError(t, err)
	return s
}

func poolJob(id, pool string, submit time.Duration, gpus int) *queue.Job {
	return &queue.Job{ID: id, Queue: "q", Submit: t0.Add(submit),
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: gpus, Selector: map[string]string{"pool": pool}}}}}
}

// others submits 200 one-GPU jobs of 5 minutes on pool b, one every 20
// s: at most 15 run at once on its 16 GPUs, so each starts at its
// arrival whatever happens on pool a.
func others(t *testing.T, s *sim.Sim) {
	for i := range 200 {
		require.NoError(t, s.Submit(poolJob(fmt.Sprintf("o%03d", i), "b", time.Duration(i)*20*time.Second, 1), 5*time.Minute))
	}
}

// checkOthers: every other job started at its arrival (no hang delayed
// its bind by even one cycle: the virtual clock does not move while
// calls are in flight).
func checkOthers(t *testing.T, s *sim.Sim) {
	t.Helper()
	n := 0
	for _, o := range s.Outcomes() {
		if o.ID[0] != 'o' {
			continue
		}
		n++
		assert.True(t, o.Started, "%s ran", o.ID)
		assert.Equal(t, o.Submit, o.Start, "%s starts at its arrival", o.ID)
		assert.True(t, o.Finished, "%s finished", o.ID)
	}
	assert.Equal(t, 200, n)
	assert.Empty(t, s.Violations(), "never two jobs on one GPU")
}

func outcome(s *sim.Sim, id string) sim.Outcome {
	for _, o := range s.Outcomes() {
		if o.ID == id {
			return o
		}
	}
	return sim.Outcome{}
}

// runActs runs be on s with priority preemption, CallTimeout timeout
// (wall clock), and returns the asynchronous outcomes seen.
func runActs(t *testing.T, s *sim.Sim, be backends.Backend, timeout time.Duration) []backends.ActResult {
	acts, _ := runActsBinds(t, s, be, timeout)
	return acts
}

func runActsBinds(t *testing.T, s *sim.Sim, be backends.Backend, timeout time.Duration) ([]backends.ActResult, []backends.BindResult) {
	t.Helper()
	var acts []backends.ActResult
	var binds []backends.BindResult
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}, {Name: "infer"}}},
			Preemption: engine.PreemptionConfig{Priority: true}, Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}},
		Backend: be, Clock: s, CallTimeout: timeout,
		Observe: func(c backends.Cycle) { acts, binds = append(acts, c.Acts...), append(binds, c.Binds...) },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, r.Run(ctx))
	return acts, binds
}

// preemptScenario: low (8 GPUs on pool a, preemptible, 40 minutes,
// protected for 10 minutes after a preemption) runs; at +1m high (8 GPUs
// on pool a, priority 10, 10 minutes) preempts it; 200 other jobs run on
// pool b meanwhile.
func preemptScenario(t *testing.T, s *sim.Sim) {
	low := poolJob("low", "a", 0, 8)
	low.Preemptible, low.MinRuntime = true, 10*time.Second
	require.NoError(t, s.Submit(low, 40*time.Minute))
	high := poolJob("high", "a", time.Minute, 8)
	high.Priority = 10
	require.NoError(t, s.Submit(high, 10*time.Minute))
	others(t, s)
}

// A preemption that hangs for ever (ignoring its context) delays no other
// job: its call is abandoned after CallTimeout, the preemption is
// unknown, the victim keeps its GPUs booked (the backend still runs it,
// and the call may come through yet), the preemptor waits: it starts
// when the victim ends, bound once. The 200 jobs on the other pool start
// at their arrivals, as without the hang.
func TestHungPreemptDelaysNoOtherJob(t *testing.T) {
	clean := poolSim(t)
	preemptScenario(t, clean)
	runActs(t, clean, clean, time.Second)
	checkOthers(t, clean)
	require.Equal(t, 1, outcome(clean, "low").Preemptions, "without the hang low is preempted")
	require.Equal(t, t0.Add(time.Minute), outcome(clean, "high").Start)

	s := poolSim(t)
	preemptScenario(t, s)
	h := &actSim{Sim: s, job: "low", hangOn: "preempt", done: make(chan struct{})}
	t.Cleanup(func() { close(h.done) })
	acts := runActs(t, s, h, 50*time.Millisecond)
	checkOthers(t, s)
	lo, hi := outcome(s, "low"), outcome(s, "high")
	assert.Equal(t, 0, lo.Preemptions, "the hung preemption never came through")
	assert.True(t, lo.Finished, "low ran to its end")
	assert.Equal(t, t0.Add(40*time.Minute), lo.End)
	assert.True(t, hi.Finished)
	assert.Equal(t, lo.End, hi.Start, "high starts once low's GPUs are free, not before")
	assert.Equal(t, int64(1), h.bound("high"), "high bound once")
	assert.Equal(t, int64(1), h.calls.Load(), "one preemption call: it stays unknown while it may come through")
	require.NotEmpty(t, acts)
	assert.Equal(t, backends.ActResult{Kind: "preempt", Job: "low", Err: acts[0].Err, Unknown: true, Cause: engine.PreemptPriority}, acts[0])
	assert.ErrorIs(t, acts[0].Err, backends.ErrCallTimeout)
}

// A preemption that commits after its timeout is reconciled: it is
// unknown (the victim keeps its GPUs), the abandoned call's late return
// says it was applied, the victim is gone and requeued, and the
// preemptor is bound once, on GPUs nothing else holds.
func TestLatePreemptIsReconciled(t *testing.T) {
	s := poolSim(t)
	preemptScenario(t, s)
	// The call returns (and preempts) 1.5 CallTimeouts after it began:
	// abandoned at the timeout, back within the grace the Runner gives
	// abandoned calls on a virtual clock (so the run is deterministic).
	h := &actSim{Sim: s, job: "low", hangOn: "preempt", commit: true, hold: 750 * time.Millisecond}
	acts := runActs(t, s, h, 500*time.Millisecond)
	checkOthers(t, s)
	lo, hi := outcome(s, "low"), outcome(s, "high")
	assert.Equal(t, 1, lo.Preemptions, "the late preemption came through")
	assert.True(t, lo.Finished, "low requeued and ran again")
	assert.Equal(t, t0.Add(time.Minute), hi.Start, "high starts when the victim is confirmed gone")
	assert.True(t, hi.Finished)
	assert.Equal(t, int64(1), h.bound("high"), "high bound once")
	assert.Equal(t, int64(1), h.calls.Load())
	require.NotEmpty(t, acts)
	assert.True(t, acts[0].Unknown, "the preemption was unknown first")
}

// serviceScenario: the service "chat" runs 8 one-GPU replicas on pool a
// (its only room: the training jobs take pool b first); at +10m it is
// scaled to 0, and job "big" (8 GPUs on pool a) is submitted at +11m.
func serviceScenario(t *testing.T, s *sim.Sim) {
	svc := &engine.Service{Name: "chat", Queue: "infer", QoS: engine.QoSGuaranteed,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, Selector: map[string]string{"pool": "a"}}}}},
		Min:     0, Max: 8, Desired: 8}
	require.NoError(t, s.SetService(t0, svc))
	require.NoError(t, s.ScaleService(t0.Add(10*time.Minute), "chat", 0))
	require.NoError(t, s.Submit(poolJob("big", "a", 11*time.Minute, 8), 10*time.Minute))
	others(t, s)
}

// A replica stop that hangs for ever delays no other job, and nothing is
// bound on the GPUs the replica may still hold: they are fenced (the
// backend still runs it), so "big" waits; the ghost sweep stops the
// replica (UnbindMember), the backend's running list shows it gone, the
// fence is lifted and "big" is bound once.
func TestHungStopReplicaDelaysNoOtherJob(t *testing.T) {
	s := poolSim(t)
	serviceScenario(t, s)
	var replica string
	h := &stopHang{Sim: s, done: make(chan struct{})}
	t.Cleanup(func() { close(h.done) })
	acts, binds := runActsBinds(t, s, h, 50*time.Millisecond)
	checkOthers(t, s)
	replica = h.hung()
	require.NotEmpty(t, replica, "a stop hung")
	big := outcome(s, "big")
	assert.True(t, big.Finished, "big ran")
	assert.Equal(t, int64(1), h.bound("big"), "big bound once")
	assert.True(t, big.Start.After(t0.Add(11*time.Minute)), "big waits for the fenced GPU (started %v)", big.Start.Sub(t0))
	deferred := 0
	for _, b := range binds {
		if b.Job == "big" && b.Err != nil {
			deferred++
			assert.Contains(t, b.Err.Error(), "GPU not released yet: the stop of "+replica+" timed out")
		}
	}
	assert.Positive(t, deferred, "big's bind was deferred, not made, while the GPU was fenced")
	var unknown bool
	for _, a := range acts {
		unknown = unknown || a.Kind == "stop" && a.Job == replica && a.Unknown
	}
	assert.True(t, unknown, "the stop of %s timed out: unknown", replica)
	running, err := s.Running(context.Background())
	require.NoError(t, err)
	assert.Empty(t, running, "every replica stopped, %s too", replica)
}

// stopHang is the simulator with the first replica stop hanging for ever.
type stopHang struct {
	*sim.Sim
	mu    sync.Mutex
	first string
	done  chan struct{}
	hold  time.Duration // non-zero: the stop commits after hold instead
	binds sync.Map
}

func (h *stopHang) hung() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.first
}

func (h *stopHang) StopReplica(ctx context.Context, st engine.Stop) error {
	h.mu.Lock()
	if h.first == "" {
		h.first = st.Job
		h.mu.Unlock()
		if h.hold > 0 { // commits after its timeout
			time.Sleep(h.hold)
			return h.Sim.StopReplica(context.WithoutCancel(ctx), st)
		}
		<-h.done
		return fmt.Errorf("hung stop of %s released", st.Job)
	}
	h.mu.Unlock()
	return h.Sim.StopReplica(ctx, st)
}

func (h *stopHang) BindMember(ctx context.Context, job string, m engine.Member) error {
	err := h.Sim.BindMember(ctx, job, m)
	if err == nil {
		n, _ := h.binds.LoadOrStore(job, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	return err
}

func (h *stopHang) bound(job string) int64 {
	if n, ok := h.binds.Load(job); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// unbindHang is the simulator with the first member unbind of one job
// hanging for ever (ignoring its context).
type unbindHang struct {
	*stopHang
	job  string
	once atomic.Bool
}

func (h *unbindHang) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	if job == h.job && !h.once.Swap(true) {
		<-h.done
		return fmt.Errorf("hung unbind of %s released", job)
	}
	return h.Sim.UnbindMember(ctx, job, m)
}

// A shrink whose unbind hangs for ever delays no other job, and nothing
// is bound on the GPU the member may still hold: the elastic job "el"
// (1-GPU members, 1 to 8, on pool a) has grown to 8 when "big" (4 GPUs on
// pool a, priority 10) arrives; the engine shrinks el by 4, one unbind
// hangs, the shrink's GPUs are fenced, big's bind is deferred (never
// made on them) until the backend's running list shows the member gone
// (the ghost sweep unbinds it), and big is bound once.
func TestHungShrinkDelaysNoOtherJob(t *testing.T) {
	s := poolSim(t)
	el := poolJob("el", "a", 0, 1)
	el.Request.Groups[0].Members = 8
	el.Elastic = queue.Elastic{MinMembers: 1, MaxMembers: 8}
	require.NoError(t, s.Submit(el, time.Hour))
	big := poolJob("big", "a", 10*time.Minute, 4)
	big.Priority = 10
	require.NoError(t, s.Submit(big, 10*time.Minute))
	others(t, s)
	h := &unbindHang{stopHang: &stopHang{Sim: s, done: make(chan struct{})}, job: "el"}
	t.Cleanup(func() { close(h.done) })
	acts, binds := runActsBinds(t, s, h, 50*time.Millisecond)
	checkOthers(t, s)
	require.True(t, h.once.Load(), "el was shrunk")
	b := outcome(s, "big")
	assert.True(t, b.Finished, "big ran")
	assert.Equal(t, int64(1), h.bound("big"), "big bound once")
	assert.True(t, b.Start.After(t0.Add(10*time.Minute)), "big waits for the fenced GPU (started %v)", b.Start.Sub(t0))
	deferred := 0
	for _, x := range binds {
		if x.Job == "big" && x.Err != nil {
			deferred++
			assert.Contains(t, x.Err.Error(), "GPU not released yet: the shrink of el timed out")
		}
	}
	assert.Positive(t, deferred, "big's bind was deferred while the GPU was fenced")
	var unknown bool
	for _, a := range acts {
		unknown = unknown || a.Kind == "shrink" && a.Job == "el" && a.Unknown
	}
	assert.True(t, unknown, "the shrink timed out: unknown")
	assert.True(t, outcome(s, "el").Finished, "el ran to its end")
}

// A replica stop that commits after its timeout is reconciled: the stop
// is unknown, its GPU fenced, until the late answer says it came through;
// the fence is lifted and "big" is bound once, at its arrival, on GPUs
// nothing else holds.
func TestLateStopReplicaIsReconciled(t *testing.T) {
	s := poolSim(t)
	serviceScenario(t, s)
	// Back 1.5 CallTimeouts after it began: abandoned, then within the
	// grace the Runner gives abandoned calls on a virtual clock.
	h := &stopHang{Sim: s, done: make(chan struct{}), hold: 750 * time.Millisecond}
	acts, binds := runActsBinds(t, s, h, 500*time.Millisecond)
	checkOthers(t, s)
	replica := h.hung()
	require.NotEmpty(t, replica)
	big := outcome(s, "big")
	assert.Equal(t, t0.Add(11*time.Minute), big.Start, "big starts at its arrival: the fence was lifted by the late answer")
	assert.Equal(t, int64(1), h.bound("big"), "big bound once")
	for _, b := range binds {
		assert.False(t, b.Job == "big" && b.Err != nil, "big's bind was not deferred: %v", b.Err)
	}
	var unknown bool
	for _, a := range acts {
		unknown = unknown || a.Kind == "stop" && a.Job == replica && a.Unknown
	}
	assert.True(t, unknown, "the stop of %s timed out first", replica)
	running, err := s.Running(context.Background())
	require.NoError(t, err)
	assert.Empty(t, running, "every replica stopped")
}
