package nvml_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// runner drives an engine against the backend until stopped.
type runner struct {
	r    *backends.Runner
	stop context.CancelFunc
	done chan error
	mu   sync.Mutex
	cyc  []backends.Cycle
}

func startRunner(t *testing.T, b *nvml.Backend) *runner {
	t.Helper()
	rn := &runner{done: make(chan error, 1)}
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}, {Name: nvml.DefaultHoldQueue}}},
			BindRetryBackoff: 100 * time.Millisecond,
		},
		Backend: b,
		// Cycles keep coming while nothing happens, so that the
		// outcomes of the last binds are observed (Cycle.Binds).
		TickInterval: 50 * time.Millisecond,
		Observe: func(c backends.Cycle) {
			rn.mu.Lock()
			rn.cyc = append(rn.cyc, c)
			rn.mu.Unlock()
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rn.r, rn.stop = r, cancel
	go func() { rn.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		err := <-rn.done
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	return rn
}

// binds returns the GPUs of every bind of job the backend applied, in
// order. Binds are asynchronous: a cycle issues a bind (Ready.Binds) and a
// later cycle reports its outcome (Cycle.Binds, by run), so a bind counts
// once an outcome says it was applied; one refused, failed or unknown
// does not.
func (rn *runner) binds(job string) [][]int {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	applied := map[uint64]bool{}
	for _, c := range rn.cyc {
		for _, br := range c.Binds {
			if br.Job == job && br.Err == nil && !br.Unknown && !br.Withdrawn {
				applied[br.Run] = true
			}
		}
	}
	var out [][]int
	for _, c := range rn.cyc {
		for _, b := range c.Ready.Binds {
			if b.Job == job && applied[b.Run] {
				var g []int
				for _, m := range b.Members {
					g = append(g, m.GPUs...)
				}
				out = append(out, g)
			}
		}
	}
	return out
}

// The engine schedules real processes on the mock box: jobs that fit run
// at once, the rest wait with a reason, and start when GPUs free up.
//
// Nothing here waits on wall time: a and b run until the test opens their
// gate (they used to sleep 0.5 s, which a loaded machine could outlast
// before c was ever seen waiting), and the binds are read once the
// Runner has observed them. A job's exit can reach the test before the
// Runner's Observe records the cycle that bound it (Observe runs after
// all of the cycle's binds, and c's "true" ends at once): reading binds
// right after the exits once found none for c ("binds of job c nil").
func TestRunnerRunsJobs(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	rn := startRunner(t, f.b)
	ctx := context.Background()
	gate := filepath.Join(t.TempDir(), "gate")
	for _, id := range []string{"a", "b"} {
		require.NoError(t, f.b.Submit(ctx, job(id, 1, 4), sh(`while [ ! -e `+gate+` ]; do sleep 0.01; done`)))
	}
	require.NoError(t, f.b.Submit(ctx, job("c", 1, 8), nvml.Command{Args: []string{"true"}}))
	waitFor(t, "c waits with a reason", func() bool {
		v := rn.r.View()
		return v != nil && slices.ContainsFunc(v.Pending, func(p engine.PendingStatus) bool { return p.Job == "c" && p.Reason != engine.ReasonNone })
	})
	assert.Empty(t, rn.binds("c"), "c bound while a and b hold the GPUs")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	done := map[string]bool{}
	for len(done) < 3 {
		e := f.exits.next(t)
		assert.Equal(t, nvml.ReasonCompleted, e.Reason, e.Job)
		done[e.Job] = true
	}
	waitFor(t, "the binds of a, b and c observed", func() bool {
		return len(rn.binds("a")) == 1 && len(rn.binds("b")) == 1 && len(rn.binds("c")) == 1
	})
	a, b := rn.binds("a"), rn.binds("b")
	require.Len(t, a, 1)
	require.Len(t, b, 1)
	// Each 4-GPU member inside one NUMA half.
	assert.ElementsMatch(t, []int{0, 1, 2, 3}, a[0])
	assert.ElementsMatch(t, []int{4, 5, 6, 7}, b[0])
	assert.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}, rn.binds("c"))
}

// A critical XID mid-run: the engine requeues the job whole and places it
// off the failed GPU, which the hold keeps out of the free set.
func TestRunnerXIDRequeuesOffTheFailedGPU(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	rn := startRunner(t, f.b)
	ctx := context.Background()
	require.NoError(t, f.b.Submit(ctx, job("train", 1, 4), nvml.Command{Args: []string{"sleep", "60"}}))
	waitFor(t, "train bound", func() bool { return len(rn.binds("train")) == 1 })
	first := rn.binds("train")[0]
	bad := first[1]
	f.box.InjectXID(bad, 48) // double-bit ECC XID
	waitFor(t, "train bound again", func() bool { return len(rn.binds("train")) == 2 })
	second := rn.binds("train")[1]
	assert.NotContains(t, second, bad)
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonGPUFailed, e.Reason)
	uuid := f.b.Devices()[bad].UUID
	waitFor(t, "hold running in the engine", func() bool {
		return slices.ContainsFunc(rn.r.View().Running(), func(r engine.RunningJob) bool { return r.Job == nvml.HoldJobID(uuid) })
	})
	require.NoError(t, f.b.Restore(context.Background(), uuid))
	waitFor(t, "hold gone", func() bool {
		return !slices.ContainsFunc(rn.r.View().Running(), func(r engine.RunningJob) bool { return r.Job == nvml.HoldJobID(uuid) })
	})
}

// On a MIG box the engine's instances are created through NVML and the
// jobs see their MIG devices.
func TestRunnerMIGJobs(t *testing.T) {
	box := mustBox(t, "dgxh100")
	box.SetMIGMode(true)
	f := open(t, box, nil)
	startRunner(t, f.b)
	ctx := context.Background()
	for _, id := range []string{"m1", "m2", "m3"} {
		j := job(id, 1, 0)
		j.Request.Groups[0].MIGProfile = "3g.40gb"
		require.NoError(t, f.b.Submit(ctx, j, sh(`echo $CUDA_VISIBLE_DEVICES`)))
	}
	for range 3 {
		e := f.exits.next(t)
		assert.Equal(t, nvml.ReasonCompleted, e.Reason, e.Job)
		assert.Regexp(t, `^MIG-[0-9a-f-]+$`, e.Visible)
		assert.Equal(t, e.Visible+"\n", readFile(t, e.Stdout))
	}
	var n int
	for _, d := range f.b.Devices() {
		n += d.Layout.Len()
	}
	assert.GreaterOrEqual(t, n, 2, "3g instances created")
}

// Instances present at start are adopted: the engine binds a job onto an
// existing instance without creating one.
func TestRunnerUsesAdoptedInstances(t *testing.T) {
	box := mustBox(t, "dgxh100")
	box.SetMIGMode(true)
	for _, d := range box.Devices {
		createGI(t, d, nv.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	}
	creates := 0
	for _, d := range box.Devices {
		sd := d.(*server.Device)
		orig := sd.CreateGpuInstanceWithPlacementFunc
		sd.CreateGpuInstanceWithPlacementFunc = func(info *nv.GpuInstanceProfileInfo, pl *nv.GpuInstancePlacement) (nv.GpuInstance, nv.Return) {
			creates++
			return orig(info, pl)
		}
	}
	f := open(t, box, nil)
	rn := startRunner(t, f.b)
	j := job("uses-3g", 1, 0)
	j.Request.Groups[0].MIGProfile = "3g.40gb"
	require.NoError(t, f.b.Submit(context.Background(), j, sh(`echo $CUDA_VISIBLE_DEVICES`)))
	e := f.exits.next(t)
	assert.Equal(t, nvml.ReasonCompleted, e.Reason)
	assert.Regexp(t, `^MIG-`, e.Visible)
	assert.Zero(t, creates, "the adopted 3g.40gb@4 is used as it is")
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, c := range rn.cyc {
		for _, b := range c.Ready.Binds {
			assert.False(t, b.Members[0].Created)
			assert.Equal(t, uint8(4), b.Members[0].Instance.Start)
		}
	}
}

// lateMIGBackend is the NVML backend whose first MIG change is made and
// then answered only after the Runner's CallTimeout (a driver call that
// commits and hangs).
type lateMIGBackend struct {
	*nvml.Backend
	late  time.Duration
	calls atomic.Int64
}

func (l *lateMIGBackend) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	err := l.Backend.ApplyMIG(ctx, r)
	if l.calls.Add(1) == 1 {
		time.Sleep(l.late)
	}
	return err
}

// On a box whose GPUs are split into seven 1g instances, a 3g job needs a
// reconfiguration: the Runner applies it on a goroutine (assumed), binds
// the job on the new instance after it, and the job runs on it. With the
// change's answer late past CallTimeout, the change is unknown until the
// GPU's layout read from NVML (MIGLayout) says it was made: ApplyMIG is
// called once, never again for it.
func TestRunnerMIGReconfiguresAsynchronously(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			box := mustBox(t, "dgxh100")
			box.SetMIGMode(true)
			for _, d := range box.Devices {
				for s := range uint32(7) {
					createGI(t, d, nv.GPU_INSTANCE_PROFILE_1_SLICE, s)
				}
			}
			f := open(t, box, nil)
			be := &lateMIGBackend{Backend: f.b}
			if late {
				be.late = 300 * time.Millisecond
			}
			var mu sync.Mutex
			var migs []backends.MIGResult
			r, err := backends.NewRunner(backends.RunnerConfig{
				Engine: engine.Config{
					Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}, {Name: nvml.DefaultHoldQueue}}},
					// Any wait is worth a change: planned at the first cycle.
					MIG: engine.MIGConfig{WaitFactor: 1e-9},
				},
				Backend:           be,
				TickInterval:      50 * time.Millisecond,
				CallTimeout:       100 * time.Millisecond,
				ReconcileInterval: 200 * time.Millisecond,
				Observe: func(c backends.Cycle) {
					mu.Lock()
					migs = append(migs, c.MIG...)
					mu.Unlock()
				},
			})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			j := job("big", 1, 0)
			j.Submit = time.Now().Add(-time.Minute)
			j.Request.Groups[0].MIGProfile = "3g.40gb"
			require.NoError(t, f.b.Submit(context.Background(), j, sh(`echo $CUDA_VISIBLE_DEVICES`)))
			e := f.exits.next(t)
			assert.Equal(t, nvml.ReasonCompleted, e.Reason)
			assert.Regexp(t, `^MIG-`, e.Visible)
			// The change's outcome reaches Observe with a cycle after it
			// was stepped, which may come after the job's exit (CI under
			// -race: none had yet when the Runner was stopped).
			want := 1
			if late {
				want = 2
			}
			waitFor(t, "the MIG outcomes observed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(migs) >= want
			})
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
			assert.Equal(t, int64(1), be.calls.Load(), "one change, applied once")
			mu.Lock()
			defer mu.Unlock()
			if late {
				require.Len(t, migs, 2, "unknown, then applied from the GPU's layout")
				assert.True(t, migs[0].Unknown)
				assert.ErrorIs(t, migs[0].Err, backends.ErrCallTimeout)
			} else {
				// Applied; under heavy load a call may pass the 100 ms
				// CallTimeout and be unknown first, then settled.
				require.NotEmpty(t, migs)
				for _, m := range migs[:len(migs)-1] {
					assert.True(t, m.Unknown, "only an unknown outcome before the last")
				}
			}
			last := migs[len(migs)-1]
			assert.NoError(t, last.Err)
			assert.False(t, last.Unknown)
			assert.Equal(t, 1, last.Change.To.Count(last.Change.Create[0].Profile), "a 3g instance made")
		})
	}
}
