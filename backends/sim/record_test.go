package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// attrSim adds an AttributeReporter to the simulator: a UUID per GPU and
// a driver version.
type attrSim struct{ *sim.Sim }

func (attrSim) JobAttributes(job string, members []engine.Member) backends.JobAttributes {
	var a backends.JobAttributes
	for _, m := range members {
		for _, g := range m.GPUs {
			a.UUIDs = append(a.UUIDs, fmt.Sprintf("GPU-%s-%d", m.Node, g))
		}
	}
	a.Driver, a.Image = "550.54.15", "img:"+job
	return a
}

// record runs the simulator with a Recorder and returns the records by
// job, waits left out.
func record(t *testing.T, be backends.Backend, s *sim.Sim, cfg engine.Config) map[string][]backends.JobRecord {
	t.Helper()
	cfg.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	by := map[string][]backends.JobRecord{}
	r, err := backends.NewRunner(backends.RunnerConfig{Engine: cfg, Backend: be, Clock: s,
		Recorder: backends.RecorderFunc(func(rec backends.JobRecord) {
			if rec.Kind != backends.RecordWait {
				by[rec.Job] = append(by[rec.Job], rec)
			}
		})})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	return by
}

func kinds(recs []backends.JobRecord) string {
	var ks []string
	for _, r := range recs {
		ks = append(ks, r.Kind.String())
	}
	return strings.Join(ks, " ")
}

func usage(recs []backends.JobRecord) (us int64) {
	for _, r := range recs {
		us += r.GPUMicroseconds
	}
	return us
}

func TestRecordsPreemptionAndRequeue(t *testing.T) {
	s := newSim(t, 1, 4)
	low := wholeJob("low", 0, 1, 4)
	low.Preemptible, low.GracePeriod, low.User, low.Account = true, time.Minute, "ann", ""
	high := wholeJob("high", 10*time.Minute, 1, 4)
	high.Priority, high.Partitions = 10, []string{"gpu-dev", "gpu-8x"}
	require.NoError(t, s.Submit(low, time.Hour))
	require.NoError(t, s.Submit(high, 10*time.Minute))
	cfg := engine.Config{Policy: queue.StrictPriority()}
	cfg.Preemption.Priority = true
	// Two partitions over the one node: high names both, and the engine
	// picks the higher tier; the start record takes the engine's choice.
	cfg.Site.Partitions = []engine.Partition{
		{Name: "gpu-8x", Nodes: []string{"n0"}, PriorityTier: 2},
		{Name: "gpu-dev", Nodes: []string{"n0"}, PriorityTier: 1},
	}
	by := record(t, attrSim{s}, s, cfg)

	lr := by["low"]
	require.Equal(t, "submit start preempt requeue start end", kinds(lr))
	assert.Equal(t, "ann", lr[0].User)
	assert.Contains(t, lr[2].Reason, "priority: for high")
	assert.Equal(t, t0.Add(10*time.Minute), lr[2].Time)
	req := lr[3]
	assert.Equal(t, t0, req.RunStart)
	assert.Equal(t, 4000*req.Time.Sub(t0).Milliseconds(), req.GPUMicroseconds, "the first run is charged to its requeue")
	end := lr[5]
	assert.Equal(t, 4000*time.Hour.Milliseconds(), end.GPUMicroseconds, "the rerun is charged in full")
	assert.Equal(t, "finished", end.Reason)

	hr := by["high"]
	require.Equal(t, "submit start end", kinds(hr))
	st := hr[1]
	assert.Equal(t, "gpu-8x", st.Partition, "the partition the engine chose for the bind")
	assert.Equal(t, "n0:0=GPU-n0-0,n0:1=GPU-n0-1,n0:2=GPU-n0-2,n0:3=GPU-n0-3", backends.FormatGPUs(st.GPUs))
	assert.Equal(t, "550.54.15", st.Driver)
	assert.Equal(t, "img:high", st.Image)
	assert.Equal(t, 4000*(10*time.Minute).Milliseconds(), usage(hr))

	// What accounting charges equals what the simulator ran, except the
	// grace period the engine held low's GPUs after the simulator stopped
	// it (charged: the GPUs were not free for others).
	var ran int64
	for _, o := range s.Outcomes() {
		ran += o.Milli * o.End.Sub(o.Start).Milliseconds()
	}
	assert.Equal(t, ran+4000*req.Time.Sub(t0).Milliseconds(), usage(lr)+usage(hr))
}

func TestRecordsNodeFailure(t *testing.T) {
	s := newSim(t, 2, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 2, 4), time.Hour))
	require.NoError(t, s.FailNode(t0.Add(10*time.Minute), "n1"))
	require.NoError(t, s.RecoverNode(t0.Add(20*time.Minute), "n1"))
	by := record(t, s, s, engine.Config{Policy: queue.StrictPriority()})
	ar := by["a"]
	require.Equal(t, "submit start requeue start end", kinds(ar))
	assert.Equal(t, 8000*(10*time.Minute).Milliseconds(), ar[2].GPUMicroseconds)
	assert.Equal(t, 8000*time.Hour.Milliseconds(), ar[4].GPUMicroseconds)
	assert.Equal(t, "n0:0,n0:1,n0:2,n0:3,n1:0,n1:1,n1:2,n1:3", backends.FormatGPUs(ar[1].GPUs), "no UUIDs without an AttributeReporter")
}

func TestRecordsRejectedSubmission(t *testing.T) {
	s := newSim(t, 1, 4)
	bad := wholeJob("bad", 0, 1, 4)
	bad.Queue = "nope"
	require.NoError(t, s.Submit(bad, time.Hour))
	require.NoError(t, s.Submit(wholeJob("ok", 0, 1, 4), time.Hour))
	by := record(t, s, s, engine.Config{Policy: queue.StrictPriority()})
	require.Equal(t, "reject", kinds(by["bad"]))
	assert.Contains(t, by["bad"][0].Reason, "nope")
	require.Equal(t, "submit start end", kinds(by["ok"]))
}

func TestRecordsWaitReasonsOnChangeOnly(t *testing.T) {
	s := newSim(t, 1, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 1, 4), time.Hour))
	for i := range 3 {
		require.NoError(t, s.Submit(wholeJob(fmt.Sprint("b", i), time.Duration(i+1)*time.Minute, 1, 4), time.Hour))
	}
	var waits []backends.JobRecord
	cfg := engine.Config{Policy: queue.StrictPriority(), Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}}
	r, err := backends.NewRunner(backends.RunnerConfig{Engine: cfg, Backend: s, Clock: s,
		Recorder: backends.RecorderFunc(func(rec backends.JobRecord) {
			if rec.Kind == backends.RecordWait && rec.Job == "b2" {
				waits = append(waits, rec)
			}
		})})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.NotEmpty(t, waits)
	for i := 1; i < len(waits); i++ {
		assert.NotEqual(t, waits[i-1].Reason, waits[i].Reason, "a wait is recorded when the reason changes")
	}
}

// A Runner restored from a FileStore knows the jobs of the restored
// engine: their ends carry their queue and user and charge their runs
// from their start before the restart, so the two Runners' records
// charge exactly what the simulator ran.
func TestRecordsAcrossARestart(t *testing.T) {
	s := newSim(t, 2, 4)
	for i := range 6 {
		j := wholeJob(fmt.Sprint("j", i), time.Duration(i)*10*time.Minute, 1, 4)
		j.User = "ann"
		require.NoError(t, s.Submit(j, time.Duration(60+i*7)*time.Minute))
	}
	store := backends.FileStore{Path: t.TempDir() + "/berth.state"}
	var recs []backends.JobRecord
	rec := backends.RecorderFunc(func(r backends.JobRecord) { recs = append(recs, r) })
	for _, stop := range []time.Time{t0.Add(90 * time.Minute), {}} {
		cfg := restartConfig(s, store)
		cfg.Recorder = rec
		ctx, cancel := context.WithCancel(context.Background())
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
		cancel()
		if stop.IsZero() {
			require.NoError(t, err)
			require.True(t, r.Reconciled().Restored)
		}
	}
	var ran, charged int64
	for _, o := range s.Outcomes() {
		require.True(t, o.Finished, o.ID)
		ran += o.Milli * o.End.Sub(o.Start).Milliseconds()
	}
	ends := 0
	for _, r := range recs {
		charged += r.GPUMicroseconds
		if r.Kind == backends.RecordEnd {
			ends++
			assert.Equal(t, "ann", r.User, r.Job)
			assert.Equal(t, "q", r.Queue, r.Job)
		}
	}
	assert.Equal(t, 6, ends)
	assert.Equal(t, ran, charged)
}
