package mig

import (
	"math/bits"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bruteBestStart is BestStart written from scratch: try every listed start,
// score the free slices left by scanning all layouts of the model.
func bruteBestStart(m Model, l Layout, p Profile) (int, bool) {
	best, bestLargest, bestCount := -1, -1, -1
	for _, s := range p.Starts() {
		nl, err := l.Place(Instance{Profile: p, Start: uint8(s)})
		if err != nil {
			continue
		}
		free := nl.Free()
		largest, count := 0, 0
		for _, x := range m.Layouts() {
			if x.Used()&^free != 0 {
				continue
			}
			count++
			for in := range x.All() {
				largest = max(largest, in.Profile.ComputeSlices())
			}
		}
		if largest > bestLargest || (largest == bestLargest && count > bestCount) {
			best, bestLargest, bestCount = s, largest, count
		}
	}
	return best, best >= 0
}

// TestAllocateOneGPUBruteForce: on one GPU, every (layout, in-use subset,
// request) the allocator answers as brute force does.
func TestAllocateOneGPUBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"A100-40GB", "H100-80GB", "A30-24GB"} {
		m := mustModel(t, name)
		layouts := m.Layouts()
		for iter := 0; iter < 400; iter++ {
			l := layouts[rng.IntN(len(layouts))]
			ins := l.Instances()
			var inUse []Instance
			for _, in := range ins {
				if rng.IntN(2) == 0 {
					inUse = append(inUse, in)
				}
			}
			prof := m.Profiles()[rng.IntN(m.NumProfiles())]
			mode := AllocMode(rng.IntN(2))

			pool := NewPool(1)
			require.NoError(t, pool.Configure(0, GPUConfig{Model: m, MIG: true, Layout: l}))
			st := *pool.gpus.at(0)
			pool.set(0, gpuState{head: -1})
			for _, in := range inUse {
				st.inUse |= 1 << in.Start // set up in-use directly; set reindexes
			}
			pool.set(0, st)
			require.NoError(t, pool.Check())

			// Brute force: the lowest idle instance of prof, else a new one.
			var want Instance
			wantOK, wantCreated := false, false
			for _, in := range ins {
				held := false
				for _, u := range inUse {
					held = held || u == in
				}
				if in.Profile == prof && !held {
					want, wantOK = in, true
					break
				}
			}
			if !wantOK && mode == MayCreate {
				if s, ok := bruteBestStart(m, l, prof); ok {
					want, wantOK, wantCreated = Instance{Profile: prof, Start: uint8(s)}, true, true
				}
			}
			g, err := pool.Allocate(0, Request{Profile: prof.Name()}, mode)
			if !wantOK {
				assert.ErrorIs(t, err, ErrNoFit, "%v in-use %v %v", l, inUse, prof)
				continue
			}
			require.NoError(t, err, "%v in-use %v %v", l, inUse, prof)
			assert.Equal(t, want, g.Instance, "%v in-use %v %v mode %d", l, inUse, prof, mode)
			assert.Equal(t, wantCreated, g.Created)
			require.NoError(t, pool.Check())
			require.NoError(t, pool.Release(g))
			assert.ErrorIs(t, pool.Release(g), ErrNotHeld, "double release")
			require.NoError(t, pool.Check())
		}
	}
}

// randomPool builds a small mixed pool: MIG GPUs of several models with
// random layouts and in-use instances, shared GPUs with random shares.
func randomPool(t testing.TB, rng *rand.Rand, n int) *Pool {
	p := NewPool(n)
	models := Models()
	for g := range uint32(n) {
		switch rng.IntN(4) {
		case 0, 1:
			m := models[rng.IntN(len(models))]
			ls := m.Layouts()
			require.NoError(t, p.Configure(g, GPUConfig{Model: m, MIG: true, Layout: ls[rng.IntN(len(ls))]}))
			for in := range p.Layout(g).All() {
				if rng.IntN(2) == 0 {
					_, err := p.Allocate(g, Request{Profile: in.Profile.Name()}, ExistingOnly)
					require.NoError(t, err)
				}
			}
		case 2:
			require.NoError(t, p.Configure(g, GPUConfig{Sharing: Sharing{Mode: TimeSlicing, Replicas: 1 + rng.IntN(10)}}))
		case 3:
			require.NoError(t, p.Configure(g, GPUConfig{Sharing: Sharing{Mode: MPS, Replicas: 1 + rng.IntN(8), MemoryMiB: rng.IntN(2) * 16384}}))
		}
		for range rng.IntN(3) {
			_, _ = p.AllocateShare(g, Request{Milli: 1 + rng.IntN(600)})
		}
	}
	require.NoError(t, p.Check())
	return p
}

func randomRequest(rng *rand.Rand) Request {
	switch rng.IntN(3) {
	case 0:
		return Request{Profile: []string{"1g", "2g", "3g", "4g", "7g", "1g+me", "1g.10gb", "2g.20gb"}[rng.IntN(8)]}
	case 1:
		return Request{Milli: 1 + rng.IntN(1000)}
	default:
		return Request{Milli: 1 + rng.IntN(500), MemoryMiB: rng.IntN(3) * 4096}
	}
}

// refChoose is the ranking of alloc.go written plainly from public
// accessors: (phase, class, GPU), lowest first.
func refChoose(p *Pool, gpus []uint32, r Request, mode AllocMode) (uint32, uint8, bool) {
	bestG, bestPhase, bestClass, found := uint32(0), uint8(0), 0, false
	consider := func(g uint32, phase uint8, class int) {
		if !found || phase < bestPhase || (phase == bestPhase && (class < bestClass || (class == bestClass && g < bestG))) {
			bestG, bestPhase, bestClass, found = g, phase, class, true
		}
	}
	for _, g := range gpus {
		info, _ := p.GPU(g)
		if info.MIG {
			pr, err := info.Model.Resolve(r)
			if err != nil {
				continue
			}
			n := info.Model.MemorySlices()
			idle := false
			for in := range info.Layout.All() {
				idle = idle || (in.Profile == pr && !info.InUse.Has(in))
			}
			if idle {
				consider(g, phaseIdle, n-bits.OnesCount8(info.InUse.Used()))
			} else if _, ok := info.Layout.BestStart(pr); ok && mode == MayCreate {
				consider(g, phaseCreate, n-bits.OnesCount8(info.Layout.Used()))
			}
			continue
		}
		if info.Sharing.Mode == Exclusive || r.Profile != "" || r.Milli == 0 || info.Shares >= info.Sharing.Replicas {
			continue
		}
		st := *p.gpus.at(int(g))
		if _, _, ok := st.shareFits(r); ok {
			consider(g, phaseShare, info.FreeMilli)
		}
	}
	return bestG, bestPhase, found
}

// TestAllocateInDifferential: the indexed AllocateIn, the scanning
// AllocateInRange and the plain reference pick the same GPU, step after
// step, on random pools and random subsets.
func TestAllocateInDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 30; round++ {
		n := 8 + rng.IntN(40)
		a := randomPool(t, rng, n)
		b := a.Clone()
		var grants []Grant
		for step := 0; step < 60; step++ {
			r := randomRequest(rng)
			mode := AllocMode(rng.IntN(2))
			var set *roaring.Bitmap
			all := make([]uint32, 0, n)
			if rng.IntN(2) == 0 {
				set = roaring.New()
				for g := range uint32(n) {
					if rng.IntN(3) == 0 {
						set.Add(g)
					}
				}
				all = set.ToArray()
			} else {
				for g := range uint32(n) {
					all = append(all, g)
				}
			}
			wantG, _, wantOK := refChoose(a, all, r, mode)
			ga, errA := a.AllocateIn(set, r, mode)
			if set == nil {
				gb, errB := b.AllocateInRange(0, uint32(n), r, mode)
				assert.Equal(t, errA == nil, errB == nil)
				assert.Equal(t, ga.GPU, gb.GPU)
				assert.Equal(t, ga.Instance, gb.Instance)
			} else if errA == nil {
				// Mirror the grant on b to keep the two pools equal.
				gb, errB := b.Allocate(ga.GPU, r, mode)
				require.NoError(t, errB)
				assert.Equal(t, ga.Instance, gb.Instance)
			}
			assert.Equal(t, wantOK, errA == nil, "round %d step %d %v: %v", round, step, r, errA)
			if wantOK && errA == nil {
				assert.Equal(t, wantG, ga.GPU, "round %d step %d %v", round, step, r)
				grants = append(grants, ga)
			} else if errA != nil {
				assert.ErrorIs(t, errA, ErrNoFit)
			}
			if len(grants) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(grants))
				require.NoError(t, a.Release(grants[i]))
				require.NoError(t, b.Release(grants[i]))
				assert.ErrorIs(t, a.Release(grants[i]), ErrNotHeld)
				grants = append(grants[:i], grants[i+1:]...)
			}
			require.NoError(t, a.Check())
			require.NoError(t, b.Check())
		}
	}
}

func TestShares(t *testing.T) {
	p := NewPool(3)
	require.NoError(t, p.Configure(0, GPUConfig{Sharing: Sharing{Mode: TimeSlicing, Replicas: 4}}))
	require.NoError(t, p.Configure(1, GPUConfig{Sharing: Sharing{Mode: MPS, Replicas: 3, MemoryMiB: 10000}}))
	assert.ErrorIs(t, p.Configure(2, GPUConfig{Sharing: Sharing{Mode: MPS, Replicas: 49}}), ErrBadConfig)
	assert.ErrorIs(t, p.Configure(2, GPUConfig{MIG: true}), ErrBadConfig)
	assert.ErrorIs(t, p.Configure(9, GPUConfig{}), ErrBadGPU)

	// Time-slicing: 300 milli of 4 replicas holds 2 replicas (500 milli).
	s, err := p.AllocateShare(0, Request{Milli: 300})
	require.NoError(t, err)
	assert.Equal(t, 2, s.Replicas)
	assert.Equal(t, 500, s.Milli)
	info, _ := p.GPU(0)
	assert.Equal(t, 500, info.FreeMilli)
	_, err = p.AllocateShare(0, Request{Milli: 501})
	assert.ErrorIs(t, err, ErrNoFit)
	s2, err := p.AllocateShare(0, Request{Milli: 500})
	require.NoError(t, err)
	assert.False(t, p.Idle(0))
	assert.ErrorIs(t, p.Configure(0, GPUConfig{}), ErrBusy)
	assert.Len(t, p.Shares(0), 2)
	require.NoError(t, p.ReleaseShare(s.ID))
	assert.ErrorIs(t, p.ReleaseShare(s.ID), ErrNotHeld)
	assert.ErrorIs(t, p.ReleaseShare(0), ErrNotHeld)
	assert.ErrorIs(t, p.ReleaseShare(ShareID(1<<40|99)), ErrNotHeld)
	// The slot is reused, but the old ID stays dead.
	s3, err := p.AllocateShare(0, Request{Milli: 100})
	require.NoError(t, err)
	assert.NotEqual(t, s.ID, s3.ID)
	assert.ErrorIs(t, p.ReleaseShare(s.ID), ErrNotHeld)
	require.NoError(t, p.ReleaseShare(s2.ID))
	require.NoError(t, p.ReleaseShare(s3.ID))
	assert.True(t, p.Idle(0))

	// MPS: exact milli, thread percentage, pinned memory, client limit.
	m1, err := p.AllocateShare(1, Request{Milli: 333})
	require.NoError(t, err)
	assert.Equal(t, 34, m1.ActiveThreadPercent)
	assert.Equal(t, 3330, m1.PinnedMemoryMiB)
	_, err = p.AllocateShare(1, Request{Milli: 100, MemoryMiB: 7000})
	assert.ErrorIs(t, err, ErrNoFit, "memory")
	_, err = p.AllocateShare(1, Request{Milli: 333, MemoryMiB: 1000})
	require.NoError(t, err)
	_, err = p.AllocateShare(1, Request{Milli: 100})
	require.NoError(t, err)
	info, _ = p.GPU(1)
	assert.Equal(t, 234, info.FreeMilli)
	_, err = p.AllocateShare(1, Request{Milli: 10})
	assert.ErrorIs(t, err, ErrNoFit, "client limit")
	_, err = p.AllocateShare(2, Request{Milli: 10})
	assert.ErrorIs(t, err, ErrNoFit, "exclusive GPU")
	require.NoError(t, p.Check())
}

func TestPoolMIGFlow(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	p := NewPool(4)
	bal, err := ParseLayout(m, "3g 2g 1g 1g") // gpu-operator all-balanced
	require.NoError(t, err)
	for g := range uint32(4) {
		require.NoError(t, p.Configure(g, GPUConfig{Model: m, MIG: true, Layout: bal}))
	}
	// Tightest fit: the second 1g goes where the first went.
	g1, err := p.AllocateIn(nil, Request{Profile: "1g"}, ExistingOnly)
	require.NoError(t, err)
	g2, err := p.AllocateIn(nil, Request{Profile: "1g"}, ExistingOnly)
	require.NoError(t, err)
	assert.Equal(t, g1.GPU, g2.GPU)
	assert.NotEqual(t, g1.Instance, g2.Instance)
	// 4g exists nowhere; MayCreate cannot make room around 3g@4 and 2g.
	_, err = p.AllocateIn(nil, Request{Profile: "4g"}, MayCreate)
	assert.ErrorIs(t, err, ErrNoFit)
	// Fractions resolve to profiles: 250 milli -> 2g.20gb.
	g3, err := p.AllocateIn(nil, Request{Milli: 250}, ExistingOnly)
	require.NoError(t, err)
	assert.Equal(t, "2g.20gb", g3.Instance.Profile.Name())
	assert.Equal(t, g1.GPU, g3.GPU, "the fullest GPU first")
	info, err := p.GPU(g1.GPU)
	require.NoError(t, err)
	assert.Equal(t, 3, info.InUse.Len())
	assert.ErrorIs(t, p.Configure(g1.GPU, GPUConfig{}), ErrBusy)
	require.NoError(t, p.Release(g1))
	assert.ErrorIs(t, p.Release(g1), ErrNotHeld)
	_, err = p.Allocate(99, Request{Profile: "1g"}, MayCreate)
	assert.ErrorIs(t, err, ErrBadGPU)
	_, err = p.Allocate(0, Request{}, MayCreate)
	assert.ErrorIs(t, err, ErrBadRequest)
	require.NoError(t, p.Check())
}

func TestClaimAndStateSize(t *testing.T) {
	assert.Equal(t, uintptr(8), unsafe.Sizeof(Layout{}))
	assert.Equal(t, uintptr(32), unsafe.Sizeof(gpuState{}), "per-GPU state stays compact")
	m := mustModel(t, "A30-24GB")
	l, err := ParseLayout(m, "2g@0 1g@2 1g@3")
	require.NoError(t, err)
	p := NewPool(1)
	require.NoError(t, p.Configure(0, GPUConfig{Model: m, MIG: true, Layout: l}))
	in, _ := l.At(3)
	g, err := p.Claim(0, in)
	require.NoError(t, err)
	_, err = p.Claim(0, in)
	assert.ErrorIs(t, err, ErrBusy)
	other, _ := l.At(0)
	_, err = p.Claim(0, Instance{Profile: other.Profile, Start: 2})
	assert.ErrorIs(t, err, ErrNoInstance)
	// The next 1g takes the other idle 1g, not the claimed one.
	g2, err := p.Allocate(0, Request{Profile: "1g"}, ExistingOnly)
	require.NoError(t, err)
	assert.Equal(t, uint8(2), g2.Instance.Start)
	require.NoError(t, p.Release(g))
	require.NoError(t, p.Check())
}
