package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// series is one line of a plot.
type series struct {
	name string
	xys  plotter.XYs
}

// savePlot draws lines and writes base.png and base.svg into dir.
func savePlot(dir, base, title, xlabel, ylabel string, legendTop bool, lines []series, opts ...func(*plot.Plot)) ([]string, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = legendTop
	p.Add(plotter.NewGrid())
	for i, s := range lines {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %s: %w", base, s.name, err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	for _, o := range opts {
		o(p)
	}
	var files []string
	for _, ext := range []string{".png", ".svg"} {
		f := filepath.Join(dir, base+ext)
		if err := p.Save(9*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return nil, fmt.Errorf("plot %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// fileName turns a workload name into a file name prefix.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, s)
}

// plotReplays draws, per workload, utilization and queue length over time
// and the wait-time CDF, a line per policy (the first seed's run).
func plotReplays(dir string, rows []row) ([]string, error) {
	var order []string
	by := map[string][]row{}
	for _, r := range rows {
		if _, ok := by[r.workload]; !ok {
			order = append(order, r.workload)
		}
		by[r.workload] = append(by[r.workload], r)
	}
	var files []string
	for _, w := range order {
		var util, queue, cdf []series
		for _, r := range by[w] {
			u, q := make(plotter.XYs, len(r.first.Series)), make(plotter.XYs, len(r.first.Series))
			for i, s := range r.first.Series {
				h := s.At.Hours()
				u[i] = plotter.XY{X: h, Y: 100 * s.Utilization}
				q[i] = plotter.XY{X: h, Y: s.Queued}
			}
			util = append(util, series{placementLabel(r.res.Policy, r.placement), u})
			queue = append(queue, series{placementLabel(r.res.Policy, r.placement), q})
			cdf = append(cdf, series{placementLabel(r.res.Policy, r.placement), waitCDF(r.first.Waits)})
		}
		base := fileName(w)
		for _, p := range []struct {
			suffix, title, x, y string
			lines               []series
		}{
			{"utilization", w + ": GPU utilization", "hours since the first submission", "utilization (%)", util},
			{"queue", w + ": queue length", "hours since the first submission", "pending jobs", queue},
			{"wait-cdf", w + ": wait-time CDF", waitAxis, "fraction of jobs", cdf},
		} {
			var opts []func(*plot.Plot)
			if p.suffix == "wait-cdf" {
				opts = append(opts, logX)
			}
			fs, err := savePlot(dir, base+"-"+p.suffix, p.title, p.x, p.y, p.suffix != "wait-cdf", p.lines, opts...)
			if err != nil {
				return nil, err
			}
			files = append(files, fs...)
		}
	}
	return files, nil
}

// waitFloor is where the wait-time CDF's log axis starts: waits shorter
// than a second, zero waits (jobs that started at once) among them, are
// drawn at one second.
const waitFloor = time.Second

// waitAxis is the wait-time CDF's x label.
const waitAxis = "wait (seconds, log scale; waits under 1 s, zero included, at 1 s)"

// waitCDF is the CDF of sorted waits, in seconds, each at least waitFloor
// (a log axis has no zero): one point per distinct wait, starting at
// (floor, 0).
func waitCDF(ws []time.Duration) plotter.XYs {
	c := make(plotter.XYs, 0, len(ws)+1)
	if len(ws) == 0 {
		return c
	}
	floor := waitFloor.Seconds()
	c = append(c, plotter.XY{X: floor, Y: 0})
	for i, d := range ws {
		x := max(d.Seconds(), floor)
		// One point per distinct plotted wait keeps files small.
		if i+1 < len(ws) && max(ws[i+1].Seconds(), floor) == x {
			continue
		}
		c = append(c, plotter.XY{X: x, Y: float64(i+1) / float64(len(ws))})
	}
	return c
}

// logX gives a plot a log x axis with its ticks at powers of ten. The axis
// starts at the floor and spans at least a decade (all waits at the floor
// would give an empty range, which the log scale cannot draw).
func logX(p *plot.Plot) {
	p.X.Min = waitFloor.Seconds()
	p.X.Max = max(p.X.Max, 10*p.X.Min)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
}
