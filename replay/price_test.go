package replay

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/workload"
)

func TestPriceFactor(t *testing.T) {
	p := Price{PerRack: 0.1, PerBlock: 0.25}
	assert.InDelta(t, 1.0, p.Factor(1, 1), 1e-12)
	assert.InDelta(t, 1.2, p.Factor(3, 1), 1e-12)
	assert.InDelta(t, 1.45, p.Factor(3, 2), 1e-12)
	assert.InDelta(t, 1.0, p.Factor(0, 0), 1e-12, "no racks counts as one")
	assert.False(t, Price{}.On())
	assert.True(t, DefaultPrice().On())

	jobs := []workload.Job{{ID: "a", GPUs: 8, NumGPU: 8, Runtime: time.Hour}}
	c := Cluster{Nodes: 4, GPUsPerNode: 8, Racks: 2}
	for name, cfg := range map[string]Config{
		"unknown placement": {Placement: "spread"},
		"negative factor":   {Price: Price{PerRack: -0.1}},
		"NaN factor":        {Price: Price{PerBlock: nanFloat()}},
		"infinite factor":   {Price: Price{PerRack: math.Inf(1)}},
		"infinite estimate": {EstimateFactor: math.Inf(1)},
		"NaN estimate":      {EstimateFactor: nanFloat()},
	} {
		cfg.Jobs, cfg.Cluster, cfg.Policy = jobs, c, "fifo"
		_, err := Run(context.Background(), cfg)
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
}

func nanFloat() float64 { z := 0.0; return z / z }

// TestPriceRacksOfTheTrueCluster: the factor counts the racks and blocks
// of the true cluster, also when the engine sees the blind one.
func TestPriceRacksOfTheTrueCluster(t *testing.T) {
	c := Cluster{Nodes: 8, GPUsPerNode: 8, Racks: 4}
	spec, err := c.Spec()
	require.NoError(t, err)
	spec.Levels = []string{"block", "rack"}
	for i := range spec.Nodes { // blocks of two racks
		spec.Nodes[i].Domains = []string{[]string{"b0", "b1"}[i/4], spec.Nodes[i].Domains[0]}
	}
	for _, pl := range []string{PlacementBerth, PlacementBlind, PlacementKueue} {
		p, err := newPlaced(&Config{Placement: pl, Price: Price{PerRack: 0.1, PerBlock: 1}}, spec)
		require.NoError(t, err, pl)
		require.Len(t, p.spec.Nodes, 8)
		name := func(i int) string { return p.spec.Nodes[i].Name }
		f := p.factor()
		assert.InDelta(t, 1.0, f("a", []string{name(0), name(1)}), 1e-12, pl)                   // one rack
		assert.InDelta(t, 1.1, f("b", []string{name(0), name(2)}), 1e-12, pl)                   // two racks, one block
		assert.InDelta(t, 2.1, f("c", []string{name(0), name(4)}), 1e-12, pl)                   // two racks, two blocks
		assert.InDelta(t, 2.3, f("d", []string{name(0), name(2), name(4), name(7)}), 1e-12, pl) // 4 racks, 2 blocks
		st := p.stats()
		assert.Equal(t, 4, st.Runs, pl)
		assert.Equal(t, 3, st.Stretched, pl)
		assert.InDelta(t, 2.3, st.MaxFactor, 1e-12, pl)
	}
	bl := blindSpec(spec)
	assert.Empty(t, bl.Levels)
	moved := 0
	for i := range bl.Nodes {
		if bl.Nodes[i].Name != "x"+spec.Nodes[i].Name[1:] {
			moved++
		}
	}
	assert.Greater(t, moved, 2, "the blind order is shuffled")
}

// TestPriceLengthensSpreadRuns: on a synthetic workload, with a price
// every run on more than one rack lasts longer than its runtime by the
// price of its racks, and runs on one node last their runtime.
func TestPriceLengthensSpreadRuns(t *testing.T) {
	jobs := replaySynthetic(t, 300, 64)
	c := Cluster{Nodes: 8, GPUsPerNode: 8, Racks: 4}
	for _, pl := range []string{PlacementBerth, PlacementBlind, PlacementKueue} {
		cfg := Config{Jobs: jobs, Cluster: c, Policy: "easy", Placement: pl, Price: Price{PerRack: 0.5}}
		res, err := Run(context.Background(), cfg)
		require.NoError(t, err, pl)
		require.Empty(t, res.Violations, pl)
		assert.Equal(t, len(jobs), res.Result.Finished, pl)
		assert.Positive(t, res.Price.Stretched, pl)
		assert.Equal(t, len(jobs), res.Price.Runs, pl)
		free, err := Run(context.Background(), Config{Jobs: jobs, Cluster: c, Policy: "easy", Placement: pl})
		require.NoError(t, err, pl)
		assert.Zero(t, free.Price.Runs, pl)
		assert.Greater(t, res.Result.AvgJCT, free.Result.AvgJCT, pl)
	}
}

// TestPricedPlacementsITP is the price of placement on ITP cluster04 (64
// nodes of 8 GPUs in 8 racks, EASY backfill, the default price): berth's
// placement spreads fewer runs over racks than the topology-blind one,
// and its mean job completion time is lower (docs/price.md).
func TestPricedPlacementsITP(t *testing.T) {
	itp := replayTrace(t, workload.KindITP)
	if replayRace() || testing.Short() {
		itp = itp[:3000]
	}
	c := Cluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}
	res := map[string]Result{}
	for _, pl := range []string{PlacementBerth, PlacementBlind} {
		r, err := Run(context.Background(), Config{Workload: "itp04", Jobs: itp, Cluster: c, Policy: "easy", Placement: pl, Price: DefaultPrice()})
		require.NoError(t, err, pl)
		require.Empty(t, r.Violations, pl)
		res[pl] = r
	}
	b, bl := res[PlacementBerth], res[PlacementBlind]
	t.Logf("berth: JCT %v, %d runs stretched; blind: JCT %v, %d runs stretched", b.Result.AvgJCT, b.Price.Stretched, bl.Result.AvgJCT, bl.Price.Stretched)
	assert.Less(t, b.Price.Stretched, bl.Price.Stretched)
	assert.Less(t, b.Result.AvgJCT, bl.Result.AvgJCT)
}
