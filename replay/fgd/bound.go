package fgd

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
)

// This file is the linear-relaxation upper bound of docs/fgd.md ("Bounds
// from a linear relaxation"): how many GPU thousandths any placement of a
// pod sequence can hold when a given prefix of it must be placed.
//
// The packing problem. Node types t (n_t nodes, each with G_t GPUs of 1000
// thousandths, C_t CPU milli, M_t memory MiB and one model) and pod classes
// c (k_c whole GPUs, or a share of u_c thousandths of one GPU, or no GPU;
// CPU and memory; optionally one model). Of class c, N_c pods arrived, and
// P_c <= N_c of them are in the prefix that must be placed. Maximise the GPU
// thousandths placed.
//
// The relaxation (PackingInstance.LP). Variables z_{c,t} >= 0 (pods of c on
// nodes of type t, for the types where one such pod fits on an empty node),
// s_t >= 0 (GPUs of type t that hold shares), Y_q >= 0 (GPUs, of any type,
// whose shares form the multiset q of share sizes, sum <= 1000):
//
//	max  sum_c D_c sum_t z_{c,t}
//	     P_c <= sum_t z_{c,t} <= N_c                      per class
//	     sum_{c whole} k_c z_{c,t} + s_t <= n_t G_t          per type (GPUs)
//	     sum_c cpu_c z_{c,t} <= n_t C_t                    per type (CPU)
//	     sum_c mem_c z_{c,t} <= n_t M_t                    per type (memory)
//	     sum_{c share} u_c z_{c,t} - 1000 s_t <= 0         per type (share room)
//	     sum_{c share of size u} sum_t z_{c,t} - sum_q n_{u,q} Y_q <= 0   per size
//	     sum_q Y_q - sum_t s_t <= 0
//
// Why it is a relaxation: take any placement that places the prefix. Let
// z_{c,t} count its pods of class c on nodes of type t, s_t the GPUs of type
// t that hold at least one share and Y_q the GPUs whose shares are exactly
// q. A whole-GPU pod takes completely free GPUs, so whole-GPU pods and shares
// never use the same GPU (the GPU row); the shares on a GPU sum to at most
// 1000 (the room row, and q is a pattern); every share sits on one GPU, so
// the shares of size u number sum_q n_{u,q} Y_q and sum_q Y_q = sum_t s_t;
// each node's CPU and memory hold its pods (summed over the type). All rows
// hold and the objective is the placed GPU demand, so the LP optimum is at
// least any placement's allocation. (It ignores which node of a type, which
// GPU model a pattern's shares asked for, and the per-node pod limit: all
// relaxations.)
//
// The certificate. By weak duality any non-negative multipliers of the rows
// bound the LP from above. DualPoint holds the multipliers of the per-type
// and per-size rows; the rest follow in closed form (Evaluate): the pattern
// row's price is rho = K(lambda), the best pattern's value (an exact
// unbounded knapsack); the GPU price is gamma_t = 1000 sigma_t + rho + e_t,
// which makes the s_t and Y_q columns dual feasible; and for each class the
// reduced value r_c = max_t (D_c - price_{c,t}) gives the class rows'
// multipliers r_c^+ (upper) and r_c^- (lower). The dual objective is then
//
//	sum_t n_t (G_t gamma_t + C_t pi_t + M_t mu_t) + sum_c (N_c r_c^+ - P_c r_c^-)
//
// Evaluate computes it in exact rational arithmetic from the multipliers'
// float64 values, so however the multipliers were found (solveSimplex, a
// dense tableau simplex with column generation, bound_simplex.go), the value is an upper bound on the LP and so
// on every placement. SolveLP solves small instances exactly with gonum's
// simplex, for the tests.

// ErrBound: an instance the bound cannot be computed for.
var ErrBound = errors.New("fgd: packing bound")

// NodeType is one kind of node and how many the cluster has.
type NodeType struct {
	Count     int
	GPUs      int
	CPUMilli  int64
	MemoryMiB int64
	Model     string
}

// PodClass is one pod shape: Whole > 0 whole GPUs, or a Share (1..999
// thousandths of one GPU), or neither (CPU only). Arrived pods of the shape
// arrived; Prefix of them must be placed.
type PodClass struct {
	Whole     int
	Share     int
	CPUMilli  int64
	MemoryMiB int64
	Model     string // "" for any
	Arrived   int
	Prefix    int
}

// Demand is the class's GPU thousandths per pod.
func (c *PodClass) Demand() int64 {
	if c.Whole > 0 {
		return int64(c.Whole) * 1000
	}
	return int64(c.Share)
}

// fits reports whether one pod of c fits on an empty node of type t.
func (c *PodClass) fits(t *NodeType) bool {
	if c.CPUMilli > t.CPUMilli || c.MemoryMiB > t.MemoryMiB {
		return false
	}
	if c.Whole == 0 && c.Share == 0 {
		return true
	}
	if c.Model != "" && c.Model != t.Model {
		return false
	}
	return t.GPUs >= max(c.Whole, 1)
}

// PackingInstance is one packing problem (see the top of this file).
type PackingInstance struct {
	Types   []NodeType
	Classes []PodClass
}

// Validate checks the instance: positive counts and sizes, prefix within
// arrived, and every prefix class placeable on some type.
func (in *PackingInstance) Validate() error {
	if len(in.Types) == 0 {
		return fmt.Errorf("%w: no node types", ErrBound)
	}
	for i, t := range in.Types {
		if t.Count <= 0 || t.GPUs <= 0 || t.CPUMilli < 0 || t.MemoryMiB < 0 {
			return fmt.Errorf("%w: node type %d: %+v", ErrBound, i, t)
		}
	}
	for i := range in.Classes {
		c := &in.Classes[i]
		switch {
		case c.Whole < 0 || c.Share < 0 || c.Share >= 1000 || (c.Whole > 0 && c.Share > 0):
			return fmt.Errorf("%w: class %d: %d GPUs, share %d", ErrBound, i, c.Whole, c.Share)
		case c.CPUMilli < 0 || c.MemoryMiB < 0:
			return fmt.Errorf("%w: class %d: negative CPU or memory", ErrBound, i)
		case c.Prefix < 0 || c.Prefix > c.Arrived:
			return fmt.Errorf("%w: class %d: prefix %d of %d arrived", ErrBound, i, c.Prefix, c.Arrived)
		}
		if c.Prefix > 0 && !slices.ContainsFunc(in.Types, func(t NodeType) bool { return c.fits(&t) }) {
			return fmt.Errorf("%w: class %d must be placed but fits no node type", ErrBound, i)
		}
	}
	return nil
}

// Capacity is the cluster's GPU thousandths.
func (in *PackingInstance) Capacity() int64 {
	var n int64
	for _, t := range in.Types {
		n += int64(t.Count) * int64(t.GPUs) * 1000
	}
	return n
}

// shareSizes lists the distinct share sizes, ascending.
func (in *PackingInstance) shareSizes() []int {
	var s []int
	for _, c := range in.Classes {
		if c.Share > 0 && !slices.Contains(s, c.Share) {
			s = append(s, c.Share)
		}
	}
	slices.Sort(s)
	return s
}

// DualPoint holds the multipliers of the per-type and per-size rows; all
// must be finite and non-negative. Per type: Sigma (share room, per
// thousandth), CPU (per milli), Mem (per MiB), Extra (added to the GPU
// price). Per share size (as shareSizes lists them): Lambda.
type DualPoint struct {
	Sigma, CPU, Mem, Extra []float64
	Lambda                 []float64
}

func (d *DualPoint) check(types, sizes int) error {
	if len(d.Sigma) != types || len(d.CPU) != types || len(d.Mem) != types || len(d.Extra) != types || len(d.Lambda) != sizes {
		return fmt.Errorf("%w: dual point of the wrong shape", ErrBound)
	}
	for _, v := range [][]float64{d.Sigma, d.CPU, d.Mem, d.Extra, d.Lambda} {
		for _, x := range v {
			if !(x >= 0) || math.IsInf(x, 0) {
				return fmt.Errorf("%w: dual value %v (want finite, >= 0)", ErrBound, x)
			}
		}
	}
	return nil
}

// Evaluate returns the dual objective at d, exactly: an upper bound on the
// GPU thousandths of every placement that places the prefix (see the top of
// this file for why).
func (in *PackingInstance) Evaluate(d *DualPoint) (*big.Rat, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	sizes := in.shareSizes()
	if err := d.check(len(in.Types), len(sizes)); err != nil {
		return nil, err
	}
	rat := func(x float64) *big.Rat { return new(big.Rat).SetFloat64(x) }
	lambda := make([]*big.Rat, len(sizes))
	for i, x := range d.Lambda {
		lambda[i] = rat(x)
	}
	rho := knapsackRat(sizes, lambda)
	thousand := big.NewRat(1000, 1)
	total := new(big.Rat)
	sigma := make([]*big.Rat, len(in.Types))
	gamma := make([]*big.Rat, len(in.Types))
	cpu := make([]*big.Rat, len(in.Types))
	mem := make([]*big.Rat, len(in.Types))
	tmp := new(big.Rat)
	for i, t := range in.Types {
		sigma[i], cpu[i], mem[i] = rat(d.Sigma[i]), rat(d.CPU[i]), rat(d.Mem[i])
		gamma[i] = new(big.Rat).Mul(thousand, sigma[i])
		gamma[i].Add(gamma[i], rho)
		gamma[i].Add(gamma[i], rat(d.Extra[i]))
		n := big.NewRat(int64(t.Count), 1)
		total.Add(total, tmp.Mul(n, tmp.Mul(big.NewRat(int64(t.GPUs), 1), gamma[i])))
		total.Add(total, tmp.Mul(n, tmp.Mul(big.NewRat(t.CPUMilli, 1), cpu[i])))
		total.Add(total, tmp.Mul(n, tmp.Mul(big.NewRat(t.MemoryMiB, 1), mem[i])))
	}
	price := new(big.Rat)
	for ci := range in.Classes {
		c := &in.Classes[ci]
		var best *big.Rat
		for ti := range in.Types {
			if !c.fits(&in.Types[ti]) {
				continue
			}
			price.Mul(big.NewRat(c.CPUMilli, 1), cpu[ti])
			price.Add(price, tmp.Mul(big.NewRat(c.MemoryMiB, 1), mem[ti]))
			switch {
			case c.Whole > 0:
				price.Add(price, tmp.Mul(big.NewRat(int64(c.Whole), 1), gamma[ti]))
			case c.Share > 0:
				price.Add(price, tmp.Mul(big.NewRat(int64(c.Share), 1), sigma[ti]))
				price.Add(price, lambda[slices.Index(sizes, c.Share)])
			}
			r := new(big.Rat).Sub(big.NewRat(c.Demand(), 1), price)
			if best == nil || r.Cmp(best) > 0 {
				best = r
			}
		}
		switch {
		case best == nil: // fits nowhere; Validate ensured Prefix == 0
		case best.Sign() > 0:
			total.Add(total, tmp.Mul(big.NewRat(int64(c.Arrived), 1), best))
		default:
			total.Add(total, tmp.Mul(big.NewRat(int64(c.Prefix), 1), best))
		}
	}
	return total, nil
}

// knapsackRat is the best value of a multiset of sizes summing to at most
// 1000, item i worth v[i]: an unbounded knapsack, exact.
func knapsackRat(sizes []int, v []*big.Rat) *big.Rat {
	best := make([]*big.Rat, 1001)
	for c := range best {
		best[c] = new(big.Rat)
		for i, s := range sizes {
			if s <= c {
				if x := new(big.Rat).Add(best[c-s], v[i]); x.Cmp(best[c]) > 0 {
					best[c] = x
				}
			}
		}
	}
	return best[1000]
}

// knapsackFloat is knapsackRat in floats, with the counts of a best
// multiset.
func knapsackFloat(sizes []int, v []float64, best []float64, from []int, counts []float64) float64 {
	for c := 0; c <= 1000; c++ {
		best[c], from[c] = 0, -1
		for i, s := range sizes {
			if s <= c && best[c-s]+v[i] > best[c] {
				best[c], from[c] = best[c-s]+v[i], i
			}
		}
	}
	clear(counts)
	for c := 1000; c > 0 && from[c] >= 0; c -= sizes[from[c]] {
		counts[from[c]]++
	}
	return best[1000]
}

// Bound is a certified upper bound: Milli GPU thousandths (exact) is the
// dual objective at Dual; Pct is it in % of the capacity, rounded up; LP is
// the optimum the simplex reached (thousandths, floats).
type Bound struct {
	Milli *big.Rat
	Pct   float64
	Dual  *DualPoint
	LP    float64
}

// PackingBound solves the relaxation (solveSimplex) and certifies the dual
// point of its last basis (Evaluate). LP is the value the simplex reached;
// Milli is at least LP up to the simplex's rounding.
func (in *PackingInstance) PackingBound() (Bound, error) {
	d, lpValue, err := in.solveSimplex()
	if err != nil {
		return Bound{}, err
	}
	v, err := in.Evaluate(d)
	if err != nil {
		return Bound{}, err
	}
	pct := new(big.Rat).Mul(v, big.NewRat(100, in.Capacity()))
	f, _ := pct.Float64()
	// Round up so that Pct is never below the exact value.
	if new(big.Rat).SetFloat64(f).Cmp(pct) < 0 {
		f = math.Nextafter(f, math.Inf(1))
	}
	return Bound{Milli: v, Pct: f, Dual: d, LP: lpValue}, nil
}

// packingInstance is the packing problem of one run: the cluster's nodes
// grouped by (GPUs, CPU, memory, model), the pods of order grouped by shape,
// the first prefix of them to be placed.
func (p *prepared) packingInstance(order []int, prefix int) *PackingInstance {
	in := &PackingInstance{}
	types := map[NodeType]int{}
	for _, n := range p.spec.Nodes {
		k := NodeType{GPUs: n.GPUs, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, Model: n.GPUModel}
		i, ok := types[k]
		if !ok {
			i = len(in.Types)
			types[k] = i
			in.Types = append(in.Types, k)
		}
		in.Types[i].Count++
	}
	classes := map[PodClass]int{}
	for j, pi := range order {
		g := &p.pods[pi].group
		k := PodClass{Whole: g.GPUsPerMember, Share: g.GPUMilli, CPUMilli: g.CPUMilli, MemoryMiB: g.MemoryMiB, Model: g.GPUModel}
		if k.Share == 1000 { // not made by podOf, but a full share is a whole GPU
			k.Whole, k.Share = 1, 0
		}
		i, ok := classes[k]
		if !ok {
			i = len(in.Classes)
			classes[k] = i
			in.Classes = append(in.Classes, k)
		}
		in.Classes[i].Arrived++
		if j < prefix {
			in.Classes[i].Prefix++
		}
	}
	return in
}
