package fgd

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cutTrace is the first nodes and pods (in name order) of the openb trace:
// a run small enough for -race that still tops up to 130%.
func cutTrace(tr *Trace, nodes, pods int) *Trace {
	return &Trace{Nodes: tr.Nodes[:nodes], Pods: tr.Pods[:pods]}
}

// bothWays runs cfg directly and through the engine.
func bothWays(t *testing.T, cfg Config) (placer, eng []Curve) {
	t.Helper()
	ctx := context.Background()
	placer, err := Runs(ctx, cfg)
	require.NoError(t, err)
	cfg.Via = ViaEngine
	eng, err = Runs(ctx, cfg)
	require.NoError(t, err)
	require.Len(t, eng, len(placer))
	return placer, eng
}

// TestViaEngine is the proof that an embedding program gets the
// experiment's quality: every pod submitted to an engine.Engine configured
// with the scorer by name (engine.Config.Scorer), one cycle per arrival,
// places exactly as gang.Placer does, so every allocation column (hence
// every number of the table) is the same. The whole trace on one seed;
// under -race a cut of it.
func TestViaEngine(t *testing.T) {
	tr, _ := loadForTest(t)
	seeds := []int64{42}
	if raceEnabled {
		tr, seeds = cutTrace(tr, 120, 900), []int64{42}
	}
	placer, eng := bothWays(t, Config{Trace: tr, Policies: []string{"dotprod", "packing", "bestfit", "fgd", "berth"}, Seeds: seeds})
	for i := range placer {
		a, b := placer[i], eng[i]
		require.Equal(t, a.Policy, b.Policy)
		require.Equal(t, a.Seed, b.Seed)
		assert.Equal(t, a.Placed, b.Placed, "%s seed %d: pods placed", a.Policy, a.Seed)
		assert.Equal(t, a.Columns, b.Columns, "%s seed %d: allocation columns", a.Policy, a.Seed)
		t.Logf("%-8s seed %d: %d of %d placed, %.2f%% at the end, both ways", a.Policy, a.Seed, a.Placed, a.Pods, a.Columns[len(a.Columns)-1])
	}
	pr, err := Summarize(placer)
	require.NoError(t, err)
	er, err := Summarize(eng)
	require.NoError(t, err)
	assert.Equal(t, pr, er)
}

// TestViaEngineRandom: Random runs through the engine too, on a stream of
// its own, so its numbers are another sample, not the same ones.
func TestViaEngineRandom(t *testing.T) {
	tr, _ := loadForTest(t)
	tr = cutTrace(tr, 120, 900)
	curves, err := Runs(context.Background(), Config{Trace: tr, Policies: []string{"random"}, Seeds: []int64{42}, Via: ViaEngine})
	require.NoError(t, err)
	require.Len(t, curves, 1)
	assert.Greater(t, curves[0].Placed, 0)
	assert.Len(t, curves[0].Columns, 131)
}
