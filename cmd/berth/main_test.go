package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/replay/metrics"
	"github.com/berthsched/berth/workload"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string][]int64{
		"42":        {42},
		"42-45":     {42, 43, 44, 45},
		"1,3,2-4,1": {1, 3, 2, 4},
		" 7 , 8 ":   {7, 8},
	} {
		got, err := parseSeeds(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", ",", "x", "5-1", "-3", "1-", "0-5000", "1.5"} {
		_, err := parseSeeds(in)
		assert.ErrorIs(t, err, errUsage, in)
	}
}

func TestParseTrace(t *testing.T) {
	tr, err := parseTrace("synthetic:300")
	require.NoError(t, err)
	assert.Equal(t, traceSpec{kind: "synthetic", jobs: 300}, tr)
	assert.Equal(t, "synthetic300", tr.name())
	tr, err = parseTrace("swf:/data/x/NASA.swf.gz")
	require.NoError(t, err)
	assert.Equal(t, "swf-NASA", tr.name())
	tr, err = parseTrace("itp")
	require.NoError(t, err)
	assert.Equal(t, "itp04", tr.name())
	tr, err = parseTrace("synthetic-mig")
	require.NoError(t, err)
	assert.Equal(t, "synthetic-mig", tr.name())
	tr, err = parseTrace("synthetic-mig:200")
	require.NoError(t, err)
	assert.Equal(t, traceSpec{kind: "synthetic-mig", jobs: 200}, tr)
	assert.Equal(t, "synthetic-mig200", tr.name())
	tr, err = parseTrace("openb:/data/openb")
	require.NoError(t, err)
	assert.Equal(t, traceSpec{kind: "openb", path: "/data/openb"}, tr)
	for _, in := range []string{"", "csv:x", "synthetic:0", "synthetic:abc", "synthetic-mig:x"} {
		_, err := parseTrace(in)
		assert.ErrorIs(t, err, errUsage, in)
	}
}

func TestParseEstimatesAndPolicies(t *testing.T) {
	for in, want := range map[string]float64{"exact": 1, "trace": 0, "inflated:2": 2, "inflated:1.5": 1.5} {
		f, err := parseEstimates(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, f, in)
	}
	for _, in := range []string{"", "inflated", "inflated:0.5", "inflated:NaN", "inflated:x", "guess"} {
		_, err := parseEstimates(in)
		assert.ErrorIs(t, err, errUsage, in)
	}
	ps, err := parsePolicies("easy, fifo,easy", []string{"fifo", "easy"})
	require.NoError(t, err)
	assert.Equal(t, []string{"easy", "fifo"}, ps)
	_, err = parsePolicies("sjf", []string{"fifo"})
	assert.ErrorIs(t, err, errUsage)
	_, err = parsePolicies(" , ", []string{"fifo"})
	assert.ErrorIs(t, err, errUsage)
}

func TestClusterFor(t *testing.T) {
	c, err := clusterFor(0, 8, 0, 64)
	require.NoError(t, err)
	assert.Equal(t, 64, c.Nodes)
	assert.Equal(t, 8, c.Racks)
	c, err = clusterFor(0, 8, 0, 16)
	require.NoError(t, err)
	assert.Equal(t, 2, c.Racks)
	c, err = clusterFor(12, 4, 0, 64)
	require.NoError(t, err)
	assert.Equal(t, 1, c.Racks)
	_, err = clusterFor(10, 8, 3, 64)
	assert.ErrorIs(t, err, errUsage)
}

func TestBadCommandLines(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":       {},
		"unknown command":  {"simulate"},
		"unknown flag":     {"replay", "--colour"},
		"bad format":       {"replay", "--format", "xml"},
		"bad seeds":        {"replay", "--seeds", "9-3"},
		"bad policy":       {"replay", "--policy", "fifo,sjf"},
		"negative nodes":   {"replay", "--nodes", "-1"},
		"bad gpus":         {"replay", "--gpus-per-node", "0"},
		"uneven racks":     {"replay", "--nodes", "10", "--racks", "3"},
		"bad trace":        {"replay", "--trace", "pbs:/x"},
		"two traces":       {"replay", "--trace", "synthetic,itp"},
		"openb nodes":      {"replay", "--trace", "openb", "--nodes", "4"},
		"mig racks":        {"replay", "--trace", "synthetic-mig", "--racks", "2"},
		"mig one node":     {"replay", "--trace", "synthetic-mig", "--nodes", "1"},
		"mig bad count":    {"replay", "--trace", "synthetic-mig:0"},
		"bad estimates":    {"replay", "--estimates", "inflated:0"},
		"bad experiment":   {"replay", "--experiment", "nope"},
		"fgd needs openb":  {"replay", "--experiment", "fgd"},
		"fgd bad policy":   {"replay", "--experiment", "fgd", "--trace", "openb", "--policy", "easy"},
		"positional":       {"replay", "extra"},
		"bad progress":     {"replay", "--progress", "maybe"},
		"parallel":         {"replay", "--parallel", "0"},
		"not an int":       {"replay", "--nodes", "many"},
		"compare no exper": {"compare", "--experiment", "fgd"},
		"via no exper":     {"replay", "--via", "engine"},
		"via bad":          {"replay", "--experiment", "fgd", "--trace", "openb", "--via", "bus"},
		"via clustering":   {"replay", "--experiment", "fgd", "--trace", "openb", "--via", "engine", "--policy", "clustering"},
		"models no exper":  {"replay", "--gpu-models", "third"},
		"models bad":       {"replay", "--experiment", "fgd", "--trace", "openb", "--gpu-models", "quarter"},
		"bad placement":    {"replay", "--placement", "berth,spread"},
		"placement twice":  {"replay", "--placement", "blind,blind"},
		"bad price":        {"replay", "--price", "rack=-1"},
		"price key":        {"replay", "--price", "node=0.1"},
		"price not number": {"replay", "--price", "rack=x"},
		"price for fgd":    {"replay", "--experiment", "fgd", "--trace", "openb", "--price", "on"},
		"compare price":    {"compare", "--price", "on"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		assert.Equal(t, 2, code, "%s: stderr %q", name, stderr)
		assert.Empty(t, stdout, name)
		assert.NotEmpty(t, stderr, name)
		assert.NotContains(t, stderr, "panic", name)
	}
	code, _, stderr := runCLI(t, "replay", "--seeds", "9-3")
	require.Equal(t, 2, code)
	assert.Equal(t, "berth replay: --seeds \"9-3\": \"9-3\" is not a range lo-hi with lo <= hi\n", stderr)
}

func TestHelp(t *testing.T) {
	code, stdout, _ := runCLI(t, "help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "berth replay")
	code, _, stderr := runCLI(t, "replay", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "-gpus-per-node")
	assert.Contains(t, stderr, "synthetic-mig[:N]")
	// Help is wrapped to 99 columns: compare with the line breaks removed.
	assert.Contains(t, strings.Join(strings.Fields(stderr), " "), "openb[:DIR] (the openb pods as a time trace")
}

func TestMissingTraceFile(t *testing.T) {
	code, _, stderr := runCLI(t, "replay", "--trace", "itp:"+filepath.Join(t.TempDir(), "none.csv"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "none.csv")
}

func TestReplayJSON(t *testing.T) {
	code, stdout, stderr := runCLI(t, "replay", "--trace", "synthetic:80", "--nodes", "4", "--format", "json")
	require.Equal(t, 0, code, stderr)
	var rows []metrics.Result
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 4)
	for i, p := range []string{"fifo", "easy", "conservative", "fairshare"} {
		assert.Equal(t, p, rows[i].Policy)
		assert.Equal(t, 80, rows[i].Jobs)
		assert.Equal(t, 80, rows[i].Finished)
		assert.Positive(t, rows[i].Utilization)
	}
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw))
	for _, k := range []string{"policy", "utilization", "avg_wait_s", "p95_wait_s", "avg_jct_s", "avg_bsld", "makespan_s", "preemptions"} {
		assert.Contains(t, raw[0], k)
	}
}

func TestReplayTableAndCSV(t *testing.T) {
	code, stdout, stderr := runCLI(t, "replay", "--trace", "synthetic:60", "--nodes", "4", "--policy", "fifo,easy", "--seeds", "1-2", "--estimates", "inflated:2")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "synthetic60: 60 jobs on 4 nodes x 8 GPUs (32), estimates inflated:2, seeds 1-2 (means over 2)")
	lines := strings.Split(stdout, "\n")
	var policies []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "fifo" || f[0] == "easy") {
			policies = append(policies, f[0])
		}
	}
	assert.Equal(t, []string{"fifo", "easy"}, policies)
	for _, l := range lines {
		assert.LessOrEqual(t, len(l), 120, "the table fits 120 columns: %q", l)
	}

	code, stdout, stderr = runCLI(t, "compare", "--trace", "synthetic:40", "--trace", "synthetic:50", "--nodes", "4", "--policy", "easy", "--format", "csv")
	require.Equal(t, 0, code, stderr)
	recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	assert.Equal(t, append(append([]string{"workload"}, metrics.CSVHeader()...), "dropped", "dropped_reasons"), recs[0])
	assert.Equal(t, []string{"synthetic40", "easy"}, recs[1][:2])
	assert.Equal(t, []string{"synthetic50", "easy"}, recs[2][:2])
}

func TestCompareJSONAndPlots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plots")
	code, stdout, stderr := runCLI(t, "compare", "--trace", "synthetic:40,synthetic:30", "--nodes", "2", "--racks", "2",
		"--policy", "fifo,fairshare", "--format", "json", "--out", dir)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 4)
	assert.Equal(t, "synthetic40", rows[0]["workload"])
	assert.Equal(t, "fairshare", rows[1]["policy"])
	assert.Equal(t, "synthetic30", rows[3]["workload"])
	for _, w := range []string{"synthetic40", "synthetic30"} {
		for _, p := range []string{"utilization", "queue", "wait-cdf"} {
			for _, ext := range []string{".png", ".svg"} {
				fi, err := os.Stat(filepath.Join(dir, w+"-"+p+ext))
				require.NoError(t, err)
				assert.Positive(t, fi.Size())
			}
		}
	}
}

func TestFGDExperiment(t *testing.T) {
	tracetest.Path(t, workload.OpenbPods)
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "replay", "--experiment", "fgd", "--trace", "openb", "--policy", "random,bestfit", "--seeds", "42", "--format", "json", "--out", dir)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]float64
	var named []struct {
		Policy string `json:"policy"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &named))
	require.NoError(t, json.Unmarshal([]byte(strings.ReplaceAll(strings.ReplaceAll(stdout, `"random"`, "0"), `"bestfit"`, "1")), &rows))
	require.Len(t, rows, 2)
	assert.Equal(t, "random", named[0].Policy)
	assert.Equal(t, "bestfit", named[1].Policy)
	for _, r := range rows {
		for _, k := range []string{"alloc_pct_at_100", "alloc_pct_at_130", "alloc_pct_std_at_130"} {
			assert.Contains(t, r, k)
		}
		assert.Greater(t, r["alloc_pct_at_130"], 80.0)
	}
	assert.Greater(t, rows[1]["alloc_pct_at_130"], rows[0]["alloc_pct_at_130"], "bestfit beats random")
	_, err := os.Stat(filepath.Join(dir, "fgd-alloc.svg"))
	require.NoError(t, err)
}

// Each duration column of the table uses one format, chosen by its
// largest value.
func TestDurationColumn(t *testing.T) {
	var short, long durCol
	for _, d := range []time.Duration{45 * time.Second, 3*time.Hour + 2*time.Minute + 1500*time.Millisecond} {
		short.see(d)
	}
	assert.Equal(t, "0:00:45", short.format(45*time.Second))
	assert.Equal(t, "3:02:02", short.format(3*time.Hour+2*time.Minute+1500*time.Millisecond))
	assert.Equal(t, "49:00:00", short.format(49*time.Hour), "a value past the column's largest keeps its format")
	long.see(45 * time.Second)
	long.see(50 * time.Hour)
	assert.Equal(t, "0d00h", long.format(45*time.Second))
	assert.Equal(t, "2d02h", long.format(50*time.Hour))
	assert.Equal(t, "12d04h", long.format(12*24*time.Hour+3*time.Hour+40*time.Minute))
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	assert.False(t, progressOn("auto", &buf), "a buffer is not a terminal")
	assert.True(t, progressOn("on", &buf))
	assert.False(t, progressOn("off", os.Stderr))
	drawBar(&buf, "jobs", 50, 200, 3*time.Second)
	assert.Equal(t, "\r[=======                       ]  25% 50/200 jobs 3s, ETA 9s ", buf.String())
	buf.Reset()
	drawBar(&buf, "runs", 0, 4, time.Second)
	assert.Equal(t, "\r[                              ]   0% 0/4 runs 1s, ETA ? ", buf.String())
	buf.Reset()
	// Replays: the count is in replays; the share and the ETA in jobs. A
	// replay that ended counts all its jobs (some never finish: dropped).
	b := newReplayBar([]int64{100, 100, 200})
	b.progress(0, 90)
	b.end(0)
	b.progress(1, 50)
	b.end(1)
	b.end(1)
	b.draw(&buf, 4*time.Second)
	assert.Equal(t, "\r[===============               ]  50% 2/3 replays (200/400 jobs) 4s, ETA 4s ", buf.String())
	buf.Reset()
	b.progress(2, 100)
	b.draw(&buf, 6*time.Second)
	assert.Equal(t, "\r[======================        ]  75% 2/3 replays (300/400 jobs) 6s, ETA 2s ", buf.String())
	buf.Reset()
	p := startProgress(&buf, true, "jobs", 10, func() int64 { return 5 })
	p.stop() // before the first second: nothing drawn
	p.stop()
	assert.Empty(t, buf.String())
}

// synthetic-mig: fractional jobs on MIG nodes split into 1g instances; the
// table says how many MIG re-layouts were decided and applied, and
// utilization counts GPU milli.
func TestReplaySyntheticMIG(t *testing.T) {
	code, stdout, stderr := runCLI(t, "replay", "--trace", "synthetic-mig:120", "--nodes", "2", "--policy", "fifo,easy")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "synthetic-mig120: 157 jobs on 2 nodes (16 GPUs, 8 in MIG mode), estimates exact, seeds 42")
	assert.Contains(t, stdout, "fractional jobs (first seed's run):")
	// Long lines are wrapped: match with the line breaks removed.
	assert.Regexp(t, `easy: 120 fractional jobs; 120 on MIG instances, 0 on shares \(at most 0 on one GPU\); MIG re-layouts decided ([1-9]\d*), applied ([1-9]\d*), refused 0`,
		strings.Join(strings.Fields(stdout), " "))
	for _, l := range strings.Split(stdout, "\n") {
		assert.LessOrEqual(t, len(l), 120, "the replay output fits 120 columns: %q", l)
	}
	assert.Contains(t, stdout, "util: GPU-milli-seconds held / available")
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "fifo" || f[0] == "easy") {
			assert.Equal(t, "157/157", f[len(f)-1], l)
		}
	}
	code, stdout, stderr = runCLI(t, "replay", "--trace", "synthetic-mig:120", "--nodes", "2", "--policy", "easy", "--format", "json")
	require.Equal(t, 0, code, stderr)
	var rows []metrics.Result
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 1)
	assert.Equal(t, 157, rows[0].Finished)
	assert.Positive(t, rows[0].Utilization)
}

func TestReplayOpenbTrace(t *testing.T) {
	tracetest.Path(t, workload.OpenbPods)
	if !raceEnabled() && !testing.Short() {
		// The whole trace (about 1 s a policy; the race detector makes it
		// 13 s, so it runs a cut below instead).
		code, stdout, stderr := runCLI(t, "replay", "--trace", "openb", "--policy", "easy")
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "openb: 6203 jobs on 1213 nodes (6212 GPUs, shared on demand)")
		assert.Contains(t, stdout, "openb: 1949 jobs left out: 1052 no GPUs, 897 no runtime")
		assert.Contains(t, stdout, "easy: 2573 fractional jobs; 0 on MIG instances, 2573 on shares")
		assert.Contains(t, stdout, "6203/6203")
	}

	// A directory holding the node list and the first 600 pods.
	dir := t.TempDir()
	for _, rel := range []string{workload.OpenbPods, workload.OpenbNodes} {
		b, err := os.ReadFile(tracetest.Path(t, rel))
		require.NoError(t, err)
		if rel == workload.OpenbPods {
			lines := strings.SplitAfter(string(b), "\n")
			b = []byte(strings.Join(lines[:601], ""))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(rel)), b, 0o644))
	}
	code, stdout, stderr := runCLI(t, "replay", "--trace", "openb:"+dir, "--policy", "fifo")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `fifo: \d+ fractional jobs; 0 on MIG instances, \d+ on shares`, stdout)
	assert.Regexp(t, `jobs left out: \d+ no runtime, \d+ no GPUs`, stdout)
	code, stdout, stderr = runCLI(t, "replay", "--trace", "openb:"+dir, "--policy", "fifo", "--format", "json")
	require.Equal(t, 0, code, stderr)
	var rows []struct {
		Dropped int            `json:"dropped"`
		Reasons map[string]int `json:"dropped_reasons"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 1)
	sum := 0
	for _, n := range rows[0].Reasons {
		sum += n
	}
	assert.Positive(t, rows[0].Dropped)
	assert.Equal(t, rows[0].Dropped, sum, "every dropped job has its reason")
	code, _, stderr = runCLI(t, "replay", "--trace", "openb:"+filepath.Join(dir, "none"), "--policy", "fifo")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "none")
}

// raceEnabled reports whether the test binary runs with the race detector.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// An --out that cannot be written fails at once, before any replay runs.
func TestReplayOutUnwritableFailsEarly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	code, stdout, stderr := runCLI(t, "replay", "--trace", "synthetic:80", "--nodes", "4", "--out", filepath.Join(file, "plots"))
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "--out")
	assert.Empty(t, stdout, "no replay ran")
}

func TestReplayPlacementsAndPrice(t *testing.T) {
	args := []string{"replay", "--trace", "synthetic:120", "--nodes", "8", "--racks", "4", "--policy", "easy",
		"--placement", "berth,blind,kueue", "--price", "rack=0.5,block=0"}
	code, stdout, stderr := runCLI(t, args...)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"easy/berth", "easy/blind", "easy/kueue",
		"price of placement: runtime x (1 + 0.5 x extra racks + 0 x extra blocks)", "runs on more than one rack"} {
		assert.Contains(t, stdout, want)
	}
	for _, l := range strings.Split(stdout, "\n") {
		assert.LessOrEqual(t, len(l), 120, "the table fits 120 columns: %q", l)
	}
	code, stdout, stderr = runCLI(t, append(args, "--format", "json")...)
	require.Equal(t, 0, code, stderr)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw))
	require.Len(t, raw, 3)
	for i, p := range []string{"berth", "blind", "kueue"} {
		assert.Equal(t, p, raw[i]["placement"])
		assert.Equal(t, "easy", raw[i]["policy"])
	}
	code, stdout, stderr = runCLI(t, append(args, "--format", "csv")...)
	require.Equal(t, 0, code, stderr)
	recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 4)
	assert.Equal(t, "placement", recs[0][len(recs[0])-1])
	assert.Equal(t, "kueue", recs[3][len(recs[3])-1])
}
