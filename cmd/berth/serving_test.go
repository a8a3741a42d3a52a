package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServingUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"policy":    {"replay", "--experiment", "serving", "--policy", "easy"},
		"policy 2":  {"replay", "--experiment", "serving", "--policy", "colocation,fgd"},
		"swf":       {"replay", "--experiment", "serving", "--trace", "swf"},
		"synth N":   {"replay", "--experiment", "serving", "--trace", "synthetic:10"},
		"openb":     {"replay", "--experiment", "serving", "--trace", "openb"},
		"compare":   {"compare", "--experiment", "serving"},
		"via":       {"replay", "--experiment", "serving", "--via", "engine"},
		"one node":  {"replay", "--experiment", "serving", "--nodes", "1"},
		"racks":     {"replay", "--experiment", "serving", "--racks", "2"},
		"preempt":   {"replay", "--experiment", "serving", "--preempt-on-reclaim"},
		"gpu model": {"replay", "--experiment", "serving", "--gpu-models", "third"},
		"unknown":   {"replay", "--experiment", "servng"},
		"estimates": {"replay", "--experiment", "serving", "--estimates", "trace"},
		"price":     {"replay", "--experiment", "serving", "--price", "on"},
		"placement": {"replay", "--experiment", "serving", "--placement", "blind"},
		"shard":     {"replay", "--experiment", "serving", "--shard", "1/2"},
		"format":    {"replay", "--experiment", "serving", "--format", "xml"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		assert.NotEqual(t, 0, code, "%s: stderr %q", name, stderr)
		assert.Empty(t, stdout, name)
		assert.NotContains(t, stderr, "panic", name)
	}
}

// The default run: one JSON row per policy, in order, with the issue's
// fields and a policy field, and the plots.
func TestServingJSON(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "replay", "--experiment", "serving", "--format", "json", "--progress", "off", "--out", dir)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 3)
	for i, p := range []string{"no-colocation", "colocation", "colocation-packing"} {
		assert.Equal(t, p, rows[i]["policy"])
		for _, f := range []string{"utilization", "training_avg_wait_s", "inference_shortfall_replica_min", "scale_up_latency_cycles"} {
			assert.Contains(t, rows[i], f)
		}
		u := rows[i]["utilization"].(float64)
		assert.True(t, u > 0 && u <= 1, "%s utilization %v", p, u)
	}
	assert.Zero(t, rows[0]["reclaimed"], "no co-location reclaims nothing")
	for _, f := range []string{"serving-utilization.png", "serving-replicas.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err)
	}
}

// --policy picks the rows; the same seed gives the same output.
func TestServingPolicyDeterministic(t *testing.T) {
	args := []string{"replay", "--experiment", "serving", "--format", "csv", "--progress", "off", "--policy", "colocation", "--nodes", "8", "--seeds", "3"}
	code, first, stderr := runCLI(t, args...)
	require.Equal(t, 0, code, stderr)
	code, second, stderr := runCLI(t, args...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, first, second)
	assert.Contains(t, first, "policy,utilization,training_avg_wait_s,inference_shortfall_replica_min,scale_up_latency_cycles")
	assert.Contains(t, first, "\ncolocation,")
	assert.NotContains(t, first, "no-colocation")
	// Nodes of 4 GPUs: the shapes wider than a node are left out.
	code, _, stderr = runCLI(t, "replay", "--experiment", "serving", "--format", "json", "--progress", "off", "--policy", "colocation-packing",
		"--nodes", "8", "--gpus-per-node", "4")
	require.Equal(t, 0, code, stderr)
}
