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
	// keys are the IDs' keys of base (idKey), the engine's alone (a
	// View reads none), and spare the array of the keys before, reused:
	// compact compares keys, in order in memory, instead of following
	// each record to its ID's bytes.
	keys, spare []uint64
}

// runOp sets a job's record; rec nil deletes it. key is idKey(id).
type runOp struct {
	id  string
	rec *runRec
	key uint64
}

// idKey is the first 8 bytes of id, big-endian, zero-padded: a < b
// whenever idKey(a) < idKey(b), and equal keys leave the order to the
// IDs themselves.
func idKey(id string) uint64 {
	var k uint64
	for i := range 8 {
		k <<= 8
		if i < len(id) {
			k |= uint64(id[i])
		}
	}
	return k
}

// cmpIDKey orders IDs by key, then by the IDs (the order of the IDs).
func cmpIDKey(ka uint64, a string, kb uint64, b string) int {
	if ka != kb {
		return cmp.Compare(ka, kb)
	}
	return cmp.Compare(a, b)
}

// runView is a runSet frozen for a View.
type runView struct {
	base []*runRec
	log  []runOp
}

func (s *runSet) set(id string, rec *runRec) {
	s.log = append(s.log, runOp{id, rec, idKey(id)})
	if len(s.log) > 32+len(s.base)/4 {
		s.compact()
	}
}

// compact folds the log into a new base (what mergeRuns makes, by the
// keys).
func (s *runSet) compact() {
	ops := append(s.tmp[:0], s.log...)
	slices.SortStableFunc(ops, func(a, b runOp) int { return cmpIDKey(a.key, a.id, b.key, b.id) })
	base, keys := s.base, s.keys
	out := make([]*runRec, 0, len(base)+len(ops))
	outK := s.spare[:0]
	i := 0
	for k := 0; k < len(ops); {
		id, key := ops[k].id, ops[k].key
		for k+1 < len(ops) && ops[k+1].key == key && ops[k+1].id == id {
			k++
		}
		last := ops[k].rec
		k++
		for i < len(base) && (keys[i] < key || keys[i] == key && base[i].Job < id) {
			i++
		}
		// base[:i] is before id: copied at once.
		out = append(out, base[:i]...)
		outK = append(outK, keys[:i]...)
		base, keys = base[i:], keys[i:]
		i = 0
		if len(base) > 0 && keys[0] == key && base[0].Job == id {
			base, keys = base[1:], keys[1:] // replaced or deleted
		}
		if last != nil {
			out = append(out, last)
			outK = append(outK, key)
		}
	}
	s.base = append(out, base...)
	s.spare, s.keys = s.keys[:0], append(outK, keys...)
	s.tmp = ops
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
