package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

var _ backends.PendingReporter = (*sim.Sim)(nil)

// restartSim is 200 jobs (some preemptible, of four priorities, some
// elastic) on 4 x 8 GPUs, as in issue 18's report.
func restartSim(t *testing.T) *sim.Sim {
	t.Helper()
	s := newSim(t, 4, 8)
	rng := rand.New(rand.NewPCG(18, 18))
	for i := range 200 {
		j := wholeJob(fmt.Sprintf("j%03d", i), time.Duration(rng.IntN(600))*time.Minute, 1+rng.IntN(2), []int{1, 2, 4, 8}[rng.IntN(4)])
		j.Priority = int32(rng.IntN(4))
		run := time.Duration(10+rng.IntN(110)) * time.Minute
		j.RuntimeEstimate, j.RuntimeLimit = run, run+time.Hour
		if rng.IntN(2) == 0 {
			j.Preemptible, j.GracePeriod = true, time.Duration(rng.IntN(3))*5*time.Minute
		}
		if rng.IntN(8) == 0 {
			j.Elastic = queue.Elastic{MinMembers: 1, MaxMembers: j.Request.Groups[0].Members + 1}
		}
		require.NoError(t, s.Submit(j, run))
	}
	return s
}

func restartConfig(s *sim.Sim, store backends.StateStore) backends.RunnerConfig {
	return backends.RunnerConfig{
		Engine: engine.Config{
			Queues:     queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
			Policy:     queue.StrictPriority(),
			Backfill:   engine.BackfillConfig{Mode: engine.BackfillEASY},
			Preemption: engine.PreemptionConfig{Priority: true},
		},
		Backend: s, Clock: s, Store: store, SaveInterval: time.Hour,
	}
}

// runUntil runs a Runner on s until the virtual clock passes stop (zero:
// to the end); it returns the Runner.
func runUntil(t *testing.T, s *sim.Sim, store backends.StateStore, stop time.Time) *backends.Runner {
	t.Helper()
	cfg := restartConfig(s, store)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !stop.IsZero() {
		cfg.Observe = func(backends.Cycle) {
			if !s.Now().Before(stop) {
				cancel()
			}
		}
	}
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	err = r.Run(ctx)
	if stop.IsZero() {
		require.NoError(t, err)
	} else if err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
	return r
}

func finishedCount(s *sim.Sim) int {
	n := 0
	for _, o := range s.Outcomes() {
		if o.Finished {
			n++
		}
	}
	return n
}

// Issue 18, Why 1: a Runner cancelled at t0+5h and a second Runner on the
// same backend. Without a saved state the backend's pending jobs
// (PendingReporter) are submitted again; with a FileStore the engine is
// restored. Either way all 200 jobs finish, and no GPU is booked twice.
func TestRestartLosesNothing(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", withStore), func(t *testing.T) {
			s := restartSim(t)
			var store backends.StateStore
			if withStore {
				store = backends.FileStore{Path: filepath.Join(t.TempDir(), "berth.state")}
			}
			runUntil(t, s, store, t0.Add(5*time.Hour))
			st := s.State(nil)
			require.Positive(t, st.Running)
			require.Less(t, finishedCount(s), 200)
			r2 := runUntil(t, s, store, time.Time{})
			assert.Equal(t, 200, finishedCount(s), "every job finished")
			assert.Empty(t, s.Violations())
			rec := r2.Reconciled()
			assert.Equal(t, withStore, rec.Restored)
			if !withStore {
				assert.NotEmpty(t, rec.Submitted, "pending jobs came from the backend")
				assert.NotEmpty(t, rec.Adopted, "running jobs were adopted")
			} else {
				assert.Empty(t, rec.Adopted, "the restored engine knew the running jobs")
				assert.Empty(t, rec.Submitted)
			}
		})
	}
}

// A Runner stopped and restarted (with a FileStore) at random points makes
// the same decisions as one that never stopped: every job starts and ends
// at the same times.
func TestRestartSameOutcomes(t *testing.T) {
	ref := restartSim(t)
	runUntil(t, ref, nil, time.Time{})
	want := ref.Outcomes()
	rng := rand.New(rand.NewPCG(1, 2))
	const points = 12
	for p := range points {
		s := restartSim(t)
		store := backends.FileStore{Path: filepath.Join(t.TempDir(), "berth.state")}
		// One to three restarts at random times in the first 12 hours.
		var stops []time.Duration
		for range 1 + rng.IntN(3) {
			stops = append(stops, time.Duration(rng.IntN(12*60))*time.Minute)
		}
		last := time.Duration(0)
		for _, d := range stops {
			if d <= last {
				continue
			}
			runUntil(t, s, store, t0.Add(d))
			last = d
		}
		runUntil(t, s, store, time.Time{})
		got := s.Outcomes()
		require.Len(t, got, len(want))
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("point %d (stops %v): job %s: never stopped %+v, restarted %+v", p, stops, want[i].ID, want[i], got[i])
			}
		}
		assert.Empty(t, s.Violations())
	}
}
