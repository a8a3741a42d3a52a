package gang_test

import (
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

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
				res, err := gang.Place(s, &r)
				if err != nil {
					t.Fatal(err)
				}
				if res.Found {
					checkPlacement(t, s, &r, res)
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
