package fgd

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/workload"
)

var publishedSeeds = []int64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}

// exactPolicies reproduce the published per-seed curves.
var exactPolicies = []string{"dotprod", "clustering", "packing", "bestfit", "fgd"}

// knownDiff is the one published value off by 0.01 (docs/fgd.md, How the comparison is made:
// its bin mean is 90.605 within float error).
var knownDiff = Diff{RunKey: RunKey{"dotprod", 51}, Column: 109}

func loadForTest(t testing.TB) (*Trace, Published) {
	t.Helper()
	tracetest.Path(t, workload.OpenbPods)
	tracetest.Path(t, PublishedAlloc)
	tr, err := LoadDefaultTrace()
	require.NoError(t, err)
	pub, err := LoadPublished()
	require.NoError(t, err, "the published FGD results are required")
	require.Len(t, tr.Nodes, 1213)
	require.Len(t, tr.Pods, 8152)
	require.Len(t, pub, 60)
	return tr, pub
}

// checkExact asserts that curves equal the published columns, but for the
// known 0.01.
func checkExact(t *testing.T, pub Published, curves []Curve) {
	t.Helper()
	for _, d := range pub.Compare(curves, 1e-9) {
		if d.RunKey == knownDiff.RunKey && d.Column == knownDiff.Column && math.Abs(d.Got-d.Want) <= 0.0100001 {
			continue
		}
		t.Errorf("%s seed %d column %d: got %.2f, published %.2f", d.Policy, d.Seed, d.Column, d.Got, d.Want)
	}
}

// checkFrag asserts that the fragmentation columns equal the published
// ones: exactly for the packing-style policies, within 0.01 for FGD (a
// few samples round differently: the original sums its fragmentation
// amounts in another order).
func checkFrag(t *testing.T, curves []Curve) {
	t.Helper()
	tracetest.Path(t, PublishedFrag)
	pub, err := LoadPublishedFrag()
	require.NoError(t, err)
	n := 0
	for _, d := range pub.CompareFrag(curves, 1e-9) {
		if d.Policy == "fgd" && math.Abs(d.Got-d.Want) <= 0.0100001 {
			n++
			continue
		}
		t.Errorf("frag %s seed %d column %d: got %v, published %v", d.Policy, d.Seed, d.Column, d.Got, d.Want)
	}
	t.Logf("frag: %d FGD values within 0.01, all others identical", n)
}

// TestPublished is the experiment of docs/fgd.md: all 60 published runs
// and berth over seeds 42..51, berth at or above FGD at every column from
// 50 to 130. Under -race it runs two seeds of the five exactly reproduced
// policies.
func TestPublished(t *testing.T) {
	tr, pub := loadForTest(t)
	ctx := context.Background()
	if raceEnabled {
		curves, err := Runs(ctx, Config{Trace: tr, Policies: exactPolicies, Seeds: []int64{42, 51}})
		require.NoError(t, err)
		checkExact(t, pub, curves)
		checkFrag(t, curves)
		return
	}
	curves, err := Runs(ctx, Config{Trace: tr, Policies: Policies, Seeds: publishedSeeds})
	require.NoError(t, err)
	require.Len(t, curves, len(Policies)*len(publishedSeeds))
	for _, cv := range curves {
		require.Len(t, cv.Columns, 131)
		assert.GreaterOrEqual(t, cv.ArrivedPct, 129.9, "tune-up reaches 130%")
	}
	var exact []Curve
	for _, cv := range curves {
		if slices.Contains(exactPolicies, cv.Policy) {
			exact = append(exact, cv)
		}
	}
	checkExact(t, pub, exact)
	checkFrag(t, exact)

	rows, err := Summarize(curves)
	require.NoError(t, err)
	by := map[string]Row{}
	for _, r := range rows {
		by[r.Policy] = r
		t.Logf("%-10s at 100: %6.2f  at 130: %6.2f  std: %.2f", r.Policy, r.AllocPctAt100, r.AllocPctAt130, r.AllocPctStdAt130)
	}
	assert.InDelta(t, 87.47, by["random"].AllocPctAt130, 0.5)
	assert.InDelta(t, 93.08, by["bestfit"].AllocPctAt130, 0.5)
	assert.Equal(t, 95.39, by["fgd"].AllocPctAt130)
	assert.GreaterOrEqual(t, by["berth"].AllocPctAt130, 95.39, "berth must reach FGD's published mean")
	assert.GreaterOrEqual(t, by["berth"].AllocPctAt130, 96.0)
	assert.Greater(t, by["berth"].AllocPctAt130, by["fgd"].AllocPctAt130)
	// Issue 19: at or above FGD at every arrival level from 50% to 130%,
	// not only at the end (means over the seeds, as reported by --curve).
	require.Len(t, by["berth"].Curve, 131)
	require.Len(t, by["fgd"].Curve, 131)
	for k := 50; k <= 130; k++ {
		assert.GreaterOrEqual(t, by["berth"].Curve[k], by["fgd"].Curve[k], "column %d: berth below FGD", k)
	}
}

func TestRowJSON(t *testing.T) {
	b, err := json.Marshal([]Row{{Policy: "fgd", AllocPctAt100: 95.23, AllocPctAt130: 95.39, AllocPctStdAt130: 0.08}})
	require.NoError(t, err)
	assert.JSONEq(t, `[{"policy":"fgd","alloc_pct_at_100":95.23,"alloc_pct_at_130":95.39,"alloc_pct_std_at_130":0.08,"model_violations":0}]`, string(b))
}

func TestConfigValidate(t *testing.T) {
	tr := &Trace{Nodes: make([]workload.Node, 1), Pods: make([]workload.Job, 1)}
	ok := Config{Trace: tr, Policies: []string{"fgd"}, Seeds: []int64{1}}
	require.NoError(t, ok.Validate())
	for name, mod := range map[string]func(c *Config){
		"no trace":    func(c *Config) { c.Trace = nil },
		"no seeds":    func(c *Config) { c.Seeds = nil },
		"no policies": func(c *Config) { c.Policies = nil },
		"unknown":     func(c *Config) { c.Policies = []string{"FGD"} },
		"tune":        func(c *Config) { c.Tune = -1 },
		"popularity":  func(c *Config) { c.Popularity = 2 },
		"via":         func(c *Config) { c.Via = "bus" },
		"clustering via engine": func(c *Config) {
			c.Policies, c.Via = []string{"clustering"}, ViaEngine
		},
	} {
		c := ok
		mod(&c)
		err := c.Validate()
		assert.ErrorIs(t, err, ErrConfig, name)
		_, err = Run(context.Background(), c)
		assert.ErrorIs(t, err, ErrConfig, name)
	}
	// A node without GPUs cannot be replayed.
	_, err := Runs(context.Background(), ok)
	assert.ErrorIs(t, err, ErrTrace)
}

func TestLoadTraceMissing(t *testing.T) {
	_, err := LoadTrace(t.TempDir())
	require.Error(t, err)
	t.Setenv("BERTH_TRACES", t.TempDir()+"/nope")
	_, err = LoadDefaultTrace()
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "BERTH_TRACES"))
	assert.ErrorContains(t, err, "bash hack/get-traces.sh DIR")
	// A traces directory without the openb trace says so, and how to get it.
	t.Setenv("BERTH_TRACES", t.TempDir())
	_, err = LoadDefaultTrace()
	assert.ErrorIs(t, err, workload.ErrNoTraces)
	assert.ErrorContains(t, err, "bash hack/get-traces.sh DIR")
}

func TestRunCancelled(t *testing.T) {
	tr, _ := loadForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Trace: tr, Policies: []string{"fgd"}, Seeds: []int64{42}})
	assert.ErrorIs(t, err, context.Canceled)
}
