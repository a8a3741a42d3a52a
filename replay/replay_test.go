package replay

import (
	"context"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/replay/metrics"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

func replaySynthetic(t testing.TB, jobs, gpus int) []workload.Job {
	t.Helper()
	c := workload.DefaultSynthetic()
	c.Jobs, c.ClusterGPUs = jobs, gpus
	js, err := workload.Synthetic(c)
	require.NoError(t, err)
	return js
}

// replayRace reports whether the test binary runs with the race detector
// (the full-trace tests are left to the plain run).
func replayRace() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// replayTrace loads a shared trace (tracetest's skip-or-fail rule).
func replayTrace(t testing.TB, kind string) []workload.Job {
	t.Helper()
	return tracetest.Open(t, kind).Jobs
}

func TestEngineConfig(t *testing.T) {
	for _, p := range Policies() {
		c, err := EngineConfig(p)
		require.NoError(t, err, p)
		assert.NotNil(t, c.Policy, p)
	}
	_, err := EngineConfig("sjf")
	require.ErrorIs(t, err, ErrInvalid)
	for _, p := range DefaultPolicies() {
		assert.Contains(t, Policies(), p)
	}
}

func TestClusterSpec(t *testing.T) {
	spec, err := Cluster{Nodes: 16, GPUsPerNode: 8, Racks: 4}.Spec()
	require.NoError(t, err)
	assert.Len(t, spec.Nodes, 16)
	assert.Equal(t, []string{"rack"}, spec.Levels)
	spec, err = Cluster{Nodes: 3, GPUsPerNode: 2}.Spec()
	require.NoError(t, err)
	assert.Empty(t, spec.Levels)
	for _, bad := range []Cluster{{}, {Nodes: 4}, {Nodes: 4, GPUsPerNode: 65}, {Nodes: 10, GPUsPerNode: 8, Racks: 3}, {Nodes: 2, GPUsPerNode: 8, Racks: 3}, {Nodes: 2, GPUsPerNode: 8, Racks: -1}} {
		_, err := bad.Spec()
		assert.ErrorIs(t, err, ErrInvalid, "%+v", bad)
	}
}

func TestReplayRequest(t *testing.T) {
	g := func(r gang.Request) [][2]int {
		var out [][2]int
		for _, x := range r.Groups {
			out = append(out, [2]int{x.Members, x.GPUsPerMember})
		}
		return out
	}
	assert.Equal(t, [][2]int{{1, 3}}, g(replayRequest(3, 8)))
	assert.Equal(t, [][2]int{{1, 8}}, g(replayRequest(8, 8)))
	assert.Equal(t, [][2]int{{4, 8}}, g(replayRequest(32, 8)))
	assert.Equal(t, [][2]int{{1, 8}, {1, 4}}, g(replayRequest(12, 8)))
}

func TestReplaySynthetic(t *testing.T) {
	jobs := replaySynthetic(t, 250, 128)
	cl := Cluster{Nodes: 16, GPUsPerNode: 8, Racks: 2}
	for _, p := range Policies() {
		t.Run(p, func(t *testing.T) {
			var cycles, lastDone int
			cfg := Config{Workload: "syn", Jobs: jobs, Cluster: cl, Policy: p, EstimateFactor: 1,
				Progress: func(n int) {
					require.GreaterOrEqual(t, n, lastDone)
					lastDone = n
				},
				Observe: func(backends.Cycle) { cycles++ }}
			r, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			res := r.Result
			assert.Equal(t, p, res.Policy)
			assert.Equal(t, 250, res.Jobs)
			assert.Equal(t, 250, res.Finished)
			assert.Equal(t, 250, lastDone)
			assert.Positive(t, cycles)
			assert.Empty(t, r.Violations)
			assert.Zero(t, r.Dropped)
			assert.InDelta(t, 0.5, res.Utilization, 0.5)
			assert.Positive(t, res.Utilization)
			assert.GreaterOrEqual(t, res.P95Wait, res.AvgWait/20)
			assert.GreaterOrEqual(t, res.AvgBSLD, 1.0)
			assert.LessOrEqual(t, res.LargestPlaceableGang, cl.GPUs())
			assert.GreaterOrEqual(t, res.FragFreeGPUs, 0.0)
			assert.Len(t, r.Waits, 250)
			assert.True(t, slices.IsSorted(r.Waits))
			assert.NotEmpty(t, r.Series)
			if p == "fifo" {
				assert.Zero(t, r.Reserved, "no backfill, no reservation")
			}
			if p == "easy" || p == "conservative" {
				assert.Positive(t, r.Reserved)
				assert.Empty(t, r.Delayed, "%s with exact estimates delays no reservation", p)
			}
			again, err := Run(context.Background(), Config{Workload: "syn", Jobs: jobs, Cluster: cl, Policy: p, EstimateFactor: 1})
			require.NoError(t, err)
			assert.Equal(t, res, again.Result, "deterministic")
		})
	}
}

func TestReplayDropsWhatCannotRun(t *testing.T) {
	jobs := []workload.Job{
		{ID: "ok", Submit: 0, Runtime: time.Minute, GPUs: 2, NumGPU: 2, GPUMilli: 1000},
		{ID: "huge", Submit: 0, Runtime: time.Minute, GPUs: 64, NumGPU: 64, GPUMilli: 1000},
		{ID: "cpu", Submit: 0, Runtime: time.Minute},
		{ID: "share", Submit: 0, Runtime: time.Minute, NumGPU: 1, GPUMilli: 500},
	}
	r, err := Run(context.Background(), Config{Jobs: jobs, Cluster: Cluster{Nodes: 2, GPUsPerNode: 8}, Policy: "easy"})
	require.NoError(t, err)
	assert.Equal(t, 3, r.Dropped)
	assert.Equal(t, 1, r.Result.Finished)
	assert.Equal(t, time.Minute, r.Result.Makespan)

	early := append([]workload.Job{{ID: "early", Submit: -time.Hour, Runtime: time.Minute, GPUs: 1, NumGPU: 1, GPUMilli: 1000}}, jobs...)
	r, err = Run(context.Background(), Config{Jobs: early, Cluster: Cluster{Nodes: 2, GPUsPerNode: 8}, Policy: "fifo"})
	require.NoError(t, err, "a submission before the trace start")
	assert.Equal(t, 2, r.Result.Finished)
	assert.Equal(t, time.Hour+time.Minute, r.Result.Makespan)

	_, err = Run(context.Background(), Config{Jobs: jobs, Cluster: Cluster{Nodes: 2, GPUsPerNode: 8}, Policy: "easy", EstimateFactor: 0.5})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Run(context.Background(), Config{Jobs: jobs, Cluster: Cluster{Nodes: 2, GPUsPerNode: 8}, Policy: "nope"})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestReplayCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Jobs: replaySynthetic(t, 50, 64), Cluster: Cluster{Nodes: 8, GPUsPerNode: 8}, Policy: "easy"})
	require.ErrorIs(t, err, context.Canceled)
	_, err = RunMany(ctx, []Config{{Jobs: replaySynthetic(t, 50, 64), Cluster: Cluster{Nodes: 8, GPUsPerNode: 8}, Policy: "easy"}}, 0)
	require.ErrorIs(t, err, context.Canceled)
}

// Done is called once per replay, when Run returns, whether it succeeded
// or not (progress bars count replays with it).
func TestReplayDone(t *testing.T) {
	var done [3]int
	cfgs := []Config{
		{Jobs: replaySynthetic(t, 30, 16), Cluster: Cluster{Nodes: 2, GPUsPerNode: 8}, Policy: "easy", Done: func() { done[0]++ }},
		{Jobs: replaySynthetic(t, 30, 16), Cluster: Cluster{Nodes: 2, GPUsPerNode: 8}, Policy: "fifo", Done: func() { done[1]++ }},
	}
	_, err := RunMany(context.Background(), cfgs, 1)
	require.NoError(t, err)
	_, err = Run(context.Background(), Config{Jobs: cfgs[0].Jobs, Policy: "nope", Done: func() { done[2]++ }})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, [3]int{1, 1, 1}, done)
}

func TestMeanResult(t *testing.T) {
	a := metrics.Result{Policy: "easy", Utilization: 0.5, AvgWait: time.Minute, Jobs: 10, Finished: 10, LargestPlaceableGang: 8}
	b := metrics.Result{Policy: "easy", Utilization: 0.7, AvgWait: 3 * time.Minute, Jobs: 10, Finished: 9, LargestPlaceableGang: 16, Preemptions: 3}
	m := MeanResult([]metrics.Result{a, b})
	assert.Equal(t, "easy", m.Policy)
	assert.InDelta(t, 0.6, m.Utilization, 1e-12)
	assert.Equal(t, 2*time.Minute, m.AvgWait)
	assert.Equal(t, 10, m.Jobs)
	assert.Equal(t, 12, m.LargestPlaceableGang)
	assert.Equal(t, 2, m.Preemptions)
	assert.Equal(t, a, MeanResult([]metrics.Result{a}))
	assert.Equal(t, metrics.Result{}, MeanResult(nil))
}

// replayCompare runs policies on jobs with exact and inflated estimates
// and checks the trace comparison's claims: every job runs, EASY's
// utilization is at least FIFO's (strictly more where strict is set), and
// with exact estimates EASY delays no reserved job past its first
// reservation. Conservative backfill is run on conservativeJobs jobs only
// (it is the slowest policy).
func replayCompare(t *testing.T, name string, jobs []workload.Job, cl Cluster, conservativeJobs int, strict bool) {
	for _, factor := range []float64{1, 2} {
		var cfgs []Config
		for _, p := range []string{"fifo", "easy", "fairshare", "conservative"} {
			js := jobs
			if p == "conservative" {
				js = jobs[:min(len(jobs), conservativeJobs)]
			}
			cfgs = append(cfgs, Config{Workload: name, Jobs: js, Cluster: cl, Policy: p, EstimateFactor: factor, EstimateSeed: 42})
		}
		rs, err := RunMany(context.Background(), cfgs, 0)
		require.NoError(t, err)
		fifo, easy := rs[0].Result, rs[1].Result
		for i, r := range rs {
			t.Logf("%s estimates x%v %-12s util %.4f avg wait %v p95 %v bsld %.2f reserved %d delayed %d (%d jobs)",
				name, factor, r.Result.Policy, r.Result.Utilization, r.Result.AvgWait.Round(time.Second),
				r.Result.P95Wait.Round(time.Second), r.Result.AvgBSLD, r.Reserved, len(r.Delayed), len(cfgs[i].Jobs))
			assert.Empty(t, r.Violations, r.Result.Policy)
			assert.Equal(t, r.Result.Jobs, r.Result.Finished, r.Result.Policy)
		}
		if strict {
			assert.Greater(t, easy.Utilization, fifo.Utilization, "%s x%v: EASY beats FIFO", name, factor)
		} else {
			assert.GreaterOrEqual(t, easy.Utilization, fifo.Utilization, "%s x%v: EASY at least FIFO", name, factor)
		}
		assert.LessOrEqual(t, easy.AvgWait, fifo.AvgWait, "%s x%v", name, factor)
		if factor == 1 {
			assert.Empty(t, rs[1].Delayed, "%s: EASY with exact estimates delayed a reservation", name)
		}
	}
}

// TestReplayTraceComparison is the job-trace comparison of docs/metrics.md
// (ITP cluster04 on 64 x 8 GPUs, NASA iPSC on 16 x 8): a cut of each
// trace under -race, the whole traces otherwise (conservative backfill on
// a cut in both cases).
func TestReplayTraceComparison(t *testing.T) {
	itp := replayTrace(t, workload.KindITP)
	nasa := replayTrace(t, workload.KindSWF)
	itpCut, nasaCut, consCut := 1000, 2000, 300
	if !replayRace() && !testing.Short() {
		itpCut, nasaCut, consCut = len(itp), len(nasa), 600
	}
	t.Run("itp04", func(t *testing.T) {
		replayCompare(t, "itp04", itp[:itpCut], Cluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}, consCut, true)
	})
	t.Run("nasa", func(t *testing.T) {
		// The NASA log is lightly loaded on 128 GPUs: its makespan is set
		// by the last arrival, so utilization ties.
		replayCompare(t, "nasa", nasa[:nasaCut], Cluster{Nodes: 16, GPUsPerNode: 8, Racks: 2}, consCut, false)
	})
}

func TestReplaySyntheticMIG(t *testing.T) {
	c := DefaultSyntheticMIG()
	c.Nodes, c.WholeJobs, c.FracJobs = 4, 60, 300
	jobs, spec, err := SyntheticMIG(c)
	require.NoError(t, err)
	again, _, err := SyntheticMIG(c)
	require.NoError(t, err)
	require.Equal(t, jobs, again, "seeded")
	for _, p := range []string{"fifo", "easy"} {
		t.Run(p, func(t *testing.T) {
			r, err := Run(context.Background(), Config{Workload: "synthetic-mig", Jobs: jobs, Spec: spec, Policy: p, EstimateFactor: 1})
			require.NoError(t, err)
			t.Logf("%s: util %.4f wait %v finished %d/%d frac %d mig decided %d sim %+v", p, r.Result.Utilization, r.Result.AvgWait, r.Result.Finished, r.Result.Jobs, r.Fractional, r.MIGDecided, r.Sim)
			assert.Empty(t, r.Violations)
			assert.Equal(t, len(jobs), r.Result.Jobs+r.Dropped, "every job accounted for")
			assert.Zero(t, r.Dropped)
			assert.Equal(t, r.Result.Jobs, r.Result.Finished)
			assert.Equal(t, 300, r.Fractional)
			assert.Equal(t, 32, r.ClusterGPUs)
			assert.Positive(t, r.MIGDecided, "1g-split GPUs must be re-laid out for 2g..4g asks")
			assert.Equal(t, r.MIGDecided, r.Sim.MIGApplied+r.Sim.MIGRefused, "every decision reached the simulator")
			assert.Zero(t, r.Sim.MIGRefused)
			assert.Equal(t, 300, r.Sim.InstanceBinds)
			assert.Positive(t, r.Sim.InstancesDestroyed)
			assert.Greater(t, r.Result.Utilization, 0.0)
			assert.Less(t, r.Result.Utilization, 1.0)
		})
	}
}

// replayOpenb loads the openb pods and nodes (tracetest's skip-or-fail
// rule).
func replayOpenb(t testing.TB) ([]workload.Job, topo.Spec) {
	t.Helper()
	tr := tracetest.Open(t, workload.KindOpenb)
	spec, err := OpenbSpec(tr.Nodes)
	require.NoError(t, err)
	return tr.Jobs, spec
}

// TestReplayOpenbTrace replays the openb pods as a time trace: share pods
// become fractional members on GPUs shared on demand.
func TestReplayOpenbTrace(t *testing.T) {
	pods, spec := replayOpenb(t)
	if replayRace() || testing.Short() {
		pods = pods[:1500]
	}
	gpus := 0
	for _, n := range spec.Nodes {
		gpus += n.GPUs
	}
	shared, noRun := 0, 0
	for i := range pods {
		if pods[i].Runtime <= 0 {
			noRun++
		} else if pods[i].Shared() && pods[i].NumGPU == 1 {
			shared++
		}
	}
	r, err := Run(context.Background(), Config{Workload: "openb", Jobs: pods, Spec: spec, Policy: "easy", EstimateFactor: 1})
	require.NoError(t, err)
	t.Logf("openb: %d pods, %d replayed, %d dropped (%d no runtime), %d fractional; util %.4f wait %v sim %+v",
		len(pods), r.Result.Jobs, r.Dropped, r.NoRuntime, r.Fractional, r.Result.Utilization, r.Result.AvgWait, r.Sim)
	assert.Empty(t, r.Violations)
	assert.Equal(t, len(pods), r.Result.Jobs+r.Dropped, "every pod accounted for")
	assert.Equal(t, noRun, r.NoRuntime)
	assert.Equal(t, shared, r.Fractional)
	assert.Positive(t, r.Fractional)
	assert.Equal(t, r.Fractional, r.Sim.ShareBinds)
	assert.Greater(t, r.Sim.MaxSharesPerGPU, 1, "share pods pack onto one GPU")
	assert.Equal(t, r.Result.Jobs, r.Result.Finished)
	assert.Equal(t, gpus, r.ClusterGPUs)
}

// Share pods run as fractional members where the cluster shares GPUs; pods
// that never ran and CPU-only pods are dropped and counted.
func TestReplaySharePods(t *testing.T) {
	jobs := []workload.Job{
		{ID: "whole", Submit: 0, Runtime: time.Hour, GPUs: 2, NumGPU: 2, GPUMilli: 1000, CPUMilli: 4000, MemoryMiB: 1024},
		{ID: "s1", Submit: 0, Runtime: time.Hour, NumGPU: 1, GPUMilli: 500, CPUMilli: 1000},
		{ID: "s2", Submit: time.Minute, Runtime: time.Hour, NumGPU: 1, GPUMilli: 400},
		{ID: "s3", Submit: time.Minute, Runtime: 30 * time.Minute, NumGPU: 1, GPUMilli: 300},
		{ID: "never", Submit: 0, NumGPU: 1, GPUMilli: 300},
		{ID: "cpu", Submit: 0, Runtime: time.Hour, CPUMilli: 1000},
		{ID: "multi", Submit: 0, Runtime: time.Hour, NumGPU: 2, GPUMilli: 500},
	}
	spec, err := OpenbSpec([]workload.Node{{Name: "a", GPUs: 2, Model: "V100M16", CPUMilli: 8000, MemoryMiB: 4096},
		{Name: "b", GPUs: 1, Model: "T4", CPUMilli: 8000}, {Name: "cpu-only", CPUMilli: 8000}})
	require.NoError(t, err)
	require.Len(t, spec.Nodes, 2, "CPU-only nodes are left out")
	r, err := Run(context.Background(), Config{Workload: "shares", Jobs: jobs, Spec: spec, Policy: "fifo", EstimateFactor: 1})
	require.NoError(t, err)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 3, r.Dropped)
	assert.Equal(t, 1, r.NoRuntime)
	assert.Equal(t, 3, r.Fractional)
	assert.Equal(t, 3, r.ClusterGPUs)
	assert.Equal(t, 4, r.Result.Finished)
	assert.Equal(t, 3, r.Sim.ShareBinds)
	assert.GreaterOrEqual(t, r.Sim.MaxSharesPerGPU, 2, "500 + 400 milli share the free GPU")
	// s1 and s2 share the T4 (900 milli); s3 (300) fits nowhere until the
	// whole job or s1 ends at 60 min, and runs to 90. GPU milli held over
	// 3 GPUs x 90 minutes:
	want := (2000.0*60 + 500*60 + 400*60 + 300*30) / (3000.0 * 90)
	assert.InDelta(t, want, r.Result.Utilization, 1e-9)
	assert.Equal(t, 90*time.Minute, r.Result.Makespan)

	_, err = OpenbSpec([]workload.Node{{Name: "cpu"}})
	require.ErrorIs(t, err, ErrInvalid)
	_, _, err = SyntheticMIG(SyntheticMIGConfig{Nodes: 1, WholeJobs: 1})
	require.ErrorIs(t, err, ErrInvalid)
}

// The jobs arrive in submission order whatever the workload's order: a
// workload listed backwards replays as the same workload listed forwards
// (distinct submit times, so IDs break no ties), and the outcomes keep the
// workload's order.
func TestRunUnsortedWorkload(t *testing.T) {
	fwd := replaySynthetic(t, 300, 64)
	for i := range fwd {
		fwd[i].Submit = time.Duration(i) * 37 * time.Second
	}
	back := slices.Clone(fwd)
	slices.Reverse(back)
	cl := Cluster{Nodes: 8, GPUsPerNode: 8}
	a, err := Run(context.Background(), Config{Workload: "fwd", Jobs: fwd, Cluster: cl, Policy: "easy", EstimateFactor: 1})
	require.NoError(t, err)
	b, err := Run(context.Background(), Config{Workload: "back", Jobs: back, Cluster: cl, Policy: "easy", EstimateFactor: 1})
	require.NoError(t, err)
	require.Equal(t, 300, b.Result.Finished)
	assert.Positive(t, a.Result.AvgWait, "the jobs queue")
	assert.Equal(t, a.Waits, b.Waits)
	assert.Equal(t, a.Result.Makespan, b.Result.Makespan)
	assert.InDelta(t, a.Result.Utilization, b.Result.Utilization, 1e-12)
	assert.InDelta(t, a.Result.AvgWait.Seconds(), b.Result.AvgWait.Seconds(), 1e-6)
	assert.Equal(t, a.GPUMicroseconds, b.GPUMicroseconds)
	assert.Equal(t, a.Cycles, b.Cycles)
}

// replayJobs orders the arrivals by submit time (ties in workload order)
// and keeps the workload's IDs and outcome positions.
func TestReplayJobsArrivalOrder(t *testing.T) {
	js := replaySynthetic(t, 6, 64)
	subs := []time.Duration{50, 10, 30, 10, 0, 30}
	for i := range js {
		js[i].Submit = subs[i] * time.Second
	}
	js[2].Runtime = 0 // dropped: no runtime
	wl, _, dropped, _, err := replayJobs(&Config{Jobs: js, Cluster: Cluster{Nodes: 8, GPUsPerNode: 8}, EstimateFactor: 1}, map[string]int{})
	require.NoError(t, err)
	assert.Equal(t, 1, dropped)
	assert.Equal(t, []int32{0, 1, 3, 4, 5}, wl.keep)
	var ids []string
	var at []time.Duration
	for n := range wl.keep {
		q, _ := wl.job(wl.pos(n))
		ids = append(ids, q.ID)
		at = append(at, q.Submit.Sub(replayBase))
	}
	assert.Equal(t, []string{"j4", "j1", "j3", "j5", "j0"}, ids)
	assert.True(t, slices.IsSorted(at))
	sorted := slices.Clone(js)
	slices.SortStableFunc(sorted, func(a, b workload.Job) int { return int(a.Submit - b.Submit) })
	wl, _, _, _, err = replayJobs(&Config{Jobs: sorted, Cluster: Cluster{Nodes: 8, GPUsPerNode: 8}, EstimateFactor: 1}, map[string]int{})
	require.NoError(t, err)
	assert.Nil(t, wl.arrive, "sorted: arrival order is workload order")
}

// sliceSource is a JobSource over a slice.
type sliceSource []workload.Job

func (s sliceSource) Len() int { return len(s) }
func (s sliceSource) Each(yield func(int, *workload.Job) bool) {
	for i := range s {
		j := s[i] // a copy: the replay may not keep it
		if !yield(i, &j) {
			return
		}
	}
}

// A Source replays exactly as the same jobs in Jobs: the generated
// workload streamed (workload.SyntheticJobs) and a slice with dropped jobs.
func TestRunSource(t *testing.T) {
	c := workload.DefaultSynthetic()
	c.Jobs, c.ClusterGPUs = 400, 64
	jobs, err := workload.Synthetic(c)
	require.NoError(t, err)
	gen, err := workload.NewSyntheticJobs(c)
	require.NoError(t, err)
	cl := Cluster{Nodes: 8, GPUsPerNode: 8}
	for _, policy := range []string{"easy", "fairshare"} {
		a, err := Run(context.Background(), Config{Workload: "w", Jobs: jobs, Cluster: cl, Policy: policy, EstimateFactor: 1})
		require.NoError(t, err)
		b, err := Run(context.Background(), Config{Workload: "w", Source: gen, Cluster: cl, Policy: policy, EstimateFactor: 1})
		require.NoError(t, err)
		assert.Positive(t, a.Result.AvgWait, "the jobs queue")
		assert.Equal(t, a, b, policy)
	}
	// Dropped jobs (no runtime, too large) and estimates of the workload.
	mixed := slices.Clone(jobs[:100])
	mixed[3].Runtime = 0
	mixed[7].GPUs = 1000
	a, err := Run(context.Background(), Config{Workload: "w", Jobs: mixed, Cluster: cl, Policy: "easy"})
	require.NoError(t, err)
	b, err := Run(context.Background(), Config{Workload: "w", Source: sliceSource(mixed), Cluster: cl, Policy: "easy"})
	require.NoError(t, err)
	assert.Equal(t, 2, b.Dropped)
	assert.Equal(t, a, b)
}

func TestRunSourceInvalid(t *testing.T) {
	jobs := replaySynthetic(t, 20, 64)
	cl := Cluster{Nodes: 8, GPUsPerNode: 8}
	back := slices.Clone(jobs)
	slices.Reverse(back)
	for name, cfg := range map[string]Config{
		"unsorted":      {Source: sliceSource(back)},
		"jobs and src":  {Source: sliceSource(jobs), Jobs: jobs},
		"inflated est.": {Source: sliceSource(jobs), EstimateFactor: 2},
	} {
		cfg.Cluster, cfg.Policy = cl, "easy"
		if cfg.EstimateFactor == 0 {
			cfg.EstimateFactor = 1
		}
		_, err := Run(context.Background(), cfg)
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
}
