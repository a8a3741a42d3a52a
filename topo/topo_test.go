package topo_test

import (
	"errors"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func b2k(t testing.TB) *topo.Cluster {
	c, err := topo.New(topo.Uniform([]string{"block", "rack"}, []int{16, 8}, 16, 8, "H100"))
	require.NoError(t, err)
	return c
}

func TestUniformB2KShape(t *testing.T) {
	c := b2k(t)
	assert.Equal(t, 2048, c.NumNodes())
	assert.Equal(t, 16384, c.NumGPUs())
	assert.Equal(t, []string{"cluster", "block", "rack"}, c.Levels())
	assert.Equal(t, 16, c.NumDomains(1))
	assert.Equal(t, 128, c.NumDomains(2))
	// Node 37 is block 0, rack 2, node 5.
	id, ok := c.NodeByName("n37")
	require.True(t, ok)
	assert.Equal(t, topo.NodeID(37), id)
	assert.Equal(t, 0, c.DomainOf(id, 1))
	assert.Equal(t, 2, c.DomainOf(id, 2))
	assert.Equal(t, "b0/r2", c.Domain(2, 2).Name)
	first, n := c.NodeGPUs(id)
	assert.Equal(t, uint32(296), first)
	assert.Equal(t, 8, n)
	lo, hi := c.Descendants(1, 3, 2)
	assert.Equal(t, [2]int{24, 32}, [2]int{lo, hi})
	d := c.Domain(1, 3)
	assert.Equal(t, topo.NodeID(3*128), d.FirstNode)
	assert.Equal(t, uint32(3*1024), d.FirstGPU)
	assert.Equal(t, uint64(1024), c.DomainGPUs(1, 3).GetCardinality())
}

func TestSpecErrors(t *testing.T) {
	node := func(name string, doms ...string) topo.NodeSpec {
		return topo.NodeSpec{Name: name, Domains: doms, GPUs: 8}
	}
	cases := []struct {
		name string
		spec topo.Spec
		err  error
	}{
		{"duplicate node", topo.Spec{Levels: []string{"rack"}, Nodes: []topo.NodeSpec{node("a", "r0"), node("a", "r1")}}, topo.ErrDuplicateNode},
		{"duplicate level", topo.Spec{Levels: []string{"rack", "rack"}}, topo.ErrDuplicateLevel},
		{"reserved level", topo.Spec{Levels: []string{"node"}}, topo.ErrReservedLevel},
		{"empty level", topo.Spec{Levels: []string{""}}, topo.ErrEmptyName},
		{"missing domain", topo.Spec{Levels: []string{"block", "rack"}, Nodes: []topo.NodeSpec{node("a", "b0")}}, topo.ErrMissingDomain},
		{"empty domain", topo.Spec{Levels: []string{"rack"}, Nodes: []topo.NodeSpec{node("a", "")}}, topo.ErrMissingDomain},
		{"zero gpus", topo.Spec{Nodes: []topo.NodeSpec{{Name: "a"}}}, topo.ErrBadGPUCount},
		{"too many gpus", topo.Spec{Nodes: []topo.NodeSpec{{Name: "a", GPUs: 65}}}, topo.ErrBadGPUCount},
		{"negative cpu", topo.Spec{Nodes: []topo.NodeSpec{{Name: "a", GPUs: 1, CPUMilli: -1}}}, topo.ErrBadResource},
		{"bad state", topo.Spec{Nodes: []topo.NodeSpec{{Name: "a", GPUs: 1, State: 9}}}, topo.ErrBadState},
		{"empty name", topo.Spec{Nodes: []topo.NodeSpec{{GPUs: 1}}}, topo.ErrEmptyName},
		{"gpu domains", topo.Spec{GPULevels: []string{"island"}, Nodes: []topo.NodeSpec{{Name: "a", GPUs: 2, GPUDomains: [][]int{{0}}}}}, topo.ErrBadGPUDomains},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := topo.New(tc.spec)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.err)
			var se *topo.SpecError
			assert.True(t, errors.As(err, &se), "typed error")
		})
	}
}

func TestTopologyOrderGroupsNodes(t *testing.T) {
	// Nodes listed out of topology order are grouped by domain, in order of
	// first appearance, keeping spec order inside a domain.
	spec := topo.Spec{Levels: []string{"rack"}, Nodes: []topo.NodeSpec{
		{Name: "a", Domains: []string{"r1"}, GPUs: 4},
		{Name: "b", Domains: []string{"r0"}, GPUs: 8},
		{Name: "c", Domains: []string{"r1"}, GPUs: 2},
	}}
	c, err := topo.New(spec)
	require.NoError(t, err)
	for i, want := range []string{"a", "c", "b"} {
		assert.Equal(t, want, c.NodeName(topo.NodeID(i)))
	}
	first, _ := c.NodeGPUs(2)
	assert.Equal(t, uint32(6), first)
	assert.Equal(t, 8, c.MaxGPUsPerNode())
}

func TestAllocateRelease(t *testing.T) {
	c := b2k(t)
	s := c.NewSnapshot()
	require.NoError(t, s.Allocate([]uint32{0, 1, 2, 8}))
	assert.Equal(t, 16384-4, s.Free())
	assert.Equal(t, 5, s.NodeAvailable(0))
	assert.Equal(t, 7, s.NodeAvailable(1))
	assert.Equal(t, 16-2, s.DomainWholeNodes(2, 0))
	assert.Equal(t, 128-4, s.DomainFree(2, 0))
	assert.Equal(t, 1, int(s.DomainHistogram(2, 0, -1)[5]))
	assert.Equal(t, 14*1+1*0+1*0, s.DomainCapacity(2, 0, 8, -1))
	assert.Equal(t, 14*4+2+3, s.DomainCapacity(2, 0, 2, -1))

	assert.ErrorIs(t, s.Allocate([]uint32{3, 2}), topo.ErrAllocated)
	assert.ErrorIs(t, s.Allocate([]uint32{4, 4}), topo.ErrDuplicateInSet)
	assert.ErrorIs(t, s.Allocate([]uint32{99999}), topo.ErrUnknownGPU)
	assert.ErrorIs(t, s.Release([]uint32{3}), topo.ErrNotAllocated)
	assert.ErrorIs(t, s.Release([]uint32{0, 0}), topo.ErrDuplicateInSet)
	require.NoError(t, s.Verify())
	assert.Equal(t, 4, s.Allocated(), "failed calls change nothing")

	require.NoError(t, s.Release([]uint32{8, 0}))
	assert.Equal(t, 2, s.Allocated())
	require.NoError(t, s.Verify())
}

func TestNodeStates(t *testing.T) {
	c := b2k(t)
	s := c.NewSnapshot()
	require.NoError(t, s.Allocate([]uint32{0, 1}))
	require.NoError(t, s.SetNodeState(0, topo.Down))
	assert.Equal(t, 0, s.NodeAvailable(0))
	assert.Equal(t, 16384-8, s.Free())
	assert.False(t, s.IsFree(5))
	assert.ErrorIs(t, s.Allocate([]uint32{5}), topo.ErrNodeNotReady)
	// Releasing on a down node works; the GPU stays unallocatable.
	require.NoError(t, s.Release([]uint32{0}))
	assert.False(t, s.IsFree(0))
	require.NoError(t, s.Verify())
	require.NoError(t, s.SetNodeState(0, topo.Cordoned))
	require.NoError(t, s.SetNodeState(0, topo.Ready))
	assert.Equal(t, 7, s.NodeAvailable(0))
	assert.True(t, s.IsFree(0))
	require.NoError(t, s.Verify())
	assert.ErrorIs(t, s.SetNodeState(5000, topo.Ready), topo.ErrUnknownNode)
	assert.ErrorIs(t, s.SetNodeState(0, 17), topo.ErrBadState)
}

func TestCloneIsCopyOnWrite(t *testing.T) {
	c := b2k(t)
	s := c.NewSnapshot()
	require.NoError(t, s.Allocate([]uint32{0}))
	cl := s.Clone()
	require.NoError(t, cl.Allocate([]uint32{1, 2, 9000}))
	require.NoError(t, cl.SetNodeState(100, topo.Down))
	require.NoError(t, s.Allocate([]uint32{3}))
	assert.Equal(t, 2, s.Allocated())
	assert.Equal(t, 4, cl.Allocated())
	assert.True(t, s.IsFree(9000))
	assert.False(t, cl.IsFree(9000))
	assert.True(t, cl.IsFree(3), "write to the original after Clone is not seen by the clone")
	assert.Equal(t, topo.Ready, s.NodeState(100))
	require.NoError(t, s.Verify())
	require.NoError(t, cl.Verify())
	// A clone of a clone.
	cc := cl.Clone()
	require.NoError(t, cc.Release([]uint32{1}))
	assert.False(t, cl.IsFree(1))
	require.NoError(t, cc.Verify())
}

// Version changes with every kind of write and not with reads, a Clone,
// or a write refused before it changed anything.
func TestVersionChangesOnWrite(t *testing.T) {
	c, err := topo.New(topo.Spec{Nodes: []topo.NodeSpec{{Name: "a", GPUs: 2, CPUMilli: 4000, MemoryMiB: 1024}, {Name: "b", GPUs: 2}}})
	require.NoError(t, err)
	s := c.NewSnapshot()
	v := s.Version()
	changed := func(what string) {
		t.Helper()
		assert.NotEqual(t, v, s.Version(), what)
		v = s.Version()
	}
	same := func(what string) {
		t.Helper()
		assert.Equal(t, v, s.Version(), what)
	}
	_ = s.IsFree(0)
	_ = s.Free()
	_ = s.Clone()
	same("reads and Clone")
	require.NoError(t, s.Allocate([]uint32{0}))
	changed("Allocate")
	assert.Error(t, s.Allocate([]uint32{0}))
	same("a refused Allocate")
	require.NoError(t, s.Release([]uint32{0}))
	changed("Release")
	require.NoError(t, s.SetNodeState(1, topo.Down))
	changed("SetNodeState")
	require.NoError(t, s.AllocateHost(0, 1000, 10))
	changed("AllocateHost")
	require.NoError(t, s.ReleaseHost(0, 1000, 10))
	changed("ReleaseHost")
}

func TestHostResources(t *testing.T) {
	c, err := topo.New(topo.Spec{Nodes: []topo.NodeSpec{{Name: "a", GPUs: 2, CPUMilli: 4000, MemoryMiB: 1024}}})
	require.NoError(t, err)
	s := c.NewSnapshot()
	assert.Equal(t, 2, s.HostFits(0, 2000, 100))
	require.NoError(t, s.AllocateHost(0, 3000, 512))
	assert.ErrorIs(t, s.AllocateHost(0, 2000, 0), topo.ErrInsufficient)
	assert.ErrorIs(t, s.ReleaseHost(0, 5000, 0), topo.ErrOverRelease)
	require.NoError(t, s.ReleaseHost(0, 3000, 512))
	require.NoError(t, s.Verify())
}

func TestHeterogeneousHistograms(t *testing.T) {
	spec := topo.Spec{Levels: []string{"rack"}, Nodes: []topo.NodeSpec{
		{Name: "a", Domains: []string{"r0"}, GPUs: 8, GPUModel: "H100"},
		{Name: "b", Domains: []string{"r0"}, GPUs: 4, GPUModel: "A100"},
	}}
	c, err := topo.New(spec)
	require.NoError(t, err)
	s := c.NewSnapshot()
	h, ok := c.ModelIndex("A100")
	require.True(t, ok)
	assert.Equal(t, 1, s.DomainCapacity(1, 0, 4, h))
	assert.Equal(t, 3, s.DomainCapacity(1, 0, 4, -1))
	assert.Equal(t, 2, s.DomainWholeNodes(1, 0))
	require.NoError(t, s.Allocate([]uint32{8}))
	assert.Equal(t, 1, s.DomainWholeNodes(1, 0))
	assert.Equal(t, 0, s.DomainCapacity(1, 0, 4, h))
	require.NoError(t, s.Verify())
}

func TestDuplicatesOutOfOrder(t *testing.T) {
	s := b2k(t).NewSnapshot()
	assert.ErrorIs(t, s.Allocate([]uint32{20, 3, 21, 2, 20}), topo.ErrDuplicateInSet)
	assert.ErrorIs(t, s.Allocate([]uint32{3, 20, 3}), topo.ErrDuplicateInSet)
	require.NoError(t, s.Allocate([]uint32{20, 3, 21, 2}))
	assert.Equal(t, 4, s.Allocated())
	require.NoError(t, s.Verify())
	fs := s.FreeSet()
	assert.Equal(t, uint64(16384-4), fs.GetCardinality())
	assert.False(t, fs.Contains(21))
	assert.Equal(t, uint64(6), s.FreeInDomain(2, 0).CardinalityInRange(0, 8))
}
