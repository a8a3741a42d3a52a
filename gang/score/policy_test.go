package score_test

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang/score"
	"github.com/berthsched/berth/topo"
)

// handState is three hand-made nodes:
//
//	n0 "a": 2 GPUs, CPU 32000, f = [1000 1000],          F = 2000, no pods
//	n1 "b": 4 GPUs, CPU 56000 free, f = [500 1000 1000 1000], F = 3500, one share
//	n2 "c": 8 GPUs, CPU 80000 free, f = [0 1000 x7],     F = 7000, one 1-GPU pod
func handState(t *testing.T) *score.State {
	t.Helper()
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "a", GPUs: 2, CPUMilli: 32000, MemoryMiB: 65536},
		{Name: "b", GPUs: 4, CPUMilli: 64000, MemoryMiB: 131072},
		{Name: "c", GPUs: 8, CPUMilli: 96000, MemoryMiB: 262144},
	}})
	require.NoError(t, err)
	st, err := score.NewState(c, score.Options{})
	require.NoError(t, err)
	_, err = st.Bind(score.Placement{Node: 1, GPUs: []int{0}}, score.Request{GPUs: 1, Milli: 500, CPUMilli: 8000})
	require.NoError(t, err)
	_, err = st.Bind(score.Placement{Node: 2, GPUs: []int{0}}, score.Request{GPUs: 1, Milli: 1000, CPUMilli: 16000})
	require.NoError(t, err)
	require.NoError(t, st.Check())
	return st
}

var allNodes = []topo.NodeID{0, 1, 2}

func scores(st *score.State, p score.Policy, r score.Request) []int64 {
	out := make([]int64, len(allNodes))
	p.Score(st, r, allNodes, out)
	return out
}

var (
	whole1  = score.Request{GPUs: 1, Milli: 1000, CPUMilli: 8000}
	whole2  = score.Request{GPUs: 2, Milli: 1000, CPUMilli: 8000}
	share   = score.Request{GPUs: 1, Milli: 300, CPUMilli: 4000}
	cpuOnly = score.Request{CPUMilli: 30000}
)

func TestDotProd(t *testing.T) {
	st := handState(t)
	// N·P with P = (0.0625, 0.125): a .046875, b .08203125, c .1484375.
	assert.Equal(t, []int64{97, 95, 92}, scores(st, score.DotProd{}, whole1))
	// CPU-only: only the CPU term; c_n < c_p scores 0 (never feasible).
	assert.Equal(t, []int64{0, 0, 0}, scores(st, score.DotProd{}, score.Request{CPUMilli: 100000}))
	assert.Equal(t, 1, score.DotProd{}.ShareGPU(st, score.Request{GPUs: 1, Milli: 400}, 2), "best fit skips the full GPU")
}

func TestGpuClustering(t *testing.T) {
	st := handState(t)
	// b = 25·(8000−F)/8000: a 18, b 14, c 3.
	assert.Equal(t, []int64{18 + 25, 14, 3 + 75}, scores(st, score.GpuClustering{}, whole1))
	assert.Equal(t, []int64{18 + 25, 14 + 75, 3}, scores(st, score.GpuClustering{}, share))
	assert.Equal(t, []int64{18 + 25, 14, 3}, scores(st, score.GpuClustering{}, whole2))
	assert.Equal(t, []int64{0, 0, 0}, scores(st, score.GpuClustering{}, cpuOnly))
	// A node with two kinds: the tag present among others gives b+50.
	_, err := st.Bind(score.Placement{Node: 2, GPUs: []int{1}}, share)
	require.NoError(t, err)
	assert.Equal(t, int64(25*(8000-6700)/8000+50), scores(st, score.GpuClustering{}, whole1)[2])
}

func TestGpuPacking(t *testing.T) {
	st := handState(t)
	// a all free: 33−2; b takes the 500 GPU: 100 − (50)/10; c takes a free GPU: 50−1.
	assert.Equal(t, []int64{31, 95, 49}, scores(st, score.GpuPacking{}, share))
	assert.Equal(t, []int64{31, 49, 49}, scores(st, score.GpuPacking{}, whole1))
	assert.Equal(t, []int64{31, 48, 48}, scores(st, score.GpuPacking{}, whole2))
	assert.Equal(t, []int64{0, 0, 0}, scores(st, score.GpuPacking{}, cpuOnly))
	// Two partial GPUs taken (k=2 of 400 on b after a 700 share on GPU 1):
	// f = [500 300 ...]: ascending with room: 500, then 1000 → z=1.
	_, err := st.Bind(score.Placement{Node: 1, GPUs: []int{1}}, score.Request{GPUs: 1, Milli: 700})
	require.NoError(t, err)
	assert.Equal(t, int64(49), scores(st, score.GpuPacking{}, score.Request{GPUs: 2, Milli: 400})[1])
	// A share of 250 fits GPUs 300 and 500: takes 300 → 100 − 30/10 = 97.
	assert.Equal(t, int64(97), scores(st, score.GpuPacking{}, score.Request{GPUs: 1, Milli: 250})[1])
}

func TestBestFit(t *testing.T) {
	st := handState(t)
	// Raw: a 84, b 65, c 34 → normalised (r−34)·100/50.
	assert.Equal(t, []int64{100, 62, 0}, scores(st, score.BestFit{}, whole1))
	// All equal: every node 0.
	out := make([]int64, 2)
	score.BestFit{}.Score(st, whole1, []topo.NodeID{0, 0}, out)
	assert.Equal(t, []int64{0, 0}, out)
}

func fgdTarget() score.Target {
	// A: (4000, 500, 1) ×3, B: (8000, 1000, 1) ×1 → weights .75, .25.
	a := score.Request{GPUs: 1, Milli: 500, CPUMilli: 4000, MemoryMiB: 1024}
	b := score.Request{GPUs: 1, Milli: 1000, CPUMilli: 8000, MemoryMiB: 2048}
	return score.NewTarget([]score.Request{a, b, a, a}, 1)
}

func TestNewTarget(t *testing.T) {
	tg := fgdTarget()
	require.Len(t, tg.Shapes, 2)
	assert.Equal(t, score.Shape{CPUMilli: 4000, Milli: 500, GPUs: 1, MemoryMiB: 1024, Count: 3, Weight: 0.75}, tg.Shapes[0])
	assert.Equal(t, 0.25, tg.Shapes[1].Weight)
	// The 95% cut keeps the shortest prefix; ties by CPU descending.
	reqs := []score.Request{{CPUMilli: 1}, {CPUMilli: 2}, {CPUMilli: 3}, {CPUMilli: 3}}
	cut := score.NewTarget(reqs, 0.7)
	require.Len(t, cut.Shapes, 2)
	assert.Equal(t, int64(3), cut.Shapes[0].CPUMilli)
	assert.Equal(t, int64(2), cut.Shapes[1].CPUMilli)
	assert.InDelta(t, 2.0/3, cut.Shapes[0].Weight, 1e-15)
}

func TestFrag(t *testing.T) {
	tg := fgdTarget()
	assert.Equal(t, 125.0, tg.Frag([]int16{500, 1000, 1000, 1000}, 56000, ""))
	assert.Equal(t, 0.0, tg.Frag([]int16{0, 1000}, 56000, ""))
	// Not enough CPU for either shape: all free milli is fragment.
	assert.Equal(t, 1500.0, tg.Frag([]int16{500, 1000}, 3000, ""))
	// CPU for A only: A counts the GPUs too small (none), B all of F.
	assert.Equal(t, 0.25*1500, tg.Frag([]int16{500, 1000}, 5000, ""))
}

func TestFGD(t *testing.T) {
	st := handState(t)
	p := score.NewFGD(fgdTarget())
	half := score.Request{GPUs: 1, Milli: 500, CPUMilli: 4000}
	// b: GPU 0 (exact fit) Δ=+125 → int(100σ(.125)) = 53; a, c: Δ=−125 → 46.
	assert.Equal(t, []int64{46, 53, 46}, scores(st, p, half))
	assert.Equal(t, 0, p.ShareGPU(st, half, 1))
	assert.Equal(t, 1, p.ShareGPU(st, half, 2))
	// CPU-only taking a's CPU to 2000: both shapes lose it, Δ = −2000 → 11.
	assert.Equal(t, int64(11), scores(st, p, cpuOnly)[0])
	// Whole GPU on c: f [0 1000...] → [0 0 1000...]: no fragment either way.
	assert.Equal(t, int64(50), scores(st, p, whole1)[2])
	// The cache follows the state: after a bind on b the score changes.
	_, err := st.Bind(score.Placement{Node: 1, GPUs: []int{0}}, half)
	require.NoError(t, err)
	assert.Equal(t, []int64{46, 46, 46}, scores(st, p, half))
}

func TestBerth(t *testing.T) {
	tg := fgdTarget()
	p := score.NewBerth(tg)
	// A piece no shape fits is dead whole; CPU or memory gone kills the
	// free GPUs; a piece most of the workload fits is nearly alive.
	assert.Equal(t, 190.0, p.Dead([]int16{190}, 1e6, 1e6, ""))
	assert.Equal(t, 2000.0, p.Dead([]int16{1000, 1000}, 0, 1e6, ""))
	assert.Equal(t, 2000.0, p.Dead([]int16{1000, 1000}, 1e6, 0, ""))
	assert.Less(t, p.Dead([]int16{500, 1000}, 1e6, 1e6, ""), 0.1)

	st := handState(t)
	half := score.Request{GPUs: 1, Milli: 500, CPUMilli: 4000}
	got := scores(st, p, half)
	assert.Greater(t, got[1], got[0], "filling b's half GPU beats opening a GPU")
	assert.Equal(t, 0, p.ShareGPU(st, half, 1))
	// CPU-only: the node keeping the larger CPU surplus wins the tie.
	small := score.Request{CPUMilli: 1000}
	got = scores(st, p, small)
	assert.Equal(t, got[0]>>24, got[2]>>24, "same primary score")
	assert.Greater(t, got[2], got[0], "c has more CPU per free GPU milli")
}

func TestBerthBalancesCPU(t *testing.T) {
	// Two nodes alike but for CPU; ρ = 5000/625 = 8 CPU milli per GPU milli.
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "poor", GPUs: 2, CPUMilli: 20000, MemoryMiB: 1 << 20},
		{Name: "rich", GPUs: 2, CPUMilli: 64000, MemoryMiB: 1 << 20},
	}})
	require.NoError(t, err)
	st, err := score.NewState(c, score.Options{})
	require.NoError(t, err)
	p := score.NewBerth(fgdTarget())
	two := []topo.NodeID{0, 1}
	out := make([]int64, 2)
	// A whole GPU: same primary score; the CPU-poor node (surplus 4000
	// after, against 48000) takes it.
	p.Score(st, whole1, two, out)
	assert.Equal(t, out[0]>>24, out[1]>>24)
	assert.Greater(t, out[0], out[1])
	// CPU-only work goes where CPU is in surplus.
	p.Score(st, score.Request{CPUMilli: 1000}, two, out)
	assert.Equal(t, out[0]>>24, out[1]>>24)
	assert.Greater(t, out[1], out[0])
}

func TestRandom(t *testing.T) {
	st := handState(t)
	p := &score.Random{Rand: rand.New(rand.NewSource(1))}
	seen := map[int]int{}
	for range 300 {
		out := scores(st, p, whole1)
		hundred := 0
		for i, v := range out {
			if v == score.MaxScore {
				hundred++
				seen[i]++
			} else {
				assert.Zero(t, v)
			}
		}
		require.Equal(t, 1, hundred)
	}
	assert.Len(t, seen, 3)
	gpus := map[int]int{}
	for range 300 {
		g := p.ShareGPU(st, share, 2)
		require.GreaterOrEqual(t, g, 1, "GPU 0 is full")
		gpus[g]++
	}
	assert.Len(t, gpus, 7)
}

func TestSchedulerRankAndSingle(t *testing.T) {
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "x", GPUs: 1, CPUMilli: 1000}, {Name: "y", GPUs: 1, CPUMilli: 1000}, {Name: "z", GPUs: 1, CPUMilli: 1000},
	}})
	require.NoError(t, err)
	st, err := score.NewState(c, score.Options{})
	require.NoError(t, err)
	// GpuClustering scores CPU-only requests 0 everywhere: the rank decides.
	sc := &score.Scheduler{State: st, Policy: score.GpuClustering{}, Rank: []int32{2, 0, 1}}
	d, _, err := sc.Schedule(score.Request{CPUMilli: 1000})
	require.NoError(t, err)
	assert.Equal(t, score.Decision{Placed: true, Feasible: 3, Placement: score.Placement{Node: 1}}, d)
	// Without a rank, the lowest ID.
	sc.Rank = nil
	d, _, err = sc.Schedule(score.Request{CPUMilli: 1000})
	require.NoError(t, err)
	assert.Equal(t, topo.NodeID(0), d.Placement.Node)
	// One node left: taken without scoring (a Random with no stream would panic).
	sc.Policy = &score.Random{}
	d, _, err = sc.Schedule(score.Request{GPUs: 1, Milli: 1000, CPUMilli: 1000})
	require.NoError(t, err)
	assert.Equal(t, score.Decision{Placed: true, Feasible: 1, Placement: score.Placement{Node: 2, GPUs: []int{0}}}, d)
	// Nothing fits: not placed, no error.
	d, _, err = sc.Schedule(score.Request{CPUMilli: 1})
	require.NoError(t, err)
	assert.False(t, d.Placed)
	_, _, err = sc.Schedule(score.Request{Milli: 2000})
	assert.ErrorIs(t, err, score.ErrBadRequest)
}
