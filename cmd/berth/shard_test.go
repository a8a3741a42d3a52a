package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestShardMerge: the shards of a sweep, merged, print exactly what the
// unsharded sweep prints (JSON and CSV), for replay and compare, whatever
// the number of shards (more shards than runs too).
func TestShardMerge(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"replay", []string{"replay", "--trace", "synthetic:120", "--nodes", "8", "--policy", "fifo,easy,fairshare", "--seeds", "1-3", "--progress", "off"}},
		{"compare", []string{"compare", "--trace", "synthetic:100,synthetic:80", "--nodes", "8", "--policy", "easy", "--seeds", "5,6", "--progress", "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, format := range []string{"json", "csv"} {
				code, want, stderr := runCLI(t, append(tc.args, "--format", format)...)
				require.Zero(t, code, stderr)
				for _, n := range []int{1, 4, 13} {
					dir := t.TempDir()
					var files []string
					for k := 1; k <= n; k++ {
						code, doc, stderr := runCLI(t, append(tc.args, "--shard", strconv.Itoa(k)+"/"+strconv.Itoa(n))...)
						require.Zero(t, code, stderr)
						f := filepath.Join(dir, "shard-"+strconv.Itoa(k)+".json")
						require.NoError(t, os.WriteFile(f, []byte(doc), 0o644))
						files = append(files, f)
					}
					code, got, stderr := runCLI(t, append([]string{"merge", "--format", format}, files...)...)
					require.Zero(t, code, stderr)
					assert.Equal(t, want, got, "%s, %d shards", format, n)
					if n > 1 {
						// A missing shard, or one given twice, is an error.
						code, _, stderr = runCLI(t, append([]string{"merge"}, files[1:]...)...)
						assert.Equal(t, 1, code)
						assert.Contains(t, stderr, "in no shard file")
						code, _, stderr = runCLI(t, append([]string{"merge"}, append(files, files[0])...)...)
						assert.Equal(t, 1, code)
						assert.Contains(t, stderr, "two shard files")
					}
				}
			}
		})
	}
}

func TestShardFlags(t *testing.T) {
	for _, s := range []string{"0/3", "4/3", "1", "a/b", "1/0", "-1/2", "1/20000"} {
		code, _, stderr := runCLI(t, "replay", "--shard", s)
		assert.Equal(t, 2, code, s)
		assert.Contains(t, stderr, "--shard", s)
	}
	code, _, stderr := runCLI(t, "replay", "--shard", "1/2", "--out", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--shard")
	code, _, _ = runCLI(t, "merge")
	assert.Equal(t, 2, code)
	f := filepath.Join(t.TempDir(), "x.json")
	require.NoError(t, os.WriteFile(f, []byte(`{"rows": []}`), 0o644))
	code, _, stderr = runCLI(t, "merge", f)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "not a shard document")
}

// TestSweepManifest checks examples/sweep/indexed-job.yaml and runs its
// pods as the Indexed Job would (what run-local.sh does, in process): an
// Indexed Job whose completions and parallelism equal SHARDS, whose berth
// command line, with the shell's JOB_COMPLETION_INDEX, SHARDS and TRACE
// substituted (TRACE: the month's first three minutes, 228 jobs, instead
// of the whole month), runs one shard per completion index; the shards'
// documents merged print exactly what the same sweep without --shard
// prints.
func TestSweepManifest(t *testing.T) {
	b, err := os.ReadFile("../../examples/sweep/indexed-job.yaml")
	require.NoError(t, err)
	var job struct {
		Kind string
		Spec struct {
			CompletionMode string `yaml:"completionMode"`
			Completions    int
			Parallelism    int
			Template       struct {
				Spec struct {
					Containers []struct {
						Env  []struct{ Name, Value string }
						Args []string
					}
				}
			}
		}
	}
	require.NoError(t, yaml.NewDecoder(bytes.NewReader(b)).Decode(&job))
	assert.Equal(t, "Job", job.Kind)
	assert.Equal(t, "Indexed", job.Spec.CompletionMode)
	assert.Equal(t, job.Spec.Completions, job.Spec.Parallelism)
	c := job.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, strconv.Itoa(job.Spec.Completions), env["SHARDS"])
	assert.Equal(t, "month", env["TRACE"])
	require.Len(t, c.Args, 1)
	cmd, redirect, _ := strings.Cut(c.Args[0], ">")
	assert.Contains(t, redirect, `/results/shard-${JOB_COMPLETION_INDEX}.json`)
	argv := func(trace, shard string) []string {
		s := strings.ReplaceAll(cmd, `"$((JOB_COMPLETION_INDEX + 1))/${SHARDS}"`, shard)
		s = strings.ReplaceAll(s, `"${TRACE}"`, trace)
		require.NotContains(t, s, "$", "a shell variable the test does not substitute")
		f := strings.Fields(s)
		require.Equal(t, "berth", f[0])
		require.Equal(t, "replay", f[1])
		return f[1:]
	}
	o, err := parseOptions(argv(env["TRACE"], "1/"+env["SHARDS"])[1:], io.Discard, false)
	require.NoError(t, err)
	assert.Equal(t, job.Spec.Completions, o.shardN)
	assert.Len(t, o.policies, 6)
	require.Len(t, o.traces, 1)
	assert.Equal(t, 30.0, o.traces[0].days)

	const tiny = "month:0.002"
	dir := t.TempDir()
	var files []string
	for index := range job.Spec.Completions { // JOB_COMPLETION_INDEX
		code, doc, stderr := runCLI(t, argv(tiny, strconv.Itoa(index+1)+"/"+env["SHARDS"])...)
		require.Zero(t, code, stderr)
		f := filepath.Join(dir, "shard-"+strconv.Itoa(index)+".json")
		require.NoError(t, os.WriteFile(f, []byte(doc), 0o644))
		files = append(files, f)
	}
	code, got, stderr := runCLI(t, append([]string{"merge", "--format", "csv"}, files...)...)
	require.Zero(t, code, stderr)
	whole := argv(tiny, "x")
	k := slices.Index(whole, "--shard")
	whole = append(whole[:k:k], whole[k+2:]...)
	code, want, stderr := runCLI(t, append(whole, "--format", "csv")...)
	require.Zero(t, code, stderr)
	assert.Equal(t, want, got)
	assert.Equal(t, 7, strings.Count(got, "\n"), "a header and one row per policy:\n%s", got)
}
