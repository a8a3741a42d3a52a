package engine

import "time"

// The timeline is the running and stopping jobs by expected end, in a
// B-tree kept as jobs start and stop, so that a cycle does not sort
// thousands of jobs and a start or an end costs O(log n). A job's
// expected end changes only when the clock passes it (it overran its
// estimate, or its limit); those jobs are the timeline's prefix at or
// before now, re-keyed at the start of each cycle.

type tlEntry struct {
	at int64 // expected end, Unix nanoseconds
	js *job
}

// tlLess orders the timeline by expected end, then job ID; an entry
// without a job (a search pivot) comes first among those of its time.
func tlLess(a, b tlEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.js == nil || b.js == nil {
		return a.js == nil && b.js != nil
	}
	return a.js.j.ID < b.js.j.ID
}

// timeline returns at least the first n entries of the timeline in order
// (all of them when it has fewer; e.tl.Len() is their count), as a slice,
// read only: a copy of the tree's prefix, extended only when a caller
// reads further, and made again only when the timeline changed since (a
// cycle's reservation searches read it by index; starts and ends,
// thousands a second on a large cluster, cost O(log n) in the tree instead
// of a slice's O(n) move). A search that finds its start among the first
// ends copies only those: a copy of the whole timeline at every search
// was a quarter of the CPU of a month's replay with a backlog (tens of
// thousands of running jobs, the timeline changing every cycle). The
// prefix at least doubles as it grows, so reading the whole timeline
// costs O(n) as before. The slice is valid while the timeline does not
// change: its callers (a reservation search, snapAt within one) read it
// within one search, during which it does not; an extension appends after
// the entries a caller holds. The copies alternate between two arrays.
func (e *Engine) timeline(n int) []tlEntry {
	total := e.tl.Len()
	n = min(n, total)
	if e.tlView == nil || e.tlViewGen != e.tlGen {
		v := e.tlSpare[:0]
		e.tlSpare = e.tlView
		e.tlView, e.tlViewGen = v, e.tlGen
	}
	v := e.tlView
	if len(v) >= n {
		return v
	}
	want := min(max(n, 2*len(v), 64), total)
	add := func(en tlEntry) bool {
		v = append(v, en)
		return len(v) < want
	}
	if len(v) == 0 {
		e.tl.Ascend(add)
	} else {
		last := v[len(v)-1]
		e.tl.AscendGreaterOrEqual(last, func(en tlEntry) bool {
			return en == last || add(en)
		})
	}
	e.tlView = v
	return v
}

// tlFirstAfter returns the earliest expected end after n (ok false: none).
func (e *Engine) tlFirstAfter(n int64) (at int64, ok bool) {
	e.tl.AscendGreaterOrEqual(tlEntry{at: n + 1}, func(en tlEntry) bool {
		at, ok = en.at, true
		return false
	})
	return at, ok
}

// activate records a job that now holds GPUs.
func (e *Engine) activate(js *job) {
	if js.activeAt == 0 {
		e.active = append(e.active, js)
		js.activeAt = int32(len(e.active))
	}
	e.tlAdd(js)
	if !js.j.Elastic.IsZero() {
		e.elastic++
	}
	if js.site != nil {
		e.siteActivate(js)
	}
	e.runUpsert(js)
}

// deactivate forgets a job that released its GPUs.
func (e *Engine) deactivate(js *job) {
	if i := int(js.activeAt) - 1; i >= 0 {
		// The last job takes its place: no map by ID to update (the order
		// of e.active means nothing, like a map's).
		last := e.active[len(e.active)-1]
		e.active[i], last.activeAt = last, int32(i+1)
		e.active[len(e.active)-1] = nil
		e.active = e.active[:len(e.active)-1]
		js.activeAt = 0
	}
	e.tlRemove(js)
	if !js.j.Elastic.IsZero() {
		e.elastic--
	}
	if js.site != nil {
		e.siteDeactivate(js)
	}
	e.runDelete(js.j.ID)
}

func (e *Engine) tlAdd(js *job) {
	at, ok := js.expectedEnd(e.now)
	if !ok {
		js.inTL = false
		return
	}
	js.inTL, js.tlAt = true, at.UnixNano()
	e.tl.ReplaceOrInsert(tlEntry{at: js.tlAt, js: js})
	e.tlGen++
	e.tlSeq++
	e.tlAdds = append(e.tlAdds, tlAddRec{seq: e.tlSeq, at: js.tlAt, js: js})
}

func (e *Engine) tlRemove(js *job) {
	if !js.inTL {
		return
	}
	js.inTL = false
	if _, ok := e.tl.Delete(tlEntry{at: js.tlAt, js: js}); ok {
		e.tlGen++
	}
}

// tlRekey re-keys a job whose expected end changed (it was preempted, or
// a preemption of it was refused).
func (e *Engine) tlRekey(js *job) {
	e.tlRemove(js)
	e.tlAdd(js)
}

// tlRefresh re-keys the jobs whose expected end is not after now.
func (e *Engine) tlRefresh(now time.Time) {
	n := now.UnixNano()
	var due []*job
	e.tl.Ascend(func(en tlEntry) bool {
		if en.at > n {
			return false
		}
		due = append(due, en.js)
		return true
	})
	if len(due) == 0 {
		return
	}
	for _, js := range due {
		e.tl.Delete(tlEntry{at: js.tlAt, js: js})
		js.inTL = false
	}
	e.tlGen++
	for _, js := range due {
		e.tlAdd(js)
	}
}
