// Package serving is the serving experiment (`berth replay --experiment
// serving`, docs/serving.md): day/night inference services, scaled by the
// HPA Autoscaler of package serving from a seeded diurnal traffic model,
// share one cluster with training jobs, run three ways:
//
//   - no-colocation: inference only on its own nodes and within its own
//     quota (guaranteed replicas, never borrowing): training's idle GPUs
//     stay idle for it;
//   - colocation: what does not fit there runs as best-effort replicas
//     on idle training GPUs, borrowing the training queue's idle quota;
//     reclaim preemption (Preemption.Reclaim) stops them, with their
//     grace period, when training needs the GPUs back;
//   - colocation-packing: co-location, and replicas whose shape is a
//     fraction of a GPU (openb pods of less than a whole GPU) run as GPU
//     fractions on shared GPUs (MPS / time-slicing), packed several to a
//     GPU, instead of taking a whole GPU each. They are packed on the
//     inference nodes only: a replica that borrows a training node takes
//     a whole GPU. (Letting fractional best-effort replicas onto training
//     nodes stalled training in this model, for a cause not yet traced:
//     see docs/serving.md.)
//
// Each service is two engine services: its home replicas (guaranteed, on
// the inference nodes, desired = the Autoscaler's count) and, with
// co-location, an overflow service "<name>-borrow" (best-effort, on the
// training nodes) whose desired count is, each minute, the home replicas
// the Autoscaler wants that did not run in the last cycle. A replica that
// spills over so starts a cycle after its home replica failed to.
//
// Everything, training jobs and replicas, is placed by one real
// engine.Engine, one cycle a minute: submissions and finishes are rounded
// to the minute; each minute every service's request rate is fed to the
// Autoscaler, whose ServiceScaled events go to the engine before the
// cycle. Training never borrows the inference queue's quota.
package serving

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/replay/hybrid"
	"github.com/berthsched/berth/serving"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// Policies of the experiment, in report order.
const (
	NoColocation      = "no-colocation"
	Colocation        = "colocation"
	ColocationPacking = "colocation-packing"
)

// Policies returns every policy name.
func Policies() []string { return []string{NoColocation, Colocation, ColocationPacking} }

// ErrInvalid: a bad Config.
var ErrInvalid = errors.New("serving replay: invalid config")

// Shape is one replica's request: GPUs whole GPUs, or (GPUs 1) Milli
// thousandths of one GPU when Milli < 1000.
type Shape struct {
	GPUs  int
	Milli int
}

// gpus is the shape's GPU amount; whole rounds a fraction up to a GPU.
func (s Shape) gpus(whole bool) float64 {
	if s.Milli > 0 && s.Milli < 1000 {
		if whole {
			return 1
		}
		return float64(s.Milli) / 1000
	}
	return float64(s.GPUs)
}

// BuiltinShapes is the replica mix used without the openb trace, close to
// the openb latency-sensitive (qos LS) GPU pods: 80% one whole GPU, 10%
// half a GPU, 8% a quarter, 1% two GPUs, 1% eight GPUs (100 entries,
// drawn uniformly).
func BuiltinShapes() []Shape {
	var out []Shape
	add := func(n int, s Shape) {
		for range n {
			out = append(out, s)
		}
	}
	add(80, Shape{GPUs: 1, Milli: 1000})
	add(10, Shape{GPUs: 1, Milli: 500})
	add(8, Shape{GPUs: 1, Milli: 250})
	add(1, Shape{GPUs: 2, Milli: 1000})
	add(1, Shape{GPUs: 8, Milli: 1000})
	return out
}

// OpenbShapes returns the shapes of the openb pods that the trace marks
// latency-sensitive (qos LS: online serving) and that ask for a GPU, one
// entry per pod in trace order: k whole GPUs (gpu_milli 1000) or a
// fraction of one. Nil when there are none.
func OpenbShapes(pods []workload.Job) []Shape {
	var out []Shape
	for _, p := range pods {
		if p.QoS != "LS" || p.NumGPU <= 0 || p.GPUMilli <= 0 {
			continue
		}
		switch {
		case p.GPUMilli >= 1000:
			out = append(out, Shape{GPUs: p.NumGPU, Milli: 1000})
		case p.NumGPU == 1:
			out = append(out, Shape{GPUs: 1, Milli: p.GPUMilli})
		}
	}
	return out
}

// Config is one run.
type Config struct {
	// Nodes x GPUsPerNode is the cluster; default 16 x 8.
	Nodes, GPUsPerNode int
	// TrainingShare is the training queue's share of the GPUs (its
	// nominal quota; the inference queue owns the rest); default 0.6.
	TrainingShare float64
	// Duration is the horizon; default 24 hours (it starts at midnight).
	Duration time.Duration
	// Seed draws the traffic, the services' shapes and the synthetic
	// training jobs.
	Seed int64
	// Training jobs (Submit: offsets); nil: hybrid.SyntheticTraining at
	// TrainingLoad (default 0.5 of all GPUs). Jobs larger than the
	// training quota are left out (Row.Dropped).
	Training     []workload.Job
	TrainingLoad float64
	// Services: default 8. Their replicas (at RatePerReplica requests per
	// second each, default 40) peak at PeakShare (default 0.45) of the
	// cluster's GPUs in the afternoon and fall to TroughShare (default
	// 0.12) at night, counted in the shapes' GPU amounts.
	Services       int
	PeakShare      float64
	TroughShare    float64
	RatePerReplica float64
	// Shapes to draw each service's replica from (uniformly); nil:
	// BuiltinShapes.
	Shapes []Shape
	// GracePeriod of a reclaimed replica; default 30 s.
	GracePeriod time.Duration
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 16
	}
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 8
	}
	if c.Duration == 0 {
		c.Duration = 24 * time.Hour
	}
	if c.Services == 0 {
		c.Services = 8
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = 30 * time.Second
	}
	def(&c.TrainingShare, 0.6)
	def(&c.TrainingLoad, 0.5)
	def(&c.PeakShare, 0.45)
	def(&c.TroughShare, 0.12)
	def(&c.RatePerReplica, 40)
	if c.Shapes == nil {
		c.Shapes = BuiltinShapes()
	}
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	switch {
	case c.Nodes < 2 || c.Nodes > 10000, c.GPUsPerNode < 1 || c.GPUsPerNode > topo.MaxGPUsPerNode:
		return bad("%d nodes x %d GPUs", c.Nodes, c.GPUsPerNode)
	case !(c.TrainingShare > 0 && c.TrainingShare < 1):
		return bad("training share %v not in (0,1)", c.TrainingShare)
	case c.Duration < time.Hour || c.Duration > 30*24*time.Hour:
		return bad("duration %v (1h..30d)", c.Duration)
	case c.Services < 1 || c.Services > 1000:
		return bad("%d services (1..1000)", c.Services)
	case !(c.PeakShare > 0 && c.PeakShare <= 1) || !(c.TroughShare >= 0 && c.TroughShare <= c.PeakShare):
		return bad("peak %v, trough %v", c.PeakShare, c.TroughShare)
	case !(c.RatePerReplica > 0) || math.IsInf(c.RatePerReplica, 0), !(c.TrainingLoad > 0 && c.TrainingLoad <= 4):
		return bad("rate per replica %v, training load %v", c.RatePerReplica, c.TrainingLoad)
	case c.GracePeriod < 0 || len(c.Shapes) == 0:
		return bad("grace period %v, %d shapes", c.GracePeriod, len(c.Shapes))
	}
	for _, s := range c.Shapes {
		if s.GPUs < 1 || s.GPUs > c.GPUsPerNode || s.Milli < 1 || s.Milli > 1000 || (s.Milli < 1000 && s.GPUs != 1) {
			return bad("shape %+v (want 1..%d whole GPUs, or one GPU's fraction)", s, c.GPUsPerNode)
		}
	}
	return c, nil
}

// Point is one sample of a run (every 15 minutes).
type Point struct {
	Hours            float64
	Utilization      float64 // of all GPUs, 0..1
	InferenceDesired int     // replicas the Autoscaler wants
	InferenceRunning int
	InferenceGPUs    float64 // GPUs the running replicas take
	TrainingBusyGPUs int
}

// Row is one policy's result.
type Row struct {
	Policy string `json:"policy"`
	// Utilization: busy GPU-time (training jobs and running replicas, a
	// fractional replica counting its fraction) over all GPU-time.
	Utilization float64 `json:"utilization"`
	// TrainingAvgWaitS: mean wait of the training jobs submitted in the
	// horizon; a job not started by the end counts its wait so far.
	TrainingAvgWaitS float64 `json:"training_avg_wait_s"`
	// InferenceShortfallReplicaMin: replica-minutes the Autoscaler wanted
	// that were not running (summed over services and minutes).
	InferenceShortfallReplicaMin float64 `json:"inference_shortfall_replica_min"`
	// ScaleUpLatencyCycles: mean cycles (one a minute) from a scale-up
	// event until the service runs the count it asked for (or a lower one
	// asked for since); a scale-up not met by the end counts its cycles so
	// far.
	ScaleUpLatencyCycles float64 `json:"scale_up_latency_cycles"`
	// ScaleUps: the scale-up events; ScaleDowns the scale-down events.
	ScaleUps   int `json:"scale_ups"`
	ScaleDowns int `json:"scale_downs"`
	// Reclaimed: replicas preempted to give training its GPUs back.
	Reclaimed int `json:"reclaimed"`
	// InferenceGPUH: GPU-hours of running replicas.
	InferenceGPUH float64 `json:"inference_gpu_h"`
	// TrainingJobs submitted in the horizon, TrainingStarted of them
	// started, Dropped left out (larger than the training quota).
	TrainingJobs    int     `json:"training_jobs"`
	TrainingStarted int     `json:"training_started"`
	Dropped         int     `json:"dropped"`
	Series          []Point `json:"-"`
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	qTrain = "training"
	qInfer = "inference"
	// poolLabel marks each node's pool: training jobs run on training
	// nodes; replicas on inference nodes only without co-location.
	poolLabel = "pool"
	// trainingPriority puts training jobs before the replicas (priority
	// 0) in the queue order, so that a blocked training job is among the
	// first to reclaim its GPUs from best-effort replicas.
	trainingPriority = 1
)

type tjob struct {
	w       workload.Job
	gpus    int
	started bool
	start   time.Time
	end     time.Time
}

// svc is one service of the traffic model: the engine service name
// (its home replicas, on inference nodes) and, with co-location, the
// overflow service over (best-effort replicas on training nodes).
type svc struct {
	name     string
	over     string
	max      int
	shape    Shape
	gpus     float64 // per replica, as placed
	running  int     // home and overflow replicas serving
	home     int     // home replicas serving
	overWant int     // the overflow service's desired count
	pending  []scaleUp
}

// overflowSuffix names a service's overflow service.
const overflowSuffix = "-borrow"

type replica struct {
	s    *svc
	over bool
}

type scaleUp struct {
	cycle  int
	target int
}

// Run runs one policy.
func Run(ctx context.Context, cfg Config, policy string) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	if !slices.Contains(Policies(), policy) {
		return Row{}, fmt.Errorf("%w: policy %q (want one of %s)", ErrInvalid, policy, strings.Join(Policies(), ", "))
	}
	per := cfg.GPUsPerNode
	totalGPUs := cfg.Nodes * per
	trainNodes := min(max(int(math.Round(cfg.TrainingShare*float64(cfg.Nodes))), 1), cfg.Nodes-1)
	trainGPUs := trainNodes * per
	coloc := policy != NoColocation
	packing := policy == ColocationPacking

	// Services: shapes, traffic, autoscalers.
	rng := workload.NewSplitMix64(uint64(cfg.Seed) ^ 0x736572766e67) // "servng"
	svcs := make([]*svc, cfg.Services)
	var meanGPU float64
	for i := range svcs {
		sh := cfg.Shapes[rng.Draw(uint64(len(cfg.Shapes)))]
		svcs[i] = &svc{name: fmt.Sprintf("svc%02d", i), shape: sh, gpus: sh.gpus(!packing)}
		meanGPU += sh.gpus(false) / float64(cfg.Services)
	}
	// The curve in replicas: peak replicas x mean GPU = PeakShare x GPUs.
	peakRate := cfg.PeakShare * float64(totalGPUs) / meanGPU * cfg.RatePerReplica
	troughRate := cfg.TroughShare * float64(totalGPUs) / meanGPU * cfg.RatePerReplica
	traffic, err := workload.NewDiurnal(workload.DiurnalConfig{Services: cfg.Services, Peak: peakRate, Trough: troughRate, Seed: uint64(cfg.Seed)})
	if err != nil {
		return Row{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}

	ec, err := replay.EngineConfig("conservative")
	if err != nil {
		return Row{}, err
	}
	spec := topo.Spec{ShareFreeGPUs: packing}
	for i := range cfg.Nodes {
		pool := qInfer
		if i < trainNodes {
			pool = qTrain
		}
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: fmt.Sprintf("n%03d", i), GPUs: per, GPUModel: "H100", Labels: map[string]string{poolLabel: pool}})
	}
	ec.Cluster = spec
	quota := func(n int, borrow bool) map[queue.ResourceName]queue.Quota {
		q := queue.Quota{Nominal: queue.WholeGPUs(int64(n))}
		if !borrow {
			q.BorrowingLimit = queue.Cap(0)
		}
		return map[queue.ResourceName]queue.Quota{queue.GPUMilli: q}
	}
	ec.Queues = queue.TreeSpec{
		Cohorts: []queue.CohortSpec{{Name: "site"}},
		Queues: []queue.QueueSpec{
			{Name: qTrain, Cohort: "site", Quota: quota(trainGPUs, false)},
			{Name: qInfer, Cohort: "site", Quota: quota(totalGPUs-trainGPUs, coloc)},
		},
	}
	ec.Start = start
	ec.MIG.Disabled = true
	ec.Preemption.Reclaim = coloc
	// Training jobs come before replicas in the order (trainingPriority),
	// and every blocked job may look for victims.
	ec.Preemption.MaxPreemptorsPerCycle = 64
	ec.Preemption.MaxVictimsPerCycle = 64
	e, err := engine.New(ec)
	if err != nil {
		return Row{}, fmt.Errorf("serving replay: engine: %w", err)
	}
	step := func(ev engine.Event) error {
		if err := e.Step(ev); err != nil {
			return fmt.Errorf("serving replay: %s: step %v: %w", policy, ev.Kind, err)
		}
		return nil
	}

	auto := serving.NewAutoscaler()
	byName := map[string]*svc{}
	for i, s := range svcs {
		byName[s.name] = s
		peakReplicas := traffic.Rate(i, time.Duration(traffic.PeakHour(i)*float64(time.Hour))) / cfg.RatePerReplica
		s.max = min(max(int(math.Ceil(2*peakReplicas)), 2), engine.MaxReplicas)
		h, err := serving.NewHPA(serving.HPAConfig{Min: 1, Max: s.max,
			Targets: []serving.Target{{Metric: serving.RequestRate, Value: cfg.RatePerReplica}}})
		if err != nil {
			return Row{}, err
		}
		desired := min(max(int(math.Ceil(traffic.Rate(i, 0)/cfg.RatePerReplica)), 1), s.max)
		if err := auto.Add(s.name, h, desired); err != nil {
			return Row{}, err
		}
		g := gang.Group{Members: 1, GPUsPerMember: s.shape.GPUs}
		if packing && s.shape.Milli < 1000 {
			g = gang.Group{Members: 1, GPUMilli: s.shape.Milli}
		}
		home := g
		home.Selector = map[string]string{poolLabel: qInfer}
		if err := step(engine.ServiceSet(start, &engine.Service{Name: s.name, Queue: qInfer, QoS: engine.QoSGuaranteed,
			Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{home}}},
			Min:     1, Max: s.max, Desired: desired})); err != nil {
			return Row{}, err
		}
		if coloc {
			// The overflow: best-effort replicas on idle training GPUs.
			s.over = s.name + overflowSuffix
			byName[s.over] = s
			// On training nodes a replica takes whole GPUs even when
			// packing: fractions are packed on the inference nodes only
			// (see the package doc).
			x := gang.Group{Members: 1, GPUsPerMember: s.shape.GPUs}
			x.Selector = map[string]string{poolLabel: qTrain}
			if err := step(engine.ServiceSet(start, &engine.Service{Name: s.over, Queue: qInfer, QoS: engine.QoSBestEffort,
				Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{x}}},
				Min:     0, Max: s.max, Desired: 0, GracePeriod: cfg.GracePeriod})); err != nil {
				return Row{}, err
			}
		}
		s.pending = append(s.pending, scaleUp{cycle: 0, target: desired})
	}

	// Training jobs.
	row := Row{Policy: policy}
	train := cfg.Training
	if train == nil {
		train = hybrid.SyntheticTraining(cfg.Seed, cfg.Duration, totalGPUs, cfg.TrainingLoad)
	}
	jobs := map[string]*tjob{}
	var order []*tjob
	for _, w := range train {
		if w.Submit < 0 || w.Submit >= cfg.Duration || w.GPUs <= 0 || w.Runtime <= 0 {
			continue
		}
		g := w.GPUs
		if g > per {
			g = (g + per - 1) / per * per
		}
		if g > trainGPUs {
			row.Dropped++
			continue
		}
		if _, dup := jobs[w.ID]; dup || strings.ContainsRune(w.ID, '/') {
			return Row{}, fmt.Errorf("%w: training job %q duplicated or with a '/'", ErrInvalid, w.ID)
		}
		j := &tjob{w: w, gpus: g}
		jobs[w.ID] = j
		order = append(order, j)
	}
	slices.SortStableFunc(order, func(a, b *tjob) int { return cmp.Compare(a.w.Submit, b.w.Submit) })
	row.TrainingJobs = len(order)

	running := map[string]replica{} // replicas serving
	var finishing []*tjob           // started training jobs by end
	next, trainBusy, cycle := 0, 0, 0
	var busyGPUMin, shortfall, latSum float64
	var latN int
	end := start.Add(cfg.Duration)
	for t := start; t.Before(end); t = t.Add(time.Minute) {
		if err := ctx.Err(); err != nil {
			return Row{}, err
		}
		if err := step(engine.Tick(t)); err != nil {
			return Row{}, err
		}
		for len(finishing) > 0 && !finishing[0].end.After(t) {
			j := finishing[0]
			finishing = finishing[1:]
			trainBusy -= j.gpus
			if err := step(engine.Finished(t, j.w.ID)); err != nil {
				return Row{}, err
			}
		}
		for next < len(order) && !start.Add(order[next].w.Submit).After(t) {
			j := order[next]
			next++
			if err := step(engine.Submitted(t, trainingJob(j, t, per))); err != nil {
				return Row{}, err
			}
		}
		off := t.Sub(start)
		for _, s := range svcs {
			if s.over == "" || cycle == 0 {
				continue
			}
			// The overflow covers the home replicas that did not run last
			// cycle (0 when all did).
			d, _ := auto.Desired(s.name)
			if w := min(max(d-s.home, 0), s.max); w != s.overWant {
				s.overWant = w
				if err := step(engine.ServiceScaled(t, s.over, w)); err != nil {
					return Row{}, err
				}
			}
		}
		for i, s := range svcs {
			ev, changed, err := auto.Observe(serving.Signal{At: t, Service: s.name, Metric: serving.RequestRate, Value: traffic.Rate(i, off)})
			if err != nil {
				return Row{}, err
			}
			if !changed {
				continue
			}
			if err := step(ev); err != nil {
				return Row{}, err
			}
			if d, _ := auto.Desired(s.name); d > s.running {
				row.ScaleUps++
				s.pending = append(s.pending, scaleUp{cycle: cycle, target: d})
			} else {
				row.ScaleDowns++
			}
		}
		rd := e.Ready()
		cycle++
		if len(rd.Rejected) > 0 {
			return Row{}, fmt.Errorf("serving replay: %s: rejected %v", policy, rd.Rejected[0])
		}
		gone := func(id string) bool {
			r, ok := running[id]
			if ok {
				delete(running, id)
				r.s.running--
				if !r.over {
					r.s.home--
				}
			}
			return ok
		}
		for _, st := range rd.Stops {
			gone(st.Job)
		}
		for _, p := range rd.Preemptions {
			if !strings.ContainsRune(p.Victim, '/') {
				return Row{}, fmt.Errorf("serving replay: %s: training job %s preempted", policy, p.Victim)
			}
			if gone(p.Victim) {
				row.Reclaimed++
			}
		}
		for _, b := range rd.Binds {
			if name, _, ok := strings.Cut(b.Job, "/"); ok {
				s := byName[name]
				if s == nil {
					return Row{}, fmt.Errorf("serving replay: %s: bind of unknown replica %s", policy, b.Job)
				}
				if _, dup := running[b.Job]; !dup {
					over := name != s.name
					running[b.Job] = replica{s: s, over: over}
					s.running++
					if !over {
						s.home++
					}
				}
				continue
			}
			j := jobs[b.Job]
			if j == nil {
				return Row{}, fmt.Errorf("serving replay: %s: bind of unknown job %s", policy, b.Job)
			}
			j.started, j.start = true, rd.At
			// Finishes fall on the minute (rounded up).
			j.end = rd.At.Add(j.w.Runtime).Add(time.Minute - 1).Truncate(time.Minute)
			trainBusy += j.gpus
			i, _ := slices.BinarySearchFunc(finishing, j, func(a, b *tjob) int {
				if c := a.end.Compare(b.end); c != 0 {
					return c
				}
				return cmp.Compare(a.w.ID, b.w.ID)
			})
			finishing = slices.Insert(finishing, i, j)
		}
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			return Row{}, fmt.Errorf("serving replay: %s: advance: %w", policy, err)
		}
		// The minute's books.
		var inferGPUs float64
		desiredAll, runningAll := 0, 0
		for _, s := range svcs {
			d, _ := auto.Desired(s.name)
			desiredAll += d
			runningAll += s.running
			inferGPUs += float64(s.running) * s.gpus
			shortfall += float64(max(d-s.running, 0))
			k := 0
			for _, u := range s.pending {
				if s.running >= min(u.target, d) {
					latSum += float64(cycle - u.cycle)
					latN++
					continue
				}
				s.pending[k] = u
				k++
			}
			s.pending = s.pending[:k]
		}
		busy := float64(trainBusy) + inferGPUs
		busyGPUMin += busy
		row.InferenceGPUH += inferGPUs / 60
		if off%(15*time.Minute) == 0 {
			row.Series = append(row.Series, Point{Hours: off.Hours(), Utilization: busy / float64(totalGPUs),
				InferenceDesired: desiredAll, InferenceRunning: runningAll, InferenceGPUs: inferGPUs, TrainingBusyGPUs: trainBusy})
		}
	}
	for _, s := range svcs {
		for _, u := range s.pending {
			latSum += float64(cycle - u.cycle)
			latN++
		}
	}
	if latN > 0 {
		row.ScaleUpLatencyCycles = latSum / float64(latN)
	}
	row.Utilization = busyGPUMin / (float64(totalGPUs) * cfg.Duration.Minutes())
	row.InferenceShortfallReplicaMin = shortfall
	var wait float64
	for _, j := range order {
		sub := start.Add(j.w.Submit)
		if j.started {
			row.TrainingStarted++
			wait += j.start.Sub(sub).Seconds()
		} else {
			wait += end.Sub(sub).Seconds()
		}
	}
	if len(order) > 0 {
		row.TrainingAvgWaitS = wait / float64(len(order))
	}
	return row, nil
}

// trainingJob is j as submitted at t (its submit time rounded up to the
// minute).
func trainingJob(j *tjob, t time.Time, per int) *queue.Job {
	est := j.w.Estimate
	if est <= 0 {
		est = j.w.Runtime
	}
	// The engine sees the runtime rounded up to the minute, as it runs.
	est = max(est, j.w.Runtime) + time.Minute
	sel := map[string]string{poolLabel: qTrain}
	req := gang.Request{Groups: []gang.Group{{Name: "worker", Members: 1, GPUsPerMember: j.gpus, Selector: sel}}}
	if j.gpus > per {
		req = gang.Request{Groups: []gang.Group{{Name: "worker", Members: j.gpus / per, GPUsPerMember: per, Selector: sel}}}
	}
	return &queue.Job{ID: j.w.ID, Queue: qTrain, Class: queue.ClassTraining, Submit: t, Request: req, RuntimeEstimate: est, Priority: trainingPriority}
}
