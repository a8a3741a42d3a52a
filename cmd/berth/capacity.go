package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/berthsched/berth/replay/capacity"
)

// capacityOptions are the flags of --experiment capacity.
type capacityOptions struct {
	set          bool // one of them was given
	p95Wait      time.Duration
	shortfallPct float64
	demand       string
	// cfg: the demand and levels parsed (checkCapacity).
	cfg capacity.Config
}

func (c *capacityOptions) flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.p95Wait, "training-p95-wait", time.Hour, "with --experiment capacity, the training service level: the p95 wait of the training jobs\n"+
		"(a job not started by the end counts its wait so far) at most this")
	fs.Float64Var(&c.shortfallPct, "inference-shortfall-pct", 1, "with --experiment capacity, the inference service level: replica-minutes wanted but not\n"+
		"running at most this percentage of those wanted")
	fs.StringVar(&c.demand, "demand", "", "with --experiment capacity, the demand and autoscaling settings, a comma list of key=value:\n"+
		"days (horizon, default 2), load (synthetic training load as a share of the reference cluster's GPUs, 0.5),\n"+
		"length (synthetic job length scale at the same load, 1), peak and trough (inference replicas at the afternoon\n"+
		"peak and at night, shares of the reference GPUs, 0.45 and 0.12), boot (node boot delay, 10m), scaledown\n"+
		"(idle time before a node is turned off, 10m)")
}

// parse fills cfg from the flags.
func (c *capacityOptions) parse() error {
	switch {
	case c.p95Wait < 0:
		return usagef("--training-p95-wait must not be negative, got %v", c.p95Wait)
	case !(c.shortfallPct >= 0 && c.shortfallPct <= 100):
		return usagef("--inference-shortfall-pct must be in 0..100, got %v", c.shortfallPct)
	}
	c.cfg = capacity.Config{TrainingP95Wait: c.p95Wait, InferenceShortfallPct: c.shortfallPct}
	if c.p95Wait == 0 {
		c.cfg.TrainingP95Wait = time.Nanosecond // zero is the default (1 h): ask for no wait at all
	}
	if c.shortfallPct == 0 {
		c.cfg.InferenceShortfallPct = 1e-9
	}
	if strings.TrimSpace(c.demand) == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(c.demand, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return usagef("--demand %q: want key=value pairs, each key once", c.demand)
		}
		seen[k] = true
		switch k {
		case "boot", "scaledown":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > 24*time.Hour {
				return usagef("--demand %s=%q: want a duration in 0..24h", k, v)
			}
			if k == "boot" {
				c.cfg.BootDelay = d
			} else {
				c.cfg.ScaleDownDelay = d
			}
			if d == 0 {
				if k == "boot" {
					c.cfg.BootDelay = time.Nanosecond
				} else {
					c.cfg.ScaleDownDelay = time.Nanosecond
				}
			}
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return usagef("--demand %s=%q: not a number", k, v)
		}
		switch k {
		case "days":
			if !(f >= 1.0/24 && f <= 60) {
				return usagef("--demand days=%v: want 1/24..60", f)
			}
			c.cfg.Duration = time.Duration(f * 24 * float64(time.Hour)).Round(time.Minute)
		case "load":
			if !(f > 0 && f <= 4) {
				return usagef("--demand load=%v: want (0,4]", f)
			}
			c.cfg.TrainingLoad = f
		case "length":
			if !(f >= 0.01 && f <= 100) {
				return usagef("--demand length=%v: want 0.01..100", f)
			}
			c.cfg.JobLengthScale = f
		case "peak":
			if !(f > 0 && f <= 1) {
				return usagef("--demand peak=%v: want (0,1]", f)
			}
			c.cfg.PeakShare = f
		case "trough":
			if !(f >= 0 && f <= 1) {
				return usagef("--demand trough=%v: want [0,1]", f)
			}
			c.cfg.TroughShare = f
			if f == 0 {
				c.cfg.TroughShare = 1e-9 // zero is the default
			}
		default:
			return usagef("--demand %q: unknown key %q (want days, load, length, peak, trough, boot, scaledown)", c.demand, k)
		}
	}
	peak, trough := c.cfg.PeakShare, c.cfg.TroughShare
	if peak == 0 {
		peak = 0.45
	}
	if trough == 0 {
		trough = 0.12
	}
	if trough > peak {
		return usagef("--demand: trough %v above peak %v", trough, peak)
	}
	return nil
}

// checkCapacity validates the options of --experiment capacity.
func checkCapacity(o *options) error {
	if o.policySet {
		return usagef("--policy is not for --experiment capacity (it runs the variants %v)", capacity.Variants())
	}
	if err := checkTrainingTrace(o, "capacity", "the built-in workload"); err != nil {
		return err
	}
	if len(o.seeds) != 1 {
		return usagef("--experiment capacity takes one seed (each variant's search is a run of its own)")
	}
	if err := checkNoTimeReplayFlags(o, "capacity"); err != nil {
		return err
	}
	if o.nodes == 1 {
		return usagef("--experiment capacity needs a reference cluster of at least 2 nodes")
	}
	t := o.traces[0]
	if err := o.capacity.parse(); err != nil {
		return err
	}
	if t.kind == "itp" && o.capacity.cfg.JobLengthScale != 0 {
		return usagef("--demand length is for the synthetic training jobs, not --trace itp")
	}
	return nil
}

// runCapacity runs the capacity experiment: every variant's search, one
// row each.
func runCapacity(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	training, what, err := hybridTraining(o)
	if err != nil {
		return err
	}
	cfg := o.capacity.cfg
	cfg.Training, cfg.GPUsPerNode, cfg.ReferenceNodes, cfg.Seed = training, o.gpn, o.nodes, o.seeds[0]
	cfg.PreemptOnReclaim = o.preemptOnReclaim
	variants := capacity.Variants()
	res, err := runSweep(ctx, o, stderr, len(variants), func(ctx context.Context, v int, seed int64) (capacity.Row, error) {
		return capacity.Search(ctx, cfg, variants[v])
	})
	if err != nil {
		return err
	}
	rows := make([]capacity.Row, len(variants))
	for v := range res {
		rows[v] = res[v][0]
	}
	capacity.Compare(rows)
	switch o.format {
	case "json":
		if err := writeIndentedJSON(stdout, rows); err != nil {
			return err
		}
	case "csv":
		var recs [][]string
		for _, r := range rows {
			recs = append(recs, []string{r.Variant, strconv.Itoa(r.GPUs), fmtFloat(r.GPUHoursPaid), fmtFloat(r.SpendVsDedicatedPct), fmtFloat(r.UtilizationAtSize),
				fmtFloat(r.TrainingP95WaitS), fmtFloat(r.InferenceShortfallPct), strconv.Itoa(r.NodeMoves), strconv.Itoa(r.ScaleUps), strconv.Itoa(r.ScaleDowns),
				strconv.Itoa(r.Nodes), strconv.Itoa(r.TrainingNodes), strconv.FormatBool(r.Met), fmtFloat(r.InferenceHeadroom), strconv.Itoa(r.Runs),
				strconv.Itoa(r.TrainingPreemptions), fmtFloat(r.TrainingLostGPUH)})
		}
		if err := writeRecords(stdout, []string{"variant", "gpus", "gpu_hours_paid", "spend_vs_dedicated_pct", "utilization_at_size", "training_p95_wait_s",
			"inference_shortfall_pct", "node_moves", "scale_ups", "scale_downs", "nodes", "training_nodes", "met", "inference_headroom", "runs", "training_preemptions", "training_lost_gpu_h"}, recs); err != nil {
			return err
		}
	default:
		ref := o.nodes
		if ref == 0 {
			ref = 40
		}
		c := cfg
		pre := ""
		if c.PreemptOnReclaim {
			pre = "; federated reclaims preempt training"
		}
		days := 2.0
		if c.Duration > 0 {
			days = c.Duration.Hours() / 24
		}
		fmt.Fprintf(stdout, "Capacity experiment: %s + inference services on a day/night curve, demand of a %d x %d-GPU reference cluster, %g days, seed %d;\n"+
			"service levels: training p95 wait <= %v, inference shortfall <= %g%% of replica-minutes%s\n\n",
			what, ref, o.gpn, days, o.seeds[0], o.capacity.p95Wait, o.capacity.shortfallPct, pre)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "variant\tGPUs (max)\tnodes (training)\tGPU-h paid\tspend vs dedicated\tutilization\ttraining p95 wait\tinference shortfall\tnode moves\tscale-ups/downs\tmet")
		for _, r := range rows {
			met := "yes"
			if !r.Met {
				met = "NO (at the search's max)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d (%d)\t%.0f\t%+.1f%%\t%.1f%%\t%.0f min\t%.2f%%\t%d\t%d/%d\t%s\n", r.Variant, r.GPUs, r.Nodes, r.TrainingNodes, r.GPUHoursPaid, r.SpendVsDedicatedPct,
				100*r.UtilizationAtSize, r.TrainingP95WaitS/60, r.InferenceShortfallPct, r.NodeMoves, r.ScaleUps, r.ScaleDowns, met)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	files, err := capacitySpendPlot(o.out, rows)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stderr, "wrote", f)
	}
	var util []series
	for _, r := range rows {
		util = append(util, series{r.Variant, dayUtilization(r)})
	}
	files, err = savePlot(o.out, "capacity-utilization", "Capacity experiment: utilization over the day at the size found",
		"hour of the day (mean over the days)", "GPUs busy / GPUs paid (%)", false, util, func(p *plot.Plot) {
			p.Y.Min, p.Y.Max = 0, 100 // room for the legend below the lines
		})
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stderr, "wrote", f)
	}
	return nil
}

// dayUtilization is a row's utilization of the GPUs paid (up or booting)
// by time of day, every 15 minutes, averaged over the horizon's days.
func dayUtilization(r capacity.Row) plotter.XYs {
	const slots = 24 * 4
	var busy, paid [slots]float64
	for _, p := range r.Series {
		k := int(p.Hours*4+0.5) % slots
		busy[k] += p.Utilization * float64(r.GPUs)
		paid[k] += float64(p.UpGPUs)
	}
	var xys plotter.XYs
	for k := range slots {
		if paid[k] > 0 {
			xys = append(xys, plotter.XY{X: float64(k) / 4, Y: 100 * busy[k] / paid[k]})
		}
	}
	return xys
}

// capacitySpendPlot draws the GPU-hours paid per variant as horizontal
// bars, in capacity-spend.png and .svg.
func capacitySpendPlot(dir string, rows []capacity.Row) ([]string, error) {
	p := plot.New()
	p.Title.Text = "Capacity experiment: GPU-hours paid at equal service"
	p.X.Label.Text = "GPU-hours paid over the horizon"
	vals := make(plotter.Values, len(rows))
	names := make([]string, len(rows))
	top := 0.0
	// Bottom to top in report order.
	for i, r := range rows {
		k := len(rows) - 1 - i
		vals[k] = r.GPUHoursPaid
		top = max(top, r.GPUHoursPaid)
		names[k] = r.Variant
		if !r.Met {
			names[k] += " (levels not met)"
		}
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return nil, fmt.Errorf("plot capacity-spend: %w", err)
	}
	bars.Horizontal = true
	p.Add(plotter.NewGrid(), bars)
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, 1.08*top
	p.Y.Padding = vg.Points(12) // the bars clear of the title
	var files []string
	for _, ext := range []string{".png", ".svg"} {
		f := filepath.Join(dir, "capacity-spend"+ext)
		if err := p.Save(9*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return nil, fmt.Errorf("plot %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}
