// Package capacity is the capacity experiment (`berth replay --experiment
// capacity`, docs/backends/federation.md): how many GPUs a site needs to
// buy, or pay for by the hour, to serve a fixed training and inference
// demand at its service levels, run each way the hybrid experiment
// (replay/hybrid) knows, with and without node autoscaling.
//
// The demand does not depend on the cluster's size: the training jobs
// (hybrid.SyntheticTraining drawn for a reference cluster, or a trace's)
// and the inference replicas of the hybrid's day/night model, in absolute
// replicas (shares of the reference cluster's GPUs). The service levels
// are a training p95 wait (every job submitted in the horizon; a job not
// started by its end counts its wait so far) and an inference shortfall
// (replica-minutes wanted but not running, as a percentage of those
// wanted).
//
// A fixed variant (dedicated, static, federated, colocated) is searched by
// bisection over the node count: the smallest cluster that meets both
// levels. An autoscaling variant (`<variant>+autoscale`) is searched by
// bisection over the cluster's maximum size, for each inference headroom
// setting (Config.Headrooms); its figure is the GPU-hours paid (nodes up or
// booting) at the smallest maximum that meets the levels, the cheapest of
// the settings. Bisection assumes that a larger cluster serves at least as
// well, which holds in this model up to scheduling anomalies; the row of a
// size found is checked to meet the levels and the size one node smaller
// was run and failed them (Row.Nodes; the search's runs are in Row.Runs).
package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/replay/hybrid"
	"github.com/berthsched/berth/workload"
)

// Suffixes of the autoscaling variants.
const (
	// Autoscale: the variant with node autoscaling, the training pool
	// scaled gang-aware (autoscale.GangAware).
	Autoscale = "+autoscale"
	// AutoscalePodByPod: the same with the training pool scaled pod by pod
	// (autoscale.PodByPod), the gang-blind baseline.
	AutoscalePodByPod = "+autoscale-podbypod"
)

// DedicatedSized is the dedicated variant with each side sized on its
// own: the fewest training nodes that meet the training level plus the
// fewest inference nodes that meet the inference level (two dedicated
// clusters bought to measure), instead of a 60/40 split of one size.
const DedicatedSized = "dedicated-sized"

// Variants returns every variant of the experiment, in report order: the
// hybrid's four fixed ones (and DedicatedSized after dedicated), each of
// the four with node autoscaling, and the federated one with pod-by-pod
// autoscaling.
func Variants() []string {
	out := []string{hybrid.Dedicated, DedicatedSized}
	out = append(out, hybrid.Variants()[1:]...)
	for _, v := range hybrid.Variants() {
		out = append(out, v+Autoscale)
	}
	return append(out, hybrid.Federated+AutoscalePodByPod)
}

// ErrInvalid: a bad Config or variant.
var ErrInvalid = errors.New("capacity: invalid config")

// Scaler makes the training pool's planner for a policy (the default is
// autoscale.Decide).
type Scaler func(policy autoscale.Policy) hybrid.TrainingScaler

// Config is one capacity experiment.
type Config struct {
	// GPUsPerNode of every node; default 8.
	GPUsPerNode int
	// ReferenceNodes is the reference cluster the demand is expressed
	// for: the synthetic training load and the inference curves are
	// shares of its GPUs; default 40 (x 8 = 320 GPUs, the hybrid
	// experiment's cluster).
	ReferenceNodes int
	// Duration of the horizon; default 2 days.
	Duration time.Duration
	// Seed draws the synthetic training jobs and the services' curves.
	Seed int64
	// Training jobs (Submit an offset from the start); nil: the
	// synthetic ones (hybrid.SyntheticTraining at TrainingLoad of the
	// reference cluster).
	Training []workload.Job
	// TrainingLoad: the synthetic training demand as a share of the
	// reference cluster's GPUs; default 0.5.
	TrainingLoad float64
	// JobLengthScale multiplies the synthetic jobs' runtimes and
	// estimates (median 50 minutes x the scale) at the same offered load
	// (fewer jobs); default 1. Not for Training from a trace.
	JobLengthScale float64
	// Services, PeakShare, TroughShare: the inference demand (hybrid
	// defaults: 12 services peaking at 0.45 of the reference GPUs in the
	// afternoon, 0.12 at night).
	Services    int
	PeakShare   float64
	TroughShare float64
	// TrainingP95Wait is the training service level: p95 wait at most
	// this; default 1 hour.
	TrainingP95Wait time.Duration
	// InferenceShortfallPct is the inference service level: shortfall at
	// most this percentage of the replica-minutes wanted; default 1.
	InferenceShortfallPct float64
	// MaxNodes bounds the search; default 8 x ReferenceNodes. A variant
	// that does not meet the levels at MaxNodes has a row with Met false.
	MaxNodes int
	// Rebalance tunes the federated variants (hybrid defaults: every 15
	// minutes, 2 moves a round).
	Rebalance federation.RebalanceConfig
	// BootDelay and ScaleDownDelay of the autoscaling variants (defaults
	// 10 minutes each; hybrid.Autoscale).
	BootDelay      time.Duration
	ScaleDownDelay time.Duration
	// Headrooms are the inference headroom settings an autoscaling
	// variant tries (hybrid.Autoscale.InferenceHeadroom); default 0, 0.1,
	// 0.25.
	Headrooms []float64
	// PreemptOnReclaim: in the federated variants, a pool reclaiming a
	// busy training node requeues its jobs at once instead of waiting for
	// them (hybrid.Config.PreemptOnReclaim); Row.TrainingPreemptions.
	PreemptOnReclaim bool
	// Scaler makes the training pool's planner; default DecideScaler
	// (autoscale.Decide).
	Scaler Scaler
}

func (c Config) withDefaults() (Config, error) {
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 8
	}
	if c.ReferenceNodes == 0 {
		c.ReferenceNodes = 40
	}
	if c.Duration == 0 {
		c.Duration = 48 * time.Hour
	}
	if c.TrainingLoad == 0 {
		c.TrainingLoad = 0.5
	}
	if c.JobLengthScale == 0 {
		c.JobLengthScale = 1
	}
	if c.TrainingP95Wait == 0 {
		c.TrainingP95Wait = time.Hour
	}
	if c.InferenceShortfallPct == 0 {
		c.InferenceShortfallPct = 1
	}
	if c.MaxNodes == 0 {
		c.MaxNodes = 8 * c.ReferenceNodes
	}
	if c.Headrooms == nil {
		c.Headrooms = []float64{0, 0.1, 0.25}
	}
	if c.Scaler == nil {
		c.Scaler = defaultScaler
	}
	switch {
	case c.GPUsPerNode < 1 || c.GPUsPerNode > 64:
		return c, fmt.Errorf("%w: %d GPUs per node (1..64)", ErrInvalid, c.GPUsPerNode)
	case c.ReferenceNodes < 2 || c.ReferenceNodes > 10000:
		return c, fmt.Errorf("%w: reference cluster of %d nodes (2..10000)", ErrInvalid, c.ReferenceNodes)
	case c.MaxNodes < 2 || c.MaxNodes > 10000:
		return c, fmt.Errorf("%w: max nodes %d (2..10000)", ErrInvalid, c.MaxNodes)
	case !(c.TrainingLoad > 0 && c.TrainingLoad <= 4):
		return c, fmt.Errorf("%w: training load %v not in (0,4]", ErrInvalid, c.TrainingLoad)
	case !(c.JobLengthScale >= 0.01 && c.JobLengthScale <= 100):
		return c, fmt.Errorf("%w: job length scale %v not in [0.01,100]", ErrInvalid, c.JobLengthScale)
	case c.JobLengthScale != 1 && c.Training != nil:
		return c, fmt.Errorf("%w: a job length scale is for the synthetic training jobs, not a trace", ErrInvalid)
	case c.Duration < time.Hour || c.Duration > 60*24*time.Hour:
		return c, fmt.Errorf("%w: duration %v (1h..60d)", ErrInvalid, c.Duration)
	case c.TrainingP95Wait < 0:
		return c, fmt.Errorf("%w: training p95 wait %v is negative", ErrInvalid, c.TrainingP95Wait)
	case !(c.InferenceShortfallPct >= 0 && c.InferenceShortfallPct <= 100):
		return c, fmt.Errorf("%w: inference shortfall %v%% not in [0,100]", ErrInvalid, c.InferenceShortfallPct)
	case len(c.Headrooms) == 0 || len(c.Headrooms) > 16:
		return c, fmt.Errorf("%w: %d headroom settings (1..16)", ErrInvalid, len(c.Headrooms))
	}
	for _, h := range c.Headrooms {
		if !(h >= 0 && h <= 1) {
			return c, fmt.Errorf("%w: inference headroom %v not in [0,1]", ErrInvalid, h)
		}
	}
	if k := c.JobLengthScale; k != 1 {
		// The same load in jobs k times as long: k times fewer of them.
		jobs := hybrid.SyntheticTraining(c.Seed, c.Duration, c.ReferenceNodes*c.GPUsPerNode, c.TrainingLoad/k)
		for i := range jobs {
			jobs[i].Runtime = time.Duration(float64(jobs[i].Runtime) * k).Round(time.Second)
			jobs[i].Estimate = time.Duration(float64(jobs[i].Estimate) * k).Round(time.Minute)
		}
		c.Training = jobs
	}
	return c, nil
}

// Row is one variant's result: the JSON field names are a contract.
type Row struct {
	Variant string `json:"variant"`
	// GPUs: the cluster's GPUs (fixed variants) or its maximum size
	// (autoscaling variants), at the size found.
	GPUs int `json:"gpus"`
	// GPUHoursPaid over the horizon: every GPU of a fixed cluster, the
	// GPUs of nodes up or booting with autoscaling.
	GPUHoursPaid float64 `json:"gpu_hours_paid"`
	// SpendVsDedicatedPct: GPUHoursPaid against the dedicated row's, in
	// percent (-28: 28% less); 0 for dedicated itself.
	SpendVsDedicatedPct float64 `json:"spend_vs_dedicated_pct"`
	// UtilizationAtSize: busy GPU-hours (training jobs and running
	// replicas) over GPU-hours paid, 0..1.
	UtilizationAtSize float64 `json:"utilization_at_size"`
	// TrainingP95WaitS and InferenceShortfallPct at the size found.
	TrainingP95WaitS      float64 `json:"training_p95_wait_s"`
	InferenceShortfallPct float64 `json:"inference_shortfall_pct"`
	// NodeMoves between the pools; ScaleUps and ScaleDowns: nodes booted
	// and turned off (autoscaling).
	NodeMoves  int `json:"node_moves"`
	ScaleUps   int `json:"scale_ups"`
	ScaleDowns int `json:"scale_downs"`
	// Nodes at the size found (GPUs / GPUsPerNode).
	Nodes int `json:"nodes"`
	// Met: the levels are met at Nodes (false: not even at MaxNodes, and
	// the row is that of MaxNodes).
	Met bool `json:"met"`
	// InferenceHeadroom: the setting chosen (autoscaling variants).
	InferenceHeadroom float64 `json:"inference_headroom"`
	// Runs: simulations the search ran.
	Runs int `json:"runs"`
	// TrainingNodes: the training pool's nodes at the size found (fixed
	// variants: its share; with autoscaling, the most it may have without
	// federation).
	TrainingNodes int `json:"training_nodes"`
	// TrainingPreemptions and TrainingLostGPUH: jobs requeued by a
	// reclaim and the GPU-hours they had run (Config.PreemptOnReclaim).
	TrainingPreemptions int     `json:"training_preemptions"`
	TrainingLostGPUH    float64 `json:"training_lost_gpu_h"`
	// Series of the run at the size found (every 15 minutes).
	Series []hybrid.Point `json:"-"`
	// Each level met (the dedicated-sized search judges one side at a
	// time).
	trainingMet, inferenceMet bool
}

func shortfallPct(r hybrid.Row) float64 {
	if r.InferenceWantedReplicaMin == 0 {
		return 0
	}
	return 100 * r.InferenceShortfallReplicaMin / r.InferenceWantedReplicaMin
}

// parse splits a variant into the hybrid variant and the policy of its
// autoscaling ("" without).
func parse(variant string) (base string, policy autoscale.Policy, err error) {
	for _, v := range Variants() {
		if v != variant {
			continue
		}
		switch {
		case strings.HasSuffix(v, AutoscalePodByPod):
			return strings.TrimSuffix(v, AutoscalePodByPod), autoscale.PodByPod, nil
		case strings.HasSuffix(v, Autoscale):
			return strings.TrimSuffix(v, Autoscale), autoscale.GangAware, nil
		case v == DedicatedSized:
			return hybrid.Dedicated, "", nil
		}
		return v, "", nil
	}
	return "", "", fmt.Errorf("%w: variant %q (want one of %v)", ErrInvalid, variant, Variants())
}

// Evaluate runs variant on a cluster of nodes (the maximum size with
// autoscaling, with the inference headroom given) and returns its row and
// whether it meets the service levels.
func Evaluate(ctx context.Context, cfg Config, variant string, nodes int, headroom float64) (Row, bool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, false, err
	}
	base, policy, err := parse(variant)
	if err != nil {
		return Row{}, false, err
	}
	if variant == DedicatedSized {
		return Row{}, false, fmt.Errorf("%w: %s has two sizes: EvaluateSized", ErrInvalid, variant)
	}
	return cfg.evaluate(ctx, variant, base, policy, nodes, 0, headroom)
}

// EvaluateSized runs the dedicated variant with training nodes for
// training and inference nodes for inference (DedicatedSized's two
// sizes) and returns its row and whether it meets each service level.
func EvaluateSized(ctx context.Context, cfg Config, training, inference int) (Row, bool, bool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, false, false, err
	}
	r, tr, in, err := cfg.evaluateSized(ctx, training, inference)
	return r, tr, in, err
}

func (c Config) evaluateSized(ctx context.Context, training, inference int) (Row, bool, bool, error) {
	if training < 1 || inference < 1 {
		return Row{}, false, false, fmt.Errorf("%w: %d training and %d inference nodes", ErrInvalid, training, inference)
	}
	n := training + inference
	r, _, err := c.evaluate(ctx, DedicatedSized, hybrid.Dedicated, "", n, float64(training)/float64(n), 0)
	if err != nil {
		return Row{}, false, false, err
	}
	return r, r.trainingMet, r.inferenceMet, nil
}

// evaluate runs one size; share is the training pool's (0: 0.6).
func (c Config) evaluate(ctx context.Context, variant, base string, policy autoscale.Policy, nodes int, share, headroom float64) (Row, bool, error) {
	hc := hybrid.Config{
		Nodes: nodes, GPUsPerNode: c.GPUsPerNode, Duration: c.Duration, Seed: c.Seed, Training: c.Training,
		TrainingLoad: c.TrainingLoad, Services: c.Services, PeakShare: c.PeakShare, TroughShare: c.TroughShare,
		Rebalance: c.Rebalance, ReferenceGPUs: c.ReferenceNodes * c.GPUsPerNode, TrainingShare: share,
		PreemptOnReclaim: c.PreemptOnReclaim,
	}
	if policy != "" {
		hc.Autoscale = &hybrid.Autoscale{Training: c.Scaler(policy), Policy: policy, BootDelay: c.BootDelay,
			ScaleDownDelay: c.ScaleDownDelay, InferenceHeadroom: headroom}
	}
	hr, err := hybrid.Run(ctx, hc, base)
	if err != nil {
		if errors.Is(err, hybrid.ErrInvalid) {
			return Row{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return Row{}, false, err
	}
	if share == 0 {
		share = 0.6
	}
	r := Row{
		Variant: variant, GPUs: nodes * c.GPUsPerNode, Nodes: nodes, GPUHoursPaid: hr.PaidGPUHours,
		TrainingNodes:    min(max(int(math.Round(share*float64(nodes))), 1), nodes-1),
		TrainingP95WaitS: hr.TrainingP95WaitS, InferenceShortfallPct: shortfallPct(hr),
		NodeMoves: hr.NodeMoves, ScaleUps: hr.ScaleUps, ScaleDowns: hr.ScaleDowns, Series: hr.Series,
		TrainingPreemptions: hr.TrainingPreemptions, TrainingLostGPUH: hr.TrainingLostGPUH,
	}
	if policy != "" {
		r.InferenceHeadroom = headroom
	}
	if hr.PaidGPUHours > 0 {
		r.UtilizationAtSize = hr.BusyGPUHours / hr.PaidGPUHours
	}
	r.trainingMet = hr.Dropped == 0 && hr.TrainingP95WaitS <= c.TrainingP95Wait.Seconds()
	r.inferenceMet = shortfallPct(hr) <= c.InferenceShortfallPct
	ok := r.trainingMet && r.inferenceMet
	r.Met = ok
	return r, ok, nil
}

// Search finds variant's smallest cluster (or, autoscaling, its cheapest
// setting at the smallest maximum size) that meets the service levels.
// SpendVsDedicatedPct is left zero (Compare fills it).
func Search(ctx context.Context, cfg Config, variant string) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	base, policy, err := parse(variant)
	if err != nil {
		return Row{}, err
	}
	if variant == DedicatedSized {
		return cfg.searchSized(ctx)
	}
	headrooms := []float64{0}
	if policy != "" {
		headrooms = cfg.Headrooms
	}
	var best Row
	have, runs := false, 0
	for _, h := range headrooms {
		r, n, err := cfg.bisect(min(max(cfg.ReferenceNodes, 2), cfg.MaxNodes), 2, func(n int) (Row, bool, error) {
			return cfg.evaluate(ctx, variant, base, policy, n, 0, h)
		})
		runs += n
		if err != nil {
			return Row{}, err
		}
		if !have || (r.Met && (!best.Met || r.GPUHoursPaid < best.GPUHoursPaid)) {
			best, have = r, true
		}
	}
	best.Runs = runs
	return best, nil
}

// searchSized sizes the dedicated sides one at a time: the fewest
// training nodes meeting the training level (with the reference cluster's
// count of inference nodes beside them), then the fewest inference nodes
// meeting the inference level beside those.
func (c Config) searchSized(ctx context.Context) (Row, error) {
	inf := c.ReferenceNodes
	t, runs, err := c.bisect(max(c.ReferenceNodes*6/10, 1), 1, func(n int) (Row, bool, error) {
		r, ok, _, err := c.evaluateSized(ctx, n, inf)
		return r, ok, err
	})
	if err != nil {
		return Row{}, err
	}
	if !t.trainingMet {
		t.Runs = runs
		return t, nil
	}
	train := t.TrainingNodes
	r, more, err := c.bisect(max(c.ReferenceNodes*4/10, 1), 1, func(n int) (Row, bool, error) {
		r, _, ok, err := c.evaluateSized(ctx, train, n)
		return r, ok, err
	})
	if err != nil {
		return Row{}, err
	}
	r.Runs = runs + more
	return r, nil
}

// bisect finds the smallest n in least..MaxNodes for which eval's level
// holds, starting at start; it returns the row at that n (the row at
// MaxNodes, Met false, when none does) and the runs made.
func (c Config) bisect(start, least int, eval func(n int) (Row, bool, error)) (Row, int, error) {
	runs := 0
	memo := map[int]Row{}
	met := map[int]bool{}
	try := func(n int) (bool, error) {
		if _, ok := memo[n]; ok {
			return met[n], nil
		}
		r, ok, err := eval(n)
		if err != nil {
			return false, err
		}
		runs++
		memo[n], met[n] = r, ok
		return ok, nil
	}
	// lo fails (or is below least), hi meets.
	lo, hi := least-1, start
	ok, err := try(hi)
	if err != nil {
		return Row{}, runs, err
	}
	if ok {
		for {
			m := hi / 2
			if m < least {
				break
			}
			ok, err := try(m)
			if err != nil {
				return Row{}, runs, err
			}
			if !ok {
				lo = m
				break
			}
			hi = m
		}
	} else {
		for {
			if hi == c.MaxNodes {
				return memo[hi], runs, nil
			}
			lo, hi = hi, min(2*hi, c.MaxNodes)
			ok, err := try(hi)
			if err != nil {
				return Row{}, runs, err
			}
			if ok {
				break
			}
		}
	}
	for hi-lo > 1 {
		m := lo + (hi-lo)/2
		ok, err := try(m)
		if err != nil {
			return Row{}, runs, err
		}
		if ok {
			hi = m
		} else {
			lo = m
		}
	}
	return memo[hi], runs, nil
}

// Compare fills every row's SpendVsDedicatedPct from the row of the
// dedicated variant (none: left zero).
func Compare(rows []Row) {
	ded := math.NaN()
	for _, r := range rows {
		if r.Variant == hybrid.Dedicated {
			ded = r.GPUHoursPaid
		}
	}
	if math.IsNaN(ded) || ded == 0 {
		return
	}
	for i := range rows {
		rows[i].SpendVsDedicatedPct = 100 * (rows[i].GPUHoursPaid/ded - 1)
	}
}
