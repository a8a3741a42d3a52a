package gang_test

import (
	"encoding/json"
	"math/rand"
	randv2 "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// handSnap is three hand-made nodes on a cluster that shares free GPUs:
//
//	n0 "a": 2 GPUs, CPU 32000, f = [1000 1000],               F = 2000
//	n1 "b": 4 GPUs, CPU 56000 free, f = [500 1000 1000 1000], F = 3500, one share
//	n2 "c": 8 GPUs, CPU 80000 free, f = [0 1000 x7],          F = 7000, one 1-GPU member
//
// The scorers' expected values are those of the FGD artifact's formulas
// (docs/fgd.md), computed by hand.
func handSnap(t testing.TB) *topo.Snapshot {
	t.Helper()
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "a", GPUs: 2, CPUMilli: 32000, MemoryMiB: 65536},
		{Name: "b", GPUs: 4, CPUMilli: 64000, MemoryMiB: 131072},
		{Name: "c", GPUs: 8, CPUMilli: 96000, MemoryMiB: 262144},
	}})
	require.NoError(t, err)
	s := c.NewSnapshot()
	require.NoError(t, s.AllocateHost(1, 8000, 0))
	_, err = s.AllocateShared(2, mig.Request{Milli: 500})
	require.NoError(t, err)
	require.NoError(t, s.AllocateHost(2, 16000, 0))
	require.NoError(t, s.Allocate([]uint32{6}))
	return s
}

var allNodes = []topo.NodeID{0, 1, 2}

func scores(s *topo.Snapshot, p gang.Scorer, g gang.Group) []int64 {
	out := make([]int64, len(allNodes))
	p.Score(s, &g, allNodes, out)
	return out
}

var (
	whole1  = gang.Group{Members: 1, GPUsPerMember: 1, CPUMilli: 8000}
	whole2  = gang.Group{Members: 1, GPUsPerMember: 2, CPUMilli: 8000}
	share   = gang.Group{Members: 1, GPUMilli: 300, CPUMilli: 4000}
	half    = gang.Group{Members: 1, GPUMilli: 500, CPUMilli: 4000}
	cpuOnly = gang.Group{Members: 1, CPUMilli: 30000}
)

func TestNodeGPUMilli(t *testing.T) {
	s := handSnap(t)
	assert.Equal(t, []int16{1000, 1000}, gang.NodeGPUMilli(s, 0, nil))
	assert.Equal(t, []int16{500, 1000, 1000, 1000}, gang.NodeGPUMilli(s, 1, nil))
	assert.Equal(t, []int16{0, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, gang.NodeGPUMilli(s, 2, nil))
}

func TestDotProd(t *testing.T) {
	s := handSnap(t)
	// N·P with P = (0.0625, 0.125): a .046875, b .08203125, c .1484375.
	assert.Equal(t, []int64{97, 95, 92}, scores(s, gang.DotProd{}, whole1))
	// CPU-only: only the CPU term.
	assert.Equal(t, []int64{97, 94, 92}, scores(s, gang.DotProd{}, cpuOnly))
	assert.Equal(t, 1, gang.DotProd{}.ShareGPU(s, &gang.Group{Members: 1, GPUMilli: 400}, 2), "best fit skips the full GPU")
	assert.Equal(t, 0, gang.DotProd{}.ShareGPU(s, &gang.Group{Members: 1, GPUMilli: 400}, 1), "best fit takes the half-used GPU")
}

func TestGpuClustering(t *testing.T) {
	s := handSnap(t)
	p := gang.NewGpuClustering()
	p.Bound(1, &share, 1)
	p.Bound(2, &whole1, 1)
	// b = 25·(8000−F)/8000: a 18, b 14, c 3.
	assert.Equal(t, []int64{18 + 25, 14, 3 + 75}, scores(s, p, whole1))
	assert.Equal(t, []int64{18 + 25, 14 + 75, 3}, scores(s, p, share))
	assert.Equal(t, []int64{18 + 25, 14, 3}, scores(s, p, whole2))
	assert.Equal(t, []int64{0, 0, 0}, scores(s, p, cpuOnly))
	// A node with two kinds: the kind present among others gives b+50.
	p.Bound(2, &share, 1)
	assert.Equal(t, int64(3+50), scores(s, p, whole1)[2])
	p.Released(2, &share, 1)
	assert.Equal(t, int64(3+75), scores(s, p, whole1)[2])
	// Without reports every node looks empty.
	assert.Equal(t, []int64{18 + 25, 14 + 25, 3 + 25}, scores(s, gang.NewGpuClustering(), whole1))
}

func TestGpuPacking(t *testing.T) {
	s := handSnap(t)
	// a all free: 33−2; b takes the 500 GPU: 100 − 50/10; c takes a free GPU: 50−1.
	assert.Equal(t, []int64{31, 95, 49}, scores(s, gang.GpuPacking{}, share))
	assert.Equal(t, []int64{31, 49, 49}, scores(s, gang.GpuPacking{}, whole1))
	assert.Equal(t, []int64{31, 48, 48}, scores(s, gang.GpuPacking{}, whole2))
	assert.Equal(t, []int64{0, 0, 0}, scores(s, gang.GpuPacking{}, cpuOnly))
	// A share of 250 on b after a 700 share on GPU 1: fits 300 and 500,
	// takes 300 → 100 − 30/10 = 97.
	_, err := s.AllocateShared(3, mig.Request{Milli: 700})
	require.NoError(t, err)
	assert.Equal(t, int64(97), scores(s, gang.GpuPacking{}, gang.Group{Members: 1, GPUMilli: 250})[1])
}

func TestBestFit(t *testing.T) {
	s := handSnap(t)
	// Raw: a 84, b 65, c 34 → normalised (r−34)·100/50.
	assert.Equal(t, []int64{100, 62, 0}, scores(s, gang.BestFit{}, whole1))
	// All equal: every node 0.
	out := make([]int64, 2)
	gang.BestFit{}.Score(s, &whole1, []topo.NodeID{0, 0}, out)
	assert.Equal(t, []int64{0, 0}, out)
}

func fgdTarget() gang.Target {
	// A: (4000, 500, 1) ×3, B: (8000, 1000, 1) ×1 → weights .75, .25.
	a := gang.Group{Members: 1, GPUMilli: 500, CPUMilli: 4000, MemoryMiB: 1024}
	b := gang.Group{Members: 1, GPUsPerMember: 1, CPUMilli: 8000, MemoryMiB: 2048}
	return gang.NewTarget([]gang.Group{a, b, a, a}, 1)
}

func TestNewTarget(t *testing.T) {
	tg := fgdTarget()
	require.Len(t, tg.Shapes, 2)
	assert.Equal(t, gang.Shape{CPUMilli: 4000, Milli: 500, GPUs: 1, MemoryMiB: 1024, Count: 3, Weight: 0.75}, tg.Shapes[0])
	assert.Equal(t, 0.25, tg.Shapes[1].Weight)
	// Members count: one group of three members weighs as three groups.
	grouped := gang.NewTarget([]gang.Group{{Members: 3, GPUMilli: 500, CPUMilli: 4000, MemoryMiB: 1024},
		{Members: 1, GPUsPerMember: 1, CPUMilli: 8000, MemoryMiB: 2048}}, 1)
	assert.Equal(t, tg, grouped)
	// The 70% cut keeps the shortest prefix; ties by CPU descending.
	cpu := func(m int64) gang.Group { return gang.Group{Members: 1, CPUMilli: m} }
	cut := gang.NewTarget([]gang.Group{cpu(1), cpu(2), cpu(3), cpu(3)}, 0.7)
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
	assert.Equal(t, 125.0, tg.NodeFrag(handSnap(t), 1))
}

func TestFGD(t *testing.T) {
	s := handSnap(t)
	p := gang.NewFGD(fgdTarget())
	// b: GPU 0 (exact fit) Δ=+125 → int(100σ(.125)) = 53; a, c: Δ=−125 → 46.
	assert.Equal(t, []int64{46, 53, 46}, scores(s, p, half))
	assert.Equal(t, 0, p.ShareGPU(s, &half, 1))
	assert.Equal(t, 1, p.ShareGPU(s, &half, 2))
	// CPU-only taking a's CPU to 2000: both shapes lose it, Δ = −2000 → 11.
	assert.Equal(t, int64(11), scores(s, p, cpuOnly)[0])
	// Whole GPU on c: f [0 1000...] → [0 0 1000...]: no fragment either way.
	assert.Equal(t, int64(50), scores(s, p, whole1)[2])
	// The cache follows the snapshot: after a share on b the score changes,
	// and a clone that went back is scored as it is.
	before := s.Clone()
	_, err := s.AllocateShared(2, mig.Request{Milli: 500})
	require.NoError(t, err)
	assert.Equal(t, []int64{46, 46, 46}, scores(s, p, half))
	assert.Equal(t, []int64{46, 53, 46}, scores(before, p, half))
}

func TestBerth(t *testing.T) {
	p := gang.NewBerth(fgdTarget())
	// A piece no shape fits is dead whole; CPU or memory gone kills the
	// free GPUs; a piece most of the workload fits is nearly alive.
	assert.Equal(t, 190.0, p.Dead([]int16{190}, 1e6, 1e6, ""))
	assert.Equal(t, 2000.0, p.Dead([]int16{1000, 1000}, 0, 1e6, ""))
	assert.Equal(t, 2000.0, p.Dead([]int16{1000, 1000}, 1e6, 0, ""))
	assert.Less(t, p.Dead([]int16{500, 1000}, 1e6, 1e6, ""), 0.1)

	s := handSnap(t)
	got := scores(s, p, half)
	assert.Greater(t, got[1], got[0], "filling b's half GPU beats opening a GPU")
	assert.Equal(t, 0, p.ShareGPU(s, &half, 1))
	// CPU-only: the node keeping the larger CPU surplus wins the tie.
	small := gang.Group{Members: 1, CPUMilli: 1000}
	got = scores(s, p, small)
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
	s := c.NewSnapshot()
	p := gang.NewBerth(fgdTarget())
	two := []topo.NodeID{0, 1}
	out := make([]int64, 2)
	// A whole GPU: same primary score; the CPU-poor node (surplus 4000
	// after, against 48000) takes it.
	p.Score(s, &whole1, two, out)
	assert.Equal(t, out[0]>>24, out[1]>>24)
	assert.Greater(t, out[0], out[1])
	// CPU-only work goes where CPU is in surplus.
	p.Score(s, &gang.Group{Members: 1, CPUMilli: 1000}, two, out)
	assert.Equal(t, out[0]>>24, out[1]>>24)
	assert.Greater(t, out[1], out[0])
}

func TestRandom(t *testing.T) {
	s := handSnap(t)
	p := &gang.Random{Rand: rand.New(rand.NewSource(1))}
	seen := map[int]int{}
	for range 300 {
		out := scores(s, p, whole1)
		hundred := 0
		for i, v := range out {
			if v == gang.MaxScore {
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
		g := p.ShareGPU(s, &share, 2)
		require.GreaterOrEqual(t, g, 1, "GPU 0 is full")
		gpus[g]++
	}
	assert.Len(t, gpus, 7)
}

// place places one request with p on s and applies it.
func place(t *testing.T, p *gang.Placer, s *topo.Snapshot, g gang.Group) gang.Result {
	t.Helper()
	req := gang.Request{Groups: []gang.Group{g}}
	res, err := p.Place(s, &req)
	require.NoError(t, err)
	if res.Found {
		require.NoError(t, res.Apply(s))
		require.NoError(t, s.Verify())
	}
	return res
}

// flat is n nodes of one GPU each with 1000 CPU milli.
func flat(t *testing.T, n int) *topo.Cluster {
	t.Helper()
	spec := topo.Spec{ShareFreeGPUs: true}
	for i := range n {
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: string(rune('x' + i)), GPUs: 1, CPUMilli: 1000})
	}
	c, err := topo.New(spec)
	require.NoError(t, err)
	return c
}

func TestScoredTiesAndSingle(t *testing.T) {
	s := flat(t, 3).NewSnapshot()
	// GpuClustering scores CPU-only members 0 everywhere: the ties decide.
	p := &gang.Placer{Scorer: gang.NewGpuClustering(), Ties: []int32{2, 0, 1}}
	res := place(t, p, s, gang.Group{Members: 1, CPUMilli: 1000})
	assert.Equal(t, topo.NodeID(1), res.Members[0].Node)
	// Without ties, the lowest ID.
	p.Ties = nil
	res = place(t, p, s, gang.Group{Members: 1, CPUMilli: 1000})
	assert.Equal(t, topo.NodeID(0), res.Members[0].Node)
	// One node left: taken without scoring (a Random with no stream would
	// panic if it were asked).
	p.Scorer = &gang.Random{}
	res = place(t, p, s, gang.Group{Members: 1, GPUsPerMember: 1, CPUMilli: 1000})
	assert.Equal(t, topo.NodeID(2), res.Members[0].Node)
	assert.Equal(t, []uint32{2}, res.MemberGPUs(0))
	// Nothing fits: not found, a reason, no error.
	res = place(t, p, s, gang.Group{Members: 1, CPUMilli: 1})
	assert.False(t, res.Found)
	assert.Equal(t, gang.NoCapacity, res.Reason.Code)
}

// A gang of several members under a scorer: the best nodes first, each
// holding what it can, members listed in node order.
func TestScoredGang(t *testing.T) {
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "n0", GPUs: 8, CPUMilli: 64000}, {Name: "n1", GPUs: 4, CPUMilli: 64000},
		{Name: "n2", GPUs: 8, CPUMilli: 64000}, {Name: "n3", GPUs: 2, CPUMilli: 64000},
	}})
	require.NoError(t, err)
	s := c.NewSnapshot()
	// BestFit wants the least leftover: n3 (2 GPUs), then n1 (4), then n0.
	p := &gang.Placer{Scorer: gang.BestFit{}}
	res := place(t, p, s, gang.Group{Members: 4, GPUsPerMember: 2, CPUMilli: 1000})
	require.True(t, res.Found)
	var nodes []topo.NodeID
	for _, m := range res.Members {
		nodes = append(nodes, m.Node)
	}
	assert.Equal(t, []topo.NodeID{0, 1, 1, 3}, nodes)
	assert.Equal(t, 3, res.Nodes)
}

// A fractional member goes to the GPU the scorer chose (ShareChooser).
func TestScoredShareGPU(t *testing.T) {
	s := handSnap(t)
	// c's GPU 1 holds a 700 share: best fit for 300 is c's GPU 1 (300
	// left), though b's GPU 0 (500 left) comes first in the default order.
	_, err := s.AllocateShared(7, mig.Request{Milli: 700})
	require.NoError(t, err)
	p := &gang.Placer{Scorer: gang.GpuPacking{}}
	res := place(t, p, s, share)
	require.True(t, res.Found)
	assert.Equal(t, topo.NodeID(2), res.Members[0].Node)
	assert.Equal(t, []uint32{7}, res.MemberGPUs(0))
	assert.Equal(t, []int16{0, 0, 1000, 1000, 1000, 1000, 1000, 1000}, gang.NodeGPUMilli(s, 2, nil))
}

func TestNewScorer(t *testing.T) {
	tg := fgdTarget()
	for _, name := range gang.ScorerNames() {
		sc, err := gang.NewScorer(gang.ScorerSpec{Name: name, Target: tg.Shapes, Seed: 7})
		require.NoError(t, err, name)
		require.NotNil(t, sc, name)
	}
	sc, err := gang.NewScorer(gang.ScorerSpec{})
	require.NoError(t, err)
	assert.Nil(t, sc, "no name: no scorer, the default packing")
	for name, spec := range map[string]gang.ScorerSpec{
		"unknown":         {Name: "FGD"},
		"fgd no target":   {Name: "fgd"},
		"berth no target": {Name: "berth"},
		"bad shape":       {Name: "fgd", Target: []gang.Shape{{Milli: 2000, Weight: 1}}},
	} {
		_, err := gang.NewScorer(spec)
		assert.ErrorIs(t, err, gang.ErrBadScorer, name)
	}
	// The spec is plain data: it round-trips through JSON.
	spec := gang.ScorerSpec{Name: "berth", Target: tg.Shapes}
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	var back gang.ScorerSpec
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, spec, back)
}

// FuzzScored places random members with random scorers and checks that
// every placement applies (the scorer only orders nodes the filter
// passed), the snapshot stays consistent, and the GPU milli allocated is
// the demand placed.
func FuzzScored(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{200, 17, 3, 99, 250, 1, 1, 1, 7, 7, 7, 64, 128, 255, 0, 0, 33})
	f.Fuzz(func(t *testing.T, ops []byte) {
		c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
			{Name: "a", GPUs: 2, GPUModel: "T4", CPUMilli: 16000, MemoryMiB: 4096},
			{Name: "b", GPUs: 4, GPUModel: "L4", CPUMilli: 32000, MemoryMiB: 8192},
			{Name: "c", GPUs: 8, CPUMilli: 64000, MemoryMiB: 16384},
		}})
		require.NoError(t, err)
		s := c.NewSnapshot()
		tg := fgdTarget()
		scorers := []gang.Scorer{gang.DotProd{}, gang.NewGpuClustering(), gang.GpuPacking{}, gang.BestFit{},
			gang.NewFGD(tg), gang.NewBerth(tg), &gang.Random{Rand: rand.New(rand.NewSource(1))}}
		p := &gang.Placer{}
		type held struct {
			res    gang.Result
			demand int64
		}
		var live []held
		var demand int64
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], int(ops[i+1]), int(ops[i+2])
			if op%4 == 3 && len(live) > 0 {
				j := a % len(live)
				require.NoError(t, live[j].res.Undo(s))
				demand -= live[j].demand
				live = append(live[:j], live[j+1:]...)
			} else {
				g := gang.Group{Members: 1 + a%3, CPUMilli: int64(a%8) * 1000, MemoryMiB: int64(b%4) * 512}
				var d int64
				switch b % 4 {
				case 1:
					g.GPUMilli, d = 50+(a*37)%950, int64(50+(a*37)%950)
				case 2:
					g.GPUsPerMember, d = 1+a%4, int64(1+a%4)*1000
				}
				if g.CPUMilli == 0 && g.MemoryMiB == 0 && d == 0 {
					g.CPUMilli = 100
				}
				switch op % 8 {
				case 5:
					g.GPUModel = "T4"
				case 6:
					g.GPUModels, g.SameModel = []string{"T4", "L4"}, a%2 == 0
				}
				p.Scorer = scorers[int(op)%len(scorers)]
				req := gang.Request{Groups: []gang.Group{g}}
				res, err := p.Place(s, &req)
				require.NoError(t, err)
				def, err := gang.Place(s, &req)
				require.NoError(t, err)
				require.Equal(t, def.Found, res.Found, "scoring changes where, never whether")
				for _, m := range res.Members {
					require.True(t, modelOK(&g, c.Node(m.Node).GPUModel), "a member on a GPU outside %v", g.Models())
				}
				if res.Found {
					require.NoError(t, res.Apply(s))
					live = append(live, held{res, d * int64(g.Members)})
					demand += d * int64(g.Members)
				}
			}
			require.NoError(t, s.Verify())
			var free int64
			for id := range topo.NodeID(c.NumNodes()) {
				for _, f := range gang.NodeGPUMilli(s, id, nil) {
					free += int64(f)
				}
			}
			require.Equal(t, demand, int64(c.NumGPUs())*1000-free)
		}
	})
}

// lastFirst scores higher node IDs higher and counts its calls.
type lastFirst struct{ calls int }

func (l *lastFirst) Score(_ *topo.Snapshot, _ *gang.Group, nodes []topo.NodeID, scores []int64) {
	l.calls++
	for i, n := range nodes {
		scores[i] = int64(n)
	}
}

// A scorer chooses the nodes of every group of a multi-group gang, inside
// the domains the gang would take unscored, each group from what the
// groups before it left.
func TestScoredMultiGroup(t *testing.T) {
	c, err := topo.New(topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "H100"))
	require.NoError(t, err)
	s := c.NewSnapshot()
	req := gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}, {Members: 3, GPUsPerMember: 4}}}
	def, err := gang.Place(s, &req)
	require.NoError(t, err)
	sc := &lastFirst{}
	p := &gang.Placer{Scorer: sc}
	res, err := p.Place(s, &req)
	require.NoError(t, err)
	require.True(t, res.Found)
	checkPlacement(t, s, &req, res)
	assert.Equal(t, 2, sc.calls, "one score per group")
	// Default: rack 0, packed from node 0. Scored: rack 0 still, from node
	// 3 down, the workers (larger members) first.
	assert.Equal(t, def.Domain, res.Domain)
	assert.Equal(t, def.Spread, res.Spread)
	nodes := map[int32][]topo.NodeID{}
	for _, m := range res.Members {
		nodes[m.Group] = append(nodes[m.Group], m.Node)
	}
	assert.Equal(t, []topo.NodeID{2, 3, 3}, nodes[1], "workers from the best node down")
	assert.Equal(t, []topo.NodeID{2}, nodes[0], "the launcher on the best node the workers left room on")

	// Random gangs: scoring never changes whether a gang fits.
	rng := randv2.New(randv2.NewPCG(21, 22))
	for iter := range 500 {
		c := small(rng)
		s := c.NewSnapshot()
		randomFill(rng, s)
		r := randomRequest(rng)
		if len(r.Groups) == 1 {
			r.Groups[0].SameModel = false
			r.Groups = append(r.Groups, gang.Group{Members: 1 + rng.IntN(2), GPUsPerMember: []int{1, 2}[rng.IntN(2)]})
		}
		def, err := gang.Place(s, &r)
		require.NoError(t, err)
		res, err := p.Place(s, &r)
		require.NoError(t, err)
		require.Equal(t, def.Found, res.Found, "iter %d", iter)
		if res.Found {
			checkPlacement(t, s, &r, res)
			assert.Equal(t, def.Domain, res.Domain, "iter %d", iter)
		}
	}
}
