package gang_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// A member takes its GPUs in the tightest domain of the finest GPU level
// that holds them all, falling back to coarser levels: 2 GPUs share a PCIe
// switch, 4 GPUs stay in one NVLink island even when the lowest free GPUs
// straddle two.
func TestPickGPUsFinestLevelThatHolds(t *testing.T) {
	spec := topo.Spec{
		GPULevels: []string{"nvlink", "pcie"},
		Nodes: []topo.NodeSpec{{
			Name: "box", GPUs: 8, GPUModel: "H100",
			GPUDomains: [][]int{{0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 1, 1, 2, 2, 3, 3}},
		}},
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	s := c.NewSnapshot()
	// GPUs 0 and 1 are busy: island 0 has 2 free GPUs (2, 3), island 1 has 4.
	require.NoError(t, s.Allocate([]uint32{0, 1}))

	pick := func(per int) []uint32 {
		t.Helper()
		res, err := gang.Place(s, &gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: per}}})
		require.NoError(t, err)
		require.True(t, res.Found, res.Reason)
		return res.MemberGPUs(0)
	}
	assert.Equal(t, []uint32{4, 5, 6, 7}, pick(4), "4 GPUs inside island 1, not 2,3,4,5")
	assert.Equal(t, []uint32{2, 3}, pick(2), "2 GPUs on the fullest PCIe switch with room")
	assert.Equal(t, []uint32{2}, pick(1))
}

// A member larger than any NVLink island spans the fewest islands: 6 GPUs
// take island 1 (4 free) and 2 GPUs of island 2, not the lowest free GPUs,
// which straddle three islands.
func TestPickGPUsFewestIslands(t *testing.T) {
	spec := topo.Spec{
		GPULevels: []string{"nvlink"},
		Nodes: []topo.NodeSpec{{
			Name: "box", GPUs: 12, GPUModel: "H100",
			GPUDomains: [][]int{{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}},
		}},
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	s := c.NewSnapshot()
	// Island 0 has 1 free GPU (3), island 1 has 4, island 2 has 2 (10, 11).
	require.NoError(t, s.Allocate([]uint32{0, 1, 2, 8, 9}))
	res, err := gang.Place(s, &gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 6}}})
	require.NoError(t, err)
	require.True(t, res.Found, res.Reason)
	assert.Equal(t, []uint32{4, 5, 6, 7, 10, 11}, res.MemberGPUs(0))
	res, err = gang.Place(s, &gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 7}}})
	require.NoError(t, err)
	require.True(t, res.Found, res.Reason)
	assert.Equal(t, []uint32{3, 4, 5, 6, 7, 10, 11}, res.MemberGPUs(0), "all three islands when two cannot hold it")
}
