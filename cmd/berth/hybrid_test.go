package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHybridUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"policy":    {"replay", "--experiment", "hybrid", "--policy", "easy"},
		"swf":       {"replay", "--experiment", "hybrid", "--trace", "swf"},
		"synth N":   {"replay", "--experiment", "hybrid", "--trace", "synthetic:10"},
		"compare":   {"compare", "--experiment", "hybrid"},
		"via":       {"replay", "--experiment", "hybrid", "--via", "engine"},
		"one node":  {"replay", "--experiment", "hybrid", "--nodes", "1"},
		"gpu model": {"replay", "--experiment", "hybrid", "--gpu-models", "third"},
		"preempt":   {"replay", "--preempt-on-reclaim"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		assert.NotEqual(t, 0, code, "%s: stderr %q", name, stderr)
		assert.Empty(t, stdout, name)
		assert.NotContains(t, stderr, "panic", name)
	}
}

// The built-in workload: one JSON row per variant with the issue's
// fields, and the plots.
func TestHybridJSON(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "replay", "--experiment", "hybrid", "--format", "json", "--progress", "off", "--out", dir)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 4)
	for i, v := range []string{"dedicated", "static", "federated", "colocated"} {
		assert.Equal(t, v, rows[i]["variant"])
		for _, f := range []string{"utilization", "training_avg_wait_s", "inference_shortfall_replica_min", "node_moves"} {
			assert.Contains(t, rows[i], f)
		}
		u := rows[i]["utilization"].(float64)
		assert.True(t, u > 0 && u <= 1, "%s utilization %v", v, u)
	}
	assert.Zero(t, rows[0]["node_moves"])
	assert.Positive(t, rows[2]["node_moves"])
	for _, f := range []string{"hybrid-utilization.png", "hybrid-inference.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err)
	}
}

// --preempt-on-reclaim: the federated row reports its preemptions (and
// the work they lost); JSON carries training_preemptions on every row.
func TestHybridPreemptOnReclaim(t *testing.T) {
	code, stdout, stderr := runCLI(t, "replay", "--experiment", "hybrid", "--format", "json", "--progress", "off",
		"--nodes", "20", "--preempt-on-reclaim")
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 4)
	for _, r := range rows {
		assert.Contains(t, r, "training_preemptions")
		assert.Contains(t, r, "training_lost_gpu_h")
		if r["variant"] != "federated" {
			assert.Zero(t, r["training_preemptions"], r["variant"])
		}
	}
}
