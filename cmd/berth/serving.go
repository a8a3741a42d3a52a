package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"

	"gonum.org/v1/plot/plotter"

	rserving "github.com/berthsched/berth/replay/serving"
	"github.com/berthsched/berth/workload"
)

// checkServing validates the options of --experiment serving and sets
// o.policies (default: every policy).
func checkServing(o *options, policy string) error {
	if err := checkTrainingTrace(o, "serving", "the built-in training workload"); err != nil {
		return err
	}
	if err := checkNoTimeReplayFlags(o, "serving"); err != nil {
		return err
	}
	if o.nodes == 1 {
		return usagef("--experiment serving needs at least 2 nodes (training and inference)")
	}
	if !o.policySet {
		o.policies = rserving.Policies()
		return nil
	}
	var err error
	o.policies, err = parsePolicies(policy, rserving.Policies())
	return err
}

// servingShapes returns the replicas' shapes: the openb latency-sensitive
// pods when the shared traces are there, else the built-in mix.
func servingShapes() ([]rserving.Shape, string, error) {
	const builtin = "built-in replica shapes (openb trace not found; " + workload.GetTraces + ")"
	p, err := workload.TracePath(workload.OpenbPods)
	if err != nil {
		return nil, builtin, nil
	}
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, builtin, nil
	}
	tr, err := workload.OpenOpenbPods(p)
	if err != nil {
		return nil, "", err
	}
	s := rserving.OpenbShapes(tr.Jobs)
	if len(s) == 0 {
		return nil, "", fmt.Errorf("serving: the openb trace has no latency-sensitive GPU pods")
	}
	return s, fmt.Sprintf("replica shapes of the %d openb LS GPU pods", len(s)), nil
}

// runServing runs the serving experiment: every policy x seed, one row
// per policy (means over the seeds).
func runServing(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	training, what, err := hybridTraining(o)
	if err != nil {
		return err
	}
	shapes, shapesWhat, err := servingShapes()
	if err != nil {
		return err
	}
	gpn := o.gpn
	if shapes == nil {
		shapes = rserving.BuiltinShapes()
	}
	// Shapes wider than a node cannot run.
	var fit []rserving.Shape
	for _, s := range shapes {
		if s.GPUs <= gpn {
			fit = append(fit, s)
		}
	}
	cfg := rserving.Config{Nodes: o.nodes, GPUsPerNode: gpn, Training: training, Shapes: fit}
	res, err := runSweep(ctx, o, stderr, len(o.policies), func(ctx context.Context, p int, seed int64) (rserving.Row, error) {
		c := cfg
		c.Seed = seed
		return rserving.Run(ctx, c, o.policies[p])
	})
	if err != nil {
		return err
	}
	rows := make([]rserving.Row, len(o.policies))
	firsts := make([]rserving.Row, len(o.policies)) // the first seed's, for plots
	n := float64(len(o.seeds))
	for p, seeds := range res {
		row := &rows[p]
		firsts[p] = seeds[0]
		*row = rserving.Row{Policy: seeds[0].Policy}
		for _, x := range seeds {
			row.Utilization += x.Utilization / n
			row.TrainingAvgWaitS += x.TrainingAvgWaitS / n
			row.InferenceShortfallReplicaMin += x.InferenceShortfallReplicaMin / n
			row.ScaleUpLatencyCycles += x.ScaleUpLatencyCycles / n
			row.InferenceGPUH += x.InferenceGPUH / n
			row.ScaleUps += x.ScaleUps
			row.ScaleDowns += x.ScaleDowns
			row.Reclaimed += x.Reclaimed
			row.TrainingJobs += x.TrainingJobs
			row.TrainingStarted += x.TrainingStarted
			row.Dropped += x.Dropped
		}
	}
	for i := range rows {
		r := &rows[i]
		meanCounts(len(o.seeds), &r.ScaleUps, &r.ScaleDowns, &r.Reclaimed, &r.TrainingJobs, &r.TrainingStarted, &r.Dropped)
	}
	switch o.format {
	case "json":
		if err := writeIndentedJSON(stdout, rows); err != nil {
			return err
		}
	case "csv":
		var recs [][]string
		for _, r := range rows {
			recs = append(recs, []string{r.Policy, fmtFloat(r.Utilization), fmtFloat(r.TrainingAvgWaitS), fmtFloat(r.InferenceShortfallReplicaMin), fmtFloat(r.ScaleUpLatencyCycles),
				strconv.Itoa(r.ScaleUps), strconv.Itoa(r.ScaleDowns), strconv.Itoa(r.Reclaimed), fmtFloat(r.InferenceGPUH),
				strconv.Itoa(r.TrainingJobs), strconv.Itoa(r.TrainingStarted), strconv.Itoa(r.Dropped)})
		}
		if err := writeRecords(stdout, []string{"policy", "utilization", "training_avg_wait_s", "inference_shortfall_replica_min", "scale_up_latency_cycles",
			"scale_ups", "scale_downs", "reclaimed", "inference_gpu_h", "training_jobs", "training_started", "dropped"}, recs); err != nil {
			return err
		}
	default:
		nodes := o.nodes
		if nodes == 0 {
			nodes = 16
		}
		fmt.Fprintf(stdout, "Serving experiment: %d nodes x %d GPUs, 60/40 training/inference nodes, 1 day, %s + HPA-scaled inference services\non a day/night curve (%s), seeds %s\n\n",
			nodes, gpn, what, shapesWhat, seedsString(o.seeds, true))
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "policy\tutilization %\ttraining wait (s)\tinference shortfall (replica-min)\tscale-up latency (cycles)\treclaimed replicas\ttraining jobs (started)")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.2f\t%d\t%d (%d)\n", r.Policy, 100*r.Utilization, r.TrainingAvgWaitS,
				r.InferenceShortfallReplicaMin, r.ScaleUpLatencyCycles, r.Reclaimed, r.TrainingJobs, r.TrainingStarted)
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
		util = append(util, series{r.Policy, xysOf(r.Series, func(p rserving.Point) plotter.XY { return plotter.XY{X: p.Hours, Y: 100 * p.Utilization} })})
		infer = append(infer, series{r.Policy + " replicas running", xysOf(r.Series, func(p rserving.Point) plotter.XY { return plotter.XY{X: p.Hours, Y: float64(p.InferenceRunning)} })})
	}
	if len(firsts) > 0 {
		infer = append(infer, series{"replicas desired (" + firsts[0].Policy + ")", xysOf(firsts[0].Series, func(p rserving.Point) plotter.XY { return plotter.XY{X: p.Hours, Y: float64(p.InferenceDesired)} })})
	}
	return writePlots(o.out, stderr,
		plotFile{"serving-utilization", "Serving experiment: GPU utilization", "hours", "GPUs busy (%)", false, util},
		plotFile{"serving-replicas", "Serving experiment: replicas desired and running", "hours", "replicas", true, infer})
}
