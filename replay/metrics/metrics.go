package metrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrInvalid is wrapped by every error of Compute, Series and Sampler:
// an outcome or parameter that cannot describe a replay.
var ErrInvalid = errors.New("metrics: invalid input")

// BSLDThreshold is the run time below which bounded slowdown stops growing:
// bsld = max(1, (wait+run) / max(run, BSLDThreshold)).
const BSLDThreshold = 10 * time.Second

// Outcome is what happened to one job in a replay.
type Outcome struct {
	ID     string
	Submit time.Duration
	// Start is the start of the job's last run: the one that finished, or
	// the one still running when the replay stopped. Wait is Start -
	// Submit, so it includes any earlier runs that were preempted.
	Start time.Duration
	// End is when the job finished. For a started job that did not finish
	// it is when the replay stopped counting it; 0 means the window end.
	End time.Duration
	// GPUMilli is the GPUs the job held, in thousandths of a GPU:
	// 8 whole GPUs = 8000, a share pod of 0.46 GPU = 460.
	GPUMilli int64
	Started  bool // the job ran (Start is meaningful)
	Finished bool // the job completed (implies Started)
	// Preemptions counts how often the job was preempted.
	Preemptions int
	// PreemptedRun is the total time the job held its GPUs in runs that
	// were preempted. It counts as busy for utilization (the GPUs were
	// held) and is assumed to lie inside the window.
	PreemptedRun time.Duration
}

// Window is the span of a replay over which utilization is measured.
type Window struct {
	Start, End time.Duration
}

// Input is one replay's outcomes.
type Input struct {
	Policy      string    // copied to Result.Policy
	ClusterGPUs int       // GPUs in the cluster, >= 1
	Jobs        []Outcome // every job of the workload, started or not
	// Window bounds utilization. The zero Window means the default: from
	// the first submit to the last End of a started job (the makespan end
	// when every job finishes).
	Window Window
}

// Result holds the replay yardsticks of docs/metrics.md. In JSON, durations
// are float64 seconds (avg_wait_s, ...), with snake_case keys; see
// MarshalJSON.
type Result struct {
	Policy      string
	Utilization float64       // GPU-seconds busy / GPU-seconds available in the window, 0..1
	AvgWait     time.Duration // mean Start - Submit over finished jobs
	P95Wait     time.Duration // nearest-rank 95th percentile of the same waits
	AvgJCT      time.Duration // mean End - Submit over finished jobs
	AvgBSLD     float64       // mean max(1, (wait+run)/max(run, 10 s)) over finished jobs
	Makespan    time.Duration // last End of a finished job - first Submit
	Preemptions int           // sum of Outcome.Preemptions
	Jobs        int           // outcomes given
	Finished    int           // outcomes that finished
	// Fragmentation, filled in by the simulator (Compute leaves them 0):
	// free GPUs that no pending job could use, and the largest gang (in
	// GPUs) that could still be placed.
	FragFreeGPUs         float64
	LargestPlaceableGang int
}

// window resolves the input's window and checks the outcomes.
func (in *Input) window() (Window, error) {
	if in.ClusterGPUs < 1 {
		return Window{}, fmt.Errorf("%w: ClusterGPUs %d < 1", ErrInvalid, in.ClusterGPUs)
	}
	var w Window
	first, ran := true, false
	for i := range in.Jobs {
		o := &in.Jobs[i]
		if msg := o.check(); msg != "" {
			return Window{}, fmt.Errorf("%w: job %d (%q): %s", ErrInvalid, i, o.ID, msg)
		}
		if first || o.Submit < w.Start {
			w.Start, first = o.Submit, false
		}
		if o.Started && (o.Finished || o.End > 0) && (!ran || o.End > w.End) {
			w.End, ran = o.End, true
		}
	}
	if in.Window != (Window{}) {
		if in.Window.End < in.Window.Start {
			return Window{}, fmt.Errorf("%w: window end %v before start %v", ErrInvalid, in.Window.End, in.Window.Start)
		}
		return in.Window, nil
	}
	if !ran {
		w.End = w.Start
	}
	return w, nil
}

func (o *Outcome) check() string {
	switch {
	case o.GPUMilli < 0:
		return "negative GPUMilli"
	case o.Preemptions < 0 || o.PreemptedRun < 0:
		return "negative preemptions"
	case o.Finished && !o.Started:
		return "finished without starting"
	case o.Started && o.Start < o.Submit:
		return "started before submit"
	case o.Finished && o.End < o.Start:
		return "ended before start"
	case o.Started && !o.Finished && o.End != 0 && o.End < o.Start:
		return "stopped before start"
	}
	return ""
}

// end is the time the job stopped holding GPUs, given the window end.
func (o *Outcome) end(w Window) time.Duration {
	if !o.Finished && o.End == 0 {
		return w.End
	}
	return o.End
}

// Compute returns the yardsticks of one replay.
//
// Utilization is the GPU-seconds held by jobs (each started job from Start
// to its end, clipped to the window, plus PreemptedRun) over ClusterGPUs x
// the window length; 0 for an empty window. Wait, JCT and bounded slowdown
// are averaged over finished jobs only (0 when none finished). P95Wait
// uses the nearest-rank convention: the smallest wait w such that at least
// 95% of the finished jobs waited at most w, i.e. the ceil(0.95 n)-th
// smallest wait. Makespan runs from the first submit of any job to the
// last end of a finished job (0 when none finished).
func Compute(in Input) (Result, error) {
	w, err := in.window()
	if err != nil {
		return Result{}, err
	}
	r := Result{Policy: in.Policy, Jobs: len(in.Jobs)}
	var busy, sumWait, sumJCT, sumBSLD float64 // GPU-seconds, seconds
	var lastEnd time.Duration
	waits := make([]time.Duration, 0, len(in.Jobs))
	for i := range in.Jobs {
		o := &in.Jobs[i]
		r.Preemptions += o.Preemptions
		gpus := float64(o.GPUMilli) / 1000
		busy += gpus * o.PreemptedRun.Seconds()
		if o.Started {
			if s, e := max(o.Start, w.Start), min(o.end(w), w.End); e > s {
				busy += gpus * (e - s).Seconds()
			}
		}
		if !o.Finished {
			continue
		}
		r.Finished++
		wait, run, jct := o.Start-o.Submit, o.End-o.Start, o.End-o.Submit
		waits = append(waits, wait)
		sumWait += wait.Seconds()
		sumJCT += jct.Seconds()
		sumBSLD += max(1, jct.Seconds()/max(run, BSLDThreshold).Seconds())
		lastEnd = max(lastEnd, o.End)
	}
	if span := (w.End - w.Start).Seconds(); span > 0 {
		r.Utilization = busy / (float64(in.ClusterGPUs) * span)
	}
	if n := float64(r.Finished); n > 0 {
		r.AvgWait = seconds(sumWait / n)
		r.AvgJCT = seconds(sumJCT / n)
		r.AvgBSLD = sumBSLD / n
		r.P95Wait = percentile(waits, 95)
		first := in.Jobs[0].Submit
		for i := range in.Jobs {
			first = min(first, in.Jobs[i].Submit)
		}
		r.Makespan = lastEnd - first
	}
	return r, nil
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// xs, sorting xs: the ceil(p/100 x n)-th smallest value.
func percentile(xs []time.Duration, p int) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	rank := (p*len(xs) + 99) / 100 // ceil in integers: no float rounding at exact ranks
	return xs[max(rank, 1)-1]
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// ds without modifying ds: the ceil(p/100 x n)-th smallest value; 0 for
// an empty slice.
func Percentile(ds []time.Duration, p int) time.Duration {
	return percentile(slices.Clone(ds), min(max(p, 1), 100))
}

// Waits returns the waits (Start - Submit) of the finished jobs, sorted
// ascending: the data of a wait-time CDF.
func Waits(jobs []Outcome) []time.Duration {
	n := 0
	for i := range jobs {
		if jobs[i].Finished {
			n++
		}
	}
	var ws []time.Duration
	if n > 0 {
		ws = make([]time.Duration, 0, n)
	}
	for i := range jobs {
		if jobs[i].Finished {
			ws = append(ws, jobs[i].Start-jobs[i].Submit)
		}
	}
	slices.Sort(ws)
	return ws
}

// seconds converts float seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * 1e9))
}
