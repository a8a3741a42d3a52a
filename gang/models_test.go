package gang_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// modelCluster is 2 racks of 4 nodes: A100-40GB, A100-80GB and H100
// nodes of 8 GPUs, with host CPU and memory and shared GPUs allowed.
func modelCluster(t *testing.T) *topo.Cluster {
	t.Helper()
	spec := topo.Spec{Levels: []string{"rack"}, ShareFreeGPUs: true}
	models := []string{"A100-40GB", "A100-80GB", "H100", "A100-40GB", "H100", "A100-80GB", "H100", "H100"}
	for i, m := range models {
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: string(rune('a' + i)), Domains: []string{[]string{"r0", "r1"}[i/4]},
			GPUs: 8, GPUModel: m, CPUMilli: 64000, MemoryMiB: 1 << 18})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	return c
}

// TestModelSetOfOne: GPUModels with one model the cluster has (or one it
// has and others it lacks) places exactly as GPUModel, with and without
// a scorer.
func TestModelSetOfOne(t *testing.T) {
	c := modelCluster(t)
	s := c.NewSnapshot()
	rng := rand.New(rand.NewPCG(3, 4))
	randomFill(rng, s)
	tg := gang.NewTarget([]gang.Group{{Members: 3, GPUMilli: 500, CPUMilli: 1000}, {Members: 1, GPUsPerMember: 2, CPUMilli: 4000}}, 1)
	for _, sc := range []gang.Scorer{nil, gang.NewFGD(tg), gang.NewBerth(tg)} {
		for _, g := range []gang.Group{
			{Members: 3, GPUsPerMember: 2},
			{Members: 2, GPUMilli: 300, CPUMilli: 2000},
			{Members: 1, GPUsPerMember: 4, CPUMilli: 8000},
		} {
			one := g
			one.GPUModel = "H100"
			want, err := (&gang.Placer{Scorer: sc}).Place(s, &gang.Request{Groups: []gang.Group{one}})
			require.NoError(t, err)
			for _, set := range [][]string{{"H100"}, {"H100", "B200"}, {"B200", "H100", "H100"}} {
				g2 := g
				g2.GPUModels = set
				got, err := (&gang.Placer{Scorer: sc}).Place(s, &gang.Request{Groups: []gang.Group{g2}})
				require.NoError(t, err)
				require.Equal(t, want.Members, got.Members, "%v", set)
				require.Equal(t, want.GPUs(), got.GPUs(), "%v", set)
			}
		}
	}
}

// TestModelSetPlacement: members land only on models of their set, per
// member by default (a gang spans models), on one model with SameModel;
// a group asking both GPUModel and GPUModels must name one of the set.
func TestModelSetPlacement(t *testing.T) {
	c := modelCluster(t)
	s := c.NewSnapshot()
	a100s := []string{"A100-40GB", "A100-80GB"}
	// 4 A100 nodes of 8 GPUs: 4 members of 8 fit only across both models.
	r := gang.Request{Groups: []gang.Group{{Members: 4, GPUsPerMember: 8, GPUModels: a100s}}}
	res, err := gang.Place(s, &r)
	require.NoError(t, err)
	require.True(t, res.Found)
	seen := map[string]int{}
	for _, m := range res.Members {
		seen[c.Node(m.Node).GPUModel]++
	}
	require.Equal(t, map[string]int{"A100-40GB": 2, "A100-80GB": 2}, seen)

	r.Groups[0].SameModel = true
	res, err = gang.Place(s, &r)
	require.NoError(t, err)
	require.False(t, res.Found)
	require.Equal(t, "group 0: only 2 of 4 members fit in the cluster on nodes with a GPU in {A100-40GB, A100-80GB}", res.Reason.String())

	r.Groups[0].Members = 2
	res, err = gang.Place(s, &r)
	require.NoError(t, err)
	require.True(t, res.Found)
	for _, m := range res.Members {
		require.Equal(t, "A100-40GB", c.Node(m.Node).GPUModel, "the first model listed that holds the group")
	}

	none := gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, GPUModels: []string{"V100", "T4"}}}}
	res, err = gang.Place(s, &none)
	require.NoError(t, err)
	require.Equal(t, gang.NoMatchingNodes, res.Reason.Code)
	require.Equal(t, "group 0: no ready node with a GPU in {V100, T4} matches its selector and host resources", res.Reason.String())

	bad := gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1, GPUModel: "H100", GPUModels: a100s}}}
	_, err = gang.Place(s, &bad)
	require.ErrorIs(t, err, gang.ErrBadGroup)
	bad.Groups[0].GPUModel, bad.Groups[0].GPUModels = "", []string{"A100|H100"}
	_, err = gang.Place(s, &bad)
	require.ErrorIs(t, err, gang.ErrBadGroup)

	multi := gang.Request{Groups: []gang.Group{
		{Members: 1, GPUsPerMember: 8, GPUModels: a100s, SameModel: true},
		{Members: 1, GPUsPerMember: 1},
	}}
	_, err = gang.Place(s, &multi)
	require.ErrorIs(t, err, gang.ErrUnsupported)
}

// TestModelSetScorers: FGD and Berth see the set: a target shape of a set
// fits nodes of any of its models, and a scored placement of a set
// allocates nothing once warm.
func TestModelSetScorers(t *testing.T) {
	set := []string{"A100-80GB", "A100-40GB"}
	tg := gang.NewTarget([]gang.Group{{Members: 1, GPUMilli: 500, GPUModels: set}}, 1)
	require.Equal(t, "A100-40GB|A100-80GB", tg.Shapes[0].Model)
	free := []int16{1000, 200}
	for _, m := range set {
		require.Equal(t, 200.0, tg.Frag(free, 1000, m), m)
	}
	require.Equal(t, 1200.0, tg.Frag(free, 1000, "H100"))
	require.Equal(t, 1200.0, tg.Frag(free, 1000, "A100"), "no match on a prefix")

	c := modelCluster(t)
	s := c.NewSnapshot()
	p := gang.Placer{Scorer: gang.NewBerth(tg)}
	req := gang.Request{Groups: []gang.Group{{Members: 1, GPUMilli: 500, CPUMilli: 1000, GPUModels: set}}}
	var res gang.Result
	require.NoError(t, p.PlaceInto(&res, s, &req))
	require.True(t, res.Found)
	require.Contains(t, set, c.Node(res.Members[0].Node).GPUModel)
	allocs := testing.AllocsPerRun(50, func() { _ = p.PlaceInto(&res, s, &req) })
	require.Zero(t, allocs)
}
