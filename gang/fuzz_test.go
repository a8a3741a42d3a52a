package gang_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// smallShared is like small, with MIG and time-sliced nodes and free GPUs
// that fractional members may share.
func smallShared(rng *rand.Rand) *topo.Cluster {
	spec := topo.Spec{Levels: []string{"block", "rack"}, ShareFreeGPUs: true}
	for i := range 8 {
		n := topo.NodeSpec{
			Name: fmt.Sprintf("n%d", i), Domains: []string{fmt.Sprintf("b%d", i/4), fmt.Sprintf("r%d", i/2%2)},
			GPUs: []int{2, 4, 8}[rng.IntN(3)], GPUModel: "A100",
		}
		switch rng.IntN(4) {
		case 0:
			n.GPUModel, n.MIG = "H100-80GB", true
			if rng.IntN(2) == 0 {
				n.MIGLayout = "3g 2g 1g 1g"
			}
		case 1:
			n.Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: 1 + rng.IntN(8)}
		}
		spec.Nodes = append(spec.Nodes, n)
	}
	c, err := topo.New(spec)
	if err != nil {
		panic(err)
	}
	return c
}

func fractionalRequest(rng *rand.Rand) gang.Request {
	g := gang.Group{Members: 1 + rng.IntN(6)}
	if rng.IntN(2) == 0 {
		g.GPUMilli = []int{100, 250, 333, 500, 999}[rng.IntN(5)]
	} else {
		g.MIGProfile = []string{"1g", "2g", "3g", "1g.10gb", "7g.80gb"}[rng.IntN(5)]
	}
	switch rng.IntN(4) {
	case 0:
		g.GPUModels = []string{"A100", "H100-80GB"}
	case 1:
		g.GPUModels, g.SameModel = []string{"H100-80GB", "A100"}, true
	}
	r := gang.Request{Groups: []gang.Group{g}}
	if rng.IntN(2) == 0 {
		r.Required = "rack"
	}
	return r
}

// FuzzOps runs random allocate / release / state / place+apply / undo
// sequences on a small cluster and checks after every step that no GPU is
// booked twice and every counter equals what the per-node state implies
// (Snapshot.Verify), and that every placement is valid.
func FuzzOps(f *testing.F) {
	f.Add(uint64(1), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint64(7), []byte{3, 3, 3, 3, 4, 4, 0, 1})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e37))
		c := small(rng)
		shared := seed%2 == 1
		if shared {
			c = smallShared(rng)
		}
		s := c.NewSnapshot()
		var placed []gang.Result
		for _, op := range ops {
			switch op % 5 {
			case 0: // allocate one GPU
				g := uint32(rng.IntN(c.NumGPUs() + 2))
				_ = s.Allocate([]uint32{g})
			case 1: // release one GPU not held by a placement
				g := uint32(rng.IntN(c.NumGPUs()))
				held := false
				for _, r := range placed {
					for _, x := range r.GPUs() {
						held = held || x == g
					}
				}
				if !held {
					_ = s.Release([]uint32{g})
				}
			case 2:
				_ = s.SetNodeState(topo.NodeID(rng.IntN(c.NumNodes())), topo.NodeState(rng.IntN(4)))
			case 3:
				r := randomRequest(rng)
				if shared && rng.IntN(2) == 0 {
					r = fractionalRequest(rng)
				}
				res, err := gang.Place(s, &r)
				if err != nil {
					t.Fatal(err)
				}
				if res.Found {
					if r.Groups[0].GPUMilli == 0 && r.Groups[0].MIGProfile == "" {
						checkPlacement(t, s, &r, res)
					} else if len(res.Members) != r.Groups[0].Members {
						t.Fatalf("%d members placed, %d asked", len(res.Members), r.Groups[0].Members)
					}
					if err := res.Apply(s); err != nil {
						t.Fatalf("apply of a fresh placement: %v", err)
					}
					placed = append(placed, res)
				}
			case 4:
				if len(placed) > 0 {
					i := rng.IntN(len(placed))
					if err := placed[i].Undo(s); err != nil {
						t.Fatalf("undo: %v", err)
					}
					placed = append(placed[:i], placed[i+1:]...)
				}
			}
			if err := s.Verify(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
