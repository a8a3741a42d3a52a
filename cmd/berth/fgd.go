package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/berthsched/berth/replay/fgd"
)

func fgdPolicies() []string { return fgd.Policies }

// runFGD runs the FGD experiment (docs/fgd.md): every policy x seed on
// the openb trace, placed through a gang.Placer or an engine.Engine
// (--via), then one row per policy.
func runFGD(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	var tr *fgd.Trace
	var err error
	if dir := o.traces[0].path; dir != "" {
		tr, err = fgd.LoadTrace(dir)
	} else {
		tr, err = fgd.LoadDefaultTrace()
	}
	if err != nil {
		return err
	}
	if tr, err = fgd.ApplyModelRule(tr, o.gpuModels); err != nil {
		return err
	}
	// One run per call, so the bar can count runs.
	start := time.Now()
	res, err := runSweep(ctx, o, stderr, len(o.policies), func(ctx context.Context, p int, seed int64) (fgd.Curve, error) {
		cs, err := fgd.Runs(ctx, fgd.Config{Trace: tr, Policies: []string{o.policies[p]}, Seeds: []int64{seed}, Parallelism: 1, Via: o.via})
		if err != nil {
			return fgd.Curve{}, err
		}
		if len(cs) != 1 {
			return fgd.Curve{}, fmt.Errorf("fgd: %d curves for one run", len(cs))
		}
		return cs[0], nil
	})
	if err != nil {
		return err
	}
	var curves []fgd.Curve
	for _, cs := range res {
		curves = append(curves, cs...)
	}
	rows, err := fgd.Summarize(curves)
	if err != nil {
		return err
	}
	switch o.format {
	case "json":
		if err := writeIndentedJSON(stdout, rows); err != nil {
			return err
		}
	case "csv":
		var recs [][]string
		for _, r := range rows {
			recs = append(recs, []string{r.Policy, fmtFloat(r.AllocPctAt100), fmtFloat(r.AllocPctAt130), fmtFloat(r.AllocPctStdAt130), strconv.Itoa(r.ModelViolations)})
		}
		if err := writeRecords(stdout, []string{"policy", "alloc_pct_at_100", "alloc_pct_at_130", "alloc_pct_std_at_130", "model_violations"}, recs); err != nil {
			return err
		}
	default:
		via := ""
		if o.via == "engine" {
			via = ", through the engine"
		}
		switch o.gpuModels {
		case fgd.RuleThird:
			via += ", GPU models asked by a third of the pods"
		case fgd.RuleHalf:
			via += ", GPU models asked by half of the pods"
		case fgd.RuleSets:
			via += ", sets of 2-3 GPU models accepted by a third of the pods"
		}
		fmt.Fprintf(stdout, "FGD experiment (openb%s): %d nodes, %d pods, seeds %s\n\n", via, len(tr.Nodes), len(tr.Pods), seedsString(o.seeds, true))
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "policy\talloc % at 100% arrived\talloc % at 130% arrived\tstd at 130%\tmodel violations")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%d\n", r.Policy, r.AllocPctAt100, r.AllocPctAt130, r.AllocPctStdAt130, r.ModelViolations)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if o.curve {
			fmt.Fprintf(stdout, "\nmean alloc %% by arrived demand %%:\n")
			fmt.Fprint(tw, "policy")
			for k := 50; k <= 130; k += 5 {
				fmt.Fprintf(tw, "\t%d", k)
			}
			fmt.Fprintln(tw)
			for _, r := range rows {
				fmt.Fprint(tw, r.Policy)
				for k := 50; k <= 130; k += 5 {
					if k < len(r.Curve) {
						fmt.Fprintf(tw, "\t%.2f", r.Curve[k])
					}
				}
				fmt.Fprintln(tw)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		// The published numbers are those of the default openb trace: print
		// them only when that trace was replayed as it is.
		published := "published means at 130% (default openb trace): random 87.47, bestfit 93.08, fgd 95.39."
		switch {
		case o.traces[0].path != "":
			published = fmt.Sprintf("trace %s: no published numbers (they are the default openb trace's).", o.traces[0].path)
		case o.gpuModels != "":
			published = "GPU models constrained (--gpu-models " + o.gpuModels + "): no published numbers."
		}
		fmt.Fprintf(stdout, "\n%s %d runs in %s.\n", published, len(curves), time.Since(start).Round(10*time.Millisecond))
	}
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// Mean allocation curve per policy over the seeds.
	var lines []series
	for _, p := range o.policies {
		var sum []float64
		n := 0
		for _, c := range curves {
			if c.Policy != p {
				continue
			}
			if len(c.Columns) > len(sum) {
				sum = append(sum, make([]float64, len(c.Columns)-len(sum))...)
			}
			for k, v := range c.Columns {
				sum[k] += v
			}
			n++
		}
		xys := make(plotter.XYs, len(sum))
		for k := range sum {
			xys[k] = plotter.XY{X: float64(k), Y: sum[k] / float64(n)}
		}
		lines = append(lines, series{p, xys})
	}
	files, err := savePlot(o.out, "fgd-alloc", "FGD experiment (openb): GPU allocation ratio", "arrived GPU demand (% of cluster GPUs)", "GPUs allocated (%)", false, lines)
	if err != nil {
		return err
	}
	if o.format == "table" {
		fmt.Fprintf(stdout, "plots: %d files in %s\n", len(files), o.out)
	}
	return nil
}
