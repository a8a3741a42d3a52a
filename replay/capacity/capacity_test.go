package capacity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/gang"
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

// FitScaler: a 32-GPU gang (4 nodes) with room for 3 more nodes gets
// none gang-aware, 3 useless ones pod by pod; a 2-node gang behind it
// gets its 2 gang-aware. An idle node past the delay is scaled down, a
// reserved or recently idle one is not.
func TestFitScaler(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := autoscale.Config{Pools: []autoscale.Pool{{Name: "training", GPUsPerNode: 8, Max: 4}}, ScaleDownDelay: 10 * time.Minute}
	nodes := []autoscale.Node{
		{Name: "busy", Pool: "training", FreeGPUs: 0},
		{Name: "idle", Pool: "training", FreeGPUs: 8, IdleSince: now.Add(-time.Hour)},
		{Name: "reserved", Pool: "training", FreeGPUs: 8, IdleSince: now.Add(-time.Hour), Reserved: true},
		{Name: "fresh", Pool: "training", FreeGPUs: 8, IdleSince: now.Add(-time.Minute)},
	}
	gang32 := gang.Request{Groups: []gang.Group{{Name: "w", Members: 4, GPUsPerMember: 8}}}
	gang16 := gang.Request{Groups: []gang.Group{{Name: "w", Members: 2, GPUsPerMember: 8}}}
	demand := []autoscale.Demand{{Job: "big", Request: gang32}, {Job: "mid", Request: gang16}}

	ga, err := capacity.FitScaler(autoscale.GangAware)(now, cfg, nodes[:1], demand)
	require.NoError(t, err)
	require.Len(t, ga.Up, 1)
	assert.Equal(t, 2, ga.Up[0].Nodes, "the 4-node gang does not fit in 3 more nodes; the 2-node one does")
	assert.Equal(t, []string{"mid"}, ga.Up[0].Jobs)
	require.Len(t, ga.Unserved, 1)
	assert.Equal(t, "big", ga.Unserved[0].Job)

	pp, err := capacity.FitScaler(autoscale.PodByPod)(now, cfg, nodes[:1], demand)
	require.NoError(t, err)
	require.Len(t, pp.Up, 1)
	assert.Equal(t, 3, pp.Up[0].Nodes, "pod by pod fills the pool with 3 of the big gang's 4 members")
	assert.Equal(t, []string{"big"}, pp.Up[0].Jobs)
	assert.Len(t, pp.Unserved, 2)

	// Scale-down: only "idle", and only when no demand wants it.
	down, err := capacity.FitScaler(autoscale.GangAware)(now, cfg, nodes, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"idle"}, down.Down)
	assert.Empty(t, down.Up)
	one := []autoscale.Demand{{Job: "one", Request: gang.Request{Groups: []gang.Group{{Name: "w", Members: 1, GPUsPerMember: 8}}}}}
	kept, err := capacity.FitScaler(autoscale.GangAware)(now, cfg, nodes, one)
	require.NoError(t, err)
	assert.Empty(t, kept.Down, "the idle node takes the pending job")
	assert.Empty(t, kept.Up)
}
