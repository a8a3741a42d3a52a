package queue

import (
	"slices"
)

// A skip under StrictPriority (issue 33: the 120% month walked a
// thousand jobs and more a cycle under EASY, whose cursor could not
// skip). The order is one total order, less, over every queue's jobs,
// usage plays no part, so the first candidate at or after the job j just
// yielded is the least such candidate, and the jobs passed are, in each
// queue, those from its head up to that candidate. The candidates listed
// are sorted once per list and pending set (strictCands); a whole class's
// first job at or after j is one lookup in the class's own order. A skip
// then costs a binary search, a lookup per class and two per queue,
// without reading the jobs passed (Skipped counts them when asked).

// strictCands is the candidates of the last Skip, sorted by less.
type strictCands struct {
	ver  uint64 // Pending.version when sorted
	jobs []*Job // the candidates as given
	ents []*entry
}

// strictCut is where a skip moves the walker of queue position k (nil:
// to its end).
type strictCut struct {
	k  int
	at *entry
}

// ClassSkipper is a Skipper whose candidates may also be whole size
// classes (StrictPriority): every pending job of them, found in the
// class's own order (Pending keeps one per class from the first call
// on), without listing them.
type ClassSkipper interface {
	Skipper
	// SkipTo is Skip with the jobs of classes (as AskClasses gave them)
	// candidates too.
	SkipTo(cands []*Job, classes []AskClass) (first *Job, passed *Skipped, ok bool)
}

// Skip: see Skipper.
func (c *strictCursor) Skip(cands []*Job) (*Job, *Skipped, bool) { return c.SkipTo(cands, nil) }

// SkipTo: see ClassSkipper.
func (c *strictCursor) SkipTo(cands []*Job, classes []AskClass) (*Job, *Skipped, bool) {
	p := c.p
	if p == nil || c.last < 0 {
		return nil, nil, false
	}
	ej := c.ws[c.last].peek()
	if ej == nil || ej != c.head[c.last] {
		return nil, nil, false // not right after Next
	}
	sc := &c.cands
	if sc.ver != p.version || !slices.Equal(sc.jobs, cands) {
		sc.ver, sc.jobs = p.version, append(sc.jobs[:0], cands...)
		clear(sc.ents)
		sc.ents = sc.ents[:0]
		for _, j := range cands {
			if e, ok := p.byID[j.ID]; ok && e.job == j {
				sc.ents = append(sc.ents, e)
			}
		}
		slices.SortFunc(sc.ents, cmpEntry)
	}
	// The first candidate at or after ej.
	var first *entry
	if i, _ := slices.BinarySearchFunc(sc.ents, ej, cmpEntry); i < len(sc.ents) {
		first = sc.ents[i]
	}
	if len(classes) > 0 {
		p.keepClassOrder()
	}
	for _, cl := range classes {
		k, t := cl.bucket()
		if k < 0 || k > maxAsk {
			continue
		}
		if o := p.asks[k][t].order; o != nil {
			o.AscendGreaterOrEqual(ej, func(e *entry) bool {
				if first == nil || less(e, first) {
					first = e
				}
				return false
			})
		}
	}
	if first == ej {
		return nil, nil, false // j is a candidate: nothing to pass
	}
	passed := &Skipped{p: p, t: p.tree, strict: true, n: -1}
	cuts := c.cuts[:0] // per range: where its walker goes on
	for k, q := range p.tree.queues {
		w := &c.ws[k]
		h := w.peek()
		if h == nil || first != nil && !less(h, first) {
			continue // nothing of this queue comes before first
		}
		tr := p.byQueue[q]
		var last, cut *entry
		if first == nil {
			last, _ = tr.Max()
		} else {
			tr.AscendGreaterOrEqual(first, func(e *entry) bool { cut = e; return false })
			tr.DescendLessOrEqual(first, func(e *entry) bool {
				if e == first {
					return true
				}
				last = e
				return false
			})
		}
		if last == nil || less(last, h) {
			return nil, nil, false // not expected: h is in the tree, before first
		}
		passed.ranges = append(passed.ranges, skipRange{q: q, first: h, last: last})
		cuts = append(cuts, strictCut{k, cut})
	}
	c.cuts = cuts
	if len(cuts) == 0 {
		return nil, nil, false // not expected: ej's queue passes ej
	}
	for _, ct := range cuts {
		if ct.at != nil {
			c.ws[ct.k].seek(ct.at)
		} else {
			c.ws[ct.k].finish()
		}
	}
	// The heads again (every walker not moved keeps its own).
	c.last = -1
	c.h = c.h[:0]
	for k := range c.ws {
		if c.head[k] = c.ws[k].peek(); c.head[k] != nil {
			c.h = append(c.h, int32(k))
		}
	}
	heapInit(c.h, c.less)
	if first == nil {
		return nil, passed, true
	}
	return first.job, passed, true
}
