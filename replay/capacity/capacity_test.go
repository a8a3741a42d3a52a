package capacity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/replay/capacity"
	"github.com/berthsched/berth/replay/hybrid"
	"github.com/berthsched/berth/workload"
)

// small is a demand of a 10 x 8-GPU reference cluster over one day.
func small() capacity.Config {
	return capacity.Config{Seed: 3, ReferenceNodes: 10, Duration: 24 * time.Hour, Headrooms: []float64{0, 0.2}}
}

// The search's answer is the smallest size: it meets both levels and one
// node less fails one of them; the row is the run at that size.
func TestSearchFindsSmallest(t *testing.T) {
	ctx := context.Background()
	cfg := small()
	for _, v := range []string{hybrid.Static, hybrid.Federated, hybrid.Dedicated + capacity.Autoscale} {
		r, err := capacity.Search(ctx, cfg, v)
		require.NoError(t, err, v)
		require.True(t, r.Met, "%s: %+v", v, r)
		require.Greater(t, r.Nodes, 2, v)
		assert.Equal(t, r.Nodes*8, r.GPUs, v)
		assert.LessOrEqual(t, r.TrainingP95WaitS, time.Hour.Seconds(), v)
		assert.LessOrEqual(t, r.InferenceShortfallPct, 1.0, v)
		at, ok, err := capacity.Evaluate(ctx, cfg, v, r.Nodes, r.InferenceHeadroom)
		require.NoError(t, err)
		assert.True(t, ok, v)
		at.Runs = r.Runs
		assert.Equal(t, r, at, "%s: the row is the run at its size", v)
		below, ok, err := capacity.Evaluate(ctx, cfg, v, r.Nodes-1, r.InferenceHeadroom)
		require.NoError(t, err)
		assert.False(t, ok, "%s: %d nodes meet the levels too: %+v", v, r.Nodes-1, below)
		assert.True(t, below.TrainingP95WaitS > time.Hour.Seconds() || below.InferenceShortfallPct > 1, v)
		t.Logf("%s: %d nodes, %.0f GPU-h, utilization %.3f, p95 %.0f s, shortfall %.2f%%, %d runs", v, r.Nodes, r.GPUHoursPaid,
			r.UtilizationAtSize, r.TrainingP95WaitS, r.InferenceShortfallPct, r.Runs)
	}
}

// The dedicated clusters sized each on its own: one training node less
// fails the training level, one inference node less the inference level.
func TestDedicatedSized(t *testing.T) {
	ctx := context.Background()
	cfg := small()
	r, err := capacity.Search(ctx, cfg, capacity.DedicatedSized)
	require.NoError(t, err)
	require.True(t, r.Met, "%+v", r)
	tr, in := r.TrainingNodes, r.Nodes-r.TrainingNodes
	at, trOK, inOK, err := capacity.EvaluateSized(ctx, cfg, tr, in)
	require.NoError(t, err)
	assert.True(t, trOK && inOK)
	at.Runs = r.Runs
	assert.Equal(t, r, at)
	_, trOK, _, err = capacity.EvaluateSized(ctx, cfg, tr-1, in)
	require.NoError(t, err)
	assert.False(t, trOK, "%d training nodes meet the training level", tr-1)
	_, _, inOK, err = capacity.EvaluateSized(ctx, cfg, tr, in-1)
	require.NoError(t, err)
	assert.False(t, inOK, "%d inference nodes meet the inference level", in-1)
	ded, err := capacity.Search(ctx, cfg, hybrid.Dedicated)
	require.NoError(t, err)
	assert.LessOrEqual(t, r.Nodes, ded.Nodes, "sizing each side is never worse than a 60/40 split")
	t.Logf("sized %d+%d nodes, 60/40 %d nodes", tr, in, ded.Nodes)
	_, _, _, err = capacity.EvaluateSized(ctx, cfg, 0, 3)
	require.ErrorIs(t, err, capacity.ErrInvalid)
	_, _, err = capacity.Evaluate(ctx, cfg, capacity.DedicatedSized, 10, 0)
	require.ErrorIs(t, err, capacity.ErrInvalid)
}

// Stricter levels need at least as large a cluster.
func TestStricterLevelsNeedMore(t *testing.T) {
	ctx := context.Background()
	loose, strict := small(), small()
	loose.TrainingP95Wait, strict.TrainingP95Wait = 4*time.Hour, 10*time.Minute
	loose.InferenceShortfallPct, strict.InferenceShortfallPct = 5, 0.2
	a, err := capacity.Search(ctx, loose, hybrid.Static)
	require.NoError(t, err)
	b, err := capacity.Search(ctx, strict, hybrid.Static)
	require.NoError(t, err)
	assert.Less(t, a.Nodes, b.Nodes)
}

// The demand does not depend on the cluster's size: the replicas wanted
// are the same at every size; a fixed cluster pays for all its GPUs, an
// autoscaled one for fewer than its maximum.
func TestFixedDemand(t *testing.T) {
	ctx := context.Background()
	cfg := small()
	a, _, err := capacity.Evaluate(ctx, cfg, hybrid.Static, 8, 0)
	require.NoError(t, err)
	b, _, err := capacity.Evaluate(ctx, cfg, hybrid.Static, 20, 0)
	require.NoError(t, err)
	require.Equal(t, len(a.Series), len(b.Series))
	for i := range a.Series {
		require.Equal(t, a.Series[i].InferenceWanted, b.Series[i].InferenceWanted, "point %d", i)
	}
	assert.InDelta(t, 8*8*24.0, a.GPUHoursPaid, 1e-6)
	assert.InDelta(t, 20*8*24.0, b.GPUHoursPaid, 1e-6)
	assert.Greater(t, b.UtilizationAtSize*b.GPUHoursPaid, 0.0)
	as, _, err := capacity.Evaluate(ctx, cfg, hybrid.Static+capacity.Autoscale, 20, 0)
	require.NoError(t, err)
	assert.Less(t, as.GPUHoursPaid, b.GPUHoursPaid)
	assert.Positive(t, as.ScaleUps)
	assert.Positive(t, as.ScaleDowns)
	assert.Greater(t, as.UtilizationAtSize, b.UtilizationAtSize)
	assert.LessOrEqual(t, as.UtilizationAtSize, 1.0)
}

// Every variant gives a complete row; spend is compared with dedicated.
func TestAllVariants(t *testing.T) {
	ctx := context.Background()
	cfg := small()
	cfg.Duration = 12 * time.Hour
	var rows []capacity.Row
	for _, v := range capacity.Variants() {
		r, err := capacity.Search(ctx, cfg, v)
		require.NoError(t, err, v)
		assert.Equal(t, v, r.Variant)
		assert.True(t, r.Met, v)
		assert.Positive(t, r.GPUs, v)
		assert.Positive(t, r.GPUHoursPaid, v)
		assert.True(t, r.UtilizationAtSize > 0 && r.UtilizationAtSize <= 1, "%s: %v", v, r.UtilizationAtSize)
		assert.Positive(t, r.Runs, v)
		rows = append(rows, r)
	}
	capacity.Compare(rows)
	require.Equal(t, hybrid.Dedicated, rows[0].Variant)
	assert.Zero(t, rows[0].SpendVsDedicatedPct)
	for _, r := range rows[1:] {
		assert.InDelta(t, 100*(r.GPUHoursPaid/rows[0].GPUHoursPaid-1), r.SpendVsDedicatedPct, 1e-9, r.Variant)
	}
	for _, r := range rows {
		switch r.Variant {
		case hybrid.Federated, hybrid.Federated + capacity.Autoscale, hybrid.Federated + capacity.AutoscalePodByPod:
		default:
			assert.Zero(t, r.NodeMoves, r.Variant)
		}
		if r.InferenceHeadroom == 0 && r.ScaleUps == 0 {
			assert.InDelta(t, float64(r.GPUs)*12, r.GPUHoursPaid, 1e-6, r.Variant)
		}
	}
}

// A demand that no cluster up to MaxNodes serves: the row is MaxNodes',
// not met.
func TestNotMet(t *testing.T) {
	cfg := small()
	cfg.MaxNodes = 4
	r, err := capacity.Search(context.Background(), cfg, hybrid.Static)
	require.NoError(t, err)
	assert.False(t, r.Met)
	assert.Equal(t, 4, r.Nodes)
}

func TestInvalid(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]capacity.Config{
		"reference":     {ReferenceNodes: 1},
		"max":           {MaxNodes: 100000},
		"gpus per node": {GPUsPerNode: 65},
		"load":          {TrainingLoad: -1},
		"wait":          {TrainingP95Wait: -time.Second},
		"shortfall":     {InferenceShortfallPct: 101},
		"headroom":      {Headrooms: []float64{2}},
		"no headroom":   {Headrooms: []float64{}},
		"duration":      {Duration: time.Minute},
		"length trace":  {JobLengthScale: 2, Training: []workload.Job{{ID: "a", GPUs: 1, Runtime: time.Hour}}},
		"duplicate":     {Training: []workload.Job{{ID: "a", GPUs: 1, Runtime: time.Hour}, {ID: "a", GPUs: 1, Runtime: time.Hour}}},
		"peak":          {PeakShare: 0.1, TroughShare: 0.2},
	} {
		_, err := capacity.Search(ctx, c, hybrid.Static)
		require.ErrorIs(t, err, capacity.ErrInvalid, name)
	}
	_, err := capacity.Search(ctx, capacity.Config{}, "shared")
	require.ErrorIs(t, err, capacity.ErrInvalid)
	_, _, err = capacity.Evaluate(ctx, capacity.Config{}, "static+autoscale-podbypod", 4, 0)
	require.ErrorIs(t, err, capacity.ErrInvalid)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = capacity.Search(cctx, small(), hybrid.Static)
	require.ErrorIs(t, err, context.Canceled)
}

// Gang-aware against pod-by-pod node autoscaling on the training pool:
// eight one-node jobs of ten hours hold 8 of the pool's 10 nodes when a
// 4-node gang arrives. Pod by pod boots the 2 nodes left for 2 of its 4
// members and pays for them, idle, until the gang can start; gang-aware
// boots nothing for it. The gang starts at the same time either way.
func TestGangAwarePaysLess(t *testing.T) {
	var jobs []workload.Job
	for i := range 8 {
		jobs = append(jobs, workload.Job{ID: "long" + string(rune('a'+i)), Runtime: 10 * time.Hour, GPUs: 8})
	}
	jobs = append(jobs, workload.Job{ID: "gang", Submit: 30 * time.Minute, Runtime: time.Hour, GPUs: 32})
	cfg := small()
	cfg.Training = jobs
	run := func(p autoscale.Policy) capacity.Row {
		c := cfg
		c.Scaler = func(autoscale.Policy) hybrid.TrainingScaler { return capacity.DecideScaler(p) }
		// 17 nodes: a training pool of 10.
		r, _, err := capacity.Evaluate(context.Background(), c, hybrid.Dedicated+capacity.Autoscale, 17, 0)
		require.NoError(t, err)
		return r
	}
	ga, pp := run(autoscale.GangAware), run(autoscale.PodByPod)
	t.Logf("gang-aware: %.0f GPU-h, %d scale-ups; pod-by-pod: %.0f GPU-h, %d scale-ups", ga.GPUHoursPaid, ga.ScaleUps, pp.GPUHoursPaid, pp.ScaleUps)
	assert.Equal(t, ga.TrainingP95WaitS, pp.TrainingP95WaitS)
	// Two idle nodes for about nine and a half hours.
	assert.InDelta(t, 2*8*9.5, pp.GPUHoursPaid-ga.GPUHoursPaid, 2*8*0.5)
	assert.Equal(t, ga.ScaleUps+2, pp.ScaleUps)
}
