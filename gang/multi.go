package gang

import (
	"slices"

	"github.com/berthsched/berth/topo"
)

// placeMulti places a gang of several groups. For each domain of the
// required level that holds every group alone, preferred domains are added
// largest (most free GPUs) first until a trial packing of all groups,
// largest members first, succeeds; the domain with the fewest preferred
// domains (then the tightest fit) wins.
func (p *Placer) placeMulti() Result {
	fits := make([]int, len(p.groups)) // best single-domain fit per group, for the reason
	found := false
	var best key
	p.best = p.best[:0]
	p.bestL = p.lp
	for d, nd := 0, p.numDomains(p.lr); d < nd; d++ {
		alone := true
		for gi := range p.groups {
			c := p.capacity(p.lr, d, &p.groups[gi])
			fits[gi] = max(fits[gi], c)
			if c < p.groups[gi].g.Members {
				alone = false
			}
		}
		if !alone {
			continue
		}
		k := key{freeD: p.free(p.lr, d), d: d}
		if p.lp < 0 {
			if !p.trial(d, false) {
				continue
			}
		} else {
			lo, hi := p.span(p.lr, d, p.lp)
			p.caps = p.caps[:0]
			for i := lo; i < hi; i++ {
				if f := p.free(p.lp, i); f > 0 || p.anyCPUOnly() {
					p.caps = append(p.caps, domCap{cap: int32(f), idx: int32(i)})
				}
			}
			slices.SortFunc(p.caps, func(a, b domCap) int {
				if a.cap != b.cap {
					return int(b.cap - a.cap)
				}
				return int(a.idx - b.idx)
			})
			ok := false
			p.chosen = p.chosen[:0]
			for _, c := range p.caps {
				p.chosen = append(p.chosen, c.idx)
				k.freeChosen += int(c.cap)
				if p.trial(d, true) {
					ok = true
					break
				}
			}
			if !ok {
				continue
			}
			k.spread = len(p.chosen)
		}
		if !found || k.less(best) {
			found, best = true, k
			p.best = append(p.best[:0], p.chosen...)
			slices.Sort(p.best)
		}
	}
	if !found {
		for gi := range p.groups {
			if fits[gi] < p.groups[gi].g.Members {
				return Result{Reason: Reason{Code: NoCapacity, Group: gi, Level: p.levelName(p.lr), Fit: fits[gi], Need: p.groups[gi].g.Members}}
			}
		}
		return Result{Reason: Reason{Code: GroupsConflict, Group: -1, Level: p.levelName(p.lr)}}
	}
	// Pack for real on the winning domains.
	p.chosen = append(p.chosen[:0], p.best...)
	p.trial(best.d, p.lp >= 0)
	p.takes = p.takes[:0]
	p.trialTakes()
	return Result{Found: true, Domain: best.d}
}

func (p *Placer) anyCPUOnly() bool {
	for i := range p.groups {
		if p.groups[i].per == 0 {
			return true
		}
	}
	return false
}

// trial packs every group onto the nodes of p.chosen (preferred domains)
// or of required domain d, largest members first, each member on the node
// with the fewest free GPUs that holds it. It records the takes in
// p.tpos (per node position and group) and reports success.
func (p *Placer) trial(d int, useChosen bool) bool {
	p.tnodes = p.tnodes[:0]
	add := func(lo, hi int) {
		for n := lo; n < hi; n++ {
			p.tnodes = append(p.tnodes, topo.NodeID(n))
		}
	}
	if useChosen {
		sorted := append(p.best[:0:0], p.chosen...)
		slices.Sort(sorted)
		for _, c := range sorted {
			add(p.span(p.lp, int(c), p.nl))
		}
	} else {
		add(p.span(p.lr, d, p.nl))
	}
	nn := len(p.tnodes)
	p.tavail = p.tavail[:0]
	p.tcpu = p.tcpu[:0]
	p.tmem = p.tmem[:0]
	for _, n := range p.tnodes {
		p.tavail = append(p.tavail, int32(p.s.NodeAvailable(n)))
		cpu, mem := p.s.NodeHostFree(n)
		p.tcpu = append(p.tcpu, cpu)
		p.tmem = append(p.tmem, mem)
	}
	p.tpos = p.tpos[:0]
	for range nn * len(p.groups) {
		p.tpos = append(p.tpos, 0)
	}
	for _, gi := range p.order {
		g := &p.groups[gi]
		left := g.g.Members
		for left > 0 {
			bestPos, bestAvail := -1, int32(1<<30)
			for pos, n := range p.tnodes {
				if p.tavail[pos] >= bestAvail || !p.fitsTrial(pos, n, g) {
					continue
				}
				bestPos, bestAvail = pos, p.tavail[pos]
			}
			if bestPos < 0 {
				return false
			}
			p.tavail[bestPos] -= int32(g.per)
			p.bookHostTrial(bestPos, g)
			p.tpos[bestPos*len(p.groups)+gi]++
			left--
		}
	}
	return true
}

func (p *Placer) fitsTrial(pos int, n topo.NodeID, g *groupInfo) bool {
	if g.noModel || (g.model >= 0 && p.c.NodeModel(n) != g.model) || (g.models.n > 0 && !p.allows(g, p.c.NodeModel(n))) || p.s.NodeState(n) != topo.Ready {
		return false
	}
	if int(p.tavail[pos]) < g.per {
		return false
	}
	if len(g.g.Selector) > 0 && !p.c.MatchesSelector(n, g.g.Selector) {
		return false
	}
	info := p.c.Node(n)
	if g.g.CPUMilli > 0 && info.CPUMilli > 0 && p.tcpu[pos] < g.g.CPUMilli {
		return false
	}
	if g.g.MemoryMiB > 0 && info.MemoryMiB > 0 && p.tmem[pos] < g.g.MemoryMiB {
		return false
	}
	return true
}

func (p *Placer) bookHostTrial(pos int, g *groupInfo) {
	info := p.c.Node(p.tnodes[pos])
	if info.CPUMilli > 0 {
		p.tcpu[pos] -= g.g.CPUMilli
	}
	if info.MemoryMiB > 0 {
		p.tmem[pos] -= g.g.MemoryMiB
	}
}

// trialTakes converts the last trial into takes, by group then node.
func (p *Placer) trialTakes() {
	ng := len(p.groups)
	for gi := range p.groups {
		for pos, n := range p.tnodes {
			if c := p.tpos[pos*ng+gi]; c > 0 {
				p.takes = append(p.takes, take{group: int32(gi), node: n, n: c})
			}
		}
	}
}
