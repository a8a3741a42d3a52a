package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"gonum.org/v1/plot/plotter"

	"github.com/berthsched/berth/replay/hybrid"
	"github.com/berthsched/berth/workload"
)

// checkHybrid validates the options of --experiment hybrid.
func checkHybrid(o *options) error {
	if o.policySet {
		return usagef("--policy is not for --experiment hybrid (it runs the variants %v)", hybrid.Variants())
	}
	return checkTrainingTrace(o, "hybrid", "the built-in workload")
}

// checkTrainingTrace checks that an experiment with training and
// inference (hybrid, serving, capacity) is given a trace it can read its
// training jobs from: the built-in synthetic workload (builtin says what
// that is to it) or ITP cluster04.
func checkTrainingTrace(o *options, exp, builtin string) error {
	t := o.traces[0]
	switch {
	case t.kind == "synthetic" && t.jobs == 0, t.kind == "itp":
		return nil
	}
	return usagef("--experiment %s takes --trace synthetic (%s) or itp[:PATH] (training jobs of ITP cluster04)", exp, builtin)
}

// checkNoTimeReplayFlags refuses the flags of time replays that an
// experiment with training and inference does not take.
func checkNoTimeReplayFlags(o *options, exp string) error {
	switch {
	case o.racks != 0:
		return usagef("--racks is not for --experiment %s (its nodes have no racks)", exp)
	case o.estimates != "exact":
		return usagef("--estimates is not for --experiment %s (training jobs keep their own estimates)", exp)
	case len(o.placements) > 0 || o.price.On():
		return usagef("--placement and --price are for time replays, not --experiment %s", exp)
	}
	return nil
}

// hybridTraining loads the training jobs: nil for the built-in synthetic
// workload, else the ITP trace with its first job at offset zero.
func hybridTraining(o *options) ([]workload.Job, string, error) {
	t := o.traces[0]
	if t.kind != "itp" {
		return nil, "built-in synthetic training jobs", nil
	}
	tr, err := workload.Open(workload.KindITP, t.path)
	if err != nil {
		return nil, "", err
	}
	jobs := append([]workload.Job(nil), tr.Jobs...)
	if len(jobs) == 0 {
		return nil, "", fmt.Errorf("hybrid: the ITP trace has no jobs")
	}
	first := jobs[0].Submit
	for _, j := range jobs {
		first = min(first, j.Submit)
	}
	for i := range jobs {
		jobs[i].Submit -= first
	}
	return jobs, "training jobs of ITP cluster04 (" + tr.Name + ")", nil
}

// runHybrid runs the hybrid experiment: every variant x seed, one row per
// variant (means over the seeds).
func runHybrid(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	training, what, err := hybridTraining(o)
	if err != nil {
		return err
	}
	cfg := hybrid.Config{Nodes: o.nodes, GPUsPerNode: o.gpn, Training: training, PreemptOnReclaim: o.preemptOnReclaim}
	variants := hybrid.Variants()
	res, err := runSweep(ctx, o, stderr, len(variants), func(ctx context.Context, v int, seed int64) (hybrid.Row, error) {
		c := cfg
		c.Seed = seed
		return hybrid.Run(ctx, c, variants[v])
	})
	if err != nil {
		return err
	}
	rows := make([]hybrid.Row, len(variants))
	firsts := make([]hybrid.Row, len(variants)) // the first seed's, for plots
	n := float64(len(o.seeds))
	for v, seeds := range res {
		row := &rows[v]
		firsts[v] = seeds[0]
		*row = hybrid.Row{Variant: seeds[0].Variant}
		for _, x := range seeds {
			row.Utilization += x.Utilization / n
			row.TrainingAvgWaitS += x.TrainingAvgWaitS / n
			row.TrainingAvgSlowdown += x.TrainingAvgSlowdown / n
			row.InferenceShortfallReplicaMin += x.InferenceShortfallReplicaMin / n
			row.NodeMoves += x.NodeMoves
			row.TrainingPreemptions += x.TrainingPreemptions
			row.TrainingLostGPUH += x.TrainingLostGPUH / n
			row.TrainingJobs += x.TrainingJobs
			row.TrainingStarted += x.TrainingStarted
			row.Dropped += x.Dropped
		}
	}
	for i := range rows {
		r := &rows[i]
		meanCounts(len(o.seeds), &r.NodeMoves, &r.TrainingPreemptions, &r.TrainingJobs, &r.TrainingStarted, &r.Dropped)
	}
	switch o.format {
	case "json":
		if err := writeIndentedJSON(stdout, rows); err != nil {
			return err
		}
	case "csv":
		var recs [][]string
		for _, r := range rows {
			recs = append(recs, []string{r.Variant, fmtFloat(r.Utilization), fmtFloat(r.TrainingAvgWaitS), fmtFloat(r.TrainingAvgSlowdown), fmtFloat(r.InferenceShortfallReplicaMin),
				strconv.Itoa(r.NodeMoves), strconv.Itoa(r.TrainingJobs), strconv.Itoa(r.TrainingStarted), strconv.Itoa(r.Dropped),
				strconv.Itoa(r.TrainingPreemptions), fmtFloat(r.TrainingLostGPUH)})
		}
		if err := writeRecords(stdout, []string{"variant", "utilization", "training_avg_wait_s", "training_avg_slowdown", "inference_shortfall_replica_min", "node_moves", "training_jobs", "training_started", "dropped", "training_preemptions", "training_lost_gpu_h"}, recs); err != nil {
			return err
		}
	default:
		nodes := o.nodes
		if nodes == 0 {
			nodes = 40
		}
		pre := ""
		if o.preemptOnReclaim {
			pre = "; reclaims preempt training"
		}
		fmt.Fprintf(stdout, "Hybrid experiment: %d nodes x %d GPUs, 60/40 training/inference, 3 days, %s + inference services on a day/night curve, seeds %s%s\n\n",
			nodes, o.gpn, what, seedsString(o.seeds, true), pre)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "variant\tutilization %\ttraining wait (s)\ttraining slowdown\tinference shortfall (replica-min)\tnode moves\ttraining preemptions\ttraining jobs (started)")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.2f\t%.0f\t%d\t%d\t%d (%d)\n", r.Variant, 100*r.Utilization, r.TrainingAvgWaitS,
				r.TrainingAvgSlowdown, r.InferenceShortfallReplicaMin, r.NodeMoves, r.TrainingPreemptions, r.TrainingJobs, r.TrainingStarted)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	var util, infer []series
	for _, r := range firsts {
		util = append(util, series{r.Variant, xysOf(r.Series, func(p hybrid.Point) plotter.XY { return plotter.XY{X: p.Hours, Y: 100 * p.Utilization} })})
		infer = append(infer, series{r.Variant + " inference GPUs", xysOf(r.Series, func(p hybrid.Point) plotter.XY { return plotter.XY{X: p.Hours, Y: float64(p.InferenceGPUs)} })})
	}
	if len(firsts) > 0 {
		infer = append(infer, series{"replicas wanted", xysOf(firsts[0].Series, func(p hybrid.Point) plotter.XY { return plotter.XY{X: p.Hours, Y: float64(p.InferenceWanted)} })})
	}
	return writePlots(o.out, stderr,
		plotFile{"hybrid-utilization", "Hybrid experiment: GPU utilization", "hours", "GPUs busy (%)", false, util},
		plotFile{"hybrid-inference", "Hybrid experiment: inference GPUs and replicas wanted", "hours", "GPUs", true, infer})
}
