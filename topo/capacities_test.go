package topo_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// TestDomainCapacities checks the batch read against DomainCapacity, one
// domain at a time, on clusters of one and of two GPU models with nodes of
// 2 to 8 GPUs, randomly booked and cordoned: every level, random ranges
// (across counter pages too), members of 1 to 9 GPUs, every model.
func TestDomainCapacities(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	for _, models := range [][]string{{"H100"}, {"H100", "A100"}} {
		spec := topo.Spec{Levels: []string{"block", "rack"}}
		for i := range 1200 {
			spec.Nodes = append(spec.Nodes, topo.NodeSpec{
				Name:     fmt.Sprintf("n%d", i),
				Domains:  []string{fmt.Sprintf("b%d", i/300), fmt.Sprintf("r%d", i/4)},
				GPUs:     []int{2, 4, 8}[rng.IntN(3)],
				GPUModel: models[rng.IntN(len(models))],
			})
		}
		c, err := topo.New(spec)
		require.NoError(t, err)
		s := c.NewSnapshot()
		for g := range uint32(c.NumGPUs()) {
			if rng.IntN(3) == 0 {
				require.NoError(t, s.Allocate([]uint32{g}))
			}
		}
		for n := range topo.NodeID(c.NumNodes()) {
			if rng.IntN(10) == 0 {
				require.NoError(t, s.SetNodeState(n, topo.Cordoned))
			}
		}
		dst := make([]int32, 400)
		for range 2000 {
			l := rng.IntN(len(c.Levels()))
			nd := c.NumDomains(l)
			lo := rng.IntN(nd)
			hi := lo + 1 + rng.IntN(min(nd-lo, len(dst)))
			per, model := 1+rng.IntN(9), rng.IntN(len(models)+1)-1
			s.DomainCapacities(l, lo, hi, per, model, dst)
			for d := lo; d < hi; d++ {
				require.Equal(t, s.DomainCapacity(l, d, per, model), int(dst[d-lo]), "level %d domain %d per %d model %d", l, d, per, model)
			}
		}
	}
}
