package fgd

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRound2(t *testing.T) {
	for x, want := range map[float64]float64{
		0.125:  0.12, // exact tie: to even
		0.375:  0.38, // exact tie: to even
		2.675:  2.67, // 2.67499999... in binary
		1.005:  1.0,  // 1.00499999...
		95.385: 95.39,
		-0.125: -0.12,
		7:      7,
	} {
		assert.Equal(t, want, round2(x), "round2(%v)", x)
	}
	assert.True(t, math.IsNaN(round2(math.NaN())))
}

func TestPairwiseSum(t *testing.T) {
	// Below 8 values: a plain left-to-right sum.
	a, b, c := 0.1, 0.2, 0.3
	assert.Equal(t, (a+b)+c, pairwiseSum([]float64{a, b, c}))
	assert.Equal(t, 0.0, pairwiseSum(nil))
	// 8..128: eight accumulators, combined pairwise, then the rest.
	v := make([]float64, 11)
	for i := range v {
		v[i] = 0.1 * float64(i+1)
	}
	r := v[:8:8]
	want := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
	want += v[8]
	want += v[9]
	want += v[10]
	assert.Equal(t, want, pairwiseSum(v))
	// Above 128: split at a multiple of 8 near the middle.
	big := make([]float64, 300)
	for i := range big {
		big[i] = 1.0 / float64(i+3)
	}
	assert.Equal(t, pairwiseSum(big[:144])+pairwiseSum(big[144:]), pairwiseSum(big))
	assert.InDelta(t, naiveSum(big), pairwiseSum(big), 1e-12)
}

func naiveSum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

func TestBinColumns(t *testing.T) {
	values := []float64{1, 2, 3, 10, 20, 40}
	bins := []int{0, 0, 1, 3, 3, 5}
	cols := binColumns(values, bins, 5)
	// Bin 2 is empty: bins 1..3 stand in; bin 4 likewise with 3..5.
	assert.Equal(t, []float64{1.5, 3, round2(33.0 / 3), 15, round2(70.0 / 3), 40}, cols)
	// Columns past the samples are NaN when their neighbours are empty too.
	cols = binColumns([]float64{5}, []int{0}, 3)
	assert.Equal(t, []float64{5, 5}, cols[:2])
	assert.True(t, math.IsNaN(cols[2]) && math.IsNaN(cols[3]))
	// Samples beyond the last column feed only its fallback.
	cols = binColumns([]float64{1, 9}, []int{0, 2}, 1)
	assert.Equal(t, []float64{1, 5}, cols)
}

func TestReadPublished(t *testing.T) {
	in := "workload,sc_policy,tune,seed,total_gpus,0,1,2\n" +
		"w,06-FGD,1.3,42,6212,0.25,1.0,\n" +
		"w,99-Other,1.3,7,6212,1,2,3\n"
	p, err := ReadPublished(strings.NewReader(in), "x.csv")
	require.NoError(t, err)
	got := p[RunKey{"fgd", 42}]
	require.Len(t, got, 3)
	assert.Equal(t, []float64{0.25, 1}, got[:2])
	assert.True(t, math.IsNaN(got[2]))
	assert.Equal(t, []float64{1, 2, 3}, p[RunKey{"99-Other", 7}])

	diffs := p.Compare([]Curve{{Policy: "fgd", Seed: 42, Columns: []float64{0.25, 1.01, math.NaN()}}, {Policy: "x", Seed: 1}}, 1e-9)
	assert.Equal(t, []Diff{{RunKey: RunKey{"fgd", 42}, Column: 1, Got: 1.01, Want: 1}}, diffs)

	for name, bad := range map[string]string{
		"empty":      "",
		"no columns": "a,b\n1,2\n",
		"bad seed":   "sc_policy,seed,0\nx,y,1\n",
		"bad value":  "sc_policy,seed,0\nx,1,z\n",
		"ragged":     "sc_policy,seed,0\nx,1\n",
	} {
		_, err := ReadPublished(strings.NewReader(bad), "bad.csv")
		assert.Error(t, err, name)
		if err != nil {
			assert.Contains(t, err.Error(), "bad.csv", name)
		}
	}
}

// FuzzReadPublished: any input gives a result or an error, never a panic,
// and every row read has one value per column of the header from "0" on.
func FuzzReadPublished(f *testing.F) {
	f.Add("workload,sc_policy,tune,seed,total_gpus,0,1\nw,06-FGD,1.3,42,6212,0.25,1.0\n")
	f.Add("sc_policy,seed,0\nx,1,z\n")
	f.Add("sc_policy,0,seed\n\"a,1,2\n")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ReadPublished(strings.NewReader(in), "fuzz.csv")
		if err != nil {
			return
		}
		n := -1
		for _, v := range p {
			if n >= 0 && len(v) != n {
				t.Fatalf("rows of %d and %d values", n, len(v))
			}
			n = len(v)
		}
	})
}

// FuzzBinColumns checks the binning on random sorted bins: every column
// lies within the range of the values, a non-empty bin's column is the
// rounded mean of its own values only.
func FuzzBinColumns(f *testing.F) {
	f.Add([]byte{0, 1, 1, 3, 7, 7, 9}, uint8(10))
	f.Fuzz(func(t *testing.T, steps []byte, last uint8) {
		if len(steps) > 2000 {
			return
		}
		values := make([]float64, len(steps))
		bins := make([]int, len(steps))
		b := 0
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, s := range steps {
			b += int(s % 3)
			bins[i] = b
			values[i] = float64(s) / 7
			lo, hi = min(lo, values[i]), max(hi, values[i])
		}
		cols := binColumns(values, bins, int(last))
		require.Len(t, cols, int(last)+1)
		for k, c := range cols {
			if math.IsNaN(c) {
				continue
			}
			require.True(t, c >= round2(lo)-0.01 && c <= round2(hi)+0.01, "column %d = %v outside [%v, %v]", k, c, lo, hi)
			var own []float64
			for i := range bins {
				if bins[i] == k {
					own = append(own, values[i])
				}
			}
			if len(own) > 0 {
				require.Equal(t, round2(pairwiseSum(own)/float64(len(own))), c)
			}
		}
	})
}
