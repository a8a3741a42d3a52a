package mig

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzLayoutOps runs random place / remove / alloc sequences on one GPU and
// checks after every step that the layout is valid and that every refusal
// left it unchanged.
func FuzzLayoutOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{5, 200, 17, 3, 99, 42, 1, 0, 250, 13})
	models := Models()
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		m := models[int(ops[0])%len(models)]
		l := EmptyLayout(m)
		profs := m.Profiles()
		for i := 1; i+1 < len(ops); i += 2 {
			p := profs[int(ops[i+1])%len(profs)]
			before := l
			var err error
			switch ops[i] % 3 {
			case 0:
				l, err = l.Place(Instance{Profile: p, Start: ops[i+1] % 8})
			case 1:
				ins := l.Instances()
				if len(ins) > 0 {
					l, err = l.Remove(ins[int(ops[i+1])%len(ins)])
				}
			case 2:
				l, _, err = l.Alloc(p)
			}
			if err != nil {
				require.Equal(t, before, l, "a refused operation changes nothing")
			}
			require.NoError(t, l.Validate(), "after op %d: %v", i, l)
			require.LessOrEqual(t, l.Len(), m.ComputeSlices())
			sum := 0
			for in := range l.All() {
				sum += in.Profile.ComputeSlices()
			}
			require.LessOrEqual(t, sum, m.ComputeSlices(), "compute slices are implied by memory slices")
		}
	})
}

// FuzzPoolOps drives a mixed pool with random allocations, releases
// (including double releases), share operations and reconfigurations, and
// checks every pool invariant after every step.
func FuzzPoolOps(f *testing.F) {
	f.Add(uint64(1), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint64(7), []byte{9, 9, 9, 1, 1, 1, 4, 4, 200, 3})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		rng := rand.New(rand.NewPCG(seed, 99))
		p := randomPool(t, rng, 12)
		var grants []Grant
		for _, op := range ops {
			r := randomRequest(rng)
			switch op % 6 {
			case 0, 1:
				if g, err := p.AllocateIn(nil, r, AllocMode(op%2)); err == nil {
					grants = append(grants, g)
				}
			case 2:
				if g, err := p.AllocateInRange(uint32(rng.IntN(12)), uint32(rng.IntN(13)), r, MayCreate); err == nil {
					grants = append(grants, g)
				}
			case 3:
				if len(grants) > 0 {
					i := rng.IntN(len(grants))
					require.NoError(t, p.Release(grants[i]))
					require.ErrorIs(t, p.Release(grants[i]), ErrNotHeld)
					grants = append(grants[:i], grants[i+1:]...)
				}
			case 4:
				g := uint32(rng.IntN(12))
				m := Models()[rng.IntN(len(Models()))]
				err := p.Configure(g, GPUConfig{Model: m, MIG: true})
				if !p.Idle(g) {
					require.ErrorIs(t, err, ErrBusy)
				}
			case 5:
				pl, err := p.Plan([]Demand{{Request: r, Count: 1 + rng.IntN(5)}}, PlanOptions{EnableMIG: rng.IntN(2) == 0})
				require.NoError(t, err)
				checkPlan(t, p, pl)
				require.NoError(t, p.Apply(pl))
			}
			require.NoError(t, p.Check())
		}
	})
}

// checkPlan asserts a plan's promises against the pool it was made on.
func checkPlan(t testing.TB, p *Pool, pl Plan) {
	t.Helper()
	for i, ch := range pl.Changes {
		if i > 0 {
			require.Less(t, pl.Changes[i-1].GPU, ch.GPU, "sorted, one change per GPU")
		}
		info, err := p.GPU(ch.GPU)
		require.NoError(t, err)
		require.NoError(t, ch.To.Validate(), "plans create only valid layouts")
		require.Equal(t, info.Layout.Model(), ch.To.Model())
		if ch.EnableMIG {
			require.False(t, info.MIG)
			require.True(t, p.Idle(ch.GPU))
			require.Equal(t, info.Model.ResetToToggle(), ch.NeedsReset)
		} else {
			require.True(t, info.MIG)
			require.Equal(t, info.Layout, ch.From)
			require.False(t, ch.NeedsReset)
		}
		for in := range info.InUse.All() {
			require.True(t, ch.To.Has(in), "in-use %v must stay", in)
		}
		for _, in := range ch.Destroy {
			require.False(t, info.InUse.Has(in), "never destroy an in-use instance")
			require.True(t, ch.From.Has(in))
			require.False(t, ch.To.Has(in))
		}
		for _, in := range ch.Create {
			require.False(t, ch.From.Has(in))
			require.True(t, ch.To.Has(in))
		}
		require.NotEmpty(t, append(ch.Create, ch.Destroy...), "a change changes something")
	}
}
