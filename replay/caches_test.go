package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/workload"
)

// replayLog runs cfg and returns its result, every cycle's decisions and
// outcome as JSON (one line per cycle, the pending statuses left out), and
// each cycle's pending statuses as JSON lines with the count of jobs not
// walked (LazyPending).
func replayLog(t *testing.T, cfg Config) (r Result, decisions []byte, pending [][]string, unwalked []int) {
	t.Helper()
	var log bytes.Buffer
	enc := json.NewEncoder(&log)
	cfg.Observe = func(c backends.Cycle) {
		rd := c.Ready
		var ps []string
		for _, p := range rd.Pending {
			b, err := json.Marshal(p)
			require.NoError(t, err)
			ps = append(ps, string(b))
		}
		pending, unwalked = append(pending, ps), append(unwalked, rd.Unwalked)
		rd.Pending, rd.Unwalked = nil, 0
		require.NoError(t, enc.Encode(struct {
			Ready   any
			Outcome any
		}{rd, c.Outcome}))
	}
	r, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	return r, log.Bytes(), pending, unwalked
}

// TestReplayCachesOff checks that the engine's caches change no
// decision: a replay with every cache off (Config.DisableCaches) gives
// byte-identical cycles (binds, reservations, pending reasons, estimates)
// and the same result, for every policy on a synthetic workload and for
// EASY and fair share on the first jobs of ITP cluster04. The walks that
// stop early (engine.Config.LazyPending, on by default in replays) change
// no decision either, and the statuses they give are the first ones of
// the full list, the rest counted in Ready.Unwalked; with AllPending the
// lists are whole and equal.
func TestReplayCachesOff(t *testing.T) {
	same := func(t *testing.T, cfg Config) {
		r1, log1, pend1, unw1 := replayLog(t, cfg)
		cfg.AllPending = true
		r3, log3, pend3, unw3 := replayLog(t, cfg)
		cfg.DisableCaches = true
		r2, log2, pend2, _ := replayLog(t, cfg)
		require.NotEmpty(t, log1)
		require.True(t, bytes.Equal(log1, log2), "cycles differ with caches off")
		require.True(t, bytes.Equal(log3, log2), "cycles differ with every job walked")
		require.Equal(t, pend2, pend3, "statuses differ with caches off")
		require.Len(t, pend1, len(pend2))
		cut := 0
		for i := range pend1 {
			require.Zero(t, unw3[i])
			require.True(t, slices.Equal(pend2[i][:len(pend1[i])], pend1[i]), "cycle %d: the statuses before the cut differ", i)
			require.Equal(t, len(pend2[i]), len(pend1[i])+unw1[i], "cycle %d: statuses and unwalked jobs do not add up", i)
			if unw1[i] > 0 {
				cut++
			}
		}
		t.Logf("%d of %d cycles stopped their walk early", cut, len(pend1))
		r1.Violations, r2.Violations, r3.Violations = nil, nil, nil
		require.Equal(t, r1, r2)
		require.Equal(t, r3, r2)
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
