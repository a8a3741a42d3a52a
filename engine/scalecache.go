package engine

import (
	"fmt"
	"strings"

	"github.com/berthsched/berth/gang"
)

// fitsMemo remembers the requests that passed neverFits on the cluster as
// it is (nodes, their GPUs, modes and domains), keyed by what neverFits
// reads of a request; rebuild clears it, since only rebuild changes the
// nodes that check reads. Without it every submission walks every node of
// the spec: on B12K, 100,000 submissions cost over a billion node visits.
// Failures are not remembered (their errors name the job and are rare).
type fitsMemo map[string]struct{}

// fitsKey is the part of r that neverFits reads.
func fitsKey(r *gang.Request) string {
	var b strings.Builder
	b.WriteString(r.Required)
	for i := range r.Groups {
		g := &r.Groups[i]
		fmt.Fprintf(&b, "|%d/%d/%d/%s/%d/%d/%d", g.Members, g.GPUsPerMember, g.GPUMilli, g.MIGProfile, g.CPUMilli, g.MemoryMiB, len(g.GPUModel))
		b.WriteString(g.GPUModel)
		for _, m := range g.GPUModels {
			fmt.Fprintf(&b, ",%d/%s", len(m), m)
		}
		if g.SameModel {
			b.WriteString(",same")
		}
	}
	return b.String()
}

// neverFitsCached is neverFits through e.fitsOK (none with
// Config.DisableCaches).
func (e *Engine) neverFitsCached(r *gang.Request, check func() error) error {
	if e.cfg.DisableCaches {
		return check()
	}
	key := fitsKey(r)
	if _, ok := e.fitsOK[key]; ok {
		return nil
	}
	err := check()
	if err == nil {
		if e.fitsOK == nil {
			e.fitsOK = fitsMemo{}
		}
		e.fitsOK[key] = struct{}{}
	}
	return err
}

// scanIf is m, or nothing when scan is false and the caches are on
// (NextWake's scans that a counter shows would find nothing).
func (e *Engine) scanIf(scan bool, m map[string]*job) map[string]*job {
	if !scan && !e.cfg.DisableCaches {
		return nil
	}
	return m
}
