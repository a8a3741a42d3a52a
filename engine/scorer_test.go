package engine_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestConfigScorerValidate(t *testing.T) {
	target := gang.NewTarget([]gang.Group{{Members: 1, GPUMilli: 500, CPUMilli: 1000}}, 1).Shapes
	for _, name := range []string{"", "random", "dotprod", "packing", "bestfit", "fgd", "berth"} {
		c := baseConfig()
		c.Scorer = gang.ScorerSpec{Name: name, Target: target}
		require.NoError(t, c.Validate(), name)
		_, err := engine.New(c)
		require.NoError(t, err, name)
	}
	for name, spec := range map[string]gang.ScorerSpec{
		"unknown":         {Name: "nope"},
		"fgd no target":   {Name: "fgd"},
		"berth no target": {Name: "berth"},
		"clustering":      {Name: "clustering"},
	} {
		c := baseConfig()
		c.Scorer = spec
		assert.ErrorIs(t, c.Validate(), engine.ErrInvalidConfig, name)
		_, err := engine.New(c)
		assert.ErrorIs(t, err, engine.ErrInvalidConfig, name)
	}
}

// The scorer is configured by name: the field survives a JSON round trip.
func TestConfigScorerJSON(t *testing.T) {
	spec := gang.ScorerSpec{Name: "fgd", Target: gang.NewTarget([]gang.Group{
		{Members: 3, GPUMilli: 500, CPUMilli: 4000, MemoryMiB: 1024},
		{Members: 1, GPUsPerMember: 1, CPUMilli: 8000, GPUModel: "T4"},
	}, 1).Shapes}
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	var back gang.ScorerSpec
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, spec, back)
}

// With a scorer the engine places where the scorer says; without one, as
// gang.Place packs (onto the node with the fewest free GPUs).
func TestEngineUsesScorer(t *testing.T) {
	spec := topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "small", GPUs: 2, CPUMilli: 16000},
		{Name: "big", GPUs: 8, CPUMilli: 128000},
	}}
	first := func(sc gang.ScorerSpec) string {
		e, err := engine.New(engine.Config{
			Cluster: spec, Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}}, Start: t0, Scorer: sc,
		})
		require.NoError(t, err)
		j := &queue.Job{ID: "j", Queue: "team", Submit: t0,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, CPUMilli: 1000}}}}
		require.NoError(t, e.Step(engine.Submitted(t0, j)))
		rd := e.Ready()
		require.Len(t, rd.Binds, 1)
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
		return rd.Binds[0].Members[0].Node
	}
	assert.Equal(t, "small", first(gang.ScorerSpec{}))
	// BestFit agrees: the least leftover.
	assert.Equal(t, "small", first(gang.ScorerSpec{Name: "bestfit"}))
	// FGD against a workload of 8-GPU members: small can never hold one,
	// so opening it costs nothing, while big would lose its only fit.
	target := gang.NewTarget([]gang.Group{{Members: 1, GPUsPerMember: 8, CPUMilli: 1000}}, 1).Shapes
	assert.Equal(t, "small", first(gang.ScorerSpec{Name: "fgd", Target: target}))
	// Against 2-GPU members: taking a GPU of small breaks its only pair,
	// while big keeps three: FGD picks big, unlike the default.
	target = gang.NewTarget([]gang.Group{{Members: 1, GPUsPerMember: 2, CPUMilli: 1000}}, 1).Shapes
	assert.Equal(t, "big", first(gang.ScorerSpec{Name: "fgd", Target: target}))
}
