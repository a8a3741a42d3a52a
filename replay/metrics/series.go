package metrics

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Sample is one bucket of a time series: the time average of the cluster
// state over [At, At+step) (the last bucket may be shorter: it averages
// over its covered part).
type Sample struct {
	At          time.Duration // bucket start
	Utilization float64       // mean busy GPUs / cluster GPUs
	BusyGPUs    float64       // mean GPUs held
	Running     float64       // mean number of running jobs
	Queued      float64       // mean number of submitted jobs waiting to run (the queue length)
}

// Sampler turns a piecewise-constant cluster state into fixed-step
// time-averaged samples, for plots of utilization and queue length over
// time. The simulator calls Set whenever the state changes; Series builds
// one from outcomes. A Sampler is not safe for concurrent use.
type Sampler struct {
	gpus        float64
	start, step time.Duration

	t       time.Duration // time of the current state
	busy    int64         // GPU milli held
	running int
	queued  int

	acc []bucket
}

// bucket accumulates state x seconds over one step.
type bucket struct {
	busyMilliSec, runningSec, queuedSec float64
}

// NewSampler returns a sampler for a cluster of clusterGPUs GPUs, with
// buckets of step starting at start. The state is zero until the first Set.
func NewSampler(clusterGPUs int, start, step time.Duration) (*Sampler, error) {
	if clusterGPUs < 1 || step <= 0 {
		return nil, fmt.Errorf("%w: sampler needs GPUs >= 1 and step > 0 (got %d, %v)", ErrInvalid, clusterGPUs, step)
	}
	return &Sampler{gpus: float64(clusterGPUs), start: start, step: step, t: start}, nil
}

// Set records the cluster state from time t on: busyMilli GPU milli held
// (1000 per whole GPU), running jobs and queued (waiting) jobs. Times must
// not go back; a t before the sampler's start only sets the initial state.
func (s *Sampler) Set(t time.Duration, busyMilli int64, running, queued int) error {
	if busyMilli < 0 || running < 0 || queued < 0 {
		return fmt.Errorf("%w: negative state at %v", ErrInvalid, t)
	}
	if t < s.t && s.t > s.start {
		return fmt.Errorf("%w: time went back from %v to %v", ErrInvalid, s.t, t)
	}
	s.advance(t)
	s.busy, s.running, s.queued = busyMilli, running, queued
	return nil
}

// advance integrates the current state up to t.
func (s *Sampler) advance(t time.Duration) {
	for s.t < t {
		k := int((s.t - s.start) / s.step)
		for len(s.acc) <= k {
			s.acc = append(s.acc, bucket{})
		}
		next := min(t, s.start+time.Duration(k+1)*s.step)
		dt := (next - s.t).Seconds()
		b := &s.acc[k]
		b.busyMilliSec += float64(s.busy) * dt
		b.runningSec += float64(s.running) * dt
		b.queuedSec += float64(s.queued) * dt
		s.t = next
	}
}

// Samples integrates the state up to end and returns one sample per
// bucket from the start to end (or to the last Set, if later). It may be
// called again after more Sets.
func (s *Sampler) Samples(end time.Duration) []Sample {
	s.advance(end)
	out := make([]Sample, 0, len(s.acc))
	for k, b := range s.acc {
		at := s.start + time.Duration(k)*s.step
		span := (min(at+s.step, s.t) - at).Seconds()
		if span <= 0 {
			break
		}
		busy := b.busyMilliSec / 1000 / span
		out = append(out, Sample{
			At:          at,
			Utilization: busy / s.gpus,
			BusyGPUs:    busy,
			Running:     b.runningSec / span,
			Queued:      b.queuedSec / span,
		})
	}
	return out
}

// Series samples a replay's outcomes over the window of in (as in
// Compute) with buckets of step: a job is queued from Submit to Start (or
// to the window end if it never started) and running, holding its GPUs,
// from Start to its end. Earlier preempted runs are not shown: a simulator
// that preempts should drive a Sampler itself.
func Series(in Input, step time.Duration) ([]Sample, error) {
	w, err := in.window()
	if err != nil {
		return nil, err
	}
	s, err := NewSampler(in.ClusterGPUs, w.Start, step)
	if err != nil {
		return nil, err
	}
	// A change of the state: 24 bytes, three per job (a month's replay
	// has millions).
	type event struct {
		t       time.Duration
		busy    int64
		running int8
		queued  int8
	}
	evs := make([]event, 0, 3*len(in.Jobs))
	for i := range in.Jobs {
		o := &in.Jobs[i]
		evs = append(evs, event{t: o.Submit, queued: 1})
		if o.Started {
			e := o.end(w)
			evs = append(evs,
				event{t: o.Start, queued: -1, running: 1, busy: o.GPUMilli},
				event{t: e, running: -1, busy: -o.GPUMilli})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.t, b.t) })
	var busy int64
	var running, queued int
	for i, e := range evs {
		busy += e.busy
		running += int(e.running)
		queued += int(e.queued)
		if i+1 < len(evs) && evs[i+1].t == e.t {
			continue // apply every change at one instant before sampling
		}
		if err := s.Set(min(e.t, w.End), busy, running, queued); err != nil {
			return nil, err
		}
	}
	return s.Samples(w.End), nil
}
