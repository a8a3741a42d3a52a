package gang

import (
	"maps"
	"slices"

	"github.com/berthsched/berth/topo"
)

// placeMulti places a gang of several groups. For each domain of the
// required level that holds every group alone, it chooses the domains of
// the preferred level and of the levels around it as for one group
// (compactMulti), checked by a trial packing of every group, largest
// members first; the domain with the least spreads (then the tightest
// fit) wins.
func (p *Placer) placeMulti() Result {
	fits := make([]int, len(p.groups)) // best single-domain fit per group, for the reason
	found := false
	var best key
	p.best = p.best[:0]
	p.bestL = p.lp
	p.relax()
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
			if !p.trial(d, -1, nil) {
				continue
			}
			p.chosen = p.chosen[:0]
		} else if !p.compactMulti(d, &k) {
			continue
		}
		if !found || k.less(best) {
			found, best = true, k
			p.best = append(p.best[:0], p.chosen...)
			p.bestL = p.chosenL
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
	dl, doms := p.bestL, p.best
	if p.lp < 0 {
		dl, doms = -1, nil
	}
	if p.Scorer == nil || !p.scoredTrial(best.d, dl, doms) {
		p.trial(best.d, dl, doms)
	}
	p.takes = p.takes[:0]
	p.trialTakes()
	return Result{Found: true, Domain: best.d}
}

// maxRelaxTries bounds the compactions of the relaxed gang per required
// domain (compactMulti) before the greedy choice.
const maxRelaxTries = 4

// relax sets p.vgi, the gang as one relaxed group: members of gcd(GPUs
// per member) GPUs, as many as the gang's GPUs make, on the nodes every
// group accepts when they all accept the same (else on any node). A set
// of nodes that holds the gang holds the relaxed group, so the relaxed
// group's least spreads bound the gang's from below. p.vneed is 0 when
// no group asks for GPUs.
func (p *Placer) relax() {
	unit, total, step := 0, 0, 0
	for i := range p.groups {
		g := &p.groups[i]
		if g.per > 0 {
			unit = gcd(unit, g.per)
			total += g.per * g.g.Members
			step = max(step, g.per)
		}
	}
	p.vneed = 0
	if unit == 0 {
		return
	}
	p.vneed, p.vstep = total/unit, step/unit
	p.vg = Group{Members: p.vneed, GPUsPerMember: unit}
	p.vgi = groupInfo{g: &p.vg, per: unit, model: -1}
	g0 := &p.groups[0]
	same := !g0.noModel
	for i := range p.groups[1:] {
		g := &p.groups[i+1]
		same = same && !g.noModel && g.model == g0.model && g.mask == g0.mask &&
			slices.Equal(p.modelsOf(g), p.modelsOf(g0)) && maps.Equal(g.g.Selector, g0.g.Selector)
	}
	if same {
		p.vg.Selector = g0.g.Selector
		p.vgi.model, p.vgi.models, p.vgi.mask = g0.model, g0.models, g0.mask
	}
	p.vgi.slow = p.vgi.needsScan()
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// compactMulti chooses the domains of the gang inside required domain d,
// leaving them in p.chosen (level p.chosenL) and their spreads and free
// GPUs in k, and reports whether the gang fits there. It compacts the
// relaxed gang (relax) as one group: when the trial packing of every
// group fits in the domains chosen, their spreads are the least any
// placement has (the relaxed bound is reached). Else it tries the relaxed
// gang asking for one largest member more, a few times, and the gang
// rounded up to whole largest members (which holds it when the members'
// GPUs divide each other), and keeps the least spreads among those the
// trial fits; when none fits, it adds preferred domains, most free GPUs
// first, until the trial fits.
func (p *Placer) compactMulti(d int, k *key) bool {
	if p.vneed > 0 {
		unit, total := p.vgi.per, p.vneed*p.vgi.per
		found := false
		var best key
		if p.relaxedTry(d, unit, p.vneed, k, &found, &best) {
			*k = best
			return true // the bound: nothing has smaller spreads
		}
		for t := 1; t < maxRelaxTries; t++ {
			if p.relaxedTry(d, unit, p.vneed+t*p.vstep, k, &found, &best) {
				break
			}
		}
		// Whole largest members.
		big := p.vstep * unit
		if big != unit {
			p.relaxedTry(d, big, (total+big-1)/big, k, &found, &best)
		}
		// Each size of member as the unit: the members at least that
		// large, in whole units (also a bound, when it packs).
		for i := range p.groups {
			s := p.groups[i].per
			if s <= unit || slices.ContainsFunc(p.groups[:i], func(g groupInfo) bool { return g.per == s }) {
				continue
			}
			n := 0
			for j := range p.groups {
				n += p.groups[j].g.Members * (p.groups[j].per / s)
			}
			p.relaxedTry(d, s, n, k, &found, &best)
		}
		p.vgi.per, p.vg.GPUsPerMember, p.vg.Members = unit, unit, p.vneed
		if found {
			*k = best
			p.chosen, p.chosenL = append(p.chosen[:0], p.mbest...), p.mbestL
			return true
		}
	}
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
	p.chosen = p.chosen[:0]
	p.chosenL = p.lp
	for _, c := range p.caps {
		p.chosen = append(p.chosen, c.idx)
		k.freeChosen += int(c.cap)
		if p.trial(d, p.lp, p.chosen) {
			slices.Sort(p.chosen)
			k.spread = len(p.chosen)
			p.greedyLevels(k)
			return true
		}
	}
	return false
}

// relaxedTry compacts, inside required domain d, the relaxed gang (relax)
// with members of per GPUs, need of them, and trial-packs every group on
// the domains it chooses. When the gang packs and their key is less than
// *best (or none was found), they become the best (p.mbest). It reports
// whether the gang packed.
func (p *Placer) relaxedTry(d, per, need int, k *key, found *bool, best *key) bool {
	p.vgi.per, p.vg.GPUsPerMember, p.vg.Members = per, per, need
	if need <= 0 || need > p.capacity(p.lr, d, &p.vgi) {
		return false
	}
	kk := *k
	p.compact(d, &p.vgi, need, &kk)
	if !p.trial(d, p.chosenL, p.chosen) {
		return false
	}
	if !*found || kk.less(*best) {
		*found, *best = true, kk
		p.mbest, p.mbestL = append(p.mbest[:0], p.chosen...), p.chosenL
	}
	return true
}

// greedyLevels fills k.levels for preferred domains p.chosen chosen
// without compaction: the domains they span at the coarser levels, and
// no bound at the finer ones (the trial may use any).
func (p *Placer) greedyLevels(k *key) {
	ki := 0
	for l := p.lr + 1; l < p.lp && ki < maxKeyLevels; l++ {
		n, last := 0, -1
		for _, x := range p.chosen { // ascending: domains above are too
			if e := p.domainAbove(p.lp, int(x), l); e != last {
				n, last = n+1, e
			}
		}
		k.levels[ki] = int32(n)
		ki++
	}
	for l := p.lp + 1; l < p.nl && ki < maxKeyLevels; l++ {
		k.levels[ki] = 1 << 30
		ki++
	}
}

func (p *Placer) anyCPUOnly() bool {
	for i := range p.groups {
		if p.groups[i].per == 0 {
			return true
		}
	}
	return false
}

// trial packs every group onto the nodes of doms (domains of level dl,
// ascending) or, for dl < 0, of required domain d, largest members first,
// each member on the node with the fewest free GPUs that holds it. It
// records the takes in p.tpos (per node position and group) and reports
// success.
func (p *Placer) trial(d, dl int, doms []int32) bool {
	p.trialNodes(d, dl, doms)
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
			p.takeTrial(bestPos, gi, 1)
			left--
		}
	}
	return true
}

// takeTrial books n members of group gi on the trial's node at pos.
func (p *Placer) takeTrial(pos, gi, n int) {
	g := &p.groups[gi]
	p.tavail[pos] -= int32(n * g.per)
	for range n {
		p.bookHostTrial(pos, g)
	}
	p.tpos[pos*len(p.groups)+gi] += int32(n)
}

// trialNodes sets up a trial on the nodes of doms (level dl), or of
// required domain d for dl < 0, as they stand on the snapshot.
func (p *Placer) trialNodes(d, dl int, doms []int32) {
	p.tnodes = p.tnodes[:0]
	add := func(lo, hi int) {
		for n := lo; n < hi; n++ {
			p.tnodes = append(p.tnodes, topo.NodeID(n))
		}
	}
	if dl >= 0 {
		p.tdoms = append(p.tdoms[:0], doms...)
		slices.Sort(p.tdoms)
		for _, c := range p.tdoms {
			add(p.span(dl, int(c), p.nl))
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

// scoredTrial is trial with each group's members taken from the nodes in
// the order of p.Scorer (as for one group, see Scorer) instead of packed:
// each group is scored on the snapshot and takes from what the groups
// before it left. It reports false when a group does not fit in what is
// left; the caller packs then, so a scorer never changes whether a gang
// fits.
func (p *Placer) scoredTrial(d, dl int, doms []int32) bool {
	p.trialNodes(d, dl, doms)
	for _, gi := range p.order {
		g := &p.groups[gi]
		p.snodes, p.scaps, p.spos = p.snodes[:0], p.scaps[:0], p.spos[:0]
		total := 0
		for pos, n := range p.tnodes {
			if c := p.trialCap(pos, n, g); c > 0 {
				p.snodes = append(p.snodes, n)
				p.scaps = append(p.scaps, int32(c))
				p.spos = append(p.spos, int32(pos))
				total += c
			}
		}
		if total < g.g.Members {
			return false
		}
		p.rankScored(g.g, g.g.Members)
		for i, pos := range p.spos {
			if c := p.scaps[i]; c > 0 {
				p.takeTrial(int(pos), gi, int(c))
			}
		}
	}
	return true
}

// trialCap is how many members of group g the trial's node at pos holds
// (at most the group's members).
func (p *Placer) trialCap(pos int, n topo.NodeID, g *groupInfo) int {
	if !p.fitsTrial(pos, n, g) {
		return 0
	}
	k := g.g.Members
	if g.per > 0 {
		k = min(k, int(p.tavail[pos])/g.per)
	}
	info := p.c.Node(n)
	if g.g.CPUMilli > 0 && info.CPUMilli > 0 {
		k = min(k, int(p.tcpu[pos]/g.g.CPUMilli))
	}
	if g.g.MemoryMiB > 0 && info.MemoryMiB > 0 {
		k = min(k, int(p.tmem[pos]/g.g.MemoryMiB))
	}
	return k
}
