package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCapacityUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"policy":      {"replay", "--experiment", "capacity", "--policy", "easy"},
		"swf":         {"replay", "--experiment", "capacity", "--trace", "swf"},
		"seeds":       {"replay", "--experiment", "capacity", "--seeds", "1-3"},
		"racks":       {"replay", "--experiment", "capacity", "--racks", "2"},
		"one node":    {"replay", "--experiment", "capacity", "--nodes", "1"},
		"wait":        {"replay", "--experiment", "capacity", "--training-p95-wait", "-1m"},
		"shortfall":   {"replay", "--experiment", "capacity", "--inference-shortfall-pct", "101"},
		"demand key":  {"replay", "--experiment", "capacity", "--demand", "color=1"},
		"demand num":  {"replay", "--experiment", "capacity", "--demand", "load=x"},
		"demand boot": {"replay", "--experiment", "capacity", "--demand", "boot=25h"},
		"trough":      {"replay", "--experiment", "capacity", "--demand", "peak=0.2,trough=0.3"},
		"itp length":  {"replay", "--experiment", "capacity", "--trace", "itp", "--demand", "length=2"},
		"not here":    {"replay", "--training-p95-wait", "30m"},
		"hybrid":      {"replay", "--experiment", "hybrid", "--demand", "load=0.6"},
		"compare":     {"compare", "--experiment", "capacity"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		assert.Equal(t, 2, code, "%s: stderr %q", name, stderr)
		assert.Empty(t, stdout, name)
		assert.NotContains(t, stderr, "panic", name)
	}
}

// A small demand: one JSON row per variant with the contract's fields,
// and the plots.
func TestCapacityJSON(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "replay", "--experiment", "capacity", "--format", "json", "--progress", "off", "--out", dir,
		"--nodes", "10", "--demand", "days=0.5", "--training-p95-wait", "45m", "--inference-shortfall-pct", "2")
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	want := []string{"dedicated", "dedicated-sized", "static", "federated", "colocated", "dedicated+autoscale", "static+autoscale",
		"federated+autoscale", "colocated+autoscale", "federated+autoscale-podbypod"}
	require.Len(t, rows, len(want))
	for i, v := range want {
		assert.Equal(t, v, rows[i]["variant"])
		for _, f := range []string{"variant", "gpus", "gpu_hours_paid", "spend_vs_dedicated_pct", "utilization_at_size", "training_p95_wait_s",
			"inference_shortfall_pct", "node_moves", "scale_ups", "scale_downs"} {
			assert.Contains(t, rows[i], f, v)
		}
		assert.Equal(t, true, rows[i]["met"], v)
		assert.LessOrEqual(t, rows[i]["training_p95_wait_s"].(float64), 45*60.0, v)
		assert.LessOrEqual(t, rows[i]["inference_shortfall_pct"].(float64), 2.0, v)
	}
	assert.Zero(t, rows[0]["spend_vs_dedicated_pct"])
	for _, f := range []string{"capacity-spend.png", "capacity-spend.svg", "capacity-utilization.png", "capacity-utilization.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err)
	}
	// The table names the levels.
	code, stdout, stderr = runCLI(t, "replay", "--experiment", "capacity", "--progress", "off", "--nodes", "10", "--demand", "days=0.25")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "training p95 wait <= 1h0m0s, inference shortfall <= 1%")
	assert.Contains(t, stdout, "federated+autoscale-podbypod")
}
