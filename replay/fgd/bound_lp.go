package fgd

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// maxLPSize bounds the rows x columns SolveLP accepts: gonum's simplex is
// dense (and uses Bland's rule), fine for the tests' small instances, far
// too slow for openb (which SearchDual and Evaluate handle instead).
const maxLPSize = 200_000

// patterns lists every multiset of sizes with sum at most 1000 that is
// maximal (no size can be added), as counts per size; false when there are
// more than limit (small shares have astronomically many).
func patterns(sizes []int, limit int) ([][]int, bool) {
	var out [][]int
	cur := make([]int, len(sizes))
	var rec func(i, room int)
	rec = func(i, room int) {
		if len(out) > limit {
			return
		}
		if i == len(sizes) {
			for _, s := range sizes {
				if s <= room {
					return // not maximal
				}
			}
			out = append(out, slices.Clone(cur))
			return
		}
		for n := room / sizes[i]; n >= 0; n-- {
			cur[i] = n
			rec(i+1, room-n*sizes[i])
		}
		cur[i] = 0
	}
	rec(0, 1000)
	return out, len(out) <= limit
}

// SolveLP solves the relaxation of the top of bound.go exactly with gonum's
// simplex (lp.Simplex) and returns its optimum in GPU thousandths. Only
// maximal patterns are listed: a GPU with a smaller one can be counted as a
// maximal pattern containing it, since the size rows are inequalities. For
// small instances only (ErrBound otherwise).
func (in *PackingInstance) SolveLP() (float64, error) {
	if err := in.Validate(); err != nil {
		return 0, err
	}
	sizes := in.shareSizes()
	pats, ok := patterns(sizes, 2000)
	if !ok {
		return 0, fmt.Errorf("%w: too many share patterns for SolveLP", ErrBound)
	}
	nt := len(in.Types)
	// Columns: z_{c,t} (fitting pairs), s_t, Y_q, then one slack per row.
	type zc struct{ c, t int }
	var zs []zc
	for ci := range in.Classes {
		for ti := range in.Types {
			if in.Classes[ci].fits(&in.Types[ti]) {
				zs = append(zs, zc{ci, ti})
			}
		}
	}
	nz := len(zs)
	sCol := func(t int) int { return nz + t }
	yCol := func(q int) int { return nz + nt + q }
	nvar := nz + nt + len(pats)
	// Rows: class upper, class lower, 4 per type, one per size, pattern.
	nrow := 2*len(in.Classes) + 4*nt + len(sizes) + 1
	ncol := nvar + nrow
	if nrow*ncol > maxLPSize {
		return 0, fmt.Errorf("%w: LP of %d rows and %d columns is too large for SolveLP", ErrBound, nrow, ncol)
	}
	A := mat.NewDense(nrow, ncol, nil)
	b := make([]float64, nrow)
	c := make([]float64, ncol)
	row := 0
	// sum_t z_{c,t} + slack = N_c
	for ci, cl := range in.Classes {
		for j, z := range zs {
			if z.c == ci {
				A.Set(row, j, 1)
			}
		}
		A.Set(row, nvar+row, 1)
		b[row] = float64(cl.Arrived)
		row++
	}
	// -sum_t z_{c,t} + slack = -P_c
	for ci, cl := range in.Classes {
		for j, z := range zs {
			if z.c == ci {
				A.Set(row, j, -1)
			}
		}
		A.Set(row, nvar+row, 1)
		b[row] = -float64(cl.Prefix)
		row++
	}
	for ti, t := range in.Types {
		gpu, cpu, mem, room := row, row+1, row+2, row+3
		for j, z := range zs {
			if z.t != ti {
				continue
			}
			cl := &in.Classes[z.c]
			A.Set(gpu, j, float64(cl.Whole))
			A.Set(cpu, j, float64(cl.CPUMilli))
			A.Set(mem, j, float64(cl.MemoryMiB))
			A.Set(room, j, float64(cl.Share))
		}
		A.Set(gpu, sCol(ti), 1)
		A.Set(room, sCol(ti), -1000)
		b[gpu] = float64(t.Count * t.GPUs)
		b[cpu] = float64(t.Count) * float64(t.CPUMilli)
		b[mem] = float64(t.Count) * float64(t.MemoryMiB)
		for r := gpu; r <= room; r++ {
			A.Set(r, nvar+r, 1)
		}
		row += 4
	}
	for si, s := range sizes {
		for j, z := range zs {
			if in.Classes[z.c].Share == s {
				A.Set(row, j, 1)
			}
		}
		for q, p := range pats {
			A.Set(row, yCol(q), -float64(p[si]))
		}
		A.Set(row, nvar+row, 1)
		row++
	}
	for q := range pats {
		A.Set(row, yCol(q), 1)
	}
	for ti := range in.Types {
		A.Set(row, sCol(ti), -1)
	}
	A.Set(row, nvar+row, 1)
	for j, z := range zs {
		c[j] = -float64(in.Classes[z.c].Demand()) / 1000
	}
	// Scale every row to a largest coefficient of 1 (CPU and memory rows
	// are in the thousands): gonum's dense solves need the conditioning.
	for r := range nrow {
		m := 0.0
		for j := range nvar {
			m = max(m, math.Abs(A.At(r, j)))
		}
		if m > 1 {
			for j := range nvar {
				A.Set(r, j, A.At(r, j)/m)
			}
			b[r] /= m
		}
	}
	opt, _, err := lp.Simplex(c, A, b, 1e-10, nil)
	if err != nil {
		return 0, fmt.Errorf("%w: simplex: %w", ErrBound, err)
	}
	return -opt * 1000, nil
}
