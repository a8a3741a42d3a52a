package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/replay/hybrid"
	"github.com/berthsched/berth/workload"
)

func runAll(t *testing.T, cfg hybrid.Config) map[string]hybrid.Row {
	t.Helper()
	out := map[string]hybrid.Row{}
	for _, v := range hybrid.Variants() {
		r, err := hybrid.Run(context.Background(), cfg, v)
		require.NoError(t, err, v)
		require.Equal(t, v, r.Variant)
		out[v] = r
	}
	return out
}

// What must hold whatever the numbers: the same seed gives the same
// rows; only the federated variant moves nodes; colocation leaves
// training alone and only adds inference capacity; everything is in
// range.
func TestVariants(t *testing.T) {
	cfg := hybrid.Config{Seed: 7, Duration: 24 * time.Hour, Nodes: 20}
	rows := runAll(t, cfg)
	again, err := hybrid.Run(context.Background(), cfg, hybrid.Federated)
	require.NoError(t, err)
	assert.Equal(t, rows[hybrid.Federated], again, "deterministic")
	for v, r := range rows {
		assert.True(t, r.Utilization > 0 && r.Utilization <= 1, "%s: utilization %v", v, r.Utilization)
		assert.GreaterOrEqual(t, r.TrainingAvgWaitS, 0.0, v)
		assert.GreaterOrEqual(t, r.InferenceShortfallReplicaMin, 0.0, v)
		assert.Positive(t, r.TrainingJobs, v)
		assert.Len(t, r.Series, 24*4, v)
		if v != hybrid.Federated {
			assert.Zero(t, r.NodeMoves, v)
		}
	}
	assert.Positive(t, rows[hybrid.Federated].NodeMoves)
	st, co := rows[hybrid.Static], rows[hybrid.Colocated]
	assert.Equal(t, st.TrainingAvgWaitS, co.TrainingAvgWaitS)
	assert.LessOrEqual(t, co.InferenceShortfallReplicaMin, st.InferenceShortfallReplicaMin)
	assert.GreaterOrEqual(t, co.Utilization, st.Utilization)
	// The static split never lends: inference GPUs stay at 40%.
	for _, p := range st.Series {
		assert.Equal(t, 8*8, p.InferenceGPUs)
	}
}

func TestInvalid(t *testing.T) {
	ctx := context.Background()
	for _, c := range []hybrid.Config{
		{Nodes: 1},
		{TrainingShare: 1.5},
		{Duration: time.Minute},
		{PeakShare: 0.1, TroughShare: 0.2},
		{Training: []workload.Job{{ID: "a", GPUs: 1, Runtime: time.Hour}, {ID: "a", GPUs: 1, Runtime: time.Hour}}},
	} {
		_, err := hybrid.Run(ctx, c, hybrid.Static)
		require.ErrorIs(t, err, hybrid.ErrInvalid, "%+v", c)
	}
	_, err := hybrid.Run(ctx, hybrid.Config{}, "shared")
	require.ErrorIs(t, err, hybrid.ErrInvalid)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = hybrid.Run(cctx, hybrid.Config{}, hybrid.Static)
	require.ErrorIs(t, err, context.Canceled)
}

// The trace-driven mode: training jobs of ITP cluster04.
func TestITP(t *testing.T) {
	tr := tracetest.Open(t, workload.KindITP)
	jobs := append([]workload.Job(nil), tr.Jobs...)
	first := jobs[0].Submit
	for _, j := range jobs {
		first = min(first, j.Submit)
	}
	for i := range jobs {
		jobs[i].Submit -= first
	}
	rows := runAll(t, hybrid.Config{Seed: 1, Duration: 24 * time.Hour, Training: jobs})
	for v, r := range rows {
		assert.Positive(t, r.TrainingJobs, v)
		assert.Positive(t, r.TrainingStarted, v)
	}
}

// Long training jobs that keep every training node busy: at night the
// federation lends idle inference nodes to training; in the day the
// inference pool reclaims them. Without preemption the reclaim waits for
// jobs of days; with PreemptOnReclaim the jobs on a reclaimed node are
// requeued and the node moves at once, so inference falls short less.
func TestPreemptOnReclaim(t *testing.T) {
	var jobs []workload.Job
	for i := range 60 {
		jobs = append(jobs, workload.Job{ID: "long" + string(rune('a'+i%26)) + string(rune('a'+i/26)),
			Submit: time.Duration(i) * 10 * time.Minute, Runtime: 40 * time.Hour, GPUs: 8, NumGPU: 8})
	}
	base := hybrid.Config{Seed: 3, Duration: 48 * time.Hour, Nodes: 20, Training: jobs}
	wait, err := hybrid.Run(context.Background(), base, hybrid.Federated)
	require.NoError(t, err)
	pre := base
	pre.PreemptOnReclaim = true
	got, err := hybrid.Run(context.Background(), pre, hybrid.Federated)
	require.NoError(t, err)
	t.Logf("without: shortfall %.0f, moves %d; with: shortfall %.0f, moves %d, preemptions %d, lost %.0f GPU-h",
		wait.InferenceShortfallReplicaMin, wait.NodeMoves, got.InferenceShortfallReplicaMin, got.NodeMoves, got.TrainingPreemptions, got.TrainingLostGPUH)
	assert.Zero(t, wait.TrainingPreemptions)
	assert.Zero(t, wait.TrainingLostGPUH)
	assert.Positive(t, got.TrainingPreemptions)
	assert.Positive(t, got.TrainingLostGPUH)
	assert.Less(t, got.InferenceShortfallReplicaMin, wait.InferenceShortfallReplicaMin)
	// Only the federated variant reclaims.
	st, err := hybrid.Run(context.Background(), pre, hybrid.Static)
	require.NoError(t, err)
	assert.Zero(t, st.TrainingPreemptions)
}
