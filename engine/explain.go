package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// Explanation is a pending job's reason in words its owner can act on:
// the resource that limits it, in numbers, and what would let it start.
// View.Explain computes it when asked, from the View alone, so the cycle
// pays nothing for the words.
type Explanation struct {
	Job    string
	Reason ReasonCode
	// Kind classifies the explanation without its numbers, for counting
	// (for example "capacity: whole nodes" or "reserved-gpus").
	Kind string
	// Limit names the limiting resource and how much of it there is, for
	// example "needs 4 whole nodes (8 GPUs each) in one rack; the freest
	// rack (r7) has 3".
	Limit string
	// Unblock says what would let the job start, for example "room at
	// 14:05 (in 2h10m) in r7, once j12, j40 end".
	Unblock string
}

func (x Explanation) String() string {
	if x.Unblock == "" {
		return x.Limit
	}
	return x.Limit + "; " + x.Unblock
}

// Explain returns the Explanation of one pending job: one of Pending, or
// one after the walk's cut whose status the engine's owner computed
// (Engine.PendingStatuses); false for any other job.
func (v *View) Explain(job string) (Explanation, bool) {
	p, i, ok := v.status(job)
	if !ok {
		return Explanation{}, false
	}
	return v.explain(p, i, &explainCache{}), true
}

// Explanations returns the Explanation of every pending job, in the
// order of Pending. It allocates and walks the timeline per job: for
// dashboards and CLIs, not for every cycle.
func (v *View) Explanations() []Explanation {
	out := make([]Explanation, len(v.Pending))
	c := &explainCache{}
	for i := range v.Pending {
		out[i] = v.explain(&v.Pending[i], i, c)
	}
	return out
}

// explainCache holds what several explanations of one View share.
type explainCache struct {
	run   []*runRec // running jobs by expected end (known ends first)
	built bool
	ests  []RunningJob
}

func (v *View) runsByEnd(c *explainCache) []*runRec {
	if c.built {
		return c.run
	}
	c.built = true
	c.run = append(c.run, v.running.all()...)
	slices.SortStableFunc(c.run, func(a, b *runRec) int {
		ea, eb := expectedEndAt(a, v.At), expectedEndAt(b, v.At)
		if ea.IsZero() != eb.IsZero() {
			if ea.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(ea.Compare(eb), cmp.Compare(a.Job, b.Job))
	})
	return c.run
}

// explain explains p, v.Pending[i] (i = -1: see estimate).
func (v *View) explain(p *PendingStatus, i int, c *explainCache) Explanation {
	x := Explanation{Job: p.Job, Reason: p.Reason, Kind: p.Reason.String()}
	est := v.estimate(p, i, &c.ests)
	switch p.Reason {
	case ReasonQuota:
		x.Limit = fmt.Sprintf("queue %s is short of quota: %s needs %s, %s available", p.Queue, p.Quota.Resource,
			quotaAmount(p.Quota.Resource, p.Quota.Need), quotaAmount(p.Quota.Resource, p.Quota.Available))
		if est.Why == NoEstimateNeverFits {
			x.Kind = "quota: never"
			x.Unblock = "nothing in its queue or cohort runs, so no end gives quota back: its quota must be raised"
		} else {
			x.Unblock = "quota comes back as " + v.jobsEnding(est.Behind, c) + " " + endVerb(est.Behind)
		}
	case ReasonCapacity:
		v.explainCapacity(p, &x, c)
	case ReasonReservedGPUs:
		v.explainReservedGPUs(p, &x, c)
	case ReasonReserved:
		v.explainReserved(p, &x, c)
	case ReasonBlocked:
		v.explainBlocked(p, i, &x, c)
	case ReasonPreempting:
		x.Limit = "jobs were preempted for it and are in their grace period"
		x.Unblock = "starts at " + v.when(p.Start) + ", when their grace periods end"
	case ReasonBindRefused:
		x.Limit = "the backend refused its last bind"
		x.Unblock = "it is placed again after the retry backoff (Engine.BindRetryAt)"
	case ReasonHeld:
		x.Limit = "its binds failed Config.MaxBindTries times in a row: " + v.Holds[p.Job]
		x.Unblock = "it is placed again once released (engine.Released)"
	case ReasonBinding:
		x.Limit = "it is bound and its GPUs are booked; the backend has not answered yet"
		x.Unblock = "it runs once the backend applies the bind"
	case ReasonBindingUnknown:
		x.Limit = "its bind call timed out: the backend may or may not run it; its GPUs stay booked"
		x.Unblock = "the backend's own state decides: running, it is adopted; not running, it is placed again"
	case ReasonUnsupported, ReasonInvalid:
		x.Limit = "its request cannot be placed on this cluster (" + p.Reason.String() + ")"
		x.Unblock = "only a changed request can start"
	case ReasonReconfiguring:
		x.Limit = fmt.Sprintf("no free MIG instance or GPU share fits it: %v", p.Place)
		x.Unblock = "a MIG reconfiguration planned this cycle makes room; it is placed once the backend applies it"
	case ReasonNone:
		x.Limit = "not considered by the latest cycle"
		x.Unblock = "the next cycle considers it"
	default:
		x.Limit = "held: " + p.String()
		x.Unblock = "it is considered again once what holds it lets it go"
	}
	return x
}

// need is one group's ask as the explanations count it.
type need struct {
	members, per int
	model        int // -1: any
	level        int // topology level the group must fit in (0: cluster)
}

func (v *View) needOf(p *PendingStatus) (need, bool) {
	if p.js == nil || v.x.snap == nil {
		return need{}, false
	}
	req := &p.js.req
	g := max(p.Place.Group, 0)
	if g >= len(req.Groups) {
		return need{}, false
	}
	gr := &req.Groups[g]
	if gr.GPUsPerMember <= 0 {
		return need{}, false
	}
	c := v.x.snap.Cluster()
	n := need{members: gr.Members, per: gr.GPUsPerMember, model: -1}
	if p.Place.Group >= 0 && p.Place.Need > 0 {
		n.members = p.Place.Need
	}
	switch ms := gr.Models(); len(ms) {
	case 0:
	case 1:
		m, ok := c.ModelIndex(ms[0])
		if !ok {
			return need{}, false
		}
		n.model = m
	default:
		return need{}, false // a set of models: not explained in GPUs to free
	}
	if p.Place.Level != "" {
		if l, err := c.Level(p.Place.Level); err == nil {
			n.level = l
		}
	}
	return n, true
}

// whatIf is the free GPUs per node of a View, released job by job.
type whatIf struct {
	c    *topo.Cluster
	free []int
}

func (v *View) whatIfNow() *whatIf {
	c := v.x.snap.Cluster()
	w := &whatIf{c: c, free: make([]int, c.NumNodes())}
	for id := range w.free {
		w.free[id] = v.x.snap.NodeAvailable(topo.NodeID(id))
	}
	return w
}

func (w *whatIf) release(s *topo.Snapshot, gpus []uint32) {
	for _, g := range gpus {
		id, err := w.c.NodeOfGPU(g)
		if err != nil || s.NodeState(id) != topo.Ready {
			continue
		}
		w.free[id]++
	}
}

// room is the most members of n that fit in one domain of n's level, and
// that domain.
func (w *whatIf) room(n need) (best, dom int) {
	nd := w.c.NumDomains(n.level)
	for d := range nd {
		info := w.c.Domain(n.level, d)
		k := 0
		for id := info.FirstNode; id < info.EndNode; id++ {
			if n.model >= 0 && w.c.NodeModel(id) != n.model {
				continue
			}
			k += w.free[id] / n.per
		}
		if k > best || d == 0 {
			best, dom = max(k, best), d
		}
	}
	return best, dom
}

// shape says what a group needs in words.
func (v *View) shape(n need) string {
	c := v.x.snap.Cluster()
	var s string
	switch {
	case n.per == c.MaxGPUsPerNode() && n.members == 1:
		s = fmt.Sprintf("a whole node (%d GPUs)", n.per)
	case n.per == c.MaxGPUsPerNode():
		s = fmt.Sprintf("%d whole nodes (%d GPUs each)", n.members, n.per)
	case n.members == 1 && n.per == 1:
		s = "1 GPU"
	case n.members == 1:
		s = fmt.Sprintf("%d GPUs on one node", n.per)
	default:
		s = fmt.Sprintf("%d members of %d GPUs, each on one node", n.members, n.per)
	}
	if n.level > 0 {
		s += " in one " + c.Levels()[n.level]
	}
	return s
}

func (v *View) shapeKind(n need) string {
	c := v.x.snap.Cluster()
	k := "whole nodes"
	if n.per < c.MaxGPUsPerNode() {
		k = "part of a node"
	}
	if n.level > 0 {
		k += " in one " + c.Levels()[n.level]
	}
	return k
}

// roomText says how much room there is for n on w.
func (v *View) roomText(w *whatIf, n need) string {
	best, dom := w.room(n)
	if n.level == 0 {
		if n.per == w.c.MaxGPUsPerNode() {
			if best == 1 {
				return "1 whole node is free"
			}
			return fmt.Sprintf("%d whole nodes are free", best)
		}
		if n.members == 1 {
			f := 0
			for id, k := range w.free {
				if n.model < 0 || w.c.NodeModel(topo.NodeID(id)) == n.model {
					f = max(f, k)
				}
			}
			return fmt.Sprintf("the freest node has %d free", f)
		}
		return fmt.Sprintf("the cluster has room for %d", best)
	}
	return fmt.Sprintf("the freest %s (%s) has room for %d", w.c.Levels()[n.level], w.c.Domain(n.level, dom).Name, best)
}

// frees walks the timeline: it releases the running jobs by expected end
// until n fits, and says when and where, and which jobs end by then.
func (v *View) frees(n need, c *explainCache) string {
	w := v.whatIfNow()
	var ended, unknown []string
	runs := v.runsByEnd(c)
	for k := 0; k < len(runs); {
		end := expectedEndAt(runs[k], v.At)
		if end.IsZero() {
			for _, r := range runs[k:] {
				unknown = append(unknown, r.Job)
			}
			break
		}
		for k < len(runs) && expectedEndAt(runs[k], v.At).Equal(end) {
			w.release(v.x.snap, runs[k].gpus)
			ended = append(ended, runs[k].Job)
			k++
		}
		if best, dom := w.room(n); best >= n.members {
			where := ""
			if n.level > 0 {
				where = " in " + w.c.Domain(n.level, dom).Name
			}
			return fmt.Sprintf("room for it%s at %s, once %s %s", where, v.when(end), namesList(lastFirst(ended), 3), endVerb(ended))
		}
	}
	if len(unknown) > 0 {
		return fmt.Sprintf("room only after jobs with no estimate or limit end (%s): no time can be given", namesList(unknown, 3))
	}
	return "no room even when every running job ends: it needs nodes that are not ready"
}

// lastFirst puts the last name (the job whose end makes room) first.
func lastFirst(names []string) []string {
	if len(names) < 2 {
		return names
	}
	out := make([]string, 0, len(names))
	out = append(out, names[len(names)-1])
	return append(out, names[:len(names)-1]...)
}

func (v *View) explainCapacity(p *PendingStatus, x *Explanation, c *explainCache) {
	n, ok := v.needOf(p)
	if !ok || p.Place.Code != gang.NoCapacity {
		x.Limit = p.Place.String()
		switch p.Place.Code {
		case gang.NoMatchingNodes, gang.MemberTooLarge:
			x.Unblock = "only a node that matches (ready, of its model, with its labels and host resources) lets it start"
		default:
			x.Unblock = "it starts when GPUs free up in one " + cmp.Or(p.Place.Level, "cluster")
		}
		return
	}
	x.Kind = "capacity: " + v.shapeKind(n)
	x.Limit = "needs " + v.shape(n) + "; " + v.roomText(v.whatIfNow(), n)
	x.Unblock = v.frees(n, c)
}

// firstReservation is the earliest backfill reservation of another job.
func (v *View) firstReservation(job string) (Reservation, bool) {
	for _, r := range v.Reservations {
		if !r.Preemption && r.Job != job {
			return r, true
		}
	}
	return Reservation{}, false
}

func (v *View) explainReservedGPUs(p *PendingStatus, x *Explanation, c *explainCache) {
	r, ok := v.firstReservation(p.Job)
	if !ok {
		x.Limit = "it fits now only on GPUs reserved for an earlier job, which it would delay"
		x.Unblock = "it starts when that job starts"
		return
	}
	x.Limit = fmt.Sprintf("it fits now only on GPUs reserved for %s from %s", r.Job, v.when(r.Start))
	room := r.Start.Sub(v.At)
	lim := time.Duration(0)
	if p.js != nil {
		lim = p.js.j.RuntimeLimit
	}
	// A limit that ends by the first reservation's start overlaps none:
	// it would start now (it fits with no reservation held). Rounded
	// down, so that the advice holds.
	hole := room.Truncate(time.Minute)
	switch {
	case hole < time.Minute:
		x.Unblock = "it starts after " + r.Job + " starts"
	case lim > 0:
		x.Unblock = fmt.Sprintf("its runtime limit (%s) ends after that; a limit of at most %s would let it start now", fmtDur(lim), fmtDur(hole))
	default:
		x.Unblock = fmt.Sprintf("it has no runtime limit; a limit of at most %s would let it start now", fmtDur(hole))
	}
}

func (v *View) explainReserved(p *PendingStatus, x *Explanation, c *explainCache) {
	var r Reservation
	for _, o := range v.Reservations {
		if o.Job == p.Job && !o.Preemption {
			r = o
		}
	}
	n := 0
	var nodes []string
	if r.GPUs != nil && v.x.snap != nil {
		n = int(r.GPUs.GetCardinality())
		cl := v.x.snap.Cluster()
		seen := map[topo.NodeID]bool{}
		it := r.GPUs.Iterator()
		for it.HasNext() {
			if id, err := cl.NodeOfGPU(it.Next()); err == nil && !seen[id] {
				seen[id] = true
				nodes = append(nodes, cl.NodeName(id))
			}
		}
	}
	x.Limit = fmt.Sprintf("its %d GPUs are reserved from %s on %s", n, v.when(p.Start), namesList(nodes, 3))
	var holders []string
	for _, rr := range v.runsByEnd(c) {
		for _, g := range rr.gpus {
			if r.GPUs != nil && r.GPUs.Contains(g) {
				holders = append(holders, rr.Job)
				break
			}
		}
	}
	if len(holders) == 0 {
		x.Unblock = "it starts then (the GPUs are held for it)"
		return
	}
	x.Unblock = "it starts then, when " + v.jobsEnding(holders, c) + " " + endVerb(holders)
}

func (v *View) explainBlocked(p *PendingStatus, i int, x *Explanation, c *explainCache) {
	h := v.headOf(i)
	if h == nil {
		x.Limit = "strict order without backfill: an earlier job is blocked"
		x.Unblock = "it starts after that job starts"
		return
	}
	head := h.Job
	x.Limit = "strict order without backfill: it waits behind " + head + ", which is blocked"
	if h.Reason == ReasonCapacity {
		var hx Explanation
		v.explainCapacity(h, &hx, c)
		x.Limit = "strict order without backfill: it waits behind " + head + ", which " + hx.Limit
	}
	if p.js != nil && v.x.snap != nil {
		fits := true
		w := v.whatIfNow()
		for gi, gr := range p.js.req.Groups {
			if gr.GPUsPerMember <= 0 {
				continue
			}
			q := *p
			q.Place = gang.Reason{Group: gi, Need: gr.Members, Level: p.js.req.Required}
			if m, ok := v.needOf(&q); ok {
				if best, _ := w.room(m); best < m.members {
					fits = false
				}
			}
		}
		if fits {
			x.Kind = "blocked: fits now"
			x.Unblock = "it fits now: backfill (EASY or conservative) would start it now if it ends before " + head + " can start"
			return
		}
		x.Kind = "blocked: no room"
		x.Unblock = "it starts after " + head + " starts, and it does not fit now either"
		return
	}
	x.Unblock = "it starts after " + head + " starts"
}

// jobsEnding names jobs with their expected ends where known.
func (v *View) jobsEnding(ids []string, c *explainCache) string {
	if len(ids) == 0 {
		return "jobs"
	}
	ends := map[string]time.Time{}
	for _, r := range v.runsByEnd(c) {
		ends[r.Job] = expectedEndAt(r, v.At)
	}
	var parts []string
	for _, id := range ids {
		if t := ends[id]; !t.IsZero() {
			parts = append(parts, fmt.Sprintf("%s (ends %s, in %s)", id, t.Format("15:04"), fmtDur(t.Sub(v.At))))
		} else {
			parts = append(parts, id+" (no known end)")
		}
	}
	return namesList(parts, 3)
}

// endVerb is "ends" for one job, "end" for more.
func endVerb(names []string) string {
	if len(names) == 1 {
		return "ends"
	}
	return "end"
}

// when formats a time of day with how far ahead it is.
func (v *View) when(t time.Time) string {
	return t.Format("15:04") + " (in " + fmtDur(t.Sub(v.At)) + ")"
}

// fmtDur writes a duration in minutes: "2h10m", "40m", "<1m".
func fmtDur(d time.Duration) string {
	d = d.Round(time.Minute)
	if d < time.Minute {
		return "<1m"
	}
	s := strings.TrimSuffix(d.String(), "0s")
	return strings.Replace(s, "h0m", "h", 1)
}
