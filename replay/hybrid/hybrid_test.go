package hybrid_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/replay/hybrid"
)

func TestDefaultRun(t *testing.T) {
	for _, v := range hybrid.Variants() {
		r, err := hybrid.Run(context.Background(), hybrid.Config{Seed: 1}, v)
		require.NoError(t, err)
		t.Logf("%+v", struct {
			V                         string
			U, W, S, Short            float64
			Moves, Jobs, Started, Drp int
		}{r.Variant, r.Utilization, r.TrainingAvgWaitS, r.TrainingAvgSlowdown, r.InferenceShortfallReplicaMin, r.NodeMoves, r.TrainingJobs, r.TrainingStarted, r.Dropped})
		assert.Equal(t, v, r.Variant)
	}
}
