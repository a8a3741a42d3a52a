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

// compact folds the log into a new base.
func (s *runSet) compact() {
	ops := append(s.tmp[:0], s.log...)
	keys := s.spare[:0]
	s.base = mergeRuns(s.base, s.keys, ops, make([]*runRec, 0, len(s.base)+len(ops)), &keys)
	s.spare, s.keys = s.keys[:0], keys
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
	return mergeRuns(v.base, nil, ops, make([]*runRec, 0, len(v.base)+len(ops)), nil)
}

// none reports whether no job ever ran (View.Running returns nil then).
func (v runView) none() bool { return v.base == nil && v.log == nil }

// mergeRuns returns base with ops applied in order (the last op of an ID
// wins), by ID, appended to out. It sorts ops (stably, by ID). With outK
// not nil, keys are the keys of base's IDs (idKey): the merge compares
// them, in order in memory, instead of following each record to its ID,
// and appends the result's keys to *outK.
func mergeRuns(base []*runRec, keys []uint64, ops []runOp, out []*runRec, outK *[]uint64) []*runRec {
	slices.SortStableFunc(ops, func(a, b runOp) int { return cmpIDKey(a.key, a.id, b.key, b.id) })
	keyed := outK != nil
	for k := 0; k < len(ops); {
		id, key := ops[k].id, ops[k].key
		for k+1 < len(ops) && ops[k+1].key == key && ops[k+1].id == id {
			k++
		}
		last := ops[k].rec
		k++
		i := 0
		if keyed {
			for i < len(base) && (keys[i] < key || keys[i] == key && base[i].Job < id) {
				i++
			}
			*outK, keys = append(*outK, keys[:i]...), keys[i:]
		} else {
			for i < len(base) && base[i].Job < id {
				i++
			}
		}
		// base[:i] is before id: copied at once.
		out, base = append(out, base[:i]...), base[i:]
		if len(base) > 0 && base[0].Job == id {
			base = base[1:] // replaced or deleted
			if keyed {
				keys = keys[1:]
			}
		}
		if last != nil {
			out = append(out, last)
			if keyed {
				*outK = append(*outK, key)
			}
		}
	}
	if keyed {
		*outK = append(*outK, keys...)
	}
	return append(out, base...)
}
