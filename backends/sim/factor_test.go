package sim_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// TestRuntimeFactor: a run lasts its runtime times the factor of the
// nodes of the whole gang, asked as each member binds; a factor below 1
// or NaN counts as 1.
func TestRuntimeFactor(t *testing.T) {
	seen := map[string][]string{}
	factor := func(job string, nodes []string) float64 {
		seen[job] = append([]string(nil), nodes...)
		switch job {
		case "c":
			return 0.5
		case "d":
			return math.NaN()
		}
		return 1 + 0.5*float64(len(nodes)-1)
	}
	s, err := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, 2, 4, "H100"), Start: t0, RuntimeFactor: factor})
	require.NoError(t, err)
	require.NoError(t, s.Submit(wholeJob("a", 0, 2, 4), time.Hour)) // two nodes: 1.5 x
	require.NoError(t, s.Submit(wholeJob("b", 0, 1, 4), time.Hour)) // one node: 1 x
	require.NoError(t, s.Submit(wholeJob("c", 0, 1, 4), time.Hour))
	require.NoError(t, s.Submit(wholeJob("d", 0, 1, 4), time.Hour))
	run(t, s, engine.Config{Policy: queue.StrictPriority()}, nil)

	out := s.Outcomes()
	require.Len(t, out, 4)
	assert.Empty(t, s.Violations())
	assert.Len(t, seen["a"], 2, "the factor saw the whole gang")
	assert.Equal(t, 90*time.Minute, out[0].End.Sub(out[0].Start))
	for _, o := range out[1:] {
		assert.True(t, o.Finished, o.ID)
		assert.Equal(t, time.Hour, o.End.Sub(o.Start), o.ID)
	}
}
