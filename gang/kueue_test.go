package gang_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// kueueSnapshot is two racks of four 8-GPU nodes with used[i] GPUs
// taken on node i.
func kueueSnapshot(t *testing.T, used [8]int) *topo.Snapshot {
	t.Helper()
	c, err := topo.New(topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "GPU"))
	require.NoError(t, err)
	s := c.NewSnapshot()
	for n, u := range used {
		var gpus []uint32
		for g := range u {
			gpus = append(gpus, uint32(n*8+g))
		}
		require.NoError(t, s.Allocate(gpus))
	}
	return s
}

func kueueNodes(res gang.Result) []topo.NodeID {
	var out []topo.NodeID
	for _, m := range res.Members {
		if len(out) == 0 || out[len(out)-1] != m.Node {
			out = append(out, m.Node)
		}
	}
	return out
}

// TestKueueLastNodeBestFit is the example of Kueue's TAS design (KEP
// 2724): a rack whose nodes hold 3, 3, 2 and 1 members, a gang of 7: the
// two nodes of 3, then the node of exactly 1 (BestFit), not the node of 2.
func TestKueueLastNodeBestFit(t *testing.T) {
	// 2 GPUs per member: free 6, 6, 4, 2 in rack 0; rack 1 full.
	s := kueueSnapshot(t, [8]int{2, 2, 4, 6, 8, 8, 8, 8})
	r := gang.Request{Groups: []gang.Group{{Members: 7, GPUsPerMember: 2}}}
	res, err := (&gang.Placer{Scorer: &gang.Kueue{}}).Place(s, &r)
	require.NoError(t, err)
	require.True(t, res.Found)
	nodes := kueueNodes(res)
	assert.ElementsMatch(t, []topo.NodeID{0, 1, 3}, nodes)
}

// TestKueueRacks: the tightest rack that holds the gang; else the
// roomiest racks first. Berth's Place with a preferred rack also takes
// one rack for the first gang, but for the second it packs the fullest
// nodes first where Kueue takes the roomiest.
func TestKueueRacks(t *testing.T) {
	// Rack 0 has 4+4+4+4 = 16 free, rack 1 has 8+8+0+2 = 18 free.
	s := kueueSnapshot(t, [8]int{4, 4, 4, 4, 0, 0, 8, 6})
	k := &gang.Placer{Scorer: &gang.Kueue{}}

	one := gang.Request{Groups: []gang.Group{{Members: 4, GPUsPerMember: 4}}}
	res, err := k.Place(s, &one)
	require.NoError(t, err)
	assert.Equal(t, []topo.NodeID{0, 1, 2, 3}, kueueNodes(res), "rack 0 holds the gang and is the tighter rack")

	big := gang.Request{Groups: []gang.Group{{Members: 5, GPUsPerMember: 4}}}
	res, err = k.Place(s, &big)
	require.NoError(t, err)
	// No rack holds 5 members of 4 (rack 1: 2+2 = 4, rack 0: 4): the
	// roomiest first is rack 0 (4 members; on a tie the lower rack), then
	// the rest (1) in the tightest node of rack 1 that holds it.
	assert.ElementsMatch(t, []topo.NodeID{0, 1, 2, 3, 4}, kueueNodes(res))

	small := gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}}}
	res, err = k.Place(s, &small)
	require.NoError(t, err)
	// Room in members of 2 GPUs: rack 0 has 2+2+2+2 = 8, rack 1 4+4+0+1
	// = 9: the tighter rack is rack 0, and its nodes tie.
	assert.Equal(t, []topo.NodeID{0}, kueueNodes(res), "the tightest rack, then its tightest node")

	sc, err := gang.NewScorer(gang.ScorerSpec{Name: gang.ScorerKueue})
	require.NoError(t, err)
	assert.IsType(t, &gang.Kueue{}, sc)
}
