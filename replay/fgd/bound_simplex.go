package fgd

import (
	"fmt"
	"math"
	"slices"
)

// A dense two-phase tableau simplex with column generation for the
// relaxation of bound.go, sized for openb (a few hundred rows, a few
// thousand columns), where gonum's lp.Simplex (dense LU solves per step,
// Bland's rule) is too slow. Its only product is a dual point, which
// Evaluate certifies exactly; a numerical slip here can make the bound
// looser, never wrong. Every loop is bounded.

const (
	spxTol      = 1e-9
	spxMaxPivot = 20_000 // openb needs 450-1,100
	spxMaxCols  = 400    // pattern columns generated, at most
)

type rowSense int8

const (
	senseLE rowSense = iota
	senseGE
)

// tableau is max c.x, rows a_i.x (<= or >=) b_i, x >= 0.
type tableau struct {
	m, n  int         // rows; columns in use (structural, slack, identity)
	t     [][]float64 // m rows, then the objective row; each of width cap+1 (last: rhs)
	cap   int
	basis []int
	ident []int     // per row: its identity column
	flip  []float64 // per row: -1 when the row was negated to make b >= 0
	art   []bool    // per column: identity column of a >= row (an artificial)
	noIn  []bool    // per column: may not enter
	cost  []float64 // per column: phase-II objective
}

func (tb *tableau) rhs(i int) float64 { return tb.t[i][tb.cap] }

// newTableau builds the tableau of structural columns cols (sparse, per
// column: row -> coefficient), costs c, rows' senses and b, with room for
// extra columns.
func newTableau(cols []map[int]float64, c []float64, sense []rowSense, b []float64, extra int) *tableau {
	m := len(b)
	tb := &tableau{m: m}
	nslack := m
	tb.cap = len(cols) + nslack + m + extra
	tb.t = make([][]float64, m+1)
	for i := range tb.t {
		tb.t[i] = make([]float64, tb.cap+1)
	}
	tb.flip = make([]float64, m)
	for i := range m {
		tb.flip[i] = 1
		if b[i] < 0 {
			tb.flip[i] = -1
		}
		tb.t[i][tb.cap] = b[i] * tb.flip[i]
	}
	tb.cost = make([]float64, tb.cap)
	tb.noIn = make([]bool, tb.cap)
	tb.art = make([]bool, tb.cap)
	for j, col := range cols {
		for i, v := range col {
			tb.t[i][j] = v * tb.flip[i]
		}
		tb.cost[j] = c[j]
	}
	n := len(cols)
	for i := range m { // slack: +1 for <=, -1 for >=
		s := 1.0
		if sense[i] == senseGE {
			s = -1
		}
		tb.t[i][n+i] = s * tb.flip[i]
	}
	n += m
	tb.ident = make([]int, m)
	tb.basis = make([]int, m)
	for i := range m {
		j := n + i
		tb.ident[i], tb.basis[i] = j, j
		tb.t[i][j] = 1
		tb.noIn[j] = true
		// An identity column is an artificial unless the row's own slack
		// is +1 after the flip (then it stands in for that slack).
		tb.art[j] = tb.t[i][len(cols)+i] != 1
	}
	tb.n = n + m
	return tb
}

// setObjective fills the objective row with reduced costs for the cost
// vector w (maximised): row[j] = c_B B^-1 a_j - w_j, rhs = c_B x_B.
func (tb *tableau) setObjective(w []float64) {
	z := tb.t[tb.m]
	clear(z)
	for j := range tb.n {
		z[j] = -w[j]
	}
	for i, bj := range tb.basis {
		if cb := w[bj]; cb != 0 {
			row := tb.t[i]
			for j := range tb.n {
				z[j] += cb * row[j]
			}
			z[tb.cap] += cb * row[tb.cap]
		}
	}
}

func (tb *tableau) pivot(r, q int) {
	pr := tb.t[r]
	inv := 1 / pr[q]
	for j := range tb.n {
		pr[j] *= inv
	}
	pr[tb.cap] *= inv
	pr[q] = 1
	for i := range tb.t {
		if i == r {
			continue
		}
		row := tb.t[i]
		f := row[q]
		if f == 0 {
			continue
		}
		for j := range tb.n {
			if pj := pr[j]; pj != 0 {
				row[j] -= f * pj
			}
		}
		row[tb.cap] -= f * pr[tb.cap]
		row[q] = 0
	}
	tb.basis[r] = q
}

// optimize pivots to the optimum of the current objective row; pivots
// counts across calls and bounds them.
func (tb *tableau) optimize(pivots *int) error {
	z := tb.t[tb.m]
	bland := false
	stall := 0
	last := z[tb.cap]
	for {
		q := -1
		best := -spxTol
		for j := range tb.n {
			if tb.noIn[j] {
				continue
			}
			if z[j] < best {
				q, best = j, z[j]
				if bland {
					break
				}
			}
		}
		if q < 0 {
			return nil
		}
		r := -1
		ratio := math.Inf(1)
		for i := range tb.m {
			if a := tb.t[i][q]; a > spxTol {
				if x := tb.rhs(i) / a; x < ratio-1e-12 || (x <= ratio+1e-12 && r >= 0 && tb.basis[i] < tb.basis[r]) {
					r, ratio = i, x
				}
			}
		}
		if r < 0 {
			return fmt.Errorf("%w: unbounded LP", ErrBound)
		}
		tb.pivot(r, q)
		if *pivots++; *pivots > spxMaxPivot {
			return fmt.Errorf("%w: simplex did not finish in %d pivots", ErrBound, spxMaxPivot)
		}
		if z[tb.cap] > last+1e-12 {
			stall, last, bland = 0, z[tb.cap], false
		} else if stall++; stall > 50 {
			bland = true // degenerate: Bland's rule cannot cycle
		}
	}
}

// dual returns the multiplier of row i of the current objective row
// (c_B B^-1 e_i in the original row's sign).
func (tb *tableau) dual(i int, w []float64) float64 {
	j := tb.ident[i]
	return (tb.t[tb.m][j] + w[j]) * tb.flip[i]
}

// solveSimplex solves the relaxation by the tableau above, generating
// pattern columns, and returns the dual point of its last basis and the
// LP value it reached.
func (in *PackingInstance) solveSimplex() (*DualPoint, float64, error) {
	if err := in.Validate(); err != nil {
		return nil, 0, err
	}
	sizes := in.shareSizes()
	nt, ns := len(in.Types), len(sizes)
	// Rows: per type gpu, cpu, mem, room (4t..4t+3); per size; pattern;
	// per class upper, lower. Each row is scaled by sc so its
	// coefficients are about 1.
	rowGPU := func(t int) int { return 4 * t }
	rowSize := func(s int) int { return 4*nt + s }
	rowPat := 4*nt + ns
	rowUp := func(c int) int { return rowPat + 1 + 2*c }
	m := rowPat + 1 + 2*len(in.Classes)
	sense := make([]rowSense, m)
	b := make([]float64, m)
	sc := make([]float64, m)
	for i := range sc {
		sc[i] = 1
	}
	for ti, t := range in.Types {
		r := rowGPU(ti)
		sc[r+1] = 1 / math.Max(float64(t.CPUMilli)/float64(t.GPUs), 1)
		sc[r+2] = 1 / math.Max(float64(t.MemoryMiB)/float64(t.GPUs), 1)
		sc[r+3] = 1.0 / 1000
		b[r] = float64(t.Count * t.GPUs)
		b[r+1] = float64(t.Count) * float64(t.CPUMilli) * sc[r+1]
		b[r+2] = float64(t.Count) * float64(t.MemoryMiB) * sc[r+2]
	}
	var cols []map[int]float64
	var cost []float64
	for ci := range in.Classes {
		c := &in.Classes[ci]
		for ti := range in.Types {
			if !c.fits(&in.Types[ti]) {
				continue
			}
			r := rowGPU(ti)
			col := map[int]float64{rowUp(ci): 1, rowUp(ci) + 1: 1}
			if c.Whole > 0 {
				col[r] = float64(c.Whole)
			}
			if c.CPUMilli > 0 {
				col[r+1] = float64(c.CPUMilli) * sc[r+1]
			}
			if c.MemoryMiB > 0 {
				col[r+2] = float64(c.MemoryMiB) * sc[r+2]
			}
			if c.Share > 0 {
				col[r+3] = float64(c.Share) * sc[r+3]
				col[rowSize(slices.Index(sizes, c.Share))] = 1
			}
			cols = append(cols, col)
			cost = append(cost, float64(c.Demand())/1000)
		}
		sense[rowUp(ci)], b[rowUp(ci)] = senseLE, float64(c.Arrived)
		sense[rowUp(ci)+1], b[rowUp(ci)+1] = senseGE, float64(c.Prefix)
	}
	for ti := range in.Types { // s_t
		r := rowGPU(ti)
		cols = append(cols, map[int]float64{r: 1, r + 3: -1, rowPat: -1})
		cost = append(cost, 0)
	}
	patCol := func(counts []int) map[int]float64 {
		col := map[int]float64{rowPat: 1}
		for si, n := range counts {
			if n > 0 {
				col[rowSize(si)] = -float64(n)
			}
		}
		return col
	}
	for si, s := range sizes { // one pattern per size to start
		counts := make([]int, ns)
		counts[si] = 1000 / s
		cols = append(cols, patCol(counts))
		cost = append(cost, 0)
	}
	tb := newTableau(cols, cost, sense, b, spxMaxCols)
	pivots := 0
	kbest := make([]float64, 1001)
	kfrom := make([]int, 1001)
	kcount := make([]float64, ns)
	lambda := make([]float64, ns)
	// solve optimises objective w, adding the pattern columns it prices
	// in (reduced value K(lambda) - rho > 0), at most spxMaxCols in all.
	solve := func(w []float64) error {
		for {
			if err := tb.optimize(&pivots); err != nil {
				return err
			}
			for si := range sizes {
				lambda[si] = max(0, tb.dual(rowSize(si), w))
			}
			rho := tb.dual(rowPat, w)
			k := knapsackFloat(sizes, lambda, kbest, kfrom, kcount)
			if k <= rho+1e-7 || tb.n >= tb.cap {
				return nil
			}
			counts := make([]int, ns)
			for si, v := range kcount {
				counts[si] = int(v)
			}
			col := patCol(counts)
			j := tb.n
			tb.n++
			// Its tableau column is B^-1 a, from the identity columns.
			for i := range tb.m {
				v := 0.0
				for r, a := range col {
					v += tb.t[i][tb.ident[r]] * a * tb.flip[r]
				}
				tb.t[i][j] = v
			}
			z := 0.0
			for r, a := range col {
				z += tb.dual(r, w) * a
			}
			tb.t[tb.m][j] = z - w[j]
		}
	}
	// Phase I: minimise the artificials (maximise their negative sum).
	w1 := make([]float64, tb.cap)
	for j := range tb.n {
		if tb.art[j] {
			w1[j] = -1
		}
	}
	tb.setObjective(w1)
	if err := solve(w1); err != nil {
		return nil, 0, err
	}
	if tb.t[tb.m][tb.cap] < -1e-6 {
		return nil, 0, fmt.Errorf("%w: the prefix does not fit, not even fractionally", ErrBound)
	}
	// Drive the artificials left in the basis (at zero) out of it, so
	// that phase II cannot raise them; a row with nothing to pivot on is
	// redundant and keeps its artificial at zero.
	for i := range tb.m {
		if !tb.art[tb.basis[i]] {
			continue
		}
		for j := range tb.n {
			if !tb.noIn[j] && math.Abs(tb.t[i][j]) > 1e-7 {
				tb.pivot(i, j)
				break
			}
		}
	}
	// Phase II.
	w2 := tb.cost
	tb.setObjective(w2)
	if err := solve(w2); err != nil {
		return nil, 0, err
	}
	d := &DualPoint{Sigma: make([]float64, nt), CPU: make([]float64, nt), Mem: make([]float64, nt), Extra: make([]float64, nt), Lambda: make([]float64, ns)}
	for si := range sizes {
		d.Lambda[si] = max(0, tb.dual(rowSize(si), w2)*1000)
	}
	rho := knapsackFloat(sizes, d.Lambda, kbest, kfrom, kcount)
	for ti := range in.Types {
		r := rowGPU(ti)
		gamma := max(0, tb.dual(r, w2)*1000)
		d.CPU[ti] = max(0, tb.dual(r+1, w2)*1000*sc[r+1])
		d.Mem[ti] = max(0, tb.dual(r+2, w2)*1000*sc[r+2])
		d.Sigma[ti] = max(0, tb.dual(r+3, w2)*1000*sc[r+3])
		d.Extra[ti] = max(0, gamma-1000*d.Sigma[ti]-rho)
	}
	return d, tb.t[tb.m][tb.cap] * 1000, nil
}
