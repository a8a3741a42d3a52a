package engine

import (
	"encoding/binary"
	"errors"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// fitsMemo remembers the verdict of neverFits on the cluster as it is
// (nodes, their GPUs, modes and domains) for each request seen, keyed by
// what neverFits reads of a request: nil for a request that passed, else
// its error with Job empty (the one thing of the job the check reads);
// rebuild clears it, since only rebuild changes the nodes that check
// reads. Without it every submission walks every node of the spec: on
// B12K, 100,000 submissions cost over a billion node visits, and a trace
// whose pods ask more CPU than any node has (openb) walked 1,213 nodes
// again for each of them.
type fitsMemo map[string]*NeverFitsError

// appendFitsKey appends to b the part of r that neverFits reads: numbers
// as 8 bytes each, strings after their length, so that no two requests
// that differ in it give the same key (fixed-width numbers: every
// submission builds its key, and decimal digits cost a division each).
func appendFitsKey(b []byte, r *gang.Request) []byte {
	b = appendKeyString(b, r.Required)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(r.Groups)))
	for i := range r.Groups {
		g := &r.Groups[i]
		b = binary.LittleEndian.AppendUint64(b, uint64(g.Members))
		b = binary.LittleEndian.AppendUint64(b, uint64(g.GPUsPerMember))
		b = binary.LittleEndian.AppendUint64(b, uint64(g.GPUMilli))
		b = appendKeyString(b, g.MIGProfile)
		b = binary.LittleEndian.AppendUint64(b, uint64(g.CPUMilli))
		b = binary.LittleEndian.AppendUint64(b, uint64(g.MemoryMiB))
		b = appendKeyString(b, g.GPUModel)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(g.GPUModels)))
		for _, m := range g.GPUModels {
			b = appendKeyString(b, m)
		}
		if g.SameModel {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

// appendKeyString appends s after its length (8 bytes).
func appendKeyString(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
}

// neverFitsCached is neverFits(j, r) through e.fitsSeen (none with
// Config.DisableCaches). A request seen before costs its key, built in
// e.fitsBuf, and one map lookup: no allocation when it passed, a copy of
// the remembered error naming j when it did not.
func (e *Engine) neverFitsCached(j *queue.Job, r *gang.Request) error {
	if e.cfg.DisableCaches {
		return e.neverFits(j, r)
	}
	e.fitsBuf = appendFitsKey(e.fitsBuf[:0], r)
	if nf, ok := e.fitsSeen[string(e.fitsBuf)]; ok {
		if nf == nil {
			return nil
		}
		c := *nf
		c.Job = j.ID
		return &c
	}
	err := e.neverFits(j, r)
	var nf *NeverFitsError
	if err != nil {
		if !errors.As(err, &nf) {
			return err // not a verdict on the request: not remembered
		}
		c := *nf
		c.Job = ""
		nf = &c
	}
	if e.fitsSeen == nil {
		e.fitsSeen = fitsMemo{}
	}
	e.fitsSeen[string(e.fitsBuf)] = nf
	return err
}

// isActive reports whether the job id holds GPUs (running or stopping).
func (e *Engine) isActive(id string) bool {
	js := e.jobs[id]
	return js != nil && js.activeAt > 0
}

// scanIf is jobs (a map or a slice of them), or nothing when scan is
// false and e's caches are on (NextWake's scans that a counter shows
// would find nothing).
func scanIf[C map[string]*job | []*job](e *Engine, scan bool, jobs C) C {
	if !scan && !e.cfg.DisableCaches {
		return nil
	}
	return jobs
}
