package engine

import (
	"strconv"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// fitsMemo remembers the requests that passed neverFits on the cluster as
// it is (nodes, their GPUs, modes and domains), keyed by what neverFits
// reads of a request; rebuild clears it, since only rebuild changes the
// nodes that check reads. Without it every submission walks every node of
// the spec: on B12K, 100,000 submissions cost over a billion node visits.
// Failures are not remembered (their errors name the job and are rare).
type fitsMemo map[string]struct{}

// appendFitsKey appends to b the part of r that neverFits reads: numbers
// in decimal, strings after their length, so that no two requests that
// differ in it give the same key.
func appendFitsKey(b []byte, r *gang.Request) []byte {
	b = append(b, r.Required...)
	for i := range r.Groups {
		g := &r.Groups[i]
		for k, n := range [...]int64{int64(g.Members), int64(g.GPUsPerMember), int64(g.GPUMilli)} {
			if k == 0 {
				b = append(b, '|')
			} else {
				b = append(b, '/')
			}
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, '/')
		b = append(b, g.MIGProfile...)
		for _, n := range [...]int64{g.CPUMilli, g.MemoryMiB, int64(len(g.GPUModel))} {
			b = append(b, '/')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, g.GPUModel...)
		for _, m := range g.GPUModels {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(len(m)), 10)
			b = append(b, '/')
			b = append(b, m...)
		}
		if g.SameModel {
			b = append(b, ",same"...)
		}
	}
	return b
}

// neverFitsCached is neverFits(j, r) through e.fitsOK (none with
// Config.DisableCaches). A request seen before costs its key, built in
// e.fitsBuf, and one map lookup: no allocation.
func (e *Engine) neverFitsCached(j *queue.Job, r *gang.Request) error {
	if e.cfg.DisableCaches {
		return e.neverFits(j, r)
	}
	e.fitsBuf = appendFitsKey(e.fitsBuf[:0], r)
	if _, ok := e.fitsOK[string(e.fitsBuf)]; ok {
		return nil
	}
	err := e.neverFits(j, r)
	if err == nil {
		if e.fitsOK == nil {
			e.fitsOK = fitsMemo{}
		}
		e.fitsOK[string(e.fitsBuf)] = struct{}{}
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
