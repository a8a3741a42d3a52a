package mig_test

import (
	"math/rand/v2"
	"testing"

	"github.com/berthsched/berth/mig"
	"github.com/stretchr/testify/require"
)

// TestFitCountMatchesAllocations: FitCount equals the number of successful
// Allocate calls on the same GPU until the first failure.
func TestFitCountMatchesAllocations(t *testing.T) {
	h100, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	reqs := []mig.Request{{Milli: 100}, {Milli: 333}, {Milli: 500}, {Profile: "1g"}, {Profile: "2g"}, {Profile: "3g"}, {Milli: 1000},
		{Milli: 250, MemoryMiB: 20000}, {Milli: 100, MemoryMiB: 30000}}
	for iter := range 2000 {
		pool := mig.NewPool(1)
		cfg := mig.GPUConfig{Model: h100}
		switch rng.IntN(3) {
		case 0:
			cfg.MIG = true
			layouts := h100.Layouts()
			cfg.Layout = layouts[rng.IntN(len(layouts))]
		case 1:
			cfg.Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: 1 + rng.IntN(10), MemoryMiB: rng.IntN(2) * 81920}
		case 2:
			cfg.Sharing = mig.Sharing{Mode: mig.MPS, Replicas: 1 + rng.IntN(48), MemoryMiB: rng.IntN(2) * 81920}
		}
		require.NoError(t, pool.Configure(0, cfg))
		// some prior use
		for range rng.IntN(4) {
			_, _ = pool.Allocate(0, reqs[rng.IntN(len(reqs))], mig.MayCreate)
		}
		r := reqs[rng.IntN(len(reqs))]
		mode := mig.AllocMode(rng.IntN(2))
		want := pool.FitCount(0, r, mode)
		got := 0
		for {
			if _, err := pool.Allocate(0, r, mode); err != nil {
				break
			}
			got++
			require.Less(t, got, 2000)
		}
		require.Equal(t, got, want, "iter %d: %+v on %+v mode %v", iter, r, cfg, mode)
	}
}
