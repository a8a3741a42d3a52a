package gang

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestCapCacheSameAnswers places random one-group gangs (required and
// preferred levels at every depth, models, other member sizes, some slow
// groups and sets of models the cache does not serve) on a cluster of
// zones > blocks > racks of uneven sizes while bookings, releases, node
// states and what-if clones change it, with one Placer (and one with
// Memo) that keeps its capacity cache throughout and a fresh one without
// it: every result must be equal. More shapes than the cache keeps keys
// are drawn, so entries are replaced. It requires the cache to answer
// often, so that the check has teeth.
func TestCapCacheSameAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	spec := topo.Spec{Levels: []string{"zone", "block", "rack"}}
	rack, block := 0, 0
	for i := range 160 {
		if rng.IntN(3) == 0 {
			rack++
			if rng.IntN(3) == 0 {
				block++
			}
		}
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{
			Name:     fmt.Sprintf("n%d", i),
			Domains:  []string{fmt.Sprintf("z%d", block/4), fmt.Sprintf("b%d", block), fmt.Sprintf("r%d", rack)},
			GPUs:     []int{4, 8}[rng.IntN(2)],
			GPUModel: []string{"H100", "A100"}[rng.IntN(2)],
			Labels:   map[string]string{"pool": []string{"a", "b"}[i%2]},
		})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	var shapes []Request
	for range 16 {
		g := Group{Members: 1 + rng.IntN(24), GPUsPerMember: []int{1, 2, 4, 8}[rng.IntN(4)]}
		switch rng.IntN(8) {
		case 0:
			g.GPUModel = "A100"
		case 1:
			g.Selector = map[string]string{"pool": "a"}
		case 2:
			g.GPUModels = []string{"A100", "H100"}
		}
		r := Request{Groups: []Group{g}}
		r.Required = []string{"", "zone", "block", "zone", ""}[rng.IntN(5)]
		switch r.Required {
		case "":
			r.Preferred = []string{"zone", "block", "rack", "", "node"}[rng.IntN(5)]
		case "zone":
			r.Preferred = []string{"block", "rack", ""}[rng.IntN(3)]
		default:
			r.Preferred = []string{"rack", ""}[rng.IntN(2)]
		}
		shapes = append(shapes, r)
	}
	cached, memo := &Placer{}, &Placer{Memo: true}
	base := c.NewSnapshot()
	s := base
	placed, found := 0, 0
	for step := range 8000 {
		var changed bool
		if s, changed = randomChange(t, rng, base, s); !changed {
			r := shapes[rng.IntN(len(shapes))]
			want, err := (&Placer{noCapCache: true}).Place(s, &r)
			require.NoError(t, err)
			for _, p := range []*Placer{cached, memo} {
				got, err := p.Place(s, &r)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d: %+v", step, r)
			}
			placed++
			if want.Found {
				found++
				if rng.IntN(3) == 0 {
					require.NoError(t, want.Apply(s))
				}
			}
		}
	}
	require.Greater(t, cached.ccache.hits, placed/2, "blocks read from the cache")
	require.Greater(t, found, placed/6)
	t.Logf("placements %d, found %d, blocks from the cache %d", placed, found, cached.ccache.hits)
}
