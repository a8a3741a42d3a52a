package benchmarks

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	randv1 "math/rand"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

var updateDigest = flag.Bool("update-digest", false, "rewrite testdata/placement.digest")

// TestPlacementDigest hashes the placements of many gangs and compares the
// digest with testdata/placement.digest: a change to the placer's speed
// must leave every decision as it was, and this test says when one did
// not. It places on random clusters of one to three levels (random fills,
// cordoned nodes, mixed GPU counts and models), in chains where found
// placements are booked and earlier ones released, with one-group and
// multi-group gangs, required and preferred levels, models and selectors,
// through a reused Placer, a Placer with Memo, gang.Place, and the
// scorers; and every standard gang on every standard cluster and fill,
// alone and in chains. A placement that changes on purpose is rewritten
// with -update-digest (and the change said in the commit).
func TestPlacementDigest(t *testing.T) {
	h := sha256.New()
	n := 0
	n += digestRandom(t, h)
	n += digestStandard(t, h)
	got := fmt.Sprintf("%s %d\n", hex.EncodeToString(h.Sum(nil)), n)
	path := filepath.Join("testdata", "placement.digest")
	if *updateDigest {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(want)), strings.TrimSpace(got), "placements changed (digest, count)")
	t.Logf("%d placements", n)
}

// digestResult writes everything a placement decides into h.
func digestResult(h hash.Hash, tag int, res *gang.Result, err error) {
	var b []byte
	w := func(v int) { b = binary.LittleEndian.AppendUint64(b, uint64(int64(v))) }
	w(tag)
	if err != nil {
		b = append(b, err.Error()...)
		h.Write(b)
		return
	}
	w(int(b2f(res.Found)))
	r := res.Reason
	w(int(r.Code))
	w(r.Group)
	w(r.Fit)
	w(r.Need)
	b = append(b, r.Level...)
	b = append(b, 0)
	b = append(b, r.Models...)
	b = append(b, 0)
	w(res.Domain)
	w(res.Nodes)
	w(len(res.Spread))
	for _, v := range res.Spread {
		w(v)
	}
	w(len(res.Members))
	for i, m := range res.Members {
		w(int(m.Group))
		w(int(m.Node))
		g := res.MemberGPUs(i)
		w(len(g))
		for _, x := range g {
			w(int(x))
		}
	}
	h.Write(b)
}

// randomDigestCluster is a cluster of 1 to 3 levels with random fanouts,
// nodes of 2, 4 or 8 GPUs (or all 8), two models, two pools.
func randomDigestCluster(rng *rand.Rand) *topo.Cluster {
	names := []string{"zone", "block", "rack"}
	nl := 1 + rng.IntN(3)
	levels := names[3-nl:]
	fan := make([]int, nl)
	switch nl {
	case 1:
		fan[0] = 2 + rng.IntN(12)
	case 2:
		fan[0], fan[1] = 2+rng.IntN(12), 2+rng.IntN(12)
	case 3:
		fan[0], fan[1], fan[2] = 2+rng.IntN(3), 2+rng.IntN(5), 2+rng.IntN(8)
	}
	perLeaf := 1 + rng.IntN(6)
	uniform := rng.IntN(2) == 0
	twoModels := rng.IntN(3) == 0
	spec := topo.Spec{Levels: levels}
	var rec func(l int, path []string)
	id := 0
	rec = func(l int, path []string) {
		if l == nl {
			for range perLeaf {
				g := 8
				if !uniform {
					g = []int{2, 4, 8, 8}[rng.IntN(4)]
				}
				model := "H100"
				if twoModels && rng.IntN(3) == 0 {
					model = "A100"
				}
				spec.Nodes = append(spec.Nodes, topo.NodeSpec{
					Name: fmt.Sprintf("n%d", id), Domains: append([]string(nil), path...), GPUs: g, GPUModel: model,
					Labels: map[string]string{"pool": []string{"a", "b"}[id%2]},
				})
				id++
			}
			return
		}
		for i := range fan[l] {
			rec(l+1, append(path, fmt.Sprintf("%s%d", levels[l][:1], i)))
		}
	}
	rec(0, nil)
	c, err := topo.New(spec)
	if err != nil {
		panic(err)
	}
	return c
}

// randomDigestFill books each GPU with a probability drawn per cluster,
// leaving some nodes whole, and cordons a few nodes.
func randomDigestFill(rng *rand.Rand, s *topo.Snapshot) {
	c := s.Cluster()
	p := 0.2 + 0.6*rng.Float64()
	for id := range c.NumNodes() {
		first, g := c.NodeGPUs(topo.NodeID(id))
		if rng.IntN(4) == 0 {
			continue // a whole free node
		}
		// Lowest GPUs first, as jobs take them, or scattered.
		if rng.IntN(2) == 0 {
			k := int(p*float64(g) + rng.Float64())
			for i := range min(k, g) {
				_ = s.Allocate([]uint32{first + uint32(i)})
			}
		} else {
			for i := range g {
				if rng.Float64() < p {
					_ = s.Allocate([]uint32{first + uint32(i)})
				}
			}
		}
		if rng.IntN(40) == 0 {
			_ = s.SetNodeState(topo.NodeID(id), topo.Cordoned)
		}
	}
}

// randomDigestRequest is a gang of one to three groups sized to the
// cluster, with required and preferred levels drawn from its own.
func randomDigestRequest(rng *rand.Rand, c *topo.Cluster) gang.Request {
	levels := c.Levels()
	ng := 1
	switch rng.IntN(8) {
	case 0:
		ng = 2
	case 1:
		ng = 3
	}
	free := max(1, c.NumGPUs()/3)
	var r gang.Request
	for range ng {
		per := []int{1, 1, 2, 4, 8, 8}[rng.IntN(6)]
		maxM := max(1, free/per/ng)
		members := 1 + rng.IntN(min(maxM, 2+rng.IntN(64)))
		g := gang.Group{Members: members, GPUsPerMember: per}
		switch rng.IntN(10) {
		case 0:
			g.GPUModel = "A100"
		case 1:
			g.GPUModels = []string{"A100", "H100"}
		case 2:
			g.GPUModels = []string{"H100", "A100"}
			g.SameModel = ng == 1
		case 3:
			g.Selector = map[string]string{"pool": "a"}
		}
		r.Groups = append(r.Groups, g)
	}
	// Required: none, or a level; preferred: a finer one, node, or none
	// (the finest level by default).
	lr := -1
	if rng.IntN(3) > 0 {
		lr = rng.IntN(len(levels))
		r.Required = levels[lr]
	}
	switch x := rng.IntN(5); {
	case x == 0:
		r.Preferred = topo.LevelNode
	case x <= 2 && lr+1 < len(levels):
		r.Preferred = levels[lr+1+rng.IntN(len(levels)-lr-1)]
	}
	return r
}

func digestScorers(rng *rand.Rand) []gang.Scorer {
	target := gang.Target{Shapes: []gang.Shape{{GPUs: 1, Milli: 1000, Weight: 0.5}, {GPUs: 8, Milli: 1000, Weight: 0.3}, {GPUs: 2, Milli: 1000, Weight: 0.2}}}
	return []gang.Scorer{
		gang.BestFit{}, gang.DotProd{}, gang.GpuPacking{}, gang.NewGpuClustering(),
		&gang.Random{Rand: randv1.New(randv1.NewSource(rng.Int64()))}, gang.NewFGD(target), gang.NewBerth(target),
	}
}

// digestRandom places chains of random gangs on random clusters.
func digestRandom(t *testing.T, h hash.Hash) int {
	rng := rand.New(rand.NewPCG(34, 5))
	n := 0
	clusters := 150
	for ci := range clusters {
		c := randomDigestCluster(rng)
		s := c.NewSnapshot()
		randomDigestFill(rng, s)
		var plain, memo gang.Placer
		memo.Memo = true
		scorers := digestScorers(rng)
		scored := gang.Placer{Scorer: scorers[ci%len(scorers)]}
		var res, mres, sres gang.Result
		var booked []gang.Result
		for step := range 60 {
			r := randomDigestRequest(rng, c)
			err := plain.PlaceInto(&res, s, &r)
			digestResult(h, 1, &res, err)
			merr := memo.PlaceInto(&mres, s, &r)
			digestResult(h, 2, &mres, merr)
			one, oerr := gang.Place(s, &r)
			digestResult(h, 3, &one, oerr)
			n += 3
			if step%3 == 0 {
				serr := scored.PlaceInto(&sres, s, &r)
				digestResult(h, 4, &sres, serr)
				n++
			}
			switch {
			case err == nil && one.Found && rng.IntN(3) > 0:
				require.NoError(t, one.Apply(s), "cluster %d step %d", ci, step)
				booked = append(booked, one)
			case len(booked) > 0 && rng.IntN(2) == 0:
				i := rng.IntN(len(booked))
				require.NoError(t, booked[i].Undo(s))
				booked = append(booked[:i], booked[i+1:]...)
			default:
				// A change outside placements: a GPU booked or freed.
				id := topo.NodeID(rng.IntN(c.NumNodes()))
				first, g := c.NodeGPUs(id)
				gpu := first + uint32(rng.IntN(g))
				held := false
				for _, b := range booked {
					for _, x := range b.GPUs() {
						held = held || x == gpu
					}
				}
				if s.IsFree(gpu) {
					_ = s.Allocate([]uint32{gpu})
				} else if !held {
					_ = s.Release([]uint32{gpu})
				}
			}
		}
	}
	return n
}

// digestStandard places every standard gang on every standard cluster and
// fill, then chains of them (booked while they fit) on a clone, with
// single GPUs booked and freed between decisions.
func digestStandard(t *testing.T, h hash.Hash) int {
	n := 0
	for _, sc := range standardCases() {
		s := filledSnapshot(t, sc.shape, sc.fill)
		req, err := Gang(sc.gang)
		require.NoError(t, err)
		res, err := gang.Place(s, &req)
		digestResult(h, 10, &res, err)
		n++
	}
	for _, sh := range []ClusterShape{B2K(), B12K(), NVL72x128()} {
		for _, f := range []Fill{Random60, Skewed60} {
			s := filledSnapshot(t, sh, f).Clone()
			c := s.Cluster()
			gangs := []string{"A", "B", "C"}
			if sh.Name == "NVL72x128" {
				gangs = []string{"N"}
			}
			rng := NewSplitMix64(7)
			var plain, memo gang.Placer
			memo.Memo = true
			var res, mres gang.Result
			for step := range 120 {
				req, err := Gang(gangs[step%len(gangs)])
				require.NoError(t, err)
				if step%2 == 0 {
					// Smaller gangs of the same shape, to book more steps.
					req.Groups[0].Members = max(1, req.Groups[0].Members/int(1+rng.Draw(8)))
				}
				err = plain.PlaceInto(&res, s, &req)
				digestResult(h, 11, &res, err)
				merr := memo.PlaceInto(&mres, s, &req)
				digestResult(h, 12, &mres, merr)
				n += 2
				if err == nil && res.Found && step%3 != 2 {
					one, _ := gang.Place(s, &req) // a result of its own to book
					require.NoError(t, one.Apply(s))
				}
				id := topo.NodeID(rng.Draw(uint64(c.NumNodes())))
				first, g := c.NodeGPUs(id)
				gpu := first + uint32(rng.Draw(uint64(g)))
				if s.IsFree(gpu) {
					_ = s.Allocate([]uint32{gpu})
				} else {
					_ = s.Release([]uint32{gpu})
				}
			}
		}
	}
	return n
}
