package engine

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// Elastic jobs (queue.Job.Elastic) start with MinMembers in their first
// group and grow, one member at a time, towards the count they asked for
// (Request.Groups[0].Members, which is what their queue is charged) when
// free GPUs appear that no reservation holds. Before any job is preempted
// for a blocked job, elastic jobs give back members beyond their minimum.

// grow lets running elastic jobs take free, unreserved GPUs, by job ID.
func (e *Engine) grow(rd *Ready) {
	cs := &e.cyc
	if e.elastic == 0 {
		return
	}
	var ids []string
	for _, js := range e.active {
		if js.st == stateRunning && !js.j.Elastic.IsZero() && js.members < js.j.Request.Groups[0].Members {
			ids = append(ids, js.j.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	s := e.snapFor(len(cs.res)) // growth never touches reserved GPUs
	for _, id := range ids {
		js := e.jobs[id]
		add := e.growOne(js, s)
		if len(add) == 0 {
			continue
		}
		js.place.members = append(js.place.members, add...)
		js.place.rebuildAll()
		js.members += len(add)
		e.runUpsert(js)
		if e.out.binds[id] {
			// Bound this cycle: the bind carries the extra members.
			for i := range rd.Binds {
				if rd.Binds[i].Job == id {
					rd.Binds[i].Members = append(rd.Binds[i].Members, toMembers(e.cluster, add)...)
				}
			}
			continue
		}
		rd.Resizes = append(rd.Resizes, Resize{Job: id, Members: js.members, Add: toMembers(e.cluster, add), Run: js.run})
		e.out.grows[id] = append(e.out.grows[id], add...)
		e.out.runs[id] = js.run
	}
	cs.dropHeld()
}

// growOne books new members of js on s and on the plan: nodes the job
// already uses first, then the other nodes of its required domain (the
// whole cluster when none is required), lowest ID first.
func (e *Engine) growOne(js *job, s *topo.Snapshot) []pmember {
	cs := &e.cyc
	c := e.cluster
	g := &js.j.Request.Groups[0]
	sel := js.req.Groups[0].Selector // g's, with the job's partition label (partition.go)
	want := g.Members - js.members
	lo, hi := topo.NodeID(0), topo.NodeID(c.NumNodes())
	if js.req.Required != "" && len(js.place.members) > 0 {
		if l, err := c.Level(js.req.Required); err == nil {
			info := c.Domain(l, c.DomainOf(js.place.members[0].node, l))
			lo, hi = info.FirstNode, info.EndNode
		}
	}
	var models []int // the group's models; nil: any
	for _, name := range g.Models() {
		if m, ok := c.ModelIndex(name); ok {
			models = append(models, m)
		}
	}
	if len(models) == 0 && len(g.Models()) > 0 {
		return nil
	}
	if g.SameModel && len(models) > 1 && len(js.place.members) > 0 {
		models = []int{c.NodeModel(js.place.members[0].node)} // grow on the model it runs on
	}
	held := e.advHeldGPUs(js) // advance reservations js may not grow onto
	var add []pmember
	try := func(n topo.NodeID) bool {
		for len(add) < want {
			if s.NodeState(n) != topo.Ready || (models != nil && !slices.Contains(models, c.NodeModel(n))) {
				return false
			}
			if len(sel) > 0 && !c.MatchesSelector(n, sel) {
				return false
			}
			free := s.NodeFreeMask(n)
			first, _ := c.NodeGPUs(n)
			for b := free; held != nil && b != 0; b &= b - 1 {
				if k := bits.TrailingZeros64(b); held[first+uint32(k)] {
					free &^= 1 << uint(k)
				}
			}
			if bits.OnesCount64(free) < g.GPUsPerMember || s.HostFits(n, g.CPUMilli, g.MemoryMiB) < 1 {
				return false
			}
			m := pmember{group: 0, node: n, cpu: g.CPUMilli, mem: g.MemoryMiB}
			for k := 0; k < g.GPUsPerMember; k++ {
				b := bits.TrailingZeros64(free)
				free &^= 1 << uint(b)
				m.gpus = append(m.gpus, first+uint32(b))
			}
			one := &placement{members: []pmember{m}, gpus: m.gpus}
			if one.book(s) != nil {
				return false
			}
			if s != cs.plan && one.book(cs.plan) != nil {
				one.unbook(s)
				return false
			}
			add = append(add, m)
		}
		return true
	}
	seen := map[topo.NodeID]bool{}
	for _, m := range js.place.members {
		if !seen[m.node] {
			seen[m.node] = true
			if try(m.node) {
				return add
			}
		}
	}
	for n := lo; n < hi && len(add) < want; n++ {
		if !seen[n] {
			try(n)
		}
	}
	return add
}

// undoGrow takes back members the backend refused to start.
func (e *Engine) undoGrow(js *job, add []pmember) {
	for _, m := range add {
		one := &placement{members: []pmember{m}, gpus: m.gpus}
		one.unbook(e.snap)
		js.place.members = slices.DeleteFunc(js.place.members, func(x pmember) bool {
			return x.node == m.node && len(x.gpus) > 0 && len(m.gpus) > 0 && x.gpus[0] == m.gpus[0]
		})
		js.members--
	}
	js.place.rebuildAll()
	e.runUpsert(js)
}

// extra is the members of an elastic job beyond its minimum: the last ones.
func extra(js *job) []pmember {
	if js.j.Elastic.IsZero() || js.st != stateRunning {
		return nil
	}
	k := js.members - js.j.Elastic.MinMembers
	if k <= 0 {
		return nil
	}
	var out []pmember
	for i := len(js.place.members) - 1; i >= 0 && len(out) < k; i-- {
		if js.place.members[i].group == 0 {
			out = append(out, js.place.members[i])
		}
	}
	return out
}

// shrinkFor gives p room by shrinking elastic jobs to their minimum, if
// that is enough: the fewest jobs (by ID, then added back if not needed).
// p is then bound in the same cycle.
func (e *Engine) shrinkFor(p *job, rd *Ready) bool {
	cs := &e.cyc
	type shrink struct {
		js *job
		ms []pmember
	}
	var cands []shrink
	if e.elastic == 0 {
		return false
	}
	for _, js := range e.active {
		if _, grew := e.out.grows[js.j.ID]; js == p || js.start.Equal(cs.now) || grew {
			continue
		}
		if ms := extra(js); len(ms) > 0 {
			cands = append(cands, shrink{js, ms})
		}
	}
	// By job ID, as before the map's order.
	slices.SortFunc(cands, func(a, b shrink) int { return cmp.Compare(a.js.j.ID, b.js.j.ID) })
	if len(cands) == 0 {
		return false
	}
	if fit, err := e.tree.Fits(p.j); err != nil || !fit.OK {
		return false
	}
	// The what-if keeps the GPUs reserved for jobs ahead of p held, also
	// where shrinking frees them.
	w := e.aheadSnap(p)
	protect := e.aheadGPUs(p)
	var chosen []shrink
	found := false
	for _, c := range cands {
		for _, m := range c.ms {
			(&placement{members: []pmember{m}, gpus: m.gpus}).unbook(w)
			for _, g := range m.gpus {
				if protect[g] {
					_ = w.Allocate([]uint32{g}) // fails only where the GPU is not allocatable anyway
				}
			}
		}
		chosen = append(chosen, c)
		if !gang.Possible(w, &p.req) {
			continue
		}
		if res, err := e.placer.Place(w, &p.req); err == nil && res.Found && !cs.onHeld(&res, protect) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	for i := len(chosen) - 1; i >= 0; i-- {
		var gpus []uint32
		for _, m := range chosen[i].ms {
			for _, g := range m.gpus {
				if !protect[g] {
					gpus = append(gpus, g)
				}
			}
		}
		slices.Sort(gpus)
		back := &placement{members: chosen[i].ms, gpus: gpus}
		if back.book(w) != nil {
			continue
		}
		if res, err := e.placer.Place(w, &p.req); err == nil && res.Found && !cs.onHeld(&res, protect) {
			chosen = slices.Delete(chosen, i, i+1)
			continue
		}
		back.unbook(w)
	}
	for _, c := range chosen {
		for _, m := range c.ms {
			(&placement{members: []pmember{m}, gpus: m.gpus}).unbook(cs.plan)
			c.js.place.members = slices.DeleteFunc(c.js.place.members, func(x pmember) bool {
				return x.node == m.node && x.gpus[0] == m.gpus[0]
			})
		}
		c.js.place.rebuildAll()
		c.js.members -= len(c.ms)
		e.runUpsert(c.js)
		rd.Resizes = append(rd.Resizes, Resize{Job: c.js.j.ID, Members: c.js.members, Remove: toMembers(e.cluster, c.ms), Run: c.js.run})
	}
	cs.dropHeld()
	res, err := e.placer.Place(e.aheadSnap(p), &p.req)
	if err != nil || !res.Found || cs.onHeld(&res, protect) {
		return true // shrunk, but the placement moved: the next cycle places it
	}
	pl := fromResult(&res, &p.req)
	if pl.book(cs.plan) != nil || !e.started(p, pl, false, rd) {
		return true
	}
	cs.placedLate = append(cs.placedLate, p.j.ID)
	cs.deleteRes(func(r *resv) bool { return r.job == p.j.ID })
	e.dropConflicting(p, pl.claimGPUs()) // shares too: a share keeps its GPU from a reservation
	return true
}
