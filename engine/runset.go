package engine

import (
	"cmp"
	"slices"
)

// runSet is the running jobs as observers see them (View.Running, Explain):
// a base sorted by job ID and the changes made since, in order. A View
// keeps the two slices as they were when it was published (runView); the
// engine only appends to the log and builds a new base when the log grows
// to a quarter of it, never writing an array a View may hold. A job
// starting or ending thus costs the cycle no allocation (a copy-on-write
// tree copied its path, several nodes, at every change) and a View costs
// none either; the View pays for the merge when it is read.
type runSet struct {
	base []*runRec
	log  []runOp
	tmp  []runOp // compact's scratch (the engine's alone)
}

// runOp sets a job's record; rec nil deletes it.
type runOp struct {
	id  string
	rec *runRec
}

// runView is a runSet frozen for a View.
type runView struct {
	base []*runRec
	log  []runOp
}

func (s *runSet) set(id string, rec *runRec) {
	s.log = append(s.log, runOp{id, rec})
	if len(s.log) > 32+len(s.base)/4 {
		s.compact()
	}
}

// compact folds the log into a new base.
func (s *runSet) compact() {
	s.tmp = append(s.tmp[:0], s.log...)
	s.base = mergeRuns(s.base, s.tmp, nil)
	clear(s.tmp)
	// A View may hold the old log's array: start a new one.
	s.log = make([]runOp, 0, 33+len(s.base)/4)
}

// view freezes the set as it is: the engine appends after the View's
// length, which the View never reads.
func (s *runSet) view() runView {
	return runView{base: s.base, log: s.log[:len(s.log):len(s.log)]}
}

// all returns the running jobs by ID, read only (allocates when the log
// is not empty).
func (v runView) all() []*runRec {
	if len(v.log) == 0 {
		return v.base // read only
	}
	ops := slices.Clone(v.log)
	return mergeRuns(v.base, ops, make([]*runRec, 0, len(v.base)+len(ops)))
}

// none reports whether no job ever ran (View.Running returns nil then).
func (v runView) none() bool { return v.base == nil && v.log == nil }

// mergeRuns returns base with ops applied in order (the last op of an ID
// wins), by ID, appended to out. It sorts ops (stably, by ID).
func mergeRuns(base []*runRec, ops []runOp, out []*runRec) []*runRec {
	slices.SortStableFunc(ops, func(a, b runOp) int { return cmp.Compare(a.id, b.id) })
	if out == nil {
		out = make([]*runRec, 0, len(base)+len(ops))
	}
	i := 0
	for k := 0; k < len(ops); {
		id := ops[k].id
		for k+1 < len(ops) && ops[k+1].id == id {
			k++
		}
		last := ops[k].rec
		k++
		for i < len(base) && base[i].Job < id {
			out = append(out, base[i])
			i++
		}
		if i < len(base) && base[i].Job == id {
			i++ // replaced or deleted
		}
		if last != nil {
			out = append(out, last)
		}
	}
	return append(out, base[i:]...)
}
