package fgd

import (
	"math"
	"math/rand"
	"testing"
)

// TestFragSum checks the running sum against fragRatio's full sum after
// every change, bit for bit.
func TestFragSum(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := range 50 {
		frag := make([]float64, rng.Intn(300))
		for i := range frag {
			frag[i] = rng.Float64() * 8000
		}
		fs := newFragSum(frag)
		ref := append([]float64(nil), frag...)
		for step := range 200 {
			if len(frag) > 0 {
				n := rng.Intn(len(frag))
				v := rng.Float64() * 8000
				if rng.Intn(4) == 0 {
					v = ref[n]
				}
				ref[n] = v
				fs.set(n, v)
			}
			free := int64(rng.Intn(1_000_000))
			if got, want := fs.ratio(free), fragRatio(ref, free); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("trial %d step %d: %v, want %v", trial, step, got, want)
			}
		}
	}
}
