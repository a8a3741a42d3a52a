package fgd

import (
	"math"
	"strconv"
)

// round2 is Python's round(x, 2): the float's exact value rounded to two
// decimals, exact ties to even (strconv rounds the exact decimal expansion
// half to even, as CPython's dtoa does).
func round2(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	if err != nil {
		return x
	}
	return v
}

// pairwiseSum is numpy's pairwise summation of float64 (pairwise_sum_DOUBLE,
// unroll 8, block 128), so that bin means round as the published analysis
// did.
func pairwiseSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		res := 0.0
		for _, v := range a {
			res += v
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range 8 {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(a[:n2]) + pairwiseSum(a[n2:])
	}
}

// binColumns turns the per-pod samples into columns 0..last
// (merge_alloc_discrete.py): column k is round(mean of the values whose bin
// is k, 2); an empty bin takes the values of bins k−1..k+1 (in sample
// order); a column with none of them is NaN. Bins must be non-decreasing.
func binColumns(values []float64, bins []int, last int) []float64 {
	return binMeans(values, bins, last, true)
}

// binMeans is binColumns with the rounding of the means optional (the
// published fragmentation file keeps them unrounded).
func binMeans(values []float64, bins []int, last int, round bool) []float64 {
	cols := make([]float64, last+1)
	// start[k] .. start[k+1]: the samples of bin k (bins are sorted).
	start := make([]int, last+3)
	j := 0
	for k := 0; k <= last+1; k++ {
		for j < len(bins) && bins[j] < k {
			j++
		}
		start[k] = j
	}
	start[last+2] = len(bins)
	for j < len(bins) && bins[j] <= last+1 {
		j++
	}
	start[last+2] = j
	span := func(lo, hi int) []float64 { // samples of bins lo..hi
		lo, hi = max(lo, 0), min(hi, last+1)
		return values[start[lo]:start[hi+1]]
	}
	for k := range cols {
		v := span(k, k)
		if len(v) == 0 {
			v = span(k-1, k+1)
		}
		if len(v) == 0 {
			cols[k] = math.NaN()
			continue
		}
		cols[k] = pairwiseSum(v) / float64(len(v))
		if round {
			cols[k] = round2(cols[k])
		}
	}
	return cols
}
