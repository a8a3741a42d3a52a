package metrics

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const s = time.Second

// fourJobs is a hand-computed replay on 4 GPUs:
//
//	A  2 GPUs  submit 0   start 0    end 100   wait 0   run 100  jct 100  bsld 1
//	B  4 GPUs  submit 10  start 100  end 300   wait 90  run 200  jct 290  bsld 1.45   (1 preemption)
//	C  1 GPU   submit 20  start 35   end 40    wait 15  run 5    jct 20   bsld 20/max(5, 10) = 2
//	D  1 GPU   submit 50  never started
//
// Window [0, 300]; busy 2x100 + 4x200 + 1x5 = 1005 GPU-s of 4x300 = 1200.
func fourJobs() []Outcome {
	return []Outcome{
		{ID: "A", Submit: 0, Start: 0, End: 100 * s, GPUMilli: 2000, Started: true, Finished: true},
		{ID: "B", Submit: 10 * s, Start: 100 * s, End: 300 * s, GPUMilli: 4000, Started: true, Finished: true, Preemptions: 1},
		{ID: "C", Submit: 20 * s, Start: 35 * s, End: 40 * s, GPUMilli: 1000, Started: true, Finished: true},
		{ID: "D", Submit: 50 * s, GPUMilli: 1000},
	}
}

func TestCompute(t *testing.T) {
	r, err := Compute(Input{Policy: "fifo", ClusterGPUs: 4, Jobs: fourJobs()})
	require.NoError(t, err)
	assert.Equal(t, "fifo", r.Policy)
	assert.InDelta(t, 1005.0/1200, r.Utilization, 1e-12)
	assert.Equal(t, 35*s, r.AvgWait)
	assert.Equal(t, 90*s, r.P95Wait)                       // n=3: rank ceil(2.85) = 3
	assert.Equal(t, time.Duration(136666666667), r.AvgJCT) // 410/3 s
	assert.InDelta(t, 4.45/3, r.AvgBSLD, 1e-12)
	assert.Equal(t, 300*s, r.Makespan)
	assert.Equal(t, 1, r.Preemptions)
	assert.Equal(t, 4, r.Jobs)
	assert.Equal(t, 3, r.Finished)
	assert.Zero(t, r.FragFreeGPUs)
	assert.Zero(t, r.LargestPlaceableGang)
}

func TestComputeWindowAndUnfinished(t *testing.T) {
	jobs := []Outcome{
		// Still running when the replay stopped; End 0 means the window end.
		{ID: "E", Submit: 0, Start: 10 * s, GPUMilli: 1000, Started: true},
		// A share pod of half a GPU.
		{ID: "F", Submit: 0, Start: 0, End: 50 * s, GPUMilli: 500, Started: true, Finished: true},
	}
	// Explicit window [0, 100]: busy 1x90 + 0.5x50 = 115 of 2x100.
	r, err := Compute(Input{ClusterGPUs: 2, Jobs: jobs, Window: Window{Start: 0, End: 100 * s}})
	require.NoError(t, err)
	assert.InDelta(t, 0.575, r.Utilization, 1e-12)
	assert.Equal(t, 1, r.Finished)
	assert.Equal(t, 2, r.Jobs)
	assert.Equal(t, time.Duration(0), r.AvgWait)
	assert.Equal(t, 50*s, r.AvgJCT)
	assert.Equal(t, 1.0, r.AvgBSLD)
	assert.Equal(t, 50*s, r.Makespan)

	// Default window ends at the last end seen, 50: busy 1x40 + 0.5x50 = 65
	// of 2x50.
	r, err = Compute(Input{ClusterGPUs: 2, Jobs: jobs})
	require.NoError(t, err)
	assert.InDelta(t, 0.65, r.Utilization, 1e-12)

	// A window that cuts both ends clips busy time: [20, 40] holds E and F
	// for 20 s each: 1.5x20 = 30 of 2x20.
	r, err = Compute(Input{ClusterGPUs: 2, Jobs: jobs, Window: Window{Start: 20 * s, End: 40 * s}})
	require.NoError(t, err)
	assert.InDelta(t, 0.75, r.Utilization, 1e-12)

	// An unfinished job with an explicit stop time holds GPUs until then.
	jobs[0].End = 30 * s
	r, err = Compute(Input{ClusterGPUs: 2, Jobs: jobs, Window: Window{End: 100 * s}})
	require.NoError(t, err)
	assert.InDelta(t, (20+25)/200.0, r.Utilization, 1e-12)
}

func TestComputePreemptedRun(t *testing.T) {
	// G ran 30 s, was preempted, waited, then ran 40 s: its wait (20 -> 60)
	// includes the preempted run, and the preempted run counts as busy.
	jobs := []Outcome{{ID: "G", Submit: 20 * s, Start: 60 * s, End: 100 * s, GPUMilli: 1000,
		Started: true, Finished: true, Preemptions: 1, PreemptedRun: 30 * s}}
	r, err := Compute(Input{ClusterGPUs: 1, Jobs: jobs})
	require.NoError(t, err)
	assert.InDelta(t, 70.0/80, r.Utilization, 1e-12)
	assert.Equal(t, 40*s, r.AvgWait)
	assert.Equal(t, 80*s, r.AvgJCT)
	assert.InDelta(t, 2.0, r.AvgBSLD, 1e-12)
	assert.Equal(t, 80*s, r.Makespan)
	assert.Equal(t, 1, r.Preemptions)
}

func TestComputeEmpty(t *testing.T) {
	r, err := Compute(Input{Policy: "x", ClusterGPUs: 8})
	require.NoError(t, err)
	assert.Equal(t, Result{Policy: "x"}, r)

	// Nothing started: no window, no NaN.
	r, err = Compute(Input{ClusterGPUs: 8, Jobs: []Outcome{{Submit: 5 * s, GPUMilli: 1000}}})
	require.NoError(t, err)
	assert.Equal(t, Result{Jobs: 1}, r)
}

func TestComputeInvalid(t *testing.T) {
	for name, in := range map[string]Input{
		"no GPUs":            {ClusterGPUs: 0},
		"negative milli":     {ClusterGPUs: 1, Jobs: []Outcome{{GPUMilli: -1}}},
		"negative preempt":   {ClusterGPUs: 1, Jobs: []Outcome{{Preemptions: -1}}},
		"negative lost run":  {ClusterGPUs: 1, Jobs: []Outcome{{PreemptedRun: -s}}},
		"finished unstarted": {ClusterGPUs: 1, Jobs: []Outcome{{Finished: true, End: s}}},
		"start before submit": {ClusterGPUs: 1, Jobs: []Outcome{
			{Submit: 10 * s, Start: 5 * s, End: 20 * s, Started: true, Finished: true}}},
		"end before start": {ClusterGPUs: 1, Jobs: []Outcome{
			{Start: 10 * s, End: 5 * s, Started: true, Finished: true}}},
		"stop before start": {ClusterGPUs: 1, Jobs: []Outcome{{Start: 10 * s, End: 5 * s, Started: true}}},
		"window backwards":  {ClusterGPUs: 1, Window: Window{Start: 10 * s, End: 5 * s}},
	} {
		_, err := Compute(in)
		assert.ErrorIs(t, err, ErrInvalid, name)
		_, err = Series(in, s)
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	seq := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(n-i) * s // descending: Percentile must sort
		}
		return out
	}
	for _, c := range []struct {
		n, p int
		want time.Duration
	}{
		{1, 95, 1 * s},
		{20, 95, 19 * s},  // ceil(19.00) = 19
		{21, 95, 20 * s},  // ceil(19.95) = 20
		{100, 95, 95 * s}, // exact rank, no float rounding up to 96
		{4, 50, 2 * s},
		{4, 100, 4 * s},
		{0, 95, 0},
	} {
		in := seq(c.n)
		assert.Equal(t, c.want, Percentile(in, c.p), "n=%d p=%d", c.n, c.p)
		if c.n > 1 {
			assert.Equal(t, time.Duration(c.n)*s, in[0], "input left unsorted")
		}
	}
}

func TestWaits(t *testing.T) {
	assert.Equal(t, []time.Duration{0, 15 * s, 90 * s}, Waits(fourJobs()))
	assert.Empty(t, Waits(nil))
}

func TestResultJSON(t *testing.T) {
	r := Result{Policy: "easy", Utilization: 0.5, AvgWait: 1500 * time.Millisecond, P95Wait: 3 * s,
		AvgJCT: 10 * s, AvgBSLD: 1.25, Makespan: time.Hour, Preemptions: 2, Jobs: 10, Finished: 9,
		FragFreeGPUs: 3.5, LargestPlaceableGang: 16}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"policy":"easy","utilization":0.5,"avg_wait_s":1.5,"p95_wait_s":3,"avg_jct_s":10,
		"avg_bsld":1.25,"makespan_s":3600,"preemptions":2,"jobs":10,"finished":9,
		"frag_free_gpus":3.5,"largest_placeable_gang":16}`, string(b))
	var back Result
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, r, back)

	// A slice of results marshals as rows too (value receiver).
	b, err = json.Marshal([]Result{r})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"avg_wait_s":1.5`)
	assert.Error(t, json.Unmarshal([]byte(`{"jobs":"x"}`), &back))

	assert.Equal(t, []string{"easy", "0.5", "1.5", "3", "10", "1.25", "3600", "2", "10", "9", "3.5", "16"}, r.CSVRecord())
	assert.Len(t, CSVHeader(), len(r.CSVRecord()))
	var keys map[string]any
	require.NoError(t, json.Unmarshal(b[1:len(b)-1], &keys))
	for _, h := range CSVHeader() {
		assert.Contains(t, keys, h, "CSV header matches the JSON keys")
	}
}

func TestSeries(t *testing.T) {
	got, err := Series(Input{ClusterGPUs: 4, Jobs: fourJobs()}, 100*s)
	require.NoError(t, err)
	// Bucket [0,100): A holds 2 GPUs throughout, C 1 GPU for 5 s: 205 GPU-s.
	// Queued: B 10..100 (90 s), C 20..35 (15 s), D 50..100 (50 s).
	want := []Sample{
		{At: 0, Utilization: 2.05 / 4, BusyGPUs: 2.05, Running: 1.05, Queued: 1.55},
		{At: 100 * s, Utilization: 1, BusyGPUs: 4, Running: 1, Queued: 1},
		{At: 200 * s, Utilization: 1, BusyGPUs: 4, Running: 1, Queued: 1},
	}
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].At, got[i].At)
		assert.InDelta(t, want[i].Utilization, got[i].Utilization, 1e-12, "bucket %d", i)
		assert.InDelta(t, want[i].BusyGPUs, got[i].BusyGPUs, 1e-12, "bucket %d", i)
		assert.InDelta(t, want[i].Running, got[i].Running, 1e-12, "bucket %d", i)
		assert.InDelta(t, want[i].Queued, got[i].Queued, 1e-12, "bucket %d", i)
	}

	// A step that does not divide the window: the last bucket averages over
	// its 50 s.
	got, err = Series(Input{ClusterGPUs: 4, Jobs: fourJobs()}, 250*s)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.InDelta(t, (200+5+4*150)/250.0/4, got[0].Utilization, 1e-12)
	assert.InDelta(t, 1.0, got[1].Utilization, 1e-12)

	_, err = Series(Input{ClusterGPUs: 4, Jobs: fourJobs()}, 0)
	assert.ErrorIs(t, err, ErrInvalid)
}

// TestSeriesMatchesCompute checks on random replays that the time average
// of the series is Compute's utilization (two computations of one number).
func TestSeriesMatchesCompute(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		var jobs []Outcome
		for i := range 1 + r.IntN(40) {
			o := Outcome{ID: string(rune('a' + i%26)), Submit: time.Duration(r.IntN(1000)) * s, GPUMilli: int64(1 + r.IntN(8000))}
			if r.IntN(5) > 0 {
				o.Started = true
				o.Start = o.Submit + time.Duration(r.IntN(500))*s
				o.End = o.Start + time.Duration(r.IntN(500))*s
				o.Finished = r.IntN(4) > 0
			}
			jobs = append(jobs, o)
		}
		in := Input{ClusterGPUs: 64, Jobs: jobs}
		res, err := Compute(in)
		require.NoError(t, err)
		samples, err := Series(in, time.Duration(1+r.IntN(300))*s)
		require.NoError(t, err)
		w, err := in.window()
		require.NoError(t, err)
		busy, span := 0.0, (w.End - w.Start).Seconds()
		for i, smp := range samples {
			end := w.End
			if i+1 < len(samples) {
				end = samples[i+1].At
			}
			busy += smp.Utilization * (end - smp.At).Seconds()
			require.GreaterOrEqual(t, smp.Queued, 0.0)
		}
		if span > 0 {
			assert.InDelta(t, res.Utilization, busy/span, 1e-9, "trial %d", trial)
		} else {
			assert.Empty(t, samples)
		}
	}
}

func TestSampler(t *testing.T) {
	sm, err := NewSampler(8, 100*s, 10*s)
	require.NoError(t, err)
	require.NoError(t, sm.Set(50*s, 4000, 1, 3)) // before the start: initial state
	require.NoError(t, sm.Set(105*s, 8000, 2, 0))
	assert.ErrorIs(t, sm.Set(104*s, 0, 0, 0), ErrInvalid)
	assert.ErrorIs(t, sm.Set(110*s, -1, 0, 0), ErrInvalid)
	got := sm.Samples(115 * s)
	require.Len(t, got, 2)
	assert.Equal(t, Sample{At: 100 * s, Utilization: 0.75, BusyGPUs: 6, Running: 1.5, Queued: 1.5}, got[0])
	assert.Equal(t, Sample{At: 110 * s, Utilization: 1, BusyGPUs: 8, Running: 2, Queued: 0}, got[1])

	// More state after a read.
	require.NoError(t, sm.Set(120*s, 0, 0, 0))
	got = sm.Samples(130 * s)
	require.Len(t, got, 3)
	assert.Equal(t, 1.0, got[1].Utilization)
	assert.Equal(t, 0.0, got[2].Utilization)

	_, err = NewSampler(0, 0, s)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = NewSampler(1, 0, 0)
	assert.ErrorIs(t, err, ErrInvalid)
}
