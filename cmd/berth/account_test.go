package main

import (
	"encoding/csv"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAccountFromReplay(t *testing.T) {
	db := filepath.Join(t.TempDir(), "acct.db")
	code, _, stderr := runCLI(t, "replay", "--trace", "synthetic:120", "--nodes", "4", "--policy", "easy",
		"--accounting", db, "--progress", "off", "--format", "csv")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "accounting records in "+db)

	code, out, stderr := runCLI(t, "account", "--db", db, "--by", "queue", "--format", "json")
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.NotEmpty(t, rows)
	var sum float64
	jobs := 0
	for _, r := range rows {
		require.Contains(t, r, "queue")
		require.Contains(t, r, "gpu_hours")
		sum += r["gpu_hours"].(float64)
		jobs += int(r["jobs"].(float64))
	}
	assert.Positive(t, sum)
	assert.Equal(t, 120, jobs)

	code, out, stderr = runCLI(t, "account", "--db", db, "--by", "user", "--format", "csv", "--since", "2026-01-01", "--until", "2030-01-01T00:00:00Z")
	require.Equal(t, 0, code, stderr)
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, []string{"user", "gpu_hours", "jobs", "runs"}, recs[0])

	code, out, stderr = runCLI(t, "account", "--db", db, "--by", "partition")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "total")

	code, out, stderr = runCLI(t, "audit", "--db", db, "j001")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "job j001: finished")
	assert.Contains(t, out, "placed")

	code, out, stderr = runCLI(t, "audit", "--db", db, "--format", "json", "j001", "j002")
	require.Equal(t, 0, code, stderr)
	var audits []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &audits))
	require.Len(t, audits, 2)
	assert.Equal(t, "j002", audits[1]["job"])

	code, _, stderr = runCLI(t, "audit", "--db", db, "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no record of job")
}

func TestAccountUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"account"},
		{"account", "--db", "x.db", "--by", "colour"},
		{"account", "--db", "x.db", "--format", "xml"},
		{"account", "--db", "x.db", "--since", "yesterday"},
		{"account", "--db", "x.db", "--since", "2026-02-01", "--until", "2026-01-01"},
		{"account", "--db", "x.db", "extra"},
		{"audit", "--db", "x.db"},
		{"audit", "--db", "x.db", "--format", "csv", "j1"},
		{"replay", "--accounting", filepath.Join(dir, "a.db")}, // four policies
		{"replay", "--accounting", filepath.Join(dir, "b.db"), "--policy", "easy", "--seeds", "1-2"},
		{"compare", "--accounting", filepath.Join(dir, "c.db")},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
	}
	code, _, stderr := runCLI(t, "account", "--db", filepath.Join(dir, "missing.db"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "missing.db")
	assert.NoFileExists(t, filepath.Join(dir, "missing.db"), "account never creates a database")
}
