package engine

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// overlapHold is enoughFree kept up to date across the probes of one
// reserve call instead of recomputed at each: the probe times only grow,
// so each reservation of the cycle enters the probe's overlap window once
// and leaves it once, and the what-if snapshot only gains free GPUs (the
// timeline's releases, reported through released). It counts, per GPU,
// the overlapping reservations that hold it and, per node, the held GPUs
// that are free; a probe then costs one HoldN per node with held GPUs,
// not one step per reserved GPU. Which of the cycle's reservations (cs.res)
// overlap is kept by two cursors, not a pass over all of them per probe:
// a reservation starts to overlap once the probe's window reaches its
// start (cs.res is sorted by start) and stops once the probe is past its
// expected end (cs.resByEnd); the few it yields to (cs.yield) are
// checked at each probe. Config.DisableCaches uses enoughFree instead
// (FuzzEngine compares).
type overlapHold struct {
	cnt []int32 // per GPU: overlapping reservations holding it
	// hb holds back, per node, the GPUs with cnt > 0 that are free on w,
	// kept up to date (gang.Holdback.Add) rather than built per probe.
	hb      gang.Holdback
	touched []uint32 // GPUs whose cnt was raised in this call
	// gen numbers the reserve calls: a reservation of cs.res overlaps at
	// the last probe when its incGen is gen.
	gen     uint64
	pa, pb  int    // cursors: into cs.res (by start) and cs.resByEnd
	yieldIn []bool // per reservation of cs.yield: overlapping at the last probe
	off     bool   // a release this cannot follow came (shared GPUs): use enoughFree
}

// resNs sets a reservation's start and expected end in Unix nanoseconds
// (end: MaxInt64 when unbounded), for overlaps in integers.
func (o *resv) resNs() {
	o.startNs, o.endNs = o.start.UnixNano(), int64(math.MaxInt64)
	if o.bounded {
		o.endNs = addSat(o.startNs, o.dur)
	}
}

// begin resets h for a reserve call on cluster c with the cycle's
// reservations (cs.res, cs.yield).
func (h *overlapHold) begin(c *topo.Cluster, cs *cycleState) {
	cs.syncResByEnd()
	h.gen++
	h.pa, h.pb = 0, 0
	for _, o := range cs.yield {
		o.resNs()
	}
	if ng := c.NumGPUs(); len(h.cnt) < ng {
		h.cnt = make([]int32, ng)
	}
	for _, g := range h.touched {
		h.cnt[g] = 0
	}
	h.hb.Reset()
	h.touched = h.touched[:0]
	h.yieldIn = slices.Grow(h.yieldIn[:0], len(cs.yield))[:len(cs.yield)]
	clear(h.yieldIn)
	h.off = false
}

// hold counts gpus as held by one more (d 1) or one fewer (d -1)
// overlapping reservation.
func (h *overlapHold) hold(w *topo.Snapshot, gpus []uint32, d int32) {
	c := w.Cluster()
	for _, g := range gpus {
		if int(g) >= len(h.cnt) {
			continue
		}
		if d > 0 {
			if h.cnt[g]++; h.cnt[g] == 1 {
				h.touched = append(h.touched, g)
				if w.IsFree(g) {
					h.add(c, g, 1)
				}
			}
		} else if h.cnt[g]--; h.cnt[g] == 0 && w.IsFree(g) {
			h.add(c, g, -1)
		}
	}
}

func (h *overlapHold) add(c *topo.Cluster, g uint32, d int32) {
	n, err := c.NodeOfGPU(g)
	if err != nil {
		return
	}
	h.hb.Add(n, int(d))
}

// released notes GPUs released on w by the timeline; shared: the job held
// shares too, whose release may free GPUs not listed.
func (h *overlapHold) released(w *topo.Snapshot, gpus []uint32, shared bool) {
	if shared {
		h.off = true
		return
	}
	c := w.Cluster()
	for _, g := range gpus {
		if int(g) < len(h.cnt) && h.cnt[g] > 0 && w.IsFree(g) {
			h.add(c, g, 1)
		}
	}
}

// enoughFreeInc is enoughFree(w, t, r, req) for the probes of one reserve
// call, in order of t.
func (e *Engine) enoughFreeInc(w *topo.Snapshot, t time.Time, r *resv, req *gang.Request) bool {
	cs := &e.cyc
	h := &cs.inc
	if h.off {
		return e.enoughFree(w, t, r, req)
	}
	// overlaps(t, r.lim, r.limited, o.start, o.dur, o.bounded), in
	// nanoseconds: o overlaps unless r ends by its limit before o starts
	// (o.startNs < tEnd fails) or o ends before t (o.endNs > tNs fails).
	// Both only turn false -> true -> false as t grows.
	tNs := t.UnixNano()
	tEnd := int64(math.MaxInt64)
	if r.limited {
		tEnd = addSat(tNs, r.lim)
	}
	for ; h.pa < len(cs.res) && cs.res[h.pa].startNs < tEnd; h.pa++ {
		if o := cs.res[h.pa]; o.endNs > tNs {
			o.incGen = h.gen
			h.hold(w, o.gpus, 1)
		}
	}
	for ; h.pb < len(cs.resByEnd) && cs.resByEnd[h.pb].endNs <= tNs; h.pb++ {
		if o := cs.resByEnd[h.pb]; o.incGen == h.gen {
			o.incGen = 0
			h.hold(w, o.gpus, -1)
		}
	}
	for i, o := range cs.yield {
		now := o.startNs < tEnd && o.endNs > tNs
		if now != h.yieldIn[i] {
			h.yieldIn[i] = now
			d := int32(1)
			if !now {
				d = -1
			}
			h.hold(w, o.gpus, d)
		}
	}
	return h.hb.Len() == 0 || gang.PossibleWithout(w, req, &h.hb)
}

// enoughFreeOf is enoughFreeInc, or enoughFree with Config.DisableCaches.
func (e *Engine) enoughFreeOf(w *topo.Snapshot, t time.Time, r *resv, req *gang.Request) bool {
	if e.cfg.DisableCaches {
		return e.enoughFree(w, t, r, req)
	}
	return e.enoughFreeInc(w, t, r, req)
}

// addSat is a + d, saturated at the int64 bounds.
func addSat(a int64, d time.Duration) int64 {
	switch {
	case d > 0 && a > math.MaxInt64-int64(d):
		return math.MaxInt64
	case d < 0 && a < math.MinInt64-int64(d):
		return math.MinInt64
	}
	return a + int64(d)
}

// syncResByEnd rebuilds cs.resByEnd when it is stale or does not hold
// what cs.res holds.
func (cs *cycleState) syncResByEnd() {
	if !cs.resByEndStale && len(cs.resByEnd) == len(cs.res) {
		return
	}
	clear(cs.resByEnd)
	cs.resByEnd = append(cs.resByEnd[:0], cs.res...)
	for _, o := range cs.resByEnd {
		o.resNs()
	}
	slices.SortFunc(cs.resByEnd, func(a, b *resv) int { return cmp.Compare(a.endNs, b.endNs) })
	cs.resByEndStale = false
}
