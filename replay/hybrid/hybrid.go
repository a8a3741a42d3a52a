// Package hybrid is the hybrid-federation experiment (`berth replay
// --experiment hybrid`, docs/backends/federation.md): one cluster shared
// by training gangs and inference services, run four ways:
//
//   - dedicated: a static 60/40 split of the nodes, each side with its own
//     system's policy (training FIFO with EASY backfill, as SLURM; the
//     inference side as Kubernetes: priority, no backfill);
//   - static: berth on the same static split (training: priority order
//     with conservative backfill and topology-aware gangs);
//   - federated: berth with the federation's rebalancer
//     (backends/federation.Plan) moving idle nodes between the pools every
//     interval by demand;
//   - colocated: the static split, with inference replicas also taking
//     idle GPUs of training nodes, evicted at once (at no cost) when a
//     training job needs them: an optimistic bound in this experiment's
//     fluid inference model (the engine's own co-location is measured by
//     replay/serving).
//
// Training jobs are placed by a real engine.Engine on the training pool's
// nodes (nodes the pool does not own are cordoned). Inference is a fluid
// model: each service wants a number of one-GPU replicas that follows a
// seeded day/night curve; the replicas that fit on the inference pool's
// GPUs run (packed onto its nodes in order), the rest are shortfall.
// Node moves are instantaneous once the node is idle.
package hybrid

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// Variants of the experiment, in report order.
const (
	Dedicated = "dedicated"
	Static    = "static"
	Federated = "federated"
	Colocated = "colocated"
)

// Variants returns every variant name.
func Variants() []string { return []string{Dedicated, Static, Federated, Colocated} }

// ErrInvalid: a bad Config.
var ErrInvalid = errors.New("hybrid: invalid config")

// Config is one experiment.
type Config struct {
	// Nodes x GPUsPerNode is the cluster; default 40 x 8.
	Nodes       int
	GPUsPerNode int
	// TrainingShare is the training pool's share of the nodes (and its
	// quota); default 0.6.
	TrainingShare float64
	// Duration is the measured horizon; default 3 days. Training jobs
	// submitted after it are not replayed.
	Duration time.Duration
	// Seed draws the synthetic training jobs and the services' curves.
	Seed int64
	// Training jobs; nil: a synthetic default (SyntheticTraining).
	// Submit is an offset from the start. Jobs larger than the training
	// pool's guaranteed half are left out (counted in Row.Dropped).
	Training []workload.Job
	// TrainingLoad is the synthetic training workload's offered load, as
	// a share of all the cluster's GPUs; default 0.5 (5/6 of the training
	// pool's 60%).
	TrainingLoad float64
	// Services is the number of inference services; default 12. Their
	// replicas peak at PeakShare of the cluster's GPUs (default 0.45) in
	// the afternoon and fall to TroughShare (default 0.12) at night.
	Services    int
	PeakShare   float64
	TroughShare float64
	// Rebalance tunes the federated variant (defaults: 15 minutes, 2
	// moves a round).
	Rebalance federation.RebalanceConfig
	// PreemptOnReclaim (federated): when the inference pool reclaims a
	// busy training node, the training jobs on it are requeued at once
	// (their work so far is lost; they wait again from the front of the
	// queue, keeping their submit time) and the node moves now, instead of
	// draining until they end (federation.Config.PreemptOnReclaim).
	PreemptOnReclaim bool
	// ReferenceGPUs is the cluster size, in GPUs, that TrainingLoad,
	// PeakShare and TroughShare are shares of; 0: this cluster's own
	// (Nodes x GPUsPerNode). A fixed ReferenceGPUs makes the demand the
	// same whatever the cluster's size (replay/capacity).
	ReferenceGPUs int
	// Autoscale, when not nil, turns on node autoscaling: Nodes is then
	// the most nodes the cluster may have, nodes boot when demand asks
	// and are turned off when idle, and only nodes up or booting are paid
	// (Row.PaidGPUHours).
	Autoscale *Autoscale
}

// Autoscale is the node autoscaling of a run (Config.Autoscale).
//
// Every minute: a node asked for boots for BootDelay (paid, not usable)
// and then joins its pool; the inference pool asks for the nodes its
// replicas wanted (plus InferenceHeadroom) need beyond those it has, and
// turns off the nodes left without replicas for ScaleDownDelay; the
// training pool asks Training for a plan (autoscale.Decide's shape) from
// its jobs pending and its nodes, and applies it: the nodes a scale-up
// asks for, and the idle ones it scales down. Without federation, each
// pool grows within its own share of the nodes (TrainingShare); in the
// federated variant a pool that needs nodes first takes idle ones of the
// other pool (a node move, at once), then boots any node of the cluster
// that is off. In the colocated variant the inference pool counts the
// idle GPUs of training nodes before asking for nodes. A run starts with
// the inference nodes its first minute wants up and every training node
// off.
type Autoscale struct {
	// Training plans the training pool's scale-ups and scale-downs;
	// required.
	Training TrainingScaler
	// Policy is passed to Training in autoscale.Config (GangAware if
	// empty).
	Policy autoscale.Policy
	// BootDelay: from asking for a node to its joining its pool; default
	// 10 minutes.
	BootDelay time.Duration
	// ScaleDownDelay: an idle node is turned off after this long; default
	// 10 minutes (cluster-autoscaler's scale-down-unneeded-time).
	ScaleDownDelay time.Duration
	// InferenceHeadroom: the inference pool keeps nodes for this share of
	// replicas beyond those wanted (0.1: 10% more), so that a rise within
	// the boot delay is served; 0..1, default 0.
	InferenceHeadroom float64
}

// TrainingScaler plans one round of the training pool's node autoscaling
// at now: cfg has one pool (the training pool, its Max the nodes it may
// have at most now), nodes are its nodes up or booting, demand its
// pending jobs in submission order. autoscale.Decide has this shape.
type TrainingScaler func(now time.Time, cfg autoscale.Config, nodes []autoscale.Node, demand []autoscale.Demand) (autoscale.Plan, error)

func (c Config) withDefaults() (Config, error) {
	if c.Nodes == 0 {
		c.Nodes = 40
	}
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 8
	}
	if c.TrainingShare == 0 {
		c.TrainingShare = 0.6
	}
	if c.Duration == 0 {
		c.Duration = 72 * time.Hour
	}
	if c.TrainingLoad == 0 {
		c.TrainingLoad = 0.5
	}
	if c.Services == 0 {
		c.Services = 12
	}
	if c.PeakShare == 0 {
		c.PeakShare = 0.45
	}
	if c.TroughShare == 0 {
		c.TroughShare = 0.12
	}
	c.Rebalance = c.Rebalance.WithDefaults()
	if c.Autoscale != nil {
		a := *c.Autoscale
		if a.BootDelay == 0 {
			a.BootDelay = 10 * time.Minute
		}
		if a.ScaleDownDelay == 0 {
			a.ScaleDownDelay = 10 * time.Minute
		}
		switch {
		case a.Training == nil:
			return c, fmt.Errorf("%w: autoscaling without a training scaler", ErrInvalid)
		case a.BootDelay < 0 || a.BootDelay > 24*time.Hour || a.ScaleDownDelay < 0 || a.ScaleDownDelay > 24*time.Hour:
			return c, fmt.Errorf("%w: boot delay %v, scale-down delay %v (0..24h)", ErrInvalid, a.BootDelay, a.ScaleDownDelay)
		case !(a.InferenceHeadroom >= 0 && a.InferenceHeadroom <= 1):
			return c, fmt.Errorf("%w: inference headroom %v not in [0,1]", ErrInvalid, a.InferenceHeadroom)
		}
		c.Autoscale = &a
	}
	switch {
	case c.ReferenceGPUs < 0 || c.ReferenceGPUs > 10000*topo.MaxGPUsPerNode:
		return c, fmt.Errorf("%w: reference GPUs %d", ErrInvalid, c.ReferenceGPUs)
	case c.Nodes < 2 || c.Nodes > 10000, c.GPUsPerNode < 1 || c.GPUsPerNode > topo.MaxGPUsPerNode:
		return c, fmt.Errorf("%w: %d nodes x %d GPUs", ErrInvalid, c.Nodes, c.GPUsPerNode)
	case c.TrainingShare <= 0 || c.TrainingShare >= 1:
		return c, fmt.Errorf("%w: training share %v not in (0,1)", ErrInvalid, c.TrainingShare)
	case c.Duration < time.Hour || c.Duration > 60*24*time.Hour:
		return c, fmt.Errorf("%w: duration %v (1h..60d)", ErrInvalid, c.Duration)
	case c.Services < 1 || c.PeakShare <= 0 || c.PeakShare > 1 || c.TroughShare < 0 || c.TroughShare > c.PeakShare:
		return c, fmt.Errorf("%w: %d services, peak %v, trough %v", ErrInvalid, c.Services, c.PeakShare, c.TroughShare)
	}
	return c, nil
}

// Point is one sample of a run's time series (every 15 minutes).
type Point struct {
	Hours            float64
	Utilization      float64 // of all GPUs, 0..1
	InferenceGPUs    int     // GPUs the inference pool owns (with borrowed ones for colocated)
	InferenceWanted  int     // replicas wanted
	TrainingBusyGPUs int
	// UpGPUs: GPUs of nodes up or booting (paid); all of them without
	// autoscaling.
	UpGPUs int
}

// Row is one variant's result.
type Row struct {
	Variant string `json:"variant"`
	// Utilization: busy GPU-time (training jobs + running replicas) over
	// all GPU-time of the horizon.
	Utilization float64 `json:"utilization"`
	// TrainingAvgWaitS: mean wait of the training jobs submitted in the
	// horizon; a job not started by its end counts its wait so far.
	TrainingAvgWaitS float64 `json:"training_avg_wait_s"`
	// TrainingAvgSlowdown: mean bounded slowdown (wait + run) / max(run,
	// 10 s) of the training jobs that started.
	TrainingAvgSlowdown float64 `json:"training_avg_slowdown"`
	// InferenceShortfallReplicaMin: replica-minutes wanted but not running.
	InferenceShortfallReplicaMin float64 `json:"inference_shortfall_replica_min"`
	// NodeMoves: nodes moved between the pools (federated only).
	NodeMoves int `json:"node_moves"`
	// TrainingPreemptions: training jobs requeued to empty a reclaimed
	// node (federated with PreemptOnReclaim); TrainingLostGPUH the GPU-hours
	// they had run (counted in Utilization as busy, lost as work).
	TrainingPreemptions int     `json:"training_preemptions"`
	TrainingLostGPUH    float64 `json:"training_lost_gpu_h"`
	// TrainingJobs submitted in the horizon, TrainingStarted of them
	// started, Dropped left out (larger than the guaranteed pool).
	TrainingJobs    int     `json:"training_jobs"`
	TrainingStarted int     `json:"training_started"`
	Dropped         int     `json:"dropped"`
	Series          []Point `json:"-"`
	// TrainingP95WaitS: the 95th percentile (nearest rank) of the waits
	// TrainingAvgWaitS averages.
	TrainingP95WaitS float64 `json:"-"`
	// InferenceWantedReplicaMin: replica-minutes wanted in the horizon.
	InferenceWantedReplicaMin float64 `json:"-"`
	// BusyGPUHours: GPU-hours of training jobs and running replicas;
	// PaidGPUHours: GPU-hours of the nodes up or booting (all the
	// cluster's without autoscaling).
	BusyGPUHours float64 `json:"-"`
	PaidGPUHours float64 `json:"-"`
	// ScaleUps and ScaleDowns count nodes booted and turned off
	// (autoscaling only).
	ScaleUps   int `json:"-"`
	ScaleDowns int `json:"-"`
}

// SyntheticTraining draws a default training workload over d: Poisson
// arrivals, gangs of 1..32 GPUs (multi-node ones in whole 8-GPU nodes),
// log-normal runtimes (median 50 minutes, capped at 12 hours), offered at
// about load x the GPUs of a cluster of gpus GPUs.
func SyntheticTraining(seed int64, d time.Duration, gpus int, load float64) []workload.Job {
	rng := rand.New(rand.NewSource(seed))
	sizes := []int{1, 2, 4, 8, 16, 32}
	weights := []float64{0.3, 0.2, 0.15, 0.2, 0.1, 0.05}
	var meanGPU float64
	for i, s := range sizes {
		meanGPU += float64(s) * weights[i]
	}
	const median = 50 * time.Minute
	const sigma = 1.0
	meanRun := median.Hours() * math.Exp(sigma*sigma/2) // hours
	rate := load * float64(gpus) / (meanGPU * meanRun)  // jobs per hour
	var out []workload.Job
	at := time.Duration(0)
	for i := 0; ; i++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Hour))
		if at >= d {
			break
		}
		u, g := rng.Float64(), sizes[len(sizes)-1]
		for k, w := range weights {
			if u < w {
				g = sizes[k]
				break
			}
			u -= w
		}
		run := time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
		run = min(max(run, time.Minute), 12*time.Hour).Round(time.Second)
		est := time.Duration(float64(run) * (1 + 2*rng.Float64())).Round(time.Minute)
		out = append(out, workload.Job{ID: "t" + strconv.Itoa(i), Submit: at, Runtime: run, Estimate: est, GPUs: g, NumGPU: g})
	}
	return out
}

// curve is the replicas all services want at t (offset from start).
type services struct {
	base, amp []float64 // per service
	peakHour  []float64
	noise     [][]float64 // per service, per 15-minute slot
}

func newServices(cfg Config, rng *rand.Rand) services {
	total := float64(cfg.Nodes * cfg.GPUsPerNode)
	if cfg.ReferenceGPUs > 0 {
		total = float64(cfg.ReferenceGPUs)
	}
	hi, lo := cfg.PeakShare*total, cfg.TroughShare*total
	s := services{}
	slots := int(cfg.Duration/(15*time.Minute)) + 1
	w := make([]float64, cfg.Services)
	var sum float64
	for i := range w {
		w[i] = 0.5 + rng.Float64()
		sum += w[i]
	}
	for i := range cfg.Services {
		share := w[i] / sum
		s.base = append(s.base, share*(hi+lo)/2)
		s.amp = append(s.amp, share*(hi-lo)/2)
		s.peakHour = append(s.peakHour, 13+3*rng.Float64())
		n := make([]float64, slots)
		for k := range n {
			n[k] = 1 + 0.1*rng.NormFloat64()
		}
		s.noise = append(s.noise, n)
	}
	return s
}

func (s services) wanted(t time.Duration) int {
	h := t.Hours()
	slot := int(t / (15 * time.Minute))
	var sum int
	for i := range s.base {
		v := s.base[i] + s.amp[i]*math.Cos(2*math.Pi*(h-s.peakHour[i])/24)
		if slot < len(s.noise[i]) {
			v *= s.noise[i][slot]
		}
		sum += max(0, int(math.Round(v)))
	}
	return sum
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	poolTrain = "training"
	poolInfer = "inference"
)

type tjob struct {
	w        workload.Job
	gpus     int
	start    time.Time
	started  bool
	members  []engine.Member
	finished bool
}

type finish struct {
	at  time.Time
	job string
}

// Run runs one variant.
func Run(ctx context.Context, cfg Config, variant string) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	if !slices.Contains(Variants(), variant) {
		return Row{}, fmt.Errorf("%w: variant %q (want one of %v)", ErrInvalid, variant, Variants())
	}
	rng := rand.New(rand.NewSource(cfg.Seed))
	svc := newServices(cfg, rng)
	train := cfg.Training
	if train == nil {
		ref := cfg.Nodes * cfg.GPUsPerNode
		if cfg.ReferenceGPUs > 0 {
			ref = cfg.ReferenceGPUs
		}
		train = SyntheticTraining(cfg.Seed, cfg.Duration, ref, cfg.TrainingLoad)
	}
	per := cfg.GPUsPerNode
	trainNodes := int(math.Round(cfg.TrainingShare * float64(cfg.Nodes)))
	trainNodes = min(max(trainNodes, 1), cfg.Nodes-1)
	// Every variant replays the same jobs: those that fit the training
	// pool's guaranteed share, which the federated variant may shrink to.
	maxGPUs := int(cfg.Rebalance.MinShare * float64(trainNodes*per))

	policy := "conservative"
	if variant == Dedicated {
		policy = "easy"
	}
	ec, err := replay.EngineConfig(policy)
	if err != nil {
		return Row{}, err
	}
	names := make([]string, cfg.Nodes)
	owner := make([]string, cfg.Nodes)
	lastMove := make([]time.Time, cfg.Nodes)
	draining := make([]string, cfg.Nodes) // pool a draining training node moves to
	as := cfg.Autoscale
	// Autoscaling: each node's power state, when a booting one is up, when
	// an idle one became idle, whether a reservation holds GPUs of it.
	power := make([]nodePower, cfg.Nodes)
	bootAt := make([]time.Time, cfg.Nodes)
	idleSince := make([]time.Time, cfg.Nodes)
	reserved := make([]bool, cfg.Nodes)
	initInfer := cfg.Nodes
	if as != nil {
		initInfer = nodesFor(int(math.Ceil(float64(svc.wanted(0))*(1+as.InferenceHeadroom))), per)
	}
	spec := topo.Spec{}
	for i := range cfg.Nodes {
		names[i] = fmt.Sprintf("n%03d", i)
		owner[i] = poolTrain
		st := topo.Ready
		if i >= trainNodes {
			owner[i] = poolInfer
			st = topo.Cordoned
		}
		if as != nil && (i < trainNodes || i-trainNodes >= initInfer) {
			power[i], st = powerOff, topo.Cordoned
		}
		spec.Nodes = append(spec.Nodes, topo.NodeSpec{Name: names[i], GPUs: per, GPUModel: "H100", State: st})
	}
	ec.Cluster = spec
	ec.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: poolTrain}}}
	ec.Start = start
	ec.MIG.Disabled = true
	e, err := engine.New(ec)
	if err != nil {
		return Row{}, fmt.Errorf("hybrid: engine: %w", err)
	}

	row := Row{Variant: variant}
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
		if g > maxGPUs {
			row.Dropped++
			continue
		}
		if _, dup := jobs[w.ID]; dup {
			return Row{}, fmt.Errorf("%w: duplicate training job %q", ErrInvalid, w.ID)
		}
		j := &tjob{w: w, gpus: g}
		jobs[w.ID] = j
		order = append(order, j)
	}
	slices.SortStableFunc(order, func(a, b *tjob) int { return cmp.Compare(a.w.Submit, b.w.Submit) })
	row.TrainingJobs = len(order)

	nodeIdx := map[string]int{}
	for i, n := range names {
		nodeIdx[n] = i
	}
	used := make([]int, cfg.Nodes) // training GPUs in use per node
	var fin []finish
	pending := map[string]*tjob{}
	var trainBusy int
	var lastReserved float64
	end := start.Add(cfg.Duration)
	next := 0
	minute := start
	var busyGPUMin, shortfall, wantedMin, paidGPUMin float64
	total := float64(cfg.Nodes * per)
	step := func(ev engine.Event) error {
		if err := e.Step(ev); err != nil {
			return fmt.Errorf("hybrid: %s: step %v: %w", variant, ev.Kind, err)
		}
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return Row{}, err
		}
		// The next instant: a submission, a finish or a minute.
		t := minute
		if next < len(order) {
			if s := start.Add(order[next].w.Submit); s.Before(t) {
				t = s
			}
		}
		if len(fin) > 0 && fin[0].at.Before(t) {
			t = fin[0].at
		}
		if !t.Before(end) {
			break
		}
		for len(fin) > 0 && !fin[0].at.After(t) {
			f := fin[0]
			fin = fin[1:]
			j := jobs[f.job]
			j.finished = true
			for _, m := range j.members {
				used[nodeIdx[m.Node]] -= len(m.GPUs)
			}
			trainBusy -= j.gpus
			if err := step(engine.Finished(t, f.job)); err != nil {
				return Row{}, err
			}
		}
		for next < len(order) && !start.Add(order[next].w.Submit).After(t) {
			j := order[next]
			next++
			pending[j.w.ID] = j
			if err := step(engine.Submitted(t, trainingJob(j, t, per))); err != nil {
				return Row{}, err
			}
		}
		if t.Equal(minute) {
			// Booted nodes join their pool.
			for i := range power {
				if power[i] == powerBooting && !bootAt[i].After(t) {
					power[i], idleSince[i] = powerOn, t
					if owner[i] == poolTrain {
						if err := step(engine.NodeChanged(t, names[i], topo.Ready, nil)); err != nil {
							return Row{}, err
						}
					}
				}
			}
			if err := step(engine.Tick(t)); err != nil {
				return Row{}, err
			}
			offset := t.Sub(start)
			wanted := svc.wanted(offset)
			inferOwned, up := 0, 0
			for i := range owner {
				if power[i] != powerOff {
					up += per
				}
				if owner[i] == poolInfer && power[i] == powerOn {
					inferOwned += per
				}
			}
			capacity := inferOwned
			if variant == Colocated {
				for i := range owner {
					if owner[i] == poolTrain && power[i] == powerOn {
						capacity += per - used[i]
					}
				}
			}
			running := min(wanted, capacity)
			shortfall += float64(wanted - running)
			wantedMin += float64(wanted)
			busyGPUMin += float64(trainBusy + running)
			paidGPUMin += float64(up)
			if offset%(15*time.Minute) == 0 {
				row.Series = append(row.Series, Point{Hours: offset.Hours(), Utilization: float64(trainBusy+running) / total,
					InferenceGPUs: capacity, InferenceWanted: wanted, TrainingBusyGPUs: trainBusy, UpGPUs: up})
			}
			// Drained training nodes move once empty.
			for i := range draining {
				if draining[i] != "" && used[i] == 0 {
					owner[i], lastMove[i], draining[i] = draining[i], t, ""
					row.NodeMoves++
				}
			}
			if variant == Federated && offset > 0 && offset%cfg.Rebalance.Interval == 0 {
				moves := rebalance(cfg, t, owner, power, lastMove, draining, used, names, pending, wanted, running, lastReserved)
				for _, mv := range moves {
					i := nodeIdx[mv.Host]
					if mv.Drain && owner[i] == poolTrain && used[i] > 0 && cfg.PreemptOnReclaim {
						// Requeue the jobs on it; the node moves now.
						for _, j := range order {
							if !j.started || j.finished || !slices.ContainsFunc(j.members, func(m engine.Member) bool { return m.Node == mv.Host }) {
								continue
							}
							for _, m := range j.members {
								used[nodeIdx[m.Node]] -= len(m.GPUs)
							}
							trainBusy -= j.gpus
							fin = slices.DeleteFunc(fin, func(f finish) bool { return f.job == j.w.ID })
							row.TrainingPreemptions++
							row.TrainingLostGPUH += float64(j.gpus) * t.Sub(j.start).Hours()
							j.started, j.members = false, nil
							pending[j.w.ID] = j
							if err := step(engine.Finished(t, j.w.ID)); err != nil {
								return Row{}, err
							}
							if err := step(engine.Submitted(t, trainingJob(j, start.Add(j.w.Submit), per))); err != nil {
								return Row{}, err
							}
						}
					}
					if mv.Drain && owner[i] == poolTrain && used[i] > 0 {
						draining[i] = mv.To
						if err := step(engine.NodeChanged(t, mv.Host, topo.Cordoned, nil)); err != nil {
							return Row{}, err
						}
						continue
					}
					// (A busy inference node is emptied at once: its
					// replicas are stateless and counted as shortfall
					// if they no longer fit.)
					owner[i], lastMove[i] = mv.To, t
					st := topo.Cordoned
					if mv.To == poolTrain {
						st = topo.Ready
					}
					if err := step(engine.NodeChanged(t, mv.Host, st, nil)); err != nil {
						return Row{}, err
					}
					row.NodeMoves++
				}
			}
			if as != nil {
				a := autoscaler{cfg: cfg, variant: variant, trainNodes: trainNodes, t: t, owner: owner, power: power, bootAt: bootAt,
					idleSince: idleSince, reserved: reserved, used: used, draining: draining, lastMove: lastMove, names: names, row: &row, step: step}
				if err := a.inference(wanted, running); err != nil {
					return Row{}, err
				}
				if err := a.training(pending); err != nil {
					return Row{}, err
				}
			}
			minute = minute.Add(time.Minute)
		}
		rd := e.Ready()
		if as != nil {
			clear(reserved)
			for _, r := range rd.Reservations {
				if r.GPUs == nil {
					continue
				}
				for it := r.GPUs.Iterator(); it.HasNext(); {
					if n, err := e.Cluster().NodeOfGPU(it.Next()); err == nil && int(n) < len(reserved) {
						reserved[n] = true
					}
				}
			}
		}
		lastReserved = 0
		for _, r := range rd.Reservations {
			if r.GPUs != nil && r.Start.Before(t.Add(cfg.Rebalance.Interval)) {
				lastReserved += float64(r.GPUs.GetCardinality())
			}
		}
		for _, b := range rd.Binds {
			j := jobs[b.Job]
			if j == nil {
				return Row{}, fmt.Errorf("hybrid: %s: bind of unknown job %s", variant, b.Job)
			}
			for _, m := range b.Members {
				i, ok := nodeIdx[m.Node]
				if !ok || owner[i] != poolTrain || power[i] != powerOn {
					return Row{}, fmt.Errorf("hybrid: %s: job %s bound on %s, not a training node", variant, b.Job, m.Node)
				}
				used[i] += len(m.GPUs)
			}
			j.members, j.started, j.start = b.Members, true, rd.At
			delete(pending, b.Job)
			trainBusy += j.gpus
			fin = insertFinish(fin, finish{at: rd.At.Add(j.w.Runtime), job: b.Job})
		}
		if len(rd.Rejected) > 0 {
			return Row{}, fmt.Errorf("hybrid: %s: rejected %v", variant, rd.Rejected[0])
		}
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			return Row{}, fmt.Errorf("hybrid: %s: advance: %w", variant, err)
		}
	}
	minutes := cfg.Duration.Minutes()
	row.Utilization = busyGPUMin / (total * minutes)
	row.InferenceShortfallReplicaMin = shortfall
	row.InferenceWantedReplicaMin = wantedMin
	row.BusyGPUHours = busyGPUMin / 60
	row.PaidGPUHours = paidGPUMin / 60
	var wait, slow float64
	waits := make([]float64, 0, len(order))
	for _, j := range order {
		sub := start.Add(j.w.Submit)
		if j.started {
			row.TrainingStarted++
			w := j.start.Sub(sub).Seconds()
			wait += w
			waits = append(waits, w)
			slow += (w + j.w.Runtime.Seconds()) / math.Max(j.w.Runtime.Seconds(), 10)
		} else {
			wait += end.Sub(sub).Seconds()
			waits = append(waits, end.Sub(sub).Seconds())
		}
	}
	if len(waits) > 0 {
		slices.Sort(waits)
		row.TrainingP95WaitS = waits[int(math.Ceil(0.95*float64(len(waits))))-1]
	}
	if len(order) > 0 {
		row.TrainingAvgWaitS = wait / float64(len(order))
	}
	if row.TrainingStarted > 0 {
		row.TrainingAvgSlowdown = slow / float64(row.TrainingStarted)
	}
	return row, nil
}

// trainingJob is j as submitted to the engine at submit.
func trainingJob(j *tjob, submit time.Time, per int) *queue.Job {
	est := j.w.Estimate
	if est <= 0 {
		est = j.w.Runtime
	}
	return &queue.Job{ID: j.w.ID, Queue: poolTrain, Class: queue.ClassTraining, Submit: submit,
		Request: request(j.gpus, per), RuntimeEstimate: est}
}

func insertFinish(fs []finish, f finish) []finish {
	i, _ := slices.BinarySearchFunc(fs, f, func(a, b finish) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.job, b.job)
	})
	return slices.Insert(fs, i, f)
}

// request is a training gang: one member up to a node, whole nodes above.
func request(g, per int) gang.Request {
	if g <= per {
		return gang.Request{Groups: []gang.Group{{Name: "worker", Members: 1, GPUsPerMember: g}}}
	}
	return gang.Request{Groups: []gang.Group{{Name: "worker", Members: g / per, GPUsPerMember: per}}}
}

// rebalance builds the rebalancer's inputs from the run's state and
// returns federation.Plan's moves.
func rebalance(cfg Config, now time.Time, owner []string, power []nodePower, lastMove []time.Time, draining []string, used []int, names []string,
	pending map[string]*tjob, wanted, running int, reserved float64) []federation.Move {
	per := cfg.GPUsPerNode
	var pendH float64
	for _, j := range pending {
		est := j.w.Estimate
		if est <= 0 {
			est = j.w.Runtime
		}
		pendH += float64(j.gpus) * est.Hours()
	}
	// Replicas are packed onto the inference nodes in name order: the
	// first ceil(replicas/per) are busy.
	busyInfer := (running + per - 1) / per
	hosts := make([]federation.HostView, 0, len(names))
	k := 0
	for i, n := range names {
		if power[i] != powerOn {
			continue // off or booting: not a host to move
		}
		h := federation.HostView{Host: n, Owner: owner[i], Pools: []string{poolTrain, poolInfer}, GPUs: per, LastMove: lastMove[i], MovingTo: draining[i]}
		if owner[i] == poolTrain {
			h.Busy = used[i] > 0
		} else {
			h.Busy = k < busyInfer
			k++
		}
		hosts = append(hosts, h)
	}
	return federation.Plan(now, cfg.Rebalance, []federation.PoolDemand{
		{Pool: poolTrain, Quota: cfg.TrainingShare, PendingGPUHours: pendH, ReservedGPUs: reserved},
		{Pool: poolInfer, Quota: 1 - cfg.TrainingShare, ReservedGPUs: float64(max(0, wanted-busyInfer*per))},
	}, hosts)
}
