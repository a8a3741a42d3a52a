package engine

import (
	"math"
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
// that are free; a probe then costs a pass over the reservations plus one
// HoldN per node with held GPUs, not one step per reserved GPU.
// Config.DisableCaches uses enoughFree instead (FuzzEngine compares).
type overlapHold struct {
	cnt []int32 // per GPU: overlapping reservations holding it
	// hb holds back, per node, the GPUs with cnt > 0 that are free on w,
	// kept up to date (gang.Holdback.Add) rather than built per probe.
	hb      gang.Holdback
	touched []uint32 // GPUs whose cnt was raised in this call
	in      []bool   // per reservation (cs.res, then cs.yield): overlapping at the last probe
	// start and end: per reservation, its start and expected end in Unix
	// nanoseconds (end: MaxInt64 when unbounded), for overlaps in integers.
	start, end []int64
	off        bool // a release this cannot follow came (shared GPUs): use enoughFree
}

// begin resets h for a reserve call on cluster c with the cycle's
// reservations res and yield.
func (h *overlapHold) begin(c *topo.Cluster, res, yield []*resv) {
	nres := len(res) + len(yield)
	h.start, h.end = h.start[:0], h.end[:0]
	for _, rs := range [2][]*resv{res, yield} {
		for _, o := range rs {
			st, end := o.start.UnixNano(), int64(math.MaxInt64)
			if o.bounded {
				end = addSat(st, o.dur)
			}
			h.start, h.end = append(h.start, st), append(h.end, end)
		}
	}
	if ng := c.NumGPUs(); len(h.cnt) < ng {
		h.cnt = make([]int32, ng)
	}
	for _, g := range h.touched {
		h.cnt[g] = 0
	}
	h.hb.Reset()
	h.touched = h.touched[:0]
	h.in = append(h.in[:0], make([]bool, nres)...)
	h.off = false
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
	c := w.Cluster()
	// overlaps(t, r.lim, r.limited, o.start, o.dur, o.bounded), in
	// nanoseconds: r ends by its limit before o starts, or o ends before t.
	tNs := t.UnixNano()
	tEnd := int64(math.MaxInt64)
	if r.limited {
		tEnd = addSat(tNs, r.lim)
	}
	i := 0
	for _, rs := range [2][]*resv{cs.res, cs.yield} {
		for _, o := range rs {
			now := !(tEnd <= h.start[i]) && !(h.end[i] <= tNs)
			if now != h.in[i] {
				h.in[i] = now
				for _, g := range o.gpus {
					if int(g) >= len(h.cnt) {
						continue
					}
					if now {
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
			i++
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
