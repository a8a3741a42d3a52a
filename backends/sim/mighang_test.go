package sim_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

var _ backends.MIGReporter = (*sim.Sim)(nil)

// migHangSim is the simulator with its first MIG change hanging for ever
// (ignoring its context) until release is closed, or, with commit, made
// by the simulator and then hanging (a call that committed and never
// answered).
type migHangSim struct {
	*sim.Sim
	release chan struct{}
	commit  bool
	calls   atomic.Int64
}

func (h *migHangSim) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	if h.calls.Add(1) > 1 {
		return h.Sim.ApplyMIG(ctx, r)
	}
	if h.commit {
		if err := h.Sim.ApplyMIG(ctx, r); err != nil {
			return err
		}
	}
	<-h.release
	return errors.New("hung MIG change released")
}

// mixedSim is one MIG GPU (seven 1g instances) and two nodes of four
// whole GPUs: "small" (1g) and "big" (3g, which needs a change of the MIG
// GPU) next to 100 one-GPU jobs of 3 minutes arriving every 30 s (the
// whole GPUs always have room).
func mixedSim(t *testing.T) *sim.Sim {
	t.Helper()
	s, err := sim.New(sim.Config{Start: t0, Cluster: topo.Spec{Nodes: []topo.NodeSpec{
		{Name: "m0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g,1g,1g,1g,1g,1g,1g"},
		{Name: "n0", GPUs: 4, GPUModel: "H100"},
		{Name: "n1", GPUs: 4, GPUModel: "H100"},
	}}})
	require.NoError(t, err)
	require.NoError(t, s.Submit(fracJob("small", 0, 1, gang.Group{MIGProfile: "1g.10gb"}), 2*time.Hour))
	require.NoError(t, s.Submit(fracJob("big", time.Minute, 1, gang.Group{MIGProfile: "3g.40gb"}), time.Hour))
	for i := range 100 {
		require.NoError(t, s.Submit(wholeJob(fmt.Sprintf("j%03d", i), time.Duration(i)*30*time.Second, 1, 1), 3*time.Minute))
	}
	return s
}

// runMixed runs s through be until every whole-GPU job has finished and
// returns the starts and the Runner's last view.
func runMixed(t *testing.T, s *sim.Sim, be backends.Backend) (map[string]time.Time, *engine.View, []backends.MIGResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var migs []backends.MIGResult
	r, err := backends.NewRunner(backends.RunnerConfig{
		// Backfill: under strict order a job that waits (for capacity, or
		// for its GPU's change) holds every job behind it.
		Engine: engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, MIG: engine.MIGConfig{RetryBackoff: 10 * time.Minute},
			Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}},
		Backend:     be,
		Clock:       s,
		CallTimeout: 50 * time.Millisecond,
		Observe:     func(c backends.Cycle) { migs = append(migs, c.MIG...) },
	})
	require.NoError(t, err)
	err = r.Run(ctx)
	require.NoError(t, err, "Run ends on its own (the simulation ran out of events)")
	out := map[string]time.Time{}
	for _, o := range s.Outcomes() {
		if o.Started {
			out[o.ID] = o.Start
		}
	}
	assert.Empty(t, s.Violations())
	return out, r.View(), migs
}

// On the simulator's virtual clock a MIG change that hangs for ever
// (wall-clock CallTimeout 50 ms) delays only what waits for that GPU:
// every whole-GPU job starts at its arrival, as in the same run without
// the hang; the loop never waits on the call (it is not called again);
// the 3g job that needed the change waits, and no bind is made on an
// instance the GPU does not have. A ReconcileInterval later the GPU's
// layout, still the old one, gives the change up (failed); after the MIG
// backoff a new change is planned, made, and the 3g job runs.
func TestHungMIGDelaysNoOtherJob(t *testing.T) {
	cs := mixedSim(t)
	clean, _, cleanMIG := runMixed(t, cs, cs)
	require.Len(t, clean, 102)
	require.Len(t, cleanMIG, 1)
	require.NoError(t, cleanMIG[0].Err)

	s := mixedSim(t)
	h := &migHangSim{Sim: s, release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	hung, _, migs := runMixed(t, s, h)
	assert.Equal(t, int64(2), h.calls.Load(), "a timed-out change is not tried again; a new one is, after the backoff")
	require.Len(t, migs, 3, "unknown, given up, the new change")
	assert.True(t, migs[0].Unknown)
	assert.ErrorIs(t, migs[0].Err, backends.ErrCallTimeout)
	assert.False(t, migs[1].Unknown)
	assert.ErrorContains(t, migs[1].Err, "given up")
	assert.Equal(t, migs[0].Change.Seq, migs[1].Change.Seq)
	assert.NoError(t, migs[2].Err)
	assert.Greater(t, migs[2].Change.Seq, migs[0].Change.Seq)
	require.Contains(t, hung, "big")
	assert.GreaterOrEqual(t, hung["big"].Sub(clean["big"]), 10*time.Minute, "big ran after the MIG backoff")
	assert.Equal(t, clean["small"], hung["small"])
	for i := range 100 {
		id := fmt.Sprintf("j%03d", i)
		assert.Equal(t, clean[id], hung[id], "%s starts as without the hang", id)
		assert.Equal(t, t0.Add(30*time.Second*time.Duration(i)), hung[id], "%s starts at its arrival", id)
	}
	assert.Equal(t, 1, s.Stats().MIGApplied, "the hung change was never made")
}

// A MIG change that the backend made but whose call never answers is
// unknown until the backend's layout (MIGReporter) says it was made: then
// the 3g job runs on the new instance.
func TestMIGCommittedAfterTimeout(t *testing.T) {
	s := mixedSim(t)
	h := &migHangSim{Sim: s, release: make(chan struct{}), commit: true}
	t.Cleanup(func() { close(h.release) })
	starts, _, migs := runMixed(t, s, h)
	require.Len(t, migs, 2, "unknown, then applied")
	assert.True(t, migs[0].Unknown)
	assert.NoError(t, migs[1].Err)
	assert.False(t, migs[1].Unknown)
	at, ran := starts["big"]
	require.True(t, ran, "big ran on the new instance")
	assert.Less(t, at.Sub(t0), 10*time.Minute, "after a ReconcileInterval's poll, not a MIG backoff")
	got, _ := s.Layout("m0", 0)
	assert.Equal(t, migs[0].Change.To, got)
	assert.Equal(t, int64(1), h.calls.Load())
}

// countingSim is the simulator counting its ApplyMIG calls (a restarted
// Runner's backend).
type countingSim struct {
	*sim.Sim
	seqs []uint64
}

func (c *countingSim) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	c.seqs = append(c.seqs, r.Seq)
	return c.Sim.ApplyMIG(ctx, r)
}

// A MIG change in flight when the Runner stops (its call timed out) is
// saved, and the restarted Runner reads the GPU's layout for it
// (MIGReporter) instead of calling ApplyMIG again: made (commit): applied,
// and the 3g job runs on the new instance without a second change; not
// made: failed, and a new change (another Seq) is planned after the MIG
// backoff. Never lost, never applied twice.
func TestMIGInFlightSurvivesRestart(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			s := mixedSim(t)
			store := backends.FileStore{Path: filepath.Join(t.TempDir(), "berth.state")}
			h := &migHangSim{Sim: s, release: make(chan struct{}), commit: commit}
			t.Cleanup(func() { close(h.release) })
			cfg := func(be backends.Backend, obs func(backends.Cycle)) backends.RunnerConfig {
				return backends.RunnerConfig{
					Engine: engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
						MIG: engine.MIGConfig{RetryBackoff: 10 * time.Minute}, Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}},
					Backend: be, Clock: s, Store: store, CallTimeout: 50 * time.Millisecond, Observe: obs,
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var first engine.MIGReconfiguration
			r1, err := backends.NewRunner(cfg(h, func(c backends.Cycle) {
				for _, m := range c.MIG {
					if m.Unknown {
						first = m.Change
						cancel()
					}
				}
			}))
			require.NoError(t, err)
			require.ErrorIs(t, r1.Run(ctx), context.Canceled)
			require.NotZero(t, first.Seq, "stopped with the change unknown")
			require.Equal(t, int64(1), h.calls.Load())

			var migs []backends.MIGResult
			c := &countingSim{Sim: s}
			r2, err := backends.NewRunner(cfg(c, func(cy backends.Cycle) { migs = append(migs, cy.MIG...) }))
			require.NoError(t, err)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel2()
			require.NoError(t, r2.Run(ctx2))
			assert.True(t, r2.Reconciled().Restored)
			assert.Empty(t, s.Violations())
			require.NotEmpty(t, migs)
			assert.Equal(t, first.Seq, migs[0].Change.Seq, "the restored change is settled first")
			assert.False(t, migs[0].Unknown)
			var big sim.Outcome
			for _, o := range s.Outcomes() {
				if o.ID == "big" {
					big = o
				}
			}
			assert.True(t, big.Finished, "big ran")
			if commit {
				assert.NoError(t, migs[0].Err)
				assert.Empty(t, c.seqs, "the change made is never applied again")
				assert.Equal(t, 1, s.Stats().MIGApplied)
				return
			}
			assert.Error(t, migs[0].Err)
			require.Len(t, c.seqs, 1, "one new change after the backoff")
			assert.NotEqual(t, first.Seq, c.seqs[0])
			assert.Equal(t, 1, s.Stats().MIGApplied)
		})
	}
}
