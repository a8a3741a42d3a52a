package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every config New accepts runs: an empty queue tree with each policy
// (DRS is the default) runs cycles, and a submission to a queue it does
// not have is rejected.
func TestEmptyQueueTreeRuns(t *testing.T) {
	for name, p := range map[string]queue.Policy{"default": nil, "drs": queue.DRS(), "fairtree": queue.FairTree()} {
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Queues = queue.TreeSpec{}
			cfg.Policy = p
			e, err := engine.New(cfg)
			require.NoError(t, err)
			rd := e.Ready()
			require.NoError(t, e.Advance(rd, engine.Outcome{}))
			err = e.Step(engine.Submitted(t0, gpuJob("j", 1, 1, t0)))
			require.Error(t, err)
			require.NoError(t, e.Step(engine.Tick(t0.Add(time.Minute))))
			rd = e.Ready()
			assert.Empty(t, rd.Binds)
			assert.Empty(t, rd.Pending)
		})
	}
}

func TestConfigValidateReliability(t *testing.T) {
	for name, mutate := range map[string]func(*engine.Config){
		"infinite MIG wait factor": func(c *engine.Config) { c.MIG.WaitFactor = math.Inf(1) },
		"NaN MIG wait factor":      func(c *engine.Config) { c.MIG.WaitFactor = math.NaN() },
		"empty label key": func(c *engine.Config) {
			c.Cluster.Nodes[0].Labels = map[string]string{"": "x"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := baseConfig()
			c.Cluster.Nodes = append([]topo.NodeSpec(nil), c.Cluster.Nodes...)
			mutate(&c)
			_, err := engine.New(c)
			assert.ErrorIs(t, err, engine.ErrInvalidConfig)
		})
	}
}

// A node label with an empty key is refused when the node joins or is
// relabelled too.
func TestEmptyLabelKeyEvents(t *testing.T) {
	e, err := engine.New(baseConfig())
	require.NoError(t, err)
	name := baseConfig().Cluster.Nodes[0].Name
	err = e.Step(engine.NodeChanged(t0, name, topo.Ready, map[string]string{"": "x"}))
	assert.ErrorIs(t, err, engine.ErrInvalidEvent)
	assert.ErrorIs(t, err, topo.ErrEmptyName)
	n := baseConfig().Cluster.Nodes[0]
	n.Name, n.Labels = "extra", map[string]string{"": "y"}
	assert.Error(t, e.Step(engine.NodeAdded(t0, n)))
}

// Unknown levels are rejected at submission (Step and intake) and at
// adoption with ErrInvalidRequest wrapping gang.ErrUnknownLevel.
func TestUnknownLevelRejected(t *testing.T) {
	e, err := engine.New(baseConfig())
	require.NoError(t, err)
	j := gpuJob("a", 1, 1, t0)
	j.Request.Required = "bogus"
	err = e.Step(engine.Submitted(t0, j))
	require.ErrorIs(t, err, engine.ErrInvalidRequest)
	assert.ErrorIs(t, err, gang.ErrUnknownLevel)

	k := gpuJob("b", 1, 1, t0)
	k.Request.Preferred = "bogus"
	require.NoError(t, e.Intake().Submit(k))
	rd := e.Ready()
	require.Len(t, rd.Rejected, 1)
	assert.ErrorIs(t, rd.Rejected[0].Err, engine.ErrInvalidRequest)
	assert.Empty(t, rd.Pending)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))

	m := gpuJob("c", 1, 1, t0)
	m.Request.Required = "bogus"
	node := baseConfig().Cluster.Nodes[0].Name
	err = e.Step(engine.Adopted(t0, m, []engine.Member{{Node: node, GPUs: []int{0}}}))
	assert.ErrorIs(t, err, engine.ErrInvalidRequest)
}

// The Why-5 sequence of issue 18 through the public API: the refusal of
// an ended binding does not un-book the adopted run of the same job ID,
// and the job is not bound a second time.
func TestStaleRefusalKeepsAdoptedRun(t *testing.T) {
	e, err := engine.New(baseConfig())
	require.NoError(t, err)
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("j1", 1, 8, t0))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	bound := rd.Binds[0].Members[0].Node
	require.NoError(t, e.Step(engine.Cancelled(t0, "j1")))
	other := ""
	for _, n := range baseConfig().Cluster.Nodes {
		if n.Name != bound {
			other = n.Name
			break
		}
	}
	require.NoError(t, e.Step(engine.Adopted(t0, gpuJob("j1", 1, 8, t0), []engine.Member{{Node: other, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}})))
	require.NoError(t, e.Advance(rd, engine.Outcome{RefusedBinds: []string{"j1"}}))
	require.NoError(t, e.Step(engine.Tick(t0.Add(time.Minute))))
	rd = e.Ready()
	assert.Empty(t, rd.Binds, "j1 runs (adopted): it must not be bound again")
	ms, ok := e.Members("j1")
	require.True(t, ok)
	require.Len(t, ms, 1)
	assert.Equal(t, other, ms[0].Node)
}

// An adopted job keeps the backend's start time.
func TestAdoptedKeepsStart(t *testing.T) {
	e, err := engine.New(baseConfig())
	require.NoError(t, err)
	node := baseConfig().Cluster.Nodes[0].Name
	started := t0.Add(-40 * time.Minute)
	require.NoError(t, e.Step(engine.AdoptedSince(t0, started, gpuJob("old", 1, 8, t0), []engine.Member{{Node: node, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}})))
	e.Ready()
	var found bool
	for _, r := range e.View().Running() {
		if r.Job == "old" {
			found = true
			assert.True(t, r.Start.Equal(started), "start %v, want %v", r.Start, started)
		}
	}
	assert.True(t, found)
}
