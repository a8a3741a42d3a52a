package fgd

import (
	"errors"
	"math/big"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bfPod is one pod of a brute-force instance.
type bfPod struct {
	class  int
	prefix bool
}

// bruteForce returns the most GPU thousandths any placement of pods on the
// instance's nodes can hold with every prefix pod placed, trying every
// node and GPU for every pod (or leaving it out); ok is false when the
// prefix cannot be placed. Whole-GPU pods take the lowest completely free
// GPUs of their node (completely free GPUs are interchangeable).
func bruteForce(in *PackingInstance, pods []bfPod) (best int64, ok bool) {
	type node struct {
		t        int
		cpu, mem int64
		gpu      []int // free thousandths
	}
	var nodes []*node
	for ti, t := range in.Types {
		for range t.Count {
			n := &node{t: ti, cpu: t.CPUMilli, mem: t.MemoryMiB, gpu: make([]int, t.GPUs)}
			for g := range n.gpu {
				n.gpu[g] = 1000
			}
			nodes = append(nodes, n)
		}
	}
	best = -1
	var rec func(i int, got int64)
	rec = func(i int, got int64) {
		if i == len(pods) {
			best = max(best, got)
			return
		}
		c := &in.Classes[pods[i].class]
		for _, n := range nodes {
			t := &in.Types[n.t]
			if n.cpu < c.CPUMilli || n.mem < c.MemoryMiB || ((c.Whole > 0 || c.Share > 0) && c.Model != "" && c.Model != t.Model) {
				continue
			}
			n.cpu -= c.CPUMilli
			n.mem -= c.MemoryMiB
			switch {
			case c.Whole > 0:
				var took []int
				for g := range n.gpu {
					if len(took) < c.Whole && n.gpu[g] == 1000 {
						took = append(took, g)
					}
				}
				if len(took) == c.Whole {
					for _, g := range took {
						n.gpu[g] = 0
					}
					rec(i+1, got+c.Demand())
					for _, g := range took {
						n.gpu[g] = 1000
					}
				}
			case c.Share > 0:
				for g := range n.gpu {
					if n.gpu[g] >= c.Share {
						n.gpu[g] -= c.Share
						rec(i+1, got+c.Demand())
						n.gpu[g] += c.Share
					}
				}
			default:
				rec(i+1, got)
			}
			n.cpu += c.CPUMilli
			n.mem += c.MemoryMiB
		}
		if !pods[i].prefix {
			rec(i+1, got)
		}
	}
	rec(0, 0)
	return best, best >= 0
}

// randomInstance draws a small instance: 1-2 node types of 1-2 nodes, and
// 3-6 pods from a few shapes (whole GPUs, shares, CPU only), some of them in
// the prefix.
func randomInstance(rng *rand.Rand) (*PackingInstance, []bfPod) {
	models := []string{"A", "B"}
	in := &PackingInstance{}
	for range 1 + rng.Intn(2) {
		in.Types = append(in.Types, NodeType{
			Count:     1 + rng.Intn(2),
			GPUs:      1 + rng.Intn(3),
			CPUMilli:  int64(4+rng.Intn(8)) * 1000,
			MemoryMiB: int64(8+rng.Intn(24)) * 1024,
			Model:     models[rng.Intn(2)],
		})
	}
	shares := []int{810, 470, 460, 320, 230, 190, 650, 550}
	for range 2 + rng.Intn(3) {
		c := PodClass{CPUMilli: int64(rng.Intn(6)) * 1000, MemoryMiB: int64(rng.Intn(12)) * 1024}
		switch rng.Intn(4) {
		case 0:
			c.Whole = 1 + rng.Intn(2)
		case 1, 2:
			c.Share = shares[rng.Intn(len(shares))]
		}
		if rng.Intn(4) == 0 {
			c.Model = models[rng.Intn(2)]
		}
		in.Classes = append(in.Classes, c)
	}
	var pods []bfPod
	for range 3 + rng.Intn(4) {
		ci := rng.Intn(len(in.Classes))
		p := bfPod{class: ci, prefix: rng.Intn(3) == 0}
		in.Classes[ci].Arrived++
		if p.prefix {
			in.Classes[ci].Prefix++
		}
		pods = append(pods, p)
	}
	return in, pods
}

// TestPackingLPBoundsBruteForce: on 300 small random instances the
// certified dual bound is at least gonum's LP optimum (lp.Simplex, every
// maximal pattern listed), which is at least the best placement found by
// brute force; the tableau simplex of bound_simplex.go reaches gonum's
// optimum. A wrong relaxation (a row that cuts off a real placement) or a
// wrong certificate fails it (checked by hand: requiring one GPU more in
// fits, or a knapsack room of 900 in the certificate, each fail it).
func TestPackingLPBoundsBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	var gapSum float64
	checked, infeasible := 0, 0
	for i := range 300 {
		in, pods := randomInstance(rng)
		opt, ok := bruteForce(in, pods)
		err := in.Validate()
		if err != nil {
			// Only a prefix class that fits no node type is rejected, and
			// then no placement exists.
			require.ErrorIs(t, err, ErrBound)
			require.False(t, ok, "instance %d: valid placement but %v", i, err)
			infeasible++
			continue
		}
		lpOpt, err := in.SolveLP()
		if !ok && errors.Is(err, ErrBound) {
			infeasible++ // the prefix does not fit, not even fractionally
			continue
		}
		require.NoError(t, err, "instance %d", i)
		b, err := in.PackingBound()
		require.NoError(t, err, "instance %d", i)
		assert.InDelta(t, lpOpt, b.LP, 1e-3, "instance %d: the tableau simplex and gonum's disagree", i)
		lpRat := new(big.Rat).SetFloat64(lpOpt)
		assert.GreaterOrEqual(t, b.Milli.Cmp(lpRat.Sub(lpRat, big.NewRat(1, 1000))), 0,
			"instance %d: dual bound %s below the LP optimum %v", i, b.Milli.FloatString(3), lpOpt)
		if !ok {
			infeasible++
			continue
		}
		checked++
		assert.GreaterOrEqual(t, lpOpt, float64(opt)-1e-6, "instance %d: LP %v below the brute-force optimum %d: %+v", i, lpOpt, opt, in)
		assert.GreaterOrEqual(t, b.Milli.Cmp(big.NewRat(opt, 1)), 0, "instance %d: bound %s below the optimum %d", i, b.Milli.FloatString(3), opt)
		f, _ := b.Milli.Float64()
		gapSum += (f - lpOpt) / float64(in.Capacity())
	}
	t.Logf("%d instances checked against brute force, %d with an unplaceable prefix; mean dual gap to the LP %.4f%% of capacity", checked, infeasible, 100*gapSum/float64(max(checked, 1)))
	assert.Greater(t, checked, 200)
}

func TestPackingBoundErrors(t *testing.T) {
	ok := PackingInstance{
		Types:   []NodeType{{Count: 1, GPUs: 2, CPUMilli: 8000, MemoryMiB: 1024}},
		Classes: []PodClass{{Share: 500, CPUMilli: 1000, Arrived: 2, Prefix: 1}},
	}
	require.NoError(t, ok.Validate())
	for name, mod := range map[string]func(in *PackingInstance){
		"no types":      func(in *PackingInstance) { in.Types = nil },
		"empty type":    func(in *PackingInstance) { in.Types[0].Count = 0 },
		"share 1000":    func(in *PackingInstance) { in.Classes[0].Share = 1000 },
		"whole + share": func(in *PackingInstance) { in.Classes[0].Whole = 1 },
		"prefix > all":  func(in *PackingInstance) { in.Classes[0].Prefix = 3 },
		"fits nowhere":  func(in *PackingInstance) { in.Classes[0].CPUMilli = 9000 },
	} {
		in := ok
		in.Types = append([]NodeType(nil), ok.Types...)
		in.Classes = append([]PodClass(nil), ok.Classes...)
		mod(&in)
		_, err := in.PackingBound()
		assert.ErrorIs(t, err, ErrBound, name)
	}
	// A prefix that fits no way at all.
	over := PackingInstance{
		Types:   []NodeType{{Count: 1, GPUs: 1, CPUMilli: 8000, MemoryMiB: 1024}},
		Classes: []PodClass{{Whole: 1, Arrived: 2, Prefix: 2}},
	}
	_, err := over.PackingBound()
	assert.ErrorIs(t, err, ErrBound)
	_, err = over.SolveLP()
	assert.ErrorIs(t, err, ErrBound)
	// Shares of 10 have too many patterns for SolveLP (but not for
	// PackingBound, which generates the ones it needs).
	tiny := PackingInstance{
		Types:   []NodeType{{Count: 1, GPUs: 1, CPUMilli: 8000, MemoryMiB: 1024}},
		Classes: []PodClass{{Share: 10, Arrived: 150, Prefix: 1}, {Share: 20, Arrived: 10}, {Share: 30, Arrived: 3}, {Share: 40, Arrived: 3}, {Share: 50, Arrived: 3}},
	}
	_, err = tiny.SolveLP()
	assert.ErrorIs(t, err, ErrBound)
	b, err := tiny.PackingBound()
	require.NoError(t, err)
	f, _ := b.Milli.Float64()
	assert.GreaterOrEqual(t, b.Milli.Cmp(big.NewRat(1000, 1)), 0, "the GPU can be filled")
	assert.InDelta(t, 1000, f, 1e-6)
	bad := &DualPoint{Sigma: []float64{-1}, CPU: []float64{0}, Mem: []float64{0}, Extra: []float64{0}, Lambda: []float64{0}}
	_, err = ok.Evaluate(bad)
	assert.ErrorIs(t, err, ErrBound)
	// The trivial point (every thousandth worth 1) bounds by the capacity.
	triv := &DualPoint{Sigma: []float64{1}, CPU: []float64{0}, Mem: []float64{0}, Extra: []float64{0}, Lambda: []float64{0}}
	v, err := ok.Evaluate(triv)
	require.NoError(t, err)
	assert.Equal(t, big.NewRat(2000, 1), v)
	lpOpt, err := ok.SolveLP()
	require.NoError(t, err)
	assert.InDelta(t, 1000, lpOpt, 1e-6)
}
