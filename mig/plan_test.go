package mig

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanBasics(t *testing.T) {
	h100 := mustModel(t, "H100-80GB")
	a100 := mustModel(t, "A100-40GB")
	p := NewPool(4)
	// GPU 0: H100 in MIG mode, 3g@4 in use, 2g@0 idle.
	l, err := ParseLayout(h100, "3g.40gb@4 2g.20gb@0")
	require.NoError(t, err)
	require.NoError(t, p.Configure(0, GPUConfig{Model: h100, MIG: true, Layout: l}))
	_, err = p.Allocate(0, Request{Profile: "3g"}, ExistingOnly)
	require.NoError(t, err)
	// GPU 1: idle H100, MIG off. GPU 2: idle A100, MIG off. GPU 3: no model.
	require.NoError(t, p.Configure(1, GPUConfig{Model: h100}))
	require.NoError(t, p.Configure(2, GPUConfig{Model: a100}))

	// Without EnableMIG only GPU 0 can change: 4 x 1g fit beside 3g@4 once
	// the idle 2g is destroyed, but the 2g serves a 2g request: keep it.
	demand := []Demand{{Request{Profile: "1g"}, 2}, {Request{Profile: "2g"}, 1}}
	pl, err := p.Plan(demand, PlanOptions{})
	require.NoError(t, err)
	checkPlan(t, p, pl)
	assert.Equal(t, []int{2, 1}, pl.Served)
	assert.Equal(t, []int{2, 0}, pl.Created, "the idle 2g serves the 2g request")
	require.Len(t, pl.Changes, 1)
	assert.Equal(t, "H100-80GB[2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4]", pl.Changes[0].To.String())
	assert.Empty(t, pl.Changes[0].Destroy)
	assert.Equal(t, Cost{GPUs: 1, Creates: 2, Time: 4 * time.Second}, pl.Cost)

	// A 7g needs a whole GPU: the H100 (no reset) wins over the A100.
	pl, err = p.Plan([]Demand{{Request{Milli: 900}, 1}}, PlanOptions{EnableMIG: true})
	require.NoError(t, err)
	checkPlan(t, p, pl)
	require.Len(t, pl.Changes, 1)
	assert.Equal(t, uint32(1), pl.Changes[0].GPU)
	assert.True(t, pl.Changes[0].EnableMIG)
	assert.False(t, pl.Changes[0].NeedsReset)
	// Two 7g: the A100 too, with a reset priced in.
	pl, err = p.Plan([]Demand{{Request{Milli: 900}, 2}}, PlanOptions{EnableMIG: true})
	require.NoError(t, err)
	require.Len(t, pl.Changes, 2)
	assert.True(t, pl.Changes[1].NeedsReset)
	assert.Equal(t, 1, pl.Cost.Resets)
	assert.Equal(t, 2*2*time.Second+60*time.Second, pl.Cost.Time)
	require.NoError(t, p.Apply(pl))
	require.NoError(t, p.Check())
	for range 2 {
		_, err := p.AllocateIn(nil, Request{Milli: 900}, ExistingOnly)
		require.NoError(t, err)
	}
	// The same plan again is stale.
	assert.ErrorIs(t, p.Apply(pl), ErrStalePlan)

	// Destroy idle instances only when they serve nothing.
	q := NewPool(1)
	l4, err := ParseLayout(h100, "1g@0 1g@1 1g@2 1g@3")
	require.NoError(t, err)
	require.NoError(t, q.Configure(0, GPUConfig{Model: h100, MIG: true, Layout: l4}))
	pl, err = q.Plan([]Demand{{Request{Profile: "4g"}, 1}}, PlanOptions{})
	require.NoError(t, err)
	checkPlan(t, q, pl)
	require.Len(t, pl.Changes, 1)
	assert.Len(t, pl.Changes[0].Destroy, 4)
	assert.Equal(t, "H100-80GB[4g.40gb@0]", pl.Changes[0].To.String())

	// Bad demand.
	_, err = q.Plan([]Demand{{Request{}, 1}}, PlanOptions{})
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = q.Plan([]Demand{{Request{Profile: "1g"}, -1}}, PlanOptions{})
	assert.ErrorIs(t, err, ErrBadRequest)
}

func TestPlanTouchesFewestGPUs(t *testing.T) {
	h100 := mustModel(t, "H100-80GB")
	p := NewPool(10)
	for g := range uint32(10) {
		require.NoError(t, p.Configure(g, GPUConfig{Model: h100, MIG: true}))
	}
	// 14 x 1g fit on two GPUs.
	pl, err := p.Plan([]Demand{{Request{Profile: "1g"}, 14}}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, 2, pl.Cost.GPUs)
	assert.Equal(t, []int{14}, pl.Served)
	// Restricted to GPUs {5, 7}; capped at one GPU.
	set := roaring.BitmapOf(5, 7)
	pl, err = p.Plan([]Demand{{Request{Profile: "1g"}, 14}}, PlanOptions{GPUs: set, MaxGPUs: 1})
	require.NoError(t, err)
	require.Len(t, pl.Changes, 1)
	assert.Equal(t, uint32(5), pl.Changes[0].GPU)
	assert.Equal(t, []int{7}, pl.Served)
}

// FuzzPlan: on random pools and demand, plans are deterministic, create only
// valid layouts, never touch in-use instances, serve no more than asked,
// and after Apply every request counted as served can be allocated from
// idle instances without creating any.
func FuzzPlan(f *testing.F) {
	f.Add(uint64(1), uint8(3), true)
	f.Add(uint64(2), uint8(6), false)
	f.Fuzz(func(t *testing.T, seed uint64, kinds uint8, enable bool) {
		rng := rand.New(rand.NewPCG(seed, 5))
		p := randomPool(t, rng, 24)
		var demand []Demand
		for range int(kinds%6) + 1 {
			demand = append(demand, Demand{Request: randomRequest(rng), Count: rng.IntN(12)})
		}
		o := PlanOptions{EnableMIG: enable, MaxGPUs: rng.IntN(4) * 5}
		pl, err := p.Plan(demand, o)
		require.NoError(t, err)
		again, err := p.Plan(demand, o)
		require.NoError(t, err)
		require.Equal(t, pl, again, "deterministic")
		checkPlan(t, p, pl)
		if o.MaxGPUs > 0 {
			require.LessOrEqual(t, len(pl.Changes), o.MaxGPUs)
		}
		for i, d := range demand {
			require.LessOrEqual(t, pl.Served[i], d.Count)
			require.LessOrEqual(t, pl.Created[i], pl.Served[i])
		}
		require.NoError(t, p.Apply(pl))
		require.NoError(t, p.Check())
		require.Equal(t, sum(pl.Served), idleMatching(p, demand, pl.Served),
			"the idle instances after the plan can serve what it counts as served")
		require.NoError(t, p.Check())
	})
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// idleMatching is the maximum number of the want[i] requests of demand i
// that the pool's idle instances can serve at once, one instance each: a
// max flow from demand kinds to (model, profile) supplies, by augmenting
// paths.
func idleMatching(p *Pool, demand []Demand, want []int) int {
	supply := map[Profile]int{}
	for g := range uint32(p.Len()) {
		info, _ := p.GPU(g)
		for in := range info.Layout.All() {
			if info.MIG && !info.InUse.Has(in) {
				supply[in.Profile]++
			}
		}
	}
	// flow[i][prof]
	flow := make([]map[Profile]int, len(demand))
	for i := range flow {
		flow[i] = map[Profile]int{}
	}
	used := map[Profile]int{}
	serves := func(i int, pr Profile) bool {
		q, err := pr.Model().Resolve(demand[i].Request)
		return err == nil && q == pr
	}
	var profs []Profile
	for pr := range supply {
		profs = append(profs, pr)
	}
	// Deterministic order is not needed for a max flow's value.
	total := 0
	for i := range demand {
		for range want[i] {
			seenD := make([]bool, len(demand))
			seenP := map[Profile]bool{}
			var augment func(d int) bool
			augment = func(d int) bool {
				seenD[d] = true
				for _, pr := range profs {
					if seenP[pr] || !serves(d, pr) {
						continue
					}
					seenP[pr] = true
					if used[pr] < supply[pr] {
						used[pr]++
						flow[d][pr]++
						return true
					}
					// Reroute a unit of another demand off pr.
					for e := range demand {
						if flow[e][pr] > 0 && !seenD[e] && augment(e) {
							flow[e][pr]--
							flow[d][pr]++
							return true
						}
					}
				}
				return false
			}
			if augment(i) {
				total++
			}
		}
	}
	return total
}
