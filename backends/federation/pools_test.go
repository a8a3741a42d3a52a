package federation_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

func TestSplitGPUs(t *testing.T) {
	assert.Equal(t, []int{192, 128}, federation.SplitGPUs(320, []float64{0.6, 0.4}))
	assert.Equal(t, []int{5, 3}, federation.SplitGPUs(8, []float64{0.6, 0.4})) // 4.8 / 3.2
	assert.Equal(t, []int{4, 3, 3}, federation.SplitGPUs(10, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}))
	assert.Equal(t, []int{3, 0}, federation.SplitGPUs(6, []float64{0.5, 0})) // half of it
	assert.Equal(t, []int{0, 0}, federation.SplitGPUs(0, []float64{0.6, 0.4}))
	assert.Equal(t, []int{0, 8}, federation.SplitGPUs(8, []float64{-1, 1}))
	for total := 0; total < 50; total++ {
		p := federation.SplitGPUs(total, []float64{0.6, 0.4})
		assert.Equal(t, total, p[0]+p[1], "total %d", total)
	}
}

// feedPair: two wall-clock members over the same hosts n0, n1; slurm owns
// n0 and kube n1 (slurm's n1 starts drained).
func feedPair(t *testing.T, change func(*federation.Config)) (*federation.Federation, *feedMember, *feedMember) {
	t.Helper()
	a := &feedMember{fakeMember: newFake(t, "slurm", 2, "n1"), feed: backends.NewFeed()}
	b := &feedMember{fakeMember: newFake(t, "kube", 2), feed: backends.NewFeed()}
	cfg := federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: a}, {Name: "kube", Backend: b}},
		Clock: a.Sim, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if change != nil {
		change(&cfg)
	}
	f, err := federation.New(cfg)
	require.NoError(t, err)
	return f, a, b
}

func TestQuotaTree(t *testing.T) {
	f, _, _ := feedPair(t, nil)
	_, err := f.QuotaTree(federation.QuotaTreeOptions{})
	require.ErrorIs(t, err, federation.ErrInvalidConfig, "no GPUs known before Cluster")
	_, err = f.Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 16, f.TotalGPUs(), "a shared host counts once")
	assert.Equal(t, map[string]int{"slurm": 8, "kube": 8}, f.PoolGPUs())
	assert.Equal(t, map[string]float64{"slurm": 0.6, "kube": 0.4}, f.Quotas())
	nominal := func(spec queue.TreeSpec) map[string]queue.Amount {
		out := map[string]queue.Amount{}
		for _, q := range spec.Queues {
			out[q.Name] = q.Quota[queue.GPUMilli].Nominal
			assert.Equal(t, federation.DefaultCohort, q.Cohort)
		}
		return out
	}
	spec, err := f.QuotaTree(federation.QuotaTreeOptions{})
	require.NoError(t, err)
	// 60% / 40% of 16 GPUs: 9.6 / 6.4, rounded by largest remainder.
	assert.Equal(t, map[string]queue.Amount{"slurm": 10000, "kube": 6000, federation.AnyQueue: 0}, nominal(spec))
	spec, err = f.QuotaTree(federation.QuotaTreeOptions{FromOwnership: true})
	require.NoError(t, err)
	assert.Equal(t, map[string]queue.Amount{"slurm": 8000, "kube": 8000, federation.AnyQueue: 0}, nominal(spec))
	// A move: ownership-based quotas follow at the next build.
	require.NoError(t, f.MoveNode(context.Background(), "n1", "slurm", "test"))
	assert.Equal(t, map[string]int{"slurm": 16, "kube": 0}, f.PoolGPUs())
	spec, err = f.QuotaTree(federation.QuotaTreeOptions{FromOwnership: true})
	require.NoError(t, err)
	assert.Equal(t, map[string]queue.Amount{"slurm": 16000, "kube": 0, federation.AnyQueue: 0}, nominal(spec))
	_, err = queue.NewTree(spec)
	require.NoError(t, err)
}

// Jobs submitted to the federation name the pools that may take them; the
// engine (with the federation's partitions and quota tree) chooses among
// them, and the bind launches the job in the chosen pool.
func TestSubmitAnyPool(t *testing.T) {
	f, a, b := feedPair(t, func(c *federation.Config) { c.PoolQueues = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec, err := f.Cluster(ctx)
	require.NoError(t, err)
	tree, err := f.QuotaTree(federation.QuotaTreeOptions{})
	require.NoError(t, err)
	eng, err := engine.New(engine.Config{Cluster: spec, Queues: tree, Start: t0, Policy: queue.StrictPriority(),
		Site: engine.SiteConfig{Partitions: f.Partitions()}, MIG: engine.MIGConfig{Disabled: true}})
	require.NoError(t, err)

	job := func(id string) *queue.Job {
		return &queue.Job{ID: id, Queue: "ignored", Submit: t0, RuntimeEstimate: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}
	}
	require.ErrorIs(t, f.Submit(job("x"), "nope"), federation.ErrUnknownNode)
	require.ErrorIs(t, f.Submit(job("x")), federation.ErrInvalidConfig)
	require.NoError(t, f.Submit(job("any1"), federation.AnyPool))
	require.NoError(t, f.Submit(job("any2"), "slurm", "kube"))
	require.NoError(t, f.Submit(job("k"), "kube"))
	require.ErrorIs(t, f.Submit(job("k"), "kube"), federation.ErrInvalidConfig, "duplicate")

	var got []engine.Event
	for len(got) < 3 {
		evs, err := f.Next(ctx, time.Now().Add(time.Second))
		require.NoError(t, err)
		got = append(got, evs...)
	}
	for _, ev := range got {
		require.Equal(t, engine.EventJobSubmitted, ev.Kind)
		switch ev.Job.ID {
		case "k":
			assert.Equal(t, "kube", ev.Job.Queue)
			assert.Equal(t, "kube", ev.Job.Request.Groups[0].Selector[federation.LabelPool])
		default:
			assert.Equal(t, federation.AnyQueue, ev.Job.Queue)
			assert.Equal(t, []string{"slurm", "kube"}, ev.Job.Partitions)
		}
		ev.Time = t0
		require.NoError(t, eng.Step(ev))
	}
	rd := eng.Ready()
	require.Len(t, rd.Binds, 2, "two 8-GPU nodes, one per pool: %+v", rd.Pending)
	where := map[string]string{}
	var out engine.Outcome
	for _, bd := range rd.Binds {
		if err := f.BindGang(ctx, bd.Job, bd.Members); err != nil {
			out.RefusedBinds = append(out.RefusedBinds, bd.Job)
			continue
		}
		pool, _, _ := federation.SplitNode(bd.Members[0].Node)
		where[bd.Job] = pool
		assert.Equal(t, pool, bd.Partition)
	}
	require.NoError(t, eng.Advance(rd, out))
	require.Empty(t, out.RefusedBinds)
	// Both any-pool jobs ran, one in each pool; the kube-only job waits.
	assert.Len(t, where, 2)
	assert.NotContains(t, where, "k")
	assert.ElementsMatch(t, []string{"slurm", "kube"}, []string{where["any1"], where["any2"]})
	for id, pool := range where {
		m := map[string]*feedMember{"slurm": a, "kube": b}[pool]
		assert.True(t, m.launched[id], "%s launched in %s", id, pool)
	}
	// A member's report of a job the federation launched is dropped.
	launchedIn := where["any1"]
	evs := f.Translate(launchedIn, []engine.Event{engine.Submitted(t0, job("any1"))})
	assert.Empty(t, evs)
	// Once it ended there, a submission of it (a requeue by that system,
	// in the same batch) is the member's, passed on pinned to the pool.
	evs = f.Translate(launchedIn, []engine.Event{engine.Finished(t0, "any1"), engine.Submitted(t0, job("any1"))})
	require.Len(t, evs, 2)
	assert.Equal(t, launchedIn, evs[1].Job.Request.Groups[0].Selector[federation.LabelPool])
	// Cancel: the waiting kube-only job is withdrawn through the stream;
	// a launched one is its pool's; an unknown one is an error.
	require.NoError(t, f.Cancel("k"))
	require.ErrorIs(t, f.Cancel("k"), federation.ErrUnknownJob)
	for _, id := range []string{"any2"} {
		require.ErrorIs(t, f.Cancel(id), backends.ErrRefused)
	}
	for {
		evs, err := f.Next(ctx, time.Now().Add(time.Second))
		require.NoError(t, err)
		if len(evs) > 0 {
			require.Len(t, evs, 1)
			assert.Equal(t, engine.EventJobCancelled, evs[0].Kind)
			assert.Equal(t, "k", evs[0].JobID)
			break
		}
	}
	// Submit refuses a pool whose member cannot launch jobs.
	g, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "p", Backend: noLaunch{a.Sim}}}})
	require.NoError(t, err)
	require.ErrorIs(t, g.Submit(job("y"), federation.AnyPool), federation.ErrNoLauncher)
}

// noLaunch is a member without Launcher.
type noLaunch struct{ backends.Backend }
