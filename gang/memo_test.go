package gang

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestMemoSameAnswers places random gangs of a few shapes on a cluster of
// zones > blocks > racks while bookings, releases, node states and
// what-if clones change it, with one Placer that keeps its memo
// throughout and a fresh one without it: every result must be equal. It
// requires the memo to answer often, so that the check has teeth.
func TestMemoSameAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 19))
	spec := topo.Spec{Levels: []string{"zone", "block", "rack"}}
	for i := range 96 {
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{
			Name:     fmt.Sprintf("n%d", i),
			Domains:  []string{fmt.Sprintf("z%d", i/24), fmt.Sprintf("b%d", i/8), fmt.Sprintf("r%d", i/2)},
			GPUs:     []int{4, 8}[rng.IntN(2)],
			GPUModel: []string{"H100", "A100", "L40"}[rng.IntN(3)],
			Labels:   map[string]string{"pool": []string{"a", "b"}[i%2]},
		})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	var shapes []Request
	for range 12 {
		g := Group{Members: 1 + rng.IntN(12), GPUsPerMember: []int{1, 2, 4, 8}[rng.IntN(4)]}
		if rng.IntN(5) == 0 {
			g.GPUModel = "A100"
		}
		if rng.IntN(8) == 0 {
			g.Selector = map[string]string{"pool": "a"}
		}
		r := Request{Groups: []Group{g}}
		r.Required = []string{"", "zone", "block", "zone"}[rng.IntN(4)]
		switch r.Required {
		case "":
			r.Preferred = []string{"zone", "block", "rack"}[rng.IntN(3)]
		case "zone":
			r.Preferred = []string{"block", "rack"}[rng.IntN(2)]
		default:
			r.Preferred = "rack"
		}
		shapes = append(shapes, r)
		// The same shape on another model, and of other member sizes:
		// answers kept for one must not serve the others.
		r2 := r
		r2.Groups = []Group{g}
		if g.GPUModel == "" {
			r2.Groups[0].GPUModel = "H100"
		} else {
			r2.Groups[0].GPUModel = ""
		}
		r3 := r
		r3.Groups = []Group{g}
		r3.Groups[0].GPUsPerMember = max(1, g.GPUsPerMember/2)
		r3.Groups[0].Members = g.Members + 1
		// The same shape on sets of models: the set is part of the key
		// (one set must not serve another, nor "any model").
		r4, r5 := r, r
		r4.Groups, r5.Groups = []Group{g}, []Group{g}
		r4.Groups[0].GPUModel, r4.Groups[0].GPUModels = "", []string{"A100", "L40"}
		r5.Groups[0].GPUModel, r5.Groups[0].GPUModels = "", []string{"L40", "H100"}
		shapes = append(shapes, r2, r3, r4, r5)
	}
	memo := &Placer{Memo: true}
	base := c.NewSnapshot()
	s := base
	placed, found := 0, 0
	for step := range 6000 {
		var changed bool
		if s, changed = randomChange(t, rng, base, s); !changed {
			r := shapes[rng.IntN(len(shapes))]
			got, err := memo.Place(s, &r)
			require.NoError(t, err)
			want, err := (&Placer{}).Place(s, &r)
			require.NoError(t, err)
			require.Equal(t, want, got, "step %d: %+v", step, r)
			placed++
			if got.Found {
				found++
				if rng.IntN(3) == 0 {
					require.NoError(t, got.Apply(s))
				}
			}
		}
	}
	require.Greater(t, memo.memo.hits, placed/8, "memo answers") // 5 shapes per draw, 2 of them sets
	require.Greater(t, found, placed/4)
	t.Logf("placements %d, found %d, memo answers %d", placed, found, memo.memo.hits)
}

// randomChange draws one of 20 operations and, for 10 of them, changes
// the cluster as the engine would between placements: a what-if clone of
// base (its probes) or back to base, a node state change, a GPU booked
// or released. It returns the snapshot to use next, and false when the
// draw is a placement's turn.
func randomChange(t *testing.T, rng *rand.Rand, base, s *topo.Snapshot) (*topo.Snapshot, bool) {
	c := s.Cluster()
	switch op := rng.IntN(20); {
	case op == 0 && s == base:
		return base.Clone(), true
	case op == 1 && s != base:
		s.Recycle()
		return base, true
	case op < 4:
		id := topo.NodeID(rng.IntN(c.NumNodes()))
		st := topo.Ready
		if s.NodeState(id) == topo.Ready {
			st = []topo.NodeState{topo.Down, topo.Cordoned}[rng.IntN(2)]
		}
		require.NoError(t, s.SetNodeState(id, st))
		return s, true
	case op < 10:
		g := uint32(rng.IntN(c.NumGPUs()))
		if s.IsFree(g) {
			require.NoError(t, s.Allocate([]uint32{g}))
		} else {
			_ = s.Release([]uint32{g})
		}
		return s, true
	}
	return s, false
}
