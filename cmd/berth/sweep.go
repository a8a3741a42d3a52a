package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"gonum.org/v1/plot/plotter"
)

// runSweep runs fn once for every variant x seed of o.seeds, at most
// o.parallel at a time, with a progress bar counting runs, and returns
// the results as out[variant][k] for the k-th seed. The first error
// cancels the rest and is returned.
func runSweep[R any](ctx context.Context, o *options, stderr io.Writer, variants int, fn func(ctx context.Context, variant int, seed int64) (R, error)) ([][]R, error) {
	out := make([][]R, variants)
	for v := range out {
		out[v] = make([]R, len(o.seeds))
	}
	var done atomic.Int64
	bar := startProgress(stderr, progressOn(o.progress, stderr), "runs", int64(variants*len(o.seeds)), done.Load)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.parallel)
	for v := range out {
		for k, seed := range o.seeds {
			g.Go(func() error {
				r, err := fn(gctx, v, seed)
				if err != nil {
					return err
				}
				out[v][k] = r
				done.Add(1)
				return nil
			})
		}
	}
	err := g.Wait()
	bar.stop()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// meanCounts turns counts summed over k seeds into their means, rounded
// to the nearest (counts are means over the seeds, like the rates).
func meanCounts(k int, counts ...*int) {
	for _, c := range counts {
		*c = (*c + k/2) / k
	}
}

// plotFile is one plot that writePlots saves (see savePlot).
type plotFile struct {
	base, title, xlabel, ylabel string
	legendTop                   bool
	lines                       []series
}

// writePlots saves each plot into dir as PNG and SVG and names every file
// written on stderr.
func writePlots(dir string, stderr io.Writer, plots ...plotFile) error {
	for _, p := range plots {
		files, err := savePlot(dir, p.base, p.title, p.xlabel, p.ylabel, p.legendTop, p.lines)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintln(stderr, "wrote", f)
		}
	}
	return nil
}

// writeRecords writes a CSV header and its records.
func writeRecords(w io.Writer, header []string, records [][]string) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(header)
	_ = cw.WriteAll(records) // flushes; the first error is cw.Error's
	return cw.Error()
}

// fmtFloat formats v for CSV: the shortest text that reads back as v.
func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// xysOf maps the points of a time series to plot coordinates.
func xysOf[P any](ps []P, f func(P) plotter.XY) plotter.XYs {
	xys := make(plotter.XYs, len(ps))
	for i, p := range ps {
		xys[i] = f(p)
	}
	return xys
}
