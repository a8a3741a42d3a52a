package fgd

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/berthsched/berth/workload"
)

// PublishedAlloc is the published allocation file, relative to the traces
// directory: the FGD artifact's per-seed columns for openb_pod_list_default.
const PublishedAlloc = "published/fgd_expected_alloc_ratio_openb_default.csv"

// PublishedFrag is the published fragmentation file, relative to the
// traces directory.
const PublishedFrag = "published/fgd_expected_frag_ratio_openb_default.csv"

// publishedNames maps the artifact's sc_policy to our policy names.
var publishedNames = map[string]string{
	"01-Random": "random", "02-DotProd": "dotprod", "03-GpuClustering": "clustering",
	"04-GpuPacking": "packing", "05-BestFit": "bestfit", "06-FGD": "fgd",
}

// RunKey names one run.
type RunKey struct {
	Policy string
	Seed   int64
}

// Published holds the published per-seed columns.
type Published map[RunKey][]float64

// ReadPublished parses the published allocation CSV (header workload,
// sc_policy, tune, seed, total_gpus, 0..130). name labels errors.
func ReadPublished(r io.Reader, name string) (Published, error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("fgd: %s: header: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	pi, ok1 := col["sc_policy"]
	si, ok2 := col["seed"]
	c0, ok3 := col["0"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("fgd: %s: header lacks sc_policy, seed or 0", name)
	}
	out := Published{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("fgd: %s:%d: %w", name, line, err)
		}
		pol, ok := publishedNames[rec[pi]]
		if !ok {
			pol = rec[pi]
		}
		seed, err := strconv.ParseInt(rec[si], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("fgd: %s:%d: seed: %w", name, line, err)
		}
		vals := make([]float64, 0, len(rec)-c0)
		for _, s := range rec[c0:] {
			v := math.NaN()
			if s != "" {
				if v, err = strconv.ParseFloat(s, 64); err != nil {
					return nil, fmt.Errorf("fgd: %s:%d: %w", name, line, err)
				}
			}
			vals = append(vals, v)
		}
		out[RunKey{pol, seed}] = vals
	}
}

// LoadPublished reads PublishedAlloc from the traces directory.
func LoadPublished() (Published, error) { return loadPublished(PublishedAlloc) }

// LoadPublishedFrag reads PublishedFrag from the traces directory; compare
// it with Curve.Frag through CompareFrag.
func LoadPublishedFrag() (Published, error) { return loadPublished(PublishedFrag) }

func loadPublished(rel string) (Published, error) {
	path, err := workload.TracePath(rel)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fgd: %w", err)
	}
	defer f.Close()
	return ReadPublished(f, path)
}

// Diff is one column where a curve and the published one differ.
type Diff struct {
	RunKey
	Column    int
	Got, Want float64
}

// Compare returns the columns of curves that differ from the published
// ones by more than tol (NaN on one side only counts as a difference).
// Curves without a published counterpart are skipped.
func (p Published) Compare(curves []Curve, tol float64) []Diff {
	return p.compare(curves, tol, func(c *Curve) []float64 { return c.Columns })
}

// CompareFrag is Compare for the fragmentation columns (Curve.Frag).
func (p Published) CompareFrag(curves []Curve, tol float64) []Diff {
	return p.compare(curves, tol, func(c *Curve) []float64 { return c.Frag })
}

func (p Published) compare(curves []Curve, tol float64, cols func(*Curve) []float64) []Diff {
	var out []Diff
	for i := range curves {
		cv := &curves[i]
		want, ok := p[cv.RunKey()]
		if !ok {
			continue
		}
		got := cols(cv)
		for k := range max(len(want), len(got)) {
			g, w := math.NaN(), math.NaN()
			if k < len(got) {
				g = got[k]
			}
			if k < len(want) {
				w = want[k]
			}
			if math.IsNaN(g) && math.IsNaN(w) {
				continue
			}
			if math.IsNaN(g) || math.IsNaN(w) || math.Abs(g-w) > tol {
				out = append(out, Diff{RunKey: cv.RunKey(), Column: k, Got: g, Want: w})
			}
		}
	}
	return out
}

// RunKey returns the curve's key.
func (c Curve) RunKey() RunKey { return RunKey{c.Policy, c.Seed} }
