package workload_test

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/workload"
)

func TestTracesDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(workload.TracesEnv, dir)
	got, err := workload.TracesDir()
	require.NoError(t, err)
	assert.Equal(t, dir, got)
	// A trace file that is not there: the error says how to get them.
	_, err = workload.TracePath(workload.ITPCluster04)
	assert.ErrorIs(t, err, workload.ErrNoTraces)
	assert.ErrorContains(t, err, "bash hack/get-traces.sh DIR")
	assert.ErrorContains(t, err, "BERTH_TRACES=DIR")
	want := filepath.Join(dir, workload.ITPCluster04)
	require.NoError(t, os.MkdirAll(filepath.Dir(want), 0o755))
	require.NoError(t, os.WriteFile(want, nil, 0o644))
	p, err := workload.TracePath(workload.ITPCluster04)
	require.NoError(t, err)
	assert.Equal(t, want, p)

	t.Setenv(workload.TracesEnv, filepath.Join(dir, "missing"))
	_, err = workload.TracesDir()
	assert.ErrorIs(t, err, workload.ErrNoTraces)
	assert.ErrorContains(t, err, "bash hack/get-traces.sh DIR")

	// Without the variable, the search relative to the working directory
	// finds shared/traces beside the repository, from the repository root
	// (the CLI) and from a package directory (go test); a layout built here,
	// so the check needs no real traces.
	t.Setenv(workload.TracesEnv, "")
	root := t.TempDir()
	want = filepath.Join(root, "shared", "traces")
	require.NoError(t, os.MkdirAll(want, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "berth", "workload"), 0o755))
	want, err = filepath.EvalSymlinks(want)
	require.NoError(t, err)
	for _, wd := range []string{"berth", filepath.Join("berth", "workload")} {
		t.Chdir(filepath.Join(root, wd))
		got, err := workload.TracesDir()
		require.NoError(t, err, wd)
		got, err = filepath.EvalSymlinks(got)
		require.NoError(t, err)
		assert.Equal(t, want, got, wd)
	}
	deep := filepath.Join(t.TempDir(), "a", "b", "c", "d")
	require.NoError(t, os.MkdirAll(deep, 0o755))
	t.Chdir(deep)
	_, err = workload.TracesDir()
	assert.ErrorIs(t, err, workload.ErrNoTraces)
	assert.ErrorContains(t, err, "bash hack/get-traces.sh DIR")
}

func TestOpen(t *testing.T) {
	_, err := workload.Open("csv", "x")
	assert.ErrorIs(t, err, workload.ErrKind)
	dir := t.TempDir()
	_, err = workload.Open(workload.KindSWF, filepath.Join(dir, "none.swf"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	swf := filepath.Join(dir, "a.swf")
	require.NoError(t, os.WriteFile(swf, []byte("; MaxProcs: 16\n1 0 5 60 4 -1 -1 4 100 -1 1 1 1 -1 1 -1 -1 -1\n"), 0o644))
	tr, err := workload.Open(workload.KindSWF, swf)
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 1)
	assert.Equal(t, 4, tr.Jobs[0].NumGPU)
	_, err = workload.Open(workload.KindOpenb, swf)
	assert.ErrorIs(t, err, workload.ErrKind, "openb wants a directory")

	// No path: the shared trace of the kind, nodes included for openb.
	tracetest.Path(t, workload.OpenbNodes)
	tr, err = workload.Open(workload.KindOpenb, "")
	require.NoError(t, err)
	assert.Len(t, tr.Nodes, 1213)
	t.Setenv(workload.TracesEnv, filepath.Join(dir, "missing"))
	_, err = workload.Open(workload.KindITP, "")
	assert.ErrorIs(t, err, workload.ErrNoTraces)
}

func TestTraceNASA(t *testing.T) {
	tr, err := workload.OpenSWF(tracetest.Path(t, workload.SWFNASA))
	require.NoError(t, err)
	// README: 18,239 jobs; 173 of them ran 0 s and are dropped.
	assert.Equal(t, 18239, len(tr.Jobs)+len(tr.Dropped))
	assert.Len(t, tr.Dropped, 173)
	for _, d := range tr.Dropped {
		require.Equal(t, "run time <= 0", d.Reason)
	}
	mp, ok := tr.HeaderInt("MaxProcs")
	require.True(t, ok)
	assert.Equal(t, 128, mp)
	assert.Equal(t, "2.2", tr.Header["Version"])

	sizes := map[int]int{}
	var longest, last time.Duration
	for _, j := range tr.Jobs {
		sizes[j.GPUs]++
		longest = max(longest, j.Runtime)
		last = max(last, j.Submit)
		require.Zero(t, j.Estimate, "the log has no estimates")
		require.Positive(t, j.Runtime)
	}
	for _, d := range tr.Dropped { // the README's counts include the dropped jobs
		sizes[swfDroppedSize(t, tr, d)]++
	}
	// README: powers of two, 1 most common with 4,935 jobs, 420 use all 128.
	assert.Equal(t, 4935, sizes[1])
	assert.Equal(t, 420, sizes[128])
	for s := range sizes {
		assert.Contains(t, []int{1, 2, 4, 8, 16, 32, 64, 128}, s)
	}
	assert.Equal(t, 62643*time.Second, longest) // 17.4 h
	assert.InDelta(t, 92.0, last.Hours()/24, 0.05)
}

// swfDroppedSize re-reads the processor count of a dropped job from the
// file (dropped jobs carry only their line).
func swfDroppedSize(t *testing.T, tr *workload.Trace, d workload.Dropped) int {
	t.Helper()
	if swfLines == nil {
		f, err := os.Open(tr.Name)
		require.NoError(t, err)
		defer f.Close()
		zr, err := gzip.NewReader(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			swfLines = append(swfLines, sc.Text())
		}
		require.NoError(t, sc.Err())
	}
	fields := strings.Fields(swfLines[d.Line-1])
	n, err := strconv.Atoi(fields[4]) // SWF field 5: allocated processors
	require.NoError(t, err)
	return n
}

var swfLines []string

func TestTraceITP(t *testing.T) {
	tr, err := workload.OpenITP(tracetest.Path(t, workload.ITPCluster04))
	require.NoError(t, err)
	assert.Empty(t, tr.Dropped)
	require.Len(t, tr.Jobs, 15802)
	sizes := map[int]int{}
	var gpuSeconds float64
	runs := make([]time.Duration, 0, len(tr.Jobs))
	for i, j := range tr.Jobs {
		sizes[j.GPUs]++
		gpuSeconds += float64(j.GPUs) * j.Runtime.Seconds()
		runs = append(runs, j.Runtime)
		if i > 0 {
			require.GreaterOrEqual(t, j.Submit, tr.Jobs[i-1].Submit, "submission times are sorted")
		}
	}
	assert.Equal(t, map[int]int{1: 11924, 8: 2779, 4: 532, 32: 254, 16: 182, 2: 125, 64: 6}, sizes)
	assert.Equal(t, 5810*time.Second, tr.Jobs[0].Submit)
	assert.Equal(t, 5142627*time.Second, tr.Jobs[len(tr.Jobs)-1].Submit)
	assert.InDelta(t, 705683, gpuSeconds/3600, 1)

	// The synthetic generator's runtime table is the nearest-rank quantiles
	// of this trace.
	slices.Sort(runs)
	for _, q := range workload.ITPRuntimeQuantiles() {
		pm := int(q.P*1000 + 0.5) // per mille
		rank := max(1, (pm*len(runs)+999)/1000)
		assert.Equal(t, runs[rank-1], q.Runtime, "quantile %v", q.P)
	}
	assert.Equal(t, 600*time.Second, runs[0])
	assert.Equal(t, 7949*time.Second, runs[len(runs)/2])
	assert.Equal(t, 1237189*time.Second, runs[len(runs)-1])
}

func TestTraceOpenb(t *testing.T) {
	nodes, err := workload.OpenOpenbNodes(tracetest.Path(t, workload.OpenbNodes))
	require.NoError(t, err)
	require.Len(t, nodes, 1213)
	gpus := 0
	shapes := map[string]int{}
	for _, n := range nodes {
		gpus += n.GPUs
		shapes[fmt.Sprintf("%sx%d", n.Model, n.GPUs)]++
	}
	assert.Equal(t, 6212, gpus)
	assert.Equal(t, 549, shapes["G2x8"])
	assert.Equal(t, 387, shapes["T4x2"])

	tr, err := workload.OpenOpenbPods(tracetest.Path(t, workload.OpenbPods))
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 8152)
	byGPU := map[int]int{}
	share := 0
	var demand int64
	var lastCreate time.Duration
	for _, p := range tr.Jobs {
		byGPU[p.NumGPU]++
		if p.Shared() {
			share++
		}
		if p.NumGPU > 1 {
			require.Equal(t, 1000, p.GPUMilli, "multi-GPU pods ask for whole GPUs")
		}
		require.Nil(t, p.GPUModels, "gpu_spec is empty throughout")
		demand += p.DemandMilli()
		lastCreate = max(lastCreate, p.Submit)
	}
	assert.Equal(t, map[int]int{0: 1088, 1: 6989, 2: 16, 4: 15, 8: 44}, byGPU)
	assert.Equal(t, 3078, share)
	assert.Equal(t, int64(6086800), demand) // 6,086.8 GPUs
	assert.Equal(t, 12901761*time.Second, lastCreate)
}
