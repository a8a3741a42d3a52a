package fgd

import (
	"context"
	"fmt"
	"math/big"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundSeedsEnv selects TestPackingBound's seeds: "FIRST-LAST" or one
// seed; 42 when unset.
const boundSeedsEnv = "BERTH_FGD_BOUND_SEEDS"

// boundTarget is issue 19's goal for the allocation at 130% arrived.
// Samples are rounded to 0.01, so a column can read 97.00 once the
// allocation reaches 96.995%: bounds are compared with boundTarget - 0.005.
const boundTarget = 97.0

const boundBelow = boundTarget - 0.005

func boundSeeds(t *testing.T) []int64 {
	s := os.Getenv(boundSeedsEnv)
	if s == "" {
		return []int64{42}
	}
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		last = first
	}
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	require.True(t, err1 == nil && err2 == nil && a <= b && b-a < 100, "%s=%q: want FIRST-LAST", boundSeedsEnv, s)
	var out []int64
	for x := a; x <= b; x++ {
		out = append(out, x)
	}
	return out
}

// prefixBound certifies the relaxation's bound with the first prefix pods
// of order placed, in % of the cluster, and checks the certificate
// against the simplex's own value.
func prefixBound(t *testing.T, p *prepared, order []int, prefix int) float64 {
	t.Helper()
	in := p.packingInstance(order, prefix)
	b, err := in.PackingBound()
	require.NoError(t, err, "prefix %d", prefix)
	lp := new(big.Rat).SetFloat64(b.LP - 1e-3)
	require.GreaterOrEqual(t, b.Milli.Cmp(lp), 0, "prefix %d: certificate %s under the simplex's %v", prefix, b.Milli.FloatString(3), b.LP)
	f, _ := b.Milli.Float64()
	require.InDelta(t, b.LP, f, 1, "prefix %d: the certificate is the simplex's optimum", prefix)
	return b.Pct
}

// TestPackingBound computes, on openb at 130% arrived, the linear-
// relaxation bound of bound.go for the experiment's rule (every pod is tried
// once, on arrival, and a placed pod stays): with the first F pods of the
// arrival order placed, no placement of the arrived pods holds more than
// B(F) % of the GPUs, so no column of the curve exceeds it (a column is a
// mean of values rounded to 0.01, each at most the final allocation). It
// asserts, per seed:
//
//   - berth's and FGD's column 130 are at most B (+0.005 for the rounding of
//     samples) at their own first failure F (every pod before it was
//     placed), and both bounds are under 96.995, so no column reads 97.00;
//   - F0, the shortest prefix with B(F0) < 96.995 (found by bisection; the
//     LP only falls as F grows, so B(F0) bounds every longer prefix too), is
//     at most FGD's F: any policy that places every pod of that prefix stays
//     under 97.0 at every column.
//
// It also logs the offline bound (nothing forced). Seeds: 42, or
// BERTH_FGD_BOUND_SEEDS=FIRST-LAST. Under -race the replays alone take
// 30-50 s, so it replays nothing: it certifies the bound with the pods up
// to 90% arrived placed and asserts it is under 96.995 (the simplex and the
// certificate take about a second there). On seed 42 every published
// policy but Random places all of those pods (first failures at 90.3 to 96%
// arrived); the full test checks the policies' own prefixes.
func TestPackingBound(t *testing.T) {
	tr, _ := loadForTest(t)
	p, err := prepare(tr, (&Config{}).defaults().Popularity)
	require.NoError(t, err)
	seeds := boundSeeds(t)
	if raceEnabled {
		for _, seed := range seeds {
			order, _ := arrivals(rand.New(rand.NewSource(seed)), p, 1.3)
			limit := int64(p.cluster.NumGPUs()) * 900 // 90% of the GPUs, milli
			var sum int64
			f := 0
			for f < len(order) && sum+p.pods[order[f]].demand <= limit {
				sum += p.pods[order[f]].demand
				f++
			}
			b := prefixBound(t, p, order, f)
			assert.Less(t, b, boundBelow, "seed %d", seed)
			t.Logf("seed %d: B(F) %.3f with the %d pods up to 90%% arrived placed", seed, b, f)
		}
		return
	}
	policies := []string{"berth", "fgd"}
	curves, err := Runs(context.Background(), Config{Trace: tr, Policies: policies, Seeds: seeds})
	require.NoError(t, err)
	capacity := float64(p.cluster.NumGPUs()) * 10 // milli per %
	for si, seed := range seeds {
		order, _ := arrivals(rand.New(rand.NewSource(seed)), p, 1.3)
		arrivedPct := func(prefix int) float64 {
			var s int64
			for _, pi := range order[:prefix] {
				s += p.pods[pi].demand
			}
			return float64(s) / capacity
		}
		line := fmt.Sprintf("seed %d:", seed)
		var fFGD int
		for pi, pol := range policies {
			cv := curves[pi*len(seeds)+si]
			require.Less(t, cv.FirstFail, cv.Pods, "%s seed %d: some pod fails", pol, seed)
			b := prefixBound(t, p, order, cv.FirstFail)
			col := cv.Columns[130]
			assert.LessOrEqual(t, col, b+0.005, "%s seed %d: column 130 above the bound", pol, seed)
			assert.Less(t, b, boundBelow, "%s seed %d: bound at its first failure", pol, seed)
			line += fmt.Sprintf(" %s col130 %.2f, F %d (%.2f%% arrived), B(F) %.3f;", pol, col, cv.FirstFail, arrivedPct(cv.FirstFail), b)
			if pol == "fgd" {
				fFGD = cv.FirstFail
			}
		}
		if !raceEnabled {
			line += fmt.Sprintf(" offline B(0) %.3f;", prefixBound(t, p, order, 0))
			// Bisection for F0: B(lo) >= 96.995 > B(hi).
			lo, hi := 0, fFGD
			bhi := prefixBound(t, p, order, hi)
			for hi-lo > 1 {
				mid := (lo + hi) / 2
				if b := prefixBound(t, p, order, mid); b < boundBelow {
					hi, bhi = mid, b
				} else {
					lo = mid
				}
			}
			assert.LessOrEqual(t, hi, fFGD)
			line += fmt.Sprintf(" F0 %d (%.2f%% arrived), B(F0) %.3f, B(F0-1) >= %.3f", hi, arrivedPct(hi), bhi, boundBelow)
		}
		t.Log(line)
	}
}
