package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/berthsched/berth/replay"
)

// errUsage marks errors in the command line: they exit with code 2.
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// traceSpec is one --trace value: kind and path (or job count).
type traceSpec struct {
	kind string  // synthetic, synthetic-mig, swf, itp, openb, month
	path string  // empty: the shared trace of that kind
	jobs int     // synthetic: job count; synthetic-mig: fractional job count (0: default)
	days float64 // month: its first days (30: the whole month)
}

// name is how the workload is called in tables, rows and plot files.
func (t traceSpec) name() string {
	switch t.kind {
	case "synthetic", "synthetic-mig":
		if t.jobs > 0 {
			return t.kind + strconv.Itoa(t.jobs)
		}
		return t.kind
	case "month":
		if t.days == 30 {
			return "month"
		}
		return "month" + strconv.FormatFloat(t.days, 'g', -1, 64) + "d"
	case "itp":
		if t.path == "" {
			return "itp04"
		}
	case "swf":
		if t.path == "" {
			return "nasa"
		}
	}
	if t.path == "" {
		return t.kind
	}
	base := t.path[strings.LastIndexAny(t.path, `/\`)+1:]
	for _, ext := range []string{".gz", ".swf", ".csv"} {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" {
		base = t.kind
	}
	return t.kind + "-" + base
}

// traceKinds is what --trace accepts, for messages.
const traceKinds = "synthetic[:N], synthetic-mig[:N], swf[:PATH], itp[:PATH], openb[:DIR] or month[:DAYS]"

// parseTrace reads "synthetic", "synthetic:N", "synthetic-mig[:N]",
// "swf[:PATH]", "itp[:PATH]", "openb[:DIR]" or "month[:DAYS]".
func parseTrace(s string) (traceSpec, error) {
	kind, arg, _ := strings.Cut(strings.TrimSpace(s), ":")
	switch kind {
	case "synthetic", "synthetic-mig":
		if arg == "" {
			return traceSpec{kind: kind}, nil
		}
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 || n > 10_000_000 {
			return traceSpec{}, usagef("--trace %q: %s:N wants a job count in 1..10000000", s, kind)
		}
		return traceSpec{kind: kind, jobs: n}, nil
	case "swf", "itp", "openb":
		return traceSpec{kind: kind, path: arg}, nil
	case "month":
		days := 30.0
		if arg != "" {
			d, err := strconv.ParseFloat(arg, 64)
			if err != nil || !(d > 0 && d <= 30) {
				return traceSpec{}, usagef("--trace %q: month:DAYS wants days in (0, 30]", s)
			}
			days = d
		}
		return traceSpec{kind: kind, days: days}, nil
	case "":
		return traceSpec{}, usagef("--trace is empty (want %s)", traceKinds)
	}
	return traceSpec{}, usagef("--trace %q: unknown kind %q (want %s)", s, kind, traceKinds)
}

// parseList splits a comma-separated flag value, dropping empty items.
func parseList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseSeeds reads "42", "42-51" or "1,5,7-9": at most 1000 seeds, in
// order, without repeats.
func parseSeeds(s string) ([]int64, error) {
	var out []int64
	seen := map[int64]bool{}
	add := func(v int64) error {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
		if len(out) > 1000 {
			return usagef("--seeds %q: more than 1000 seeds", s)
		}
		return nil
	}
	items := parseList(s)
	if len(items) == 0 {
		return nil, usagef("--seeds is empty (want e.g. 42, 42-51 or 1,3,5)")
	}
	for _, it := range items {
		lo, hi, isRange := strings.Cut(it, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil || a < 0 {
			return nil, usagef("--seeds %q: %q is not a non-negative integer or range", s, it)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a {
				return nil, usagef("--seeds %q: %q is not a range lo-hi with lo <= hi", s, it)
			}
		}
		if b-a >= 1000 {
			return nil, usagef("--seeds %q: more than 1000 seeds", s)
		}
		for v := a; v <= b; v++ {
			if err := add(v); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// parseEstimates reads "exact", "trace" or "inflated:F" (F >= 1) into the
// replay's estimate factor (1, 0, F).
func parseEstimates(s string) (float64, error) {
	switch s {
	case "exact":
		return 1, nil
	case "trace":
		return 0, nil
	}
	if f, ok := strings.CutPrefix(s, "inflated:"); ok {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 1 || v > 1000 {
			return 0, usagef("--estimates %q: inflated:F wants a factor F in [1, 1000]", s)
		}
		return v, nil
	}
	return 0, usagef("--estimates %q: want exact, trace or inflated:F", s)
}

// parsePolicies checks a --policy list against the names the replay
// knows.
func parsePolicies(s string, known []string) ([]string, error) {
	ps := parseList(s)
	if len(ps) == 0 {
		return nil, usagef("--policy is empty (want some of %s)", strings.Join(known, ","))
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range ps {
		if !contains(known, p) {
			return nil, usagef("--policy: unknown policy %q (want some of %s)", p, strings.Join(known, ","))
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// clusterFor resolves the cluster of a workload: flags win; otherwise the
// trace's own size (NASA: 16 nodes of 8; the rest: 64 nodes of 8).
// Racks: the flag, else racks of 8 nodes when the nodes split evenly,
// else 1.
func clusterFor(nodes, gpusPerNode, racks, defaultNodes int) (replay.Cluster, error) {
	c := replay.Cluster{Nodes: nodes, GPUsPerNode: gpusPerNode, Racks: racks}
	if c.Nodes == 0 {
		c.Nodes = defaultNodes
	}
	if c.Racks == 0 {
		c.Racks = 1
		if c.Nodes%8 == 0 {
			c.Racks = c.Nodes / 8
		}
	}
	if _, err := c.Spec(); err != nil {
		return c, usagef("%v", err)
	}
	return c, nil
}

// parseFormat checks --format.
func parseFormat(s string) (string, error) {
	switch s {
	case "table", "json", "csv":
		return s, nil
	}
	return "", usagef("--format %q: want table, json or csv", s)
}
