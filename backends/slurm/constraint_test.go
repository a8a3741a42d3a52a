package slurm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
)

func TestToJobConstraint(t *testing.T) {
	c, err := (&Config{Partitions: map[string]Partition{"p": {}}}).withDefaults()
	require.NoError(t, err)
	b := &Backend{cfg: c}
	b.gpuModels.Store(&map[string]bool{"a100": true, "h100": true, "l40": true})
	for _, tc := range []struct {
		gres, constraint string
		model            string
		models           []string
		same             bool
		selector         map[string]string
		bad              bool
	}{
		{gres: "gres:gpu:2"},
		{gres: "gres:gpu:2", constraint: "(null)"},
		{gres: "gres:gpu:h100:2", model: "h100"},
		{gres: "gres:gpu:2", constraint: "a100|h100", models: []string{"a100", "h100"}},
		{gres: "gres:gpu:2", constraint: "[a100|h100]", models: []string{"a100", "h100"}, same: true},
		{gres: "gres:gpu:h100:2", constraint: "a100|h100", model: "h100"},
		{gres: "gres:gpu:2", constraint: "l40", model: "l40"},
		{gres: "gres:gpu:2", constraint: "ib&rack1", selector: map[string]string{"ib": "true", "rack1": "true"}},
		{gres: "gres:gpu:2", constraint: "a100&ib", model: "a100", selector: map[string]string{"ib": "true"}},
		{gres: "gres:gpu:l40:2", constraint: "a100|h100", bad: true},   // GRES type outside the set
		{gres: "gres:gpu:2", constraint: "a100|rack1", bad: true},      // | over a feature
		{gres: "gres:gpu:2", constraint: "[rack1|rack2]", bad: true},   // [...] over features
		{gres: "gres:gpu:2", constraint: "a100&h100", bad: true},       // two models at once
		{gres: "gres:gpu:2", constraint: "a100*2", bad: true},          // counts
		{gres: "gres:gpu:2", constraint: "(a100|h100)&ib", bad: true},  // parentheses
		{gres: "gres:gpu:2", constraint: "[a100*1&h100*1]", bad: true}, // node counts
	} {
		r := jobRec{JobID: 9, NodeCount: 2, TresPerNode: tc.gres, Features: tc.constraint}
		j, err := b.toJob("9", &r, "p", 0)
		if tc.bad {
			assert.ErrorIs(t, err, ErrBadJob, tc.constraint)
			assert.ErrorIs(t, err, backends.ErrModelConstraint, tc.constraint)
			continue
		}
		require.NoError(t, err, tc.constraint)
		g := j.Request.Groups[0]
		assert.Equal(t, tc.model, g.GPUModel, tc.constraint)
		assert.Equal(t, tc.models, g.GPUModels, tc.constraint)
		assert.Equal(t, tc.same, g.SameModel, tc.constraint)
		assert.Equal(t, tc.selector, g.Selector, tc.constraint)
		assert.NoError(t, j.Request.Validate(), tc.constraint)
	}
}

// A running job's constraint that berth would not place by does not fail
// the read of running jobs (Running, RunningNow): it is left out.
func TestRunningJobIgnoresBadConstraint(t *testing.T) {
	c, err := (&Config{Partitions: map[string]Partition{"p": {}}}).withDefaults()
	require.NoError(t, err)
	b := &Backend{cfg: c}
	b.gpuModels.Store(&map[string]bool{"h100": true})
	r := jobRec{JobID: 9, NodeCount: 1, TresPerNode: "gres:gpu:h100:2", Features: "rack1|rack2"}
	_, err = b.toJob("9", &r, "p", 0)
	require.ErrorIs(t, err, backends.ErrModelConstraint)
	j, err := b.runningJob("9", &r, "p")
	require.NoError(t, err)
	assert.Equal(t, "h100", j.Request.Groups[0].GPUModel)
}
