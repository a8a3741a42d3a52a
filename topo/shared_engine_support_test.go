package topo_test

import (
	"testing"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEngineSupportMIG(t *testing.T) {
	c := sharedCluster(t)
	s := c.NewSnapshot()
	h100, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)

	// Not in MIG mode: refused.
	assert.ErrorIs(t, s.SetMIGLayout(0, mig.EmptyLayout(h100)), topo.ErrNotShared)
	_, err = s.ClaimInstance(4, mig.Instance{})
	assert.ErrorIs(t, err, topo.ErrNotShared)
	assert.ErrorIs(t, s.SetMIGLayout(99, mig.EmptyLayout(h100)), topo.ErrUnknownGPU)

	// A new layout on an idle MIG GPU, then a claim of one of its instances.
	l, err := mig.ParseLayout(h100, "7g")
	require.NoError(t, err)
	cl := s.Clone()
	require.NoError(t, s.SetMIGLayout(2, l))
	assert.Equal(t, l, s.Pool().Layout(2))
	assert.NotEqual(t, l, cl.Pool().Layout(2), "the clone keeps its own pool")
	in := l.Instances()[0]
	gr, err := s.ClaimInstance(2, in)
	require.NoError(t, err)
	assert.False(t, gr.Created)
	assert.Equal(t, in, gr.Instance)
	_, err = s.ClaimInstance(2, in)
	assert.ErrorIs(t, err, mig.ErrBusy)
	assert.ErrorIs(t, s.SetMIGLayout(2, mig.EmptyLayout(h100)), mig.ErrBusy, "busy GPUs keep their layout")
	require.NoError(t, s.Pool().Check())
	require.NoError(t, s.Verify())

	// A plan for GPU 3 (idle "3g 2g 1g 1g"): seven 1g wanted.
	pl, err := s.Pool().Plan([]mig.Demand{{Request: mig.Request{Profile: "1g"}, Count: 7}}, mig.PlanOptions{})
	require.NoError(t, err)
	require.False(t, pl.Empty())
	require.NoError(t, s.ApplyMIGPlan(pl))
	assert.Equal(t, 7, s.SharedFits(3, mig.Request{Profile: "1g.10gb"}))
	assert.ErrorIs(t, s.ApplyMIGPlan(pl), mig.ErrStalePlan, "a plan applies once")
	require.NoError(t, s.Pool().Check())
	require.NoError(t, s.Verify())
}
