package engine

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// The timeline is the running and stopping jobs by expected end, kept
// sorted as jobs start and stop so that a cycle does not sort thousands of
// jobs. A job's expected end changes only when the clock passes it (it
// overran its estimate, or its limit); those jobs are the timeline's
// prefix at or before now, re-keyed at the start of each cycle.

type tlEntry struct {
	at int64 // expected end, Unix nanoseconds
	js *job
}

func cmpTL(a, b tlEntry) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	return strings.Compare(a.js.j.ID, b.js.j.ID)
}

// activate records a job that now holds GPUs.
func (e *Engine) activate(js *job) {
	e.active[js.j.ID] = js
	i, _ := slices.BinarySearch(e.activeIDs, js.j.ID)
	e.activeIDs = slices.Insert(e.activeIDs, i, js.j.ID)
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
	delete(e.active, js.j.ID)
	if i, ok := slices.BinarySearch(e.activeIDs, js.j.ID); ok {
		e.activeIDs = slices.Delete(e.activeIDs, i, i+1)
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
	en := tlEntry{at: js.tlAt, js: js}
	i, _ := slices.BinarySearchFunc(e.tl, en, cmpTL)
	e.tl = slices.Insert(e.tl, i, en)
	e.tlGen++
}

func (e *Engine) tlRemove(js *job) {
	if !js.inTL {
		return
	}
	js.inTL = false
	if i, ok := slices.BinarySearchFunc(e.tl, tlEntry{at: js.tlAt, js: js}, cmpTL); ok {
		e.tl = slices.Delete(e.tl, i, i+1)
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
	k := 0
	for k < len(e.tl) && e.tl[k].at <= n {
		k++
	}
	if k == 0 {
		return
	}
	due := make([]*job, k)
	for i := range k {
		due[i] = e.tl[i].js
		due[i].inTL = false
	}
	e.tl = slices.Delete(e.tl, 0, k)
	e.tlGen++
	for _, js := range due {
		e.tlAdd(js)
	}
}
