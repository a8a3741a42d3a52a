package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/workload"
)

// replayLog runs cfg and returns its result and every cycle's decisions
// and outcome as JSON, one line per cycle.
func replayLog(t *testing.T, cfg Config) (Result, []byte) {
	t.Helper()
	var log bytes.Buffer
	enc := json.NewEncoder(&log)
	cfg.Observe = func(c backends.Cycle) {
		require.NoError(t, enc.Encode(struct {
			Ready   any
			Outcome any
		}{c.Ready, c.Outcome}))
	}
	r, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	return r, log.Bytes()
}

// TestReplayCachesOff checks that the engine's caches change no
// decision: a replay with every cache off (Config.DisableCaches) gives
// byte-identical cycles (binds, reservations, pending reasons, estimates)
// and the same result, for every policy on a synthetic workload and for
// EASY and fair share on the first jobs of ITP cluster04.
func TestReplayCachesOff(t *testing.T) {
	same := func(t *testing.T, cfg Config) {
		r1, log1 := replayLog(t, cfg)
		cfg.DisableCaches = true
		r2, log2 := replayLog(t, cfg)
		require.NotEmpty(t, log1)
		require.True(t, bytes.Equal(log1, log2), "cycles differ with caches off")
		r1.Violations, r2.Violations = nil, nil
		require.Equal(t, r1, r2)
		require.Empty(t, r2.Violations)
	}
	jobs := replaySynthetic(t, 250, 128)
	for _, p := range Policies() {
		t.Run("synthetic/"+p, func(t *testing.T) {
			same(t, Config{Workload: "syn", Jobs: jobs, Cluster: Cluster{Nodes: 16, GPUsPerNode: 8, Racks: 2}, Policy: p, EstimateFactor: 1})
		})
	}
	itp := replayTrace(t, workload.KindITP)
	n := 600
	if testing.Short() || replayRace() {
		n = 250
	}
	for _, p := range []string{"easy", "fairshare"} {
		t.Run("itp04/"+p, func(t *testing.T) {
			// 4 nodes: a backlog builds, so resumed walks and memos matter.
			same(t, Config{Workload: "itp04", Jobs: itp[:min(n, len(itp))], Cluster: Cluster{Nodes: 4, GPUsPerNode: 8, Racks: 2}, Policy: p, EstimateFactor: 1})
		})
	}
}
