package gang

import (
	"math/rand"
	"slices"
	"testing"
)

// naiveGreedy is greedyPick written plainly: quadratic, no sorting.
func naiveGreedy(rooms []int, need int) []int32 {
	var dst []int32
	taken := func(i int32) bool { return slices.Contains(dst, i) }
	for left := need; left > 0; {
		best := int32(-1)
		for i, r := range rooms {
			if r >= left && !taken(int32(i)) && (best < 0 || r < rooms[best]) {
				best = int32(i)
			}
		}
		if best >= 0 {
			return append(dst, best)
		}
		big := int32(-1)
		for i, r := range rooms {
			if r > 0 && !taken(int32(i)) && (big < 0 || r > rooms[big]) {
				big = int32(i)
			}
		}
		if big < 0 {
			return dst
		}
		dst = append(dst, big)
		left -= rooms[big]
	}
	return dst
}

func TestGreedyPickMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var dst, ord []int32
	for it := range 5000 {
		n := 1 + rng.Intn(12)
		rooms := make([]int, n)
		for i := range rooms {
			rooms[i] = rng.Intn(6)
		}
		need := 1 + rng.Intn(20)
		dst, ord = greedyPick(dst[:0], ord, int32(n), func(i int32) int { return rooms[i] }, need)
		if want := naiveGreedy(rooms, need); !slices.Equal(dst, want) {
			t.Fatalf("case %d: rooms %v need %d: got %v, want %v", it, rooms, need, dst, want)
		}
	}
}
