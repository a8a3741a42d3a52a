package workload

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyntheticDeterministic(t *testing.T) {
	cfg := DefaultSynthetic()
	a, err := Synthetic(cfg)
	require.NoError(t, err)
	b, err := Synthetic(cfg)
	require.NoError(t, err)
	require.Len(t, a, cfg.Jobs)
	assert.Equal(t, a, b, "same seed, same jobs")

	cfg.Seed = 43
	c, err := Synthetic(cfg)
	require.NoError(t, err)
	assert.NotEqual(t, a, c)
	same := 0
	for i := range a {
		if a[i].Runtime == c[i].Runtime {
			same++
		}
	}
	assert.Less(t, same, len(a)/10, "another seed draws other runtimes")

	assert.Equal(t, Job{ID: "j0000", Submit: a[0].Submit, Runtime: a[0].Runtime, Estimate: a[0].Runtime,
		GPUs: a[0].GPUs, NumGPU: a[0].GPUs, GPUMilli: 1000, Queue: a[0].Queue}, a[0])
	// The checksum pins the default workload (computed on linux/amd64): a
	// change to it changes every published replay number, so it must be
	// deliberate.
	assert.Equal(t, "f27a1b492ee2970e", syntheticChecksum(a))
}

// syntheticChecksum is FNV-1a 64 over "submit:runtime:gpus:queue:estimate;"
// (seconds) of every job, like the fill checksums of docs/standard-work.md.
func syntheticChecksum(jobs []Job) string {
	h := fnv.New64a()
	for _, j := range jobs {
		fmt.Fprintf(h, "%d:%d:%d:%s:%d;", int64(j.Submit.Seconds()), int64(j.Runtime.Seconds()),
			j.GPUs, j.Queue, int64(j.Estimate.Seconds()))
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

func TestSyntheticDistributions(t *testing.T) {
	cfg := DefaultSynthetic()
	cfg.Jobs = 40000
	cfg.Queues = 4
	cfg.MaxRuntime = 0 // the full ITP distribution
	jobs, err := Synthetic(cfg)
	require.NoError(t, err)

	sizes := map[int]int{}
	queues := map[string]int{}
	runs := make([]time.Duration, 0, len(jobs))
	work := 0.0
	for i, j := range jobs {
		sizes[j.GPUs]++
		queues[j.Queue]++
		runs = append(runs, j.Runtime)
		work += float64(j.GPUs) * j.Runtime.Seconds()
		require.Equal(t, j.Runtime, j.Estimate, "EstimateFactor 1 gives exact estimates")
		require.Equal(t, j.Runtime.Truncate(time.Second), j.Runtime, "whole seconds")
		require.Equal(t, j.Submit.Truncate(time.Second), j.Submit)
		require.Equal(t, 1000, j.GPUMilli)
		require.Equal(t, j.GPUs, j.NumGPU)
		if i > 0 {
			require.GreaterOrEqual(t, j.Submit, jobs[i-1].Submit, "sorted by submit")
			require.Greater(t, j.ID, jobs[i-1].ID)
		}
	}
	// Size frequencies follow ITP cluster04 (15,802 jobs) within sampling
	// noise: 4 standard deviations of a binomial.
	for _, s := range ITPSizes() {
		p := float64(s.Weight) / 15802
		n := float64(len(jobs))
		assert.InDelta(t, p*n, float64(sizes[s.GPUs]), 4*math.Sqrt(n*p*(1-p))+1, "size %d", s.GPUs)
	}
	// Runtimes: minimum 600 s, median 7,949 s, and quantiles near the table.
	slices.Sort(runs)
	assert.Equal(t, 600*time.Second, runs[0])
	assert.LessOrEqual(t, runs[len(runs)-1], 1237189*time.Second)
	// Compare in probability space, where the sampling error is known: the
	// sample's p-quantile sits at CDF p within 4 binomial standard errors.
	table := ITPRuntimeQuantiles()
	for _, q := range table[1 : len(table)-1] {
		got := runs[int(q.P*float64(len(runs)))]
		n := float64(len(runs))
		tol := 4*math.Sqrt(q.P*(1-q.P)/n) + 2/n
		assert.InDelta(t, q.P, runtimeCDF(table, got), tol, "quantile %v: %v", q.P, got)
	}
	assert.InEpsilon(t, 7949, runs[len(runs)/2].Seconds(), 0.02)
	// Queue popularity: Zipf 1 over 4 queues is 12/25, 6/25, 4/25, 3/25.
	for i, w := range []float64{12, 6, 4, 3} {
		name := []string{"q0", "q1", "q2", "q3"}[i]
		assert.InDelta(t, w/25, float64(queues[name])/float64(len(jobs)), 0.01, name)
	}
	// Offered load over the arrival window [0, T] is the target; the window
	// ends after the last arrival by about one mean gap.
	span := jobs[len(jobs)-1].Submit.Seconds()
	load := work / (float64(cfg.ClusterGPUs) * span)
	assert.InEpsilon(t, cfg.Load, load, 0.001)
	// Arrivals are Poisson: inter-arrival gaps have a coefficient of
	// variation near 1.
	var gaps []float64
	for i := 1; i < len(jobs); i++ {
		gaps = append(gaps, (jobs[i].Submit - jobs[i-1].Submit).Seconds())
	}
	mean, sd := meanSD(gaps)
	assert.InDelta(t, 1.0, sd/mean, 0.05)
}

func meanSD(x []float64) (float64, float64) {
	s := 0.0
	for _, v := range x {
		s += v
	}
	m := s / float64(len(x))
	v := 0.0
	for _, e := range x {
		v += (e - m) * (e - m)
	}
	return m, math.Sqrt(v / float64(len(x)))
}

func TestSyntheticKnobs(t *testing.T) {
	base := DefaultSynthetic()
	base.Jobs = 500
	exact, err := Synthetic(base)
	require.NoError(t, err)

	// Estimates: inflating them changes nothing else (separate streams).
	infl := base
	infl.EstimateFactor = 3
	inflated, err := Synthetic(infl)
	require.NoError(t, err)
	bigger := 0
	for i := range exact {
		e, f := exact[i], inflated[i]
		require.GreaterOrEqual(t, f.Estimate, f.Runtime)
		require.LessOrEqual(t, f.Estimate, 3*f.Runtime+time.Second)
		if f.Estimate > f.Runtime {
			bigger++
		}
		f.Estimate = e.Estimate
		require.Equal(t, e, f)
	}
	assert.Greater(t, bigger, 490)

	// Load only rescales arrivals.
	double := base
	double.Load = 2 * base.Load
	dense, err := Synthetic(double)
	require.NoError(t, err)
	last := len(exact) - 1
	assert.InDelta(t, exact[last].Submit.Seconds()/2, dense[last].Submit.Seconds(), 1)
	assert.Equal(t, exact[last].Runtime, dense[last].Runtime)

	// Sizes larger than the cluster are left out.
	small := base
	small.ClusterGPUs = 8
	jobs, err := Synthetic(small)
	require.NoError(t, err)
	for _, j := range jobs {
		require.LessOrEqual(t, j.GPUs, 8)
	}

	// MaxRuntime truncates the distribution without piling jobs at the cut,
	// and keeps the body (the default cuts at one day).
	capped := base
	capped.Jobs = 5000
	require.Equal(t, 24*time.Hour, capped.MaxRuntime)
	jobs, err = Synthetic(capped)
	require.NoError(t, err)
	atCap := 0
	for _, j := range jobs {
		require.LessOrEqual(t, j.Runtime, capped.MaxRuntime)
		if j.Runtime == capped.MaxRuntime {
			atCap++
		}
	}
	assert.LessOrEqual(t, atCap, 2)
	runs := make([]time.Duration, len(jobs))
	for i, j := range jobs {
		runs[i] = j.Runtime
	}
	slices.Sort(runs)
	assert.InEpsilon(t, 7850, runs[len(runs)/2].Seconds(), 0.03)
	assert.GreaterOrEqual(t, runs[0], 600*time.Second)

	// One queue, uniform skew, zero jobs.
	one := base
	one.Queues, one.QueueSkew = 1, 0
	jobs, err = Synthetic(one)
	require.NoError(t, err)
	for _, j := range jobs {
		require.Equal(t, "q0", j.Queue)
	}
	none := base
	none.Jobs = 0
	jobs, err = Synthetic(none)
	require.NoError(t, err)
	assert.Empty(t, jobs)
}

func TestSyntheticValidate(t *testing.T) {
	require.NoError(t, DefaultSynthetic().Validate())
	for name, mut := range map[string]func(*SyntheticConfig){
		"negative jobs":   func(c *SyntheticConfig) { c.Jobs = -1 },
		"no gpus":         func(c *SyntheticConfig) { c.ClusterGPUs = 0 },
		"zero load":       func(c *SyntheticConfig) { c.Load = 0 },
		"NaN load":        func(c *SyntheticConfig) { c.Load = math.NaN() },
		"no queues":       func(c *SyntheticConfig) { c.Queues = 0 },
		"negative skew":   func(c *SyntheticConfig) { c.QueueSkew = -1 },
		"deflated":        func(c *SyntheticConfig) { c.EstimateFactor = 0.5 },
		"infinite factor": func(c *SyntheticConfig) { c.EstimateFactor = math.Inf(1) },
		"no sizes":        func(c *SyntheticConfig) { c.Sizes = nil },
		"no size fits":    func(c *SyntheticConfig) { c.Sizes = []SizeWeight{{GPUs: 1024, Weight: 1}} },
		"zero gpu size":   func(c *SyntheticConfig) { c.Sizes = []SizeWeight{{GPUs: 0, Weight: 1}} },
		"no runtimes":     func(c *SyntheticConfig) { c.Runtimes = nil },
		"P not from 0":    func(c *SyntheticConfig) { c.Runtimes = c.Runtimes[1:] },
		"P not to 1":      func(c *SyntheticConfig) { c.Runtimes = c.Runtimes[:3] },
		"P repeats": func(c *SyntheticConfig) {
			c.Runtimes = []Quantile{{0, time.Minute}, {0, time.Minute}, {1, time.Hour}}
		},
		"runtime shrinks": func(c *SyntheticConfig) {
			c.Runtimes = []Quantile{{0, time.Hour}, {1, time.Minute}}
		},
		"sub-second": func(c *SyntheticConfig) {
			c.Runtimes = []Quantile{{0, time.Millisecond}, {1, time.Minute}}
		},
		"cap below min": func(c *SyntheticConfig) { c.MaxRuntime = time.Second },
	} {
		cfg := DefaultSynthetic()
		mut(&cfg)
		assert.ErrorIs(t, cfg.Validate(), ErrConfig, name)
		_, err := Synthetic(cfg)
		assert.ErrorIs(t, err, ErrConfig, name)
	}
}

func TestInflateEstimates(t *testing.T) {
	jobs := []Job{{Runtime: 100 * time.Second, Estimate: time.Hour}, {Runtime: 1500 * time.Millisecond}, {}}
	require.NoError(t, InflateEstimates(jobs, 7, 1))
	assert.Equal(t, []time.Duration{100 * time.Second, 1500 * time.Millisecond, 0},
		[]time.Duration{jobs[0].Estimate, jobs[1].Estimate, jobs[2].Estimate})

	require.NoError(t, InflateEstimates(jobs, 7, 2))
	a := []time.Duration{jobs[0].Estimate, jobs[1].Estimate}
	assert.GreaterOrEqual(t, a[0], 100*time.Second)
	assert.LessOrEqual(t, a[0], 200*time.Second)
	assert.GreaterOrEqual(t, a[1], 2*time.Second) // rounded up to whole seconds
	require.NoError(t, InflateEstimates(jobs, 7, 2))
	assert.Equal(t, a, []time.Duration{jobs[0].Estimate, jobs[1].Estimate}, "same seed, same estimates")

	assert.ErrorIs(t, InflateEstimates(jobs, 7, 0.9), ErrConfig)
	assert.ErrorIs(t, InflateEstimates(jobs, 7, math.NaN()), ErrConfig)
}

func TestSplitMix64(t *testing.T) {
	// docs/standard-work.md's generator: reference outputs of SplitMix64 from state 0.
	r := SplitMix64{}
	assert.Equal(t, uint64(0xe220a8397b1dcdaf), r.Next())
	assert.Equal(t, uint64(0x6e789e6aa1b965f4), r.Next())
	r = SplitMix64{state: 42}
	for range 1000 {
		u := r.float()
		require.True(t, u >= 0 && u < 1)
		require.Less(t, r.Draw(7), uint64(7))
	}
}

func TestRuntimeTable(t *testing.T) {
	q := ITPRuntimeQuantiles()
	assert.Equal(t, 600.0, runtimeAt(q, 0))
	assert.Equal(t, 7949.0, runtimeAt(q, 0.5))
	assert.Equal(t, 1237189.0, runtimeAt(q, math.Nextafter(1, 0)))
	for _, r := range []time.Duration{600 * time.Second, 7949 * time.Second, 50000 * time.Second} {
		u := runtimeCDF(q, r)
		assert.InDelta(t, r.Seconds(), runtimeAt(q, u), 1, "round trip %v", r)
	}
	assert.Equal(t, 1.0, runtimeCDF(q, 1e7*time.Second))
}

// SyntheticJobs generates Synthetic's jobs again at every Each, and stops
// when yield does.
func TestSyntheticJobsEach(t *testing.T) {
	cfg := DefaultSynthetic()
	cfg.Jobs = 500
	want, err := Synthetic(cfg)
	require.NoError(t, err)
	g, err := NewSyntheticJobs(cfg)
	require.NoError(t, err)
	assert.Equal(t, 500, g.Len())
	for range 2 {
		var got []Job
		g.Each(func(i int, j *Job) bool {
			assert.Equal(t, len(got), i)
			got = append(got, *j)
			return true
		})
		assert.Equal(t, want, got)
	}
	n := 0
	g.Each(func(int, *Job) bool { n++; return n < 10 })
	assert.Equal(t, 10, n)
	_, err = NewSyntheticJobs(SyntheticConfig{})
	assert.ErrorIs(t, err, ErrConfig)
}
