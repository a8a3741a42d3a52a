package topo_test

import (
	"testing"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sharedCluster(t *testing.T) *topo.Cluster {
	c, err := topo.New(topo.Spec{
		ShareFreeGPUs: true,
		Nodes: []topo.NodeSpec{
			{Name: "plain", GPUs: 2, GPUModel: "T4"},
			{Name: "mig", GPUs: 2, GPUModel: "H100-80GB", MIG: true, MIGLayout: "3g 2g 1g 1g"},
			{Name: "ts", GPUs: 1, GPUModel: "A10", Sharing: mig.Sharing{Mode: mig.TimeSlicing, Replicas: 4}},
		},
	})
	require.NoError(t, err)
	return c
}

func TestSharedGPUsAreNotWhole(t *testing.T) {
	c := sharedCluster(t)
	s := c.NewSnapshot()
	assert.Equal(t, 2, s.Free(), "only the plain node's GPUs are whole-free")
	assert.Equal(t, 3, s.Allocated())
	assert.ErrorIs(t, s.Allocate([]uint32{2}), topo.ErrAllocated)
	assert.ErrorIs(t, s.Release([]uint32{2}), topo.ErrSharedGPU)
	require.NoError(t, s.Verify())

	// MIG: the 1g instances first, then room to create none (layout full).
	assert.Equal(t, 2, s.SharedFits(2, mig.Request{Profile: "1g"}))
	gr, err := s.AllocateShared(2, mig.Request{Profile: "1g"})
	require.NoError(t, err)
	assert.False(t, gr.Created)
	assert.Equal(t, 1, s.SharedFits(2, mig.Request{Profile: "1g"}))
	// Time-slicing with 4 replicas: 250 milli each.
	assert.Equal(t, 4, s.SharedFits(4, mig.Request{Milli: 200}))
	require.NoError(t, s.ReleaseShared(gr))
	assert.ErrorIs(t, s.ReleaseShared(gr), mig.ErrNotHeld)
	require.NoError(t, s.Verify())
}

func TestShareFreeGPUs(t *testing.T) {
	c := sharedCluster(t)
	s := c.NewSnapshot()
	assert.Equal(t, 3, s.SharedFits(0, mig.Request{Milli: 300}))
	a, err := s.AllocateShared(0, mig.Request{Milli: 300})
	require.NoError(t, err)
	assert.True(t, s.IsSharedGPU(0))
	assert.Equal(t, 1, s.Free(), "a GPU holding a share is booked")
	assert.ErrorIs(t, s.Allocate([]uint32{0}), topo.ErrAllocated)
	assert.Equal(t, 2, s.SharedFits(0, mig.Request{Milli: 300}))
	cl := s.Clone()
	b, err := s.AllocateShared(0, mig.Request{Milli: 700})
	require.NoError(t, err)
	assert.Equal(t, 0, s.SharedFits(0, mig.Request{Milli: 1}))
	assert.Equal(t, 2, cl.SharedFits(0, mig.Request{Milli: 300}), "the clone does not see later shares")
	require.NoError(t, s.Verify())
	require.NoError(t, s.ReleaseShared(a))
	assert.Equal(t, 1, s.Free())
	require.NoError(t, s.ReleaseShared(b))
	assert.Equal(t, 2, s.Free(), "free again after the last share")
	assert.False(t, s.IsSharedGPU(0))
	require.NoError(t, s.Verify())
	require.NoError(t, cl.Verify())
	_, err = s.AllocateShared(0, mig.Request{Profile: "1g"})
	assert.ErrorIs(t, err, topo.ErrNotShared)
}

func TestSharingSpecErrors(t *testing.T) {
	for _, n := range []topo.NodeSpec{
		{Name: "a", GPUs: 1, GPUModel: "T4", MIG: true},
		{Name: "a", GPUs: 1, GPUModel: "H100-80GB", MIGLayout: "1g"},
		{Name: "a", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "4g 4g"},
		{Name: "a", GPUs: 1, GPUModel: "T4", Sharing: mig.Sharing{Mode: mig.TimeSlicing}},
	} {
		_, err := topo.New(topo.Spec{Nodes: []topo.NodeSpec{n}})
		assert.ErrorIs(t, err, topo.ErrBadSharing, "%+v", n)
	}
}

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

// NodeSharedMask is IsSharedGPU of each GPU, and HostHolds is HostFits >= 1,
// as GPUs are shared, released and nodes' hosts filled.
func TestNodeSharedMaskAndHostHolds(t *testing.T) {
	c, err := topo.New(topo.Spec{
		ShareFreeGPUs: true,
		Nodes: []topo.NodeSpec{
			{Name: "plain", GPUs: 4, GPUModel: "T4", CPUMilli: 8000, MemoryMiB: 4096},
			{Name: "mig", GPUs: 2, GPUModel: "H100-80GB", MIG: true, MIGLayout: "3g 2g 1g 1g"},
			{Name: "ts", GPUs: 1, GPUModel: "A10", Sharing: mig.Sharing{Mode: mig.TimeSlicing, Replicas: 4}, CPUMilli: 1000},
		},
	})
	require.NoError(t, err)
	s := c.NewSnapshot()
	check := func() {
		t.Helper()
		for id := range topo.NodeID(c.NumNodes()) {
			first, n := c.NodeGPUs(id)
			var want uint64
			for i := range n {
				if s.IsSharedGPU(first + uint32(i)) {
					want |= 1 << i
				}
			}
			assert.Equal(t, want, s.NodeSharedMask(id), "node %d", id)
			for _, cpu := range []int64{0, 500, 1000, 4000, 8000, 9000} {
				for _, mem := range []int64{0, 1024, 4096, 5000} {
					assert.Equal(t, s.HostFits(id, cpu, mem) >= 1, s.HostHolds(id, cpu, mem), "node %d cpu %d mem %d", id, cpu, mem)
				}
			}
		}
	}
	check()
	gr, err := s.AllocateShared(1, mig.Request{Milli: 300}) // a free GPU of the plain node becomes shared
	require.NoError(t, err)
	assert.Equal(t, uint64(0b10), s.NodeSharedMask(0))
	check()
	require.NoError(t, s.AllocateHost(0, 6000, 4000))
	check()
	require.NoError(t, s.ReleaseShared(gr))
	check()
}
