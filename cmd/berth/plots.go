package main

import (
	"fmt"
	"path/filepath"
	"strings"

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
func savePlot(dir, base, title, xlabel, ylabel string, legendTop bool, lines []series) ([]string, error) {
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
			ws := r.first.Waits
			c := make(plotter.XYs, 0, len(ws)+1)
			if len(ws) > 0 {
				c = append(c, plotter.XY{X: 0, Y: 0})
			}
			for i, d := range ws {
				// One point per distinct wait keeps files small.
				if i+1 < len(ws) && ws[i+1] == d {
					continue
				}
				c = append(c, plotter.XY{X: d.Hours(), Y: float64(i+1) / float64(len(ws))})
			}
			cdf = append(cdf, series{placementLabel(r.res.Policy, r.placement), c})
		}
		base := fileName(w)
		for _, p := range []struct {
			suffix, title, x, y string
			lines               []series
		}{
			{"utilization", w + ": GPU utilization", "hours since the first submission", "utilization (%)", util},
			{"queue", w + ": queue length", "hours since the first submission", "pending jobs", queue},
			{"wait-cdf", w + ": wait-time CDF", "wait (hours)", "fraction of jobs", cdf},
		} {
			fs, err := savePlot(dir, base+"-"+p.suffix, p.title, p.x, p.y, p.suffix != "wait-cdf", p.lines)
			if err != nil {
				return nil, err
			}
			files = append(files, fs...)
		}
	}
	return files, nil
}
