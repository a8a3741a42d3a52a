package gang

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// ErrUnsupported is returned for requests this placer cannot place yet:
// fractional (GPUMilli) or MIG-profile groups inside multi-group gangs.
var ErrUnsupported = errors.New("gang: unsupported request")

// Placer places gangs. Its zero value is ready to use; it keeps scratch
// buffers between calls, so reuse one Placer per goroutine to avoid
// allocations. A Placer is not safe for concurrent use.
//
// A Placer also keeps, from one call to the next, the capacities of the
// preferred domains (racks) of each domain just above them (blocks), for
// up to four member shapes, and reads a block's again only when its
// counters changed (topo.Snapshot.DomainStamp): a few arrays the size of
// the cluster's racks and blocks, and a reference to the cluster last
// placed on. Results are the same with it and without it.
type Placer struct {
	// Scorer, when set, chooses the nodes of every group inside the
	// chosen domains (see Scorer). Nil: members pack onto the nodes with
	// the fewest free GPUs (Place).
	Scorer Scorer
	// Ties ranks nodes for scored choices: between equal scores the node
	// with the lower Ties[id] wins. Nil, or a node beyond its length: the
	// node ID. Unused without a Scorer.
	Ties []int32
	// Memo keeps, from one placement to the next, the search inside each
	// domain of the required level (its preferred domains and their
	// ranking) per gang shape, and reuses it while the domain's counters
	// are unchanged (topo.Snapshot.DomainStamp), on any snapshot of the
	// cluster: after a booking or a release only the domains it touched
	// are searched again. Results are the same with it and without it.
	// Only one-group gangs with a preferred level, without node selectors,
	// host resources or fractional GPUs, use it; it holds at most a few
	// thousand answers.
	Memo bool

	s  *topo.Snapshot
	c  *topo.Cluster
	nl int // node pseudo-level = len(Levels)
	lr int // required level (0: the cluster root; nl: node)
	lp int // preferred level, or -1 for none

	groups []groupInfo
	order  []int // groups by GPUs per member, descending

	caps   []domCap
	cnt    []int32 // capacity buckets
	pick   []int32 // positions in caps
	chosen []int32
	best   []int32
	// levels of the domains in chosen and best
	chosenL, bestL int
	cmp            compactScratch
	takes          []take
	// trial packing scratch
	tnodes []topo.NodeID
	tavail []int32
	tcpu   []int64
	tmem   []int64
	tpos   []int32
	tdoms  []int32
	spread []topo.NodeID
	// the gang as one relaxed group (relax)
	vg           Group
	vgi          groupInfo
	vneed, vstep int
	mbest        []int32 // compactMulti's best candidate, of level mbestL
	mbestL       int
	// scored packing scratch
	snodes  []topo.NodeID
	scaps   []int32
	sscores []int64
	sorder  []int32
	spos    []int32 // trial positions of snodes (scoredTrial)
	sfree   []uint8 // free GPUs of snodes (packOne)
	memo    domainMemo
	ix      nodeIndex // nodes by free capacity (collectScored)
	noIndex bool      // tests: collectScored scans every node
	// the capacity cache (capcache.go): cc is its entry for the group
	// ccGi of the current single-group search, nil when none.
	ccache     capCaches
	cc         *capCache
	ccGi       *groupInfo
	ccFresh    bool      // the blocks of compact's required domain were checked (cachedCaps)
	noCapCache bool      // tests: no capacity cache
	noWitness  bool      // tests: minGroups without witness
	witnessed  int       // tests: knapsacks run with witness's count
	cands      []candDom // pruned's domains
	ckeys      []uint64  // and their sort keys
	mods       []int32   // model indices of the groups' sets (groupInfo.models)
	// sets interns the sets of models named by reasons (Reason.Models),
	// so that a failure allocates nothing for a set seen before.
	sets map[string]string
	kbuf []byte
}

// setName is models joined by '|', interned.
func (p *Placer) setName(models []string) string {
	p.kbuf = p.kbuf[:0]
	for i, m := range models {
		if i > 0 {
			p.kbuf = append(p.kbuf, '|')
		}
		p.kbuf = append(p.kbuf, m...)
	}
	if name, ok := p.sets[string(p.kbuf)]; ok {
		return name
	}
	if p.sets == nil || len(p.sets) >= memoMax {
		p.sets = map[string]string{}
	}
	name := string(p.kbuf)
	p.sets[name] = name
	return name
}

// modelSpan is a range of Placer.mods.
type modelSpan struct{ lo, n int32 }

// resolveModels sets the model fields of gi from its group's GPUModels
// (resolve reads GPUModel alone itself): a set whose models the cluster lacks is noModel; a
// set with one model the cluster has is that model, exactly as GPUModel
// alone; two or more go to p.mods.
func (p *Placer) resolveModels(gi *groupInfo, i, groups int) error {
	g := gi.g
	lo := len(p.mods)
	for _, name := range g.GPUModels {
		if m, ok := p.c.ModelIndex(name); ok && !slices.Contains(p.mods[lo:], int32(m)) {
			p.mods = append(p.mods, int32(m))
		}
	}
	switch n := len(p.mods) - lo; n {
	case 0:
		gi.noModel = true
	case 1:
		gi.model = int(p.mods[lo])
		p.mods = p.mods[:lo]
	default:
		if g.SameModel && groups > 1 {
			return fmt.Errorf("%w: group %d: SameModel over several GPU models only in single-group gangs", ErrUnsupported, i)
		}
		gi.models = modelSpan{lo: int32(lo), n: int32(n)}
		for _, m := range p.mods[lo:] {
			if m >= 64 {
				gi.mask = 0
				break
			}
			gi.mask |= 1 << m
		}
	}
	return nil
}

// needsScan reports whether gi's capacity needs a node scan (groupInfo.slow).
func (gi *groupInfo) needsScan() bool {
	g := gi.g
	return len(g.Selector) > 0 || g.CPUMilli > 0 || g.MemoryMiB > 0 || g.GPUsPerMember == 0 || gi.noModel || gi.frac ||
		(gi.models.n > 0 && gi.mask == 0)
}

// placeSameModel is placeOne for a single group of several members that
// must share one model of its set (Group.SameModel): placeOne with each
// model of the set in the order listed until one places the group; a
// failure reports the model that came closest (the most members fit).
func (p *Placer) placeSameModel() Result {
	gi := &p.groups[0]
	saved := *gi
	defer func() { p.groups[0] = saved }() // the set, for the reason
	var fail Result
	for i, m := range p.modelsOf(&saved) {
		*gi = saved
		gi.model, gi.models, gi.mask = int(m), modelSpan{}, 0
		gi.slow = gi.needsScan()
		p.takes = p.takes[:0]
		res := p.placeOne()
		if res.Found {
			return res
		}
		if i == 0 || res.Reason.Fit > fail.Reason.Fit {
			fail = res
		}
	}
	return fail
}

// allows reports whether group gi accepts GPU model m.
func (p *Placer) allows(gi *groupInfo, m int) bool {
	switch {
	case gi.noModel:
		return false
	case gi.mask != 0:
		return m < 64 && gi.mask&(1<<m) != 0
	case gi.models.n > 0:
		return slices.Contains(p.modelsOf(gi), int32(m))
	}
	return gi.model < 0 || gi.model == m
}

// modelsOf is the model indices of gi's set of several models, nil for
// none or one.
func (p *Placer) modelsOf(gi *groupInfo) []int32 {
	return p.mods[gi.models.lo : gi.models.lo+gi.models.n]
}

// setCapacity is DomainCapacity summed over the models of gi's set (a
// node has one model, so the sets of nodes counted are disjoint).
func (p *Placer) setCapacity(l, d int, gi *groupInfo) int {
	n := 0
	for _, m := range p.modelsOf(gi) {
		n += p.s.DomainCapacity(l, d, gi.per, int(m))
	}
	return n
}

type groupInfo struct {
	g       *Group
	per     int // GPUs per member
	model   int // model index, -1 any (or several: models)
	noModel bool
	// models are the indices of a set of two or more models the cluster
	// has (model is then -1), positions in Placer.mods; mask has their
	// bits when every index is below 64 (else the group is slow).
	models modelSpan
	mask   uint64
	slow   bool // capacity needs a node scan
	frac   bool // members want a MIG instance or a share (mreq)
	mreq   mig.Request
	reach  int // members that fit in the whole cluster (multi-group only)
}

type domCap struct {
	cap int32
	idx int32
}

type take struct {
	group int32
	node  topo.NodeID
	n     int32
}

var placers = sync.Pool{New: func() any { return new(Placer) }}

// Place finds where a gang goes on snapshot s, without changing s.
//
// Policy, in order: every member inside one domain of the required level;
// the fewest domains of the preferred level (for single-group gangs this is
// exactly the best possible; for multi-group gangs it is the best possible
// whenever the relaxed bound packs, see "Several groups" in the package
// doc); then the fewest domains at every level between the
// required and the preferred one, coarsest first, then at every level
// between the preferred one and the node (see compact.go for where this is
// exact); among equal spreads the tightest fit (the domain with the least free
// GPUs, then the chosen preferred domains with the least free GPUs), so that
// big free domains stay whole; within the chosen domains members pack onto
// the nodes with the fewest free GPUs that still hold them, so members that
// want a whole node take whole free nodes and smaller members fill partly
// used nodes first. GPUs within a node are the lowest free ones, inside one
// GPU-level domain (NVLink island) when one holds the member, else spread
// over the fewest such domains. Ties break on
// the lower index: same snapshot and request, same answer.
//
// A gang that does not fit is a Result with Found false and a Reason, not
// an error. Errors are for invalid requests (ErrBadGroup, ErrUnknownLevel,
// ...) and ErrUnsupported.
func Place(s *topo.Snapshot, r *Request) (Result, error) {
	p := placers.Get().(*Placer)
	res, err := p.Place(s, r)
	p.s, p.c = nil, nil
	placers.Put(p)
	return res, err
}

// Place is the package-level Place using p's scratch buffers.
func (p *Placer) Place(s *topo.Snapshot, r *Request) (Result, error) {
	var res Result
	err := p.PlaceInto(&res, s, r)
	return res, err
}

// PlaceInto is Place writing its answer into *dst and reusing the memory of
// dst's earlier answer (its members, GPUs and spread), so a caller that
// places many gangs in a row allocates nothing in the steady state. dst must
// not be a Result that is still needed (for Undo, say): it is overwritten.
func (p *Placer) PlaceInto(dst *Result, s *topo.Snapshot, r *Request) error {
	res, err := p.place(s, r, dst)
	*dst = res
	return err
}

func (p *Placer) place(s *topo.Snapshot, r *Request, reuse *Result) (Result, error) {
	if err := r.Validate(); err != nil {
		return Result{}, err
	}
	p.s, p.c = s, s.Cluster()
	p.nl = len(p.c.Levels())
	if err := p.resolve(r); err != nil {
		return Result{}, err
	}
	// Members larger than any node, or matching no node at all.
	for gi := range p.groups {
		g := &p.groups[gi]
		if g.per > p.c.MaxGPUsPerNode() {
			return Result{Reason: Reason{Code: MemberTooLarge, Group: gi, Level: p.levelName(p.lr), Fit: p.c.MaxGPUsPerNode(), Need: g.per}}, nil
		}
	}
	p.takes = p.takes[:0]
	var res Result
	if g := &p.groups[0]; len(p.groups) == 1 && g.g.SameModel && g.models.n > 0 && g.g.Members > 1 {
		res = p.placeSameModel()
	} else if len(p.groups) == 1 {
		res = p.placeOne()
	} else {
		res = p.placeMulti()
	}
	if reuse != nil {
		// Keep the memory for the next answer, with nothing in it.
		res.Members, res.gpus, res.Spread = reuse.Members[:0], reuse.gpus[:0], reuse.Spread[:0]
		res.hostBuf = reuse.hostBuf
	}
	if !res.Found {
		if res.Reason.Code == NoCapacity && res.Reason.Fit == 0 && !p.anyNodeMatches(res.Reason.Group) {
			res.Reason.Code = NoMatchingNodes
		}
		if gr := res.Reason.Group; gr >= 0 && gr < len(p.groups) && len(p.groups[gr].g.GPUModels) > 1 {
			res.Reason.Models = p.setName(p.groups[gr].g.GPUModels)
		}
		return res, nil
	}
	p.emit(&res)
	return res, nil
}

func (p *Placer) levelName(l int) string {
	if l >= p.nl {
		return topo.LevelNode
	}
	return p.c.Levels()[l]
}

func (p *Placer) level(name string) (int, error) {
	if name == topo.LevelNode {
		return p.nl, nil
	}
	l, err := p.c.Level(name)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnknownLevel, err)
	}
	return l, nil
}

func (p *Placer) resolve(r *Request) error {
	p.lr, p.lp = 0, -1
	if r.Required != "" {
		l, err := p.level(r.Required)
		if err != nil {
			return err
		}
		p.lr = l
	}
	if r.Preferred != "" {
		l, err := p.level(r.Preferred)
		if err != nil {
			return err
		}
		if l <= p.lr {
			return &FieldError{Group: -1, Field: "Preferred", Err: ErrBadTopology,
				Msg: fmt.Sprintf("preferred level %q is not finer than required level %q", r.Preferred, p.levelName(p.lr))}
		}
		p.lp = l
	} else if finest := p.nl - 1; finest > p.lr {
		p.lp = finest // compact by default: fewest domains of the finest level above nodes
	}
	p.groups = p.groups[:0]
	p.order = p.order[:0]
	p.mods = p.mods[:0]
	for i := range r.Groups {
		g := &r.Groups[i]
		gi := groupInfo{g: g, per: g.GPUsPerMember, model: -1}
		if g.GPUMilli > 0 || g.MIGProfile != "" {
			if len(r.Groups) > 1 {
				return fmt.Errorf("%w: group %d: fractional and MIG members only in single-group gangs", ErrUnsupported, i)
			}
			gi.frac = true
			gi.mreq = mig.Request{Milli: g.GPUMilli, Profile: g.MIGProfile, MemoryMiB: g.GPUMemoryMiB}
		}
		if len(g.GPUModels) > 0 {
			if err := p.resolveModels(&gi, i, len(r.Groups)); err != nil {
				return err
			}
		} else if g.GPUModel != "" {
			m, ok := p.c.ModelIndex(g.GPUModel)
			gi.model, gi.noModel = m, !ok
		}
		gi.slow = gi.needsScan()
		p.groups = append(p.groups, gi)
		p.order = append(p.order, i)
	}
	if len(p.groups) > 1 {
		// Largest members first, then the most constrained group (least
		// capacity in the cluster), so that flexible groups take what is left.
		for i := range p.groups {
			p.groups[i].reach = p.capacity(0, 0, &p.groups[i])
		}
		slices.SortStableFunc(p.order, func(a, b int) int {
			if d := p.groups[b].per - p.groups[a].per; d != 0 {
				return d
			}
			return p.groups[a].reach - p.groups[b].reach
		})
	}
	return nil
}

// nodeCap is how many members of group gi node n holds now.
func (p *Placer) nodeCap(n topo.NodeID, gi *groupInfo) int {
	if !gi.slow && gi.model < 0 && gi.models.n == 0 {
		return p.s.NodeAvailable(n) / gi.per
	}
	if gi.noModel || (gi.model >= 0 && p.c.NodeModel(n) != gi.model) || (gi.models.n > 0 && !p.allows(gi, p.c.NodeModel(n))) {
		return 0
	}
	if p.s.NodeState(n) != topo.Ready {
		return 0
	}
	if len(gi.g.Selector) > 0 && !p.c.MatchesSelector(n, gi.g.Selector) {
		return 0
	}
	// A node never needs to hold more than the whole group; the cap also
	// keeps sums finite for members whose resources a node does not track.
	k := gi.g.Members
	if gi.per > 0 {
		if k = min(k, p.s.NodeAvailable(n)/gi.per); k == 0 {
			return 0 // no GPUs: the host need not be read
		}
	}
	if k == 1 {
		if !p.s.HostHolds(n, gi.g.CPUMilli, gi.g.MemoryMiB) {
			return 0
		}
	} else {
		k = min(k, p.s.HostFits(n, gi.g.CPUMilli, gi.g.MemoryMiB))
	}
	if gi.frac && k > 0 {
		if !p.sharedNode(n, gi) {
			return 0
		}
		k = min(k, p.shareFits(n, gi, k))
	}
	return k
}

// sharedNode reports whether node n can hold a member of fractional group
// gi at all: a MIG member needs GPUs in MIG mode, a fraction needs shared
// GPUs (or plain ones under Spec.ShareFreeGPUs). It keeps the capacity
// scan of a MIG or fractional request off the other nodes' GPUs.
func (p *Placer) sharedNode(n topo.NodeID, gi *groupInfo) bool {
	if gi.mreq.Profile == "" && p.c.SharesFreeGPUs() {
		return true // the node's configuration need not be read (a copy)
	}
	cfg, ok := p.c.NodeGPUConfig(n)
	if gi.mreq.Profile != "" {
		return ok && cfg.MIG
	}
	return ok || p.c.SharesFreeGPUs()
}

// shareFits is the sum of SharedFits over the GPUs of node n for group
// gi, or any value >= k once the sum reaches k.
func (p *Placer) shareFits(n topo.NodeID, gi *groupInfo, k int) int {
	first, _ := p.c.NodeGPUs(n)
	f := 0
	mask := p.s.NodeFreeMask(n)
	if mask != 0 && p.c.SharesFreeGPUs() && gi.mreq.Profile == "" && gi.mreq.Milli > 0 &&
		!p.s.IsSharedGPU(first+uint32(bits.TrailingZeros64(mask))) {
		// A free GPU of a plain node takes 1000/Milli shares (SharedFits
		// under Spec.ShareFreeGPUs): count them from the mask, then the
		// shared GPUs only if that is not enough.
		if f = bits.OnesCount64(mask) * (1000 / gi.mreq.Milli); f >= k {
			return f
		}
		for m := p.s.NodeSharedMask(n) &^ mask; m != 0; m &= m - 1 {
			if f += p.s.SharedFits(first+uint32(bits.TrailingZeros64(m)), gi.mreq); f >= k {
				break
			}
		}
		return f
	}
	// Only GPUs in MIG mode, shared or free give shares (SharedFits is 0
	// for the others), in ascending order.
	for m := p.s.NodeSharedMask(n) | mask; m != 0; m &= m - 1 {
		if f += p.s.SharedFits(first+uint32(bits.TrailingZeros64(m)), gi.mreq); f >= k {
			break // enough: the rest cannot change min(k, f)
		}
	}
	return f
}

// capacity is how many members of group gi domain d of level l holds now.
func (p *Placer) capacity(l, d int, gi *groupInfo) int {
	if l == p.nl {
		return p.nodeCap(topo.NodeID(d), gi)
	}
	if !gi.slow {
		if gi.models.n == 0 {
			return p.s.DomainCapacity(l, d, gi.per, gi.model)
		}
		return p.setCapacity(l, d, gi)
	}
	info := p.c.Domain(l, d)
	n := 0
	for id := info.FirstNode; id < info.EndNode; id++ {
		n += p.nodeCap(id, gi)
	}
	return n
}

func (p *Placer) numDomains(l int) int {
	if l == p.nl {
		return p.c.NumNodes()
	}
	return p.c.NumDomains(l)
}

func (p *Placer) free(l, d int) int {
	if l == p.nl {
		return p.s.NodeAvailable(topo.NodeID(d))
	}
	return p.s.DomainFree(l, d)
}

// span returns the range of domains of level `to` inside domain d of `from`.
func (p *Placer) span(from, d, to int) (int, int) {
	if to == p.nl {
		if from == p.nl {
			return d, d + 1
		}
		info := p.c.Domain(from, d)
		return int(info.FirstNode), int(info.EndNode)
	}
	return p.c.Descendants(from, d, to)
}

// key orders candidate domains: fewer preferred domains, then fewer
// domains at the other levels (compactKey order, see compact.go), then
// fewer free GPUs in the required domain, then fewer free GPUs in the
// chosen preferred domains, then lower index.
type key struct {
	spread               int
	levels               [maxKeyLevels]int32
	freeD, freeChosen, d int
}

func (a key) less(b key) bool {
	if a.spread != b.spread {
		return a.spread < b.spread
	}
	if a.levels != b.levels {
		for i := range a.levels {
			if a.levels[i] != b.levels[i] {
				return a.levels[i] < b.levels[i]
			}
		}
	}
	if a.freeD != b.freeD {
		return a.freeD < b.freeD
	}
	if a.freeChosen != b.freeChosen {
		return a.freeChosen < b.freeChosen
	}
	return a.d < b.d
}

func (p *Placer) placeOne() Result {
	gi := &p.groups[0]
	need := gi.g.Members
	bestFit := 0
	found := false
	var best key
	p.best = p.best[:0]
	p.bestL = p.lp
	if p.Scorer != nil && p.lp < 0 && p.numDomains(p.lr) == 1 {
		// One domain to choose from: its nodes are scanned once, for the
		// capacity and the scored choice together.
		if total := p.collectScored(0, gi); total < need {
			return Result{Reason: Reason{Code: NoCapacity, Group: 0, Level: p.levelName(p.lr), Fit: total, Need: need}}
		}
		p.chooseScored(gi, need)
		return Result{Found: true}
	}
	p.cc, p.ccGi = p.capCacheFor(gi), gi
	defer func() { p.cc, p.ccGi = nil, nil }()
	pruned := false
	if nd := p.numDomains(p.lr); nd > 1 && p.lp >= 0 && p.lp < p.nl && !gi.slow && !p.Memo {
		// Bounds first: compact only the domains that can still win.
		bestFit, found, best = p.pruned(gi, need)
		pruned = true
	}
	for d, nd := 0, p.numDomains(p.lr); d < nd && !pruned; d++ {
		total := p.capacity(p.lr, d, gi)
		bestFit = max(bestFit, total)
		if total < need {
			continue
		}
		k := key{freeD: p.free(p.lr, d), d: d}
		if p.lp >= 0 {
			mk, memo := p.memoKeyOf(gi, need, d)
			if !memo || !p.memoGet(mk, &k) {
				p.compact(d, gi, need, &k)
				if memo {
					p.memoPut(mk, &k)
				}
			}
		}
		if !found || k.less(best) {
			found, best = true, k
			p.best = append(p.best[:0], p.chosen...)
			p.bestL = p.chosenL
		}
	}
	if !found {
		return Result{Reason: Reason{Code: NoCapacity, Group: 0, Level: p.levelName(p.lr), Fit: bestFit, Need: need}}
	}
	return p.finishOne(gi, need, best)
}

// candDom is a domain of the required level that holds the gang, with
// the bound of its key: its fewest preferred domains (exact) and free GPUs.
type candDom struct {
	spread, freeD, d int32
}

// pruned is placeOne's search over the domains of the required level,
// for a group whose capacities the counters give (fastCaps): it computes
// for each domain that holds the gang the fewest preferred domains (the
// key's first field, exactly as choose counts it), orders the domains by
// the least key they can have (that count, one domain at every other
// level of the key, their free GPUs, nothing free in the chosen domains,
// the index), and compacts them in that order until the bound of the next
// is no less than the best key found. The key orders domains totally (the
// index breaks ties), so the winner, and what is left in p.best, is the
// one the full search finds. It returns the best fit and the winner.
func (p *Placer) pruned(gi *groupInfo, need int) (bestFit int, found bool, best key) {
	c := &p.cmp
	p.cands = p.cands[:0]
	for d, nd := 0, p.numDomains(p.lr); d < nd; d++ {
		total := p.capacity(p.lr, d, gi)
		bestFit = max(bestFit, total)
		if total < need {
			continue
		}
		lo, hi := p.span(p.lr, d, p.lp)
		spread := 0
		if p.cachedFor(gi) && p.lp-1 == p.lr {
			// d is a block of the cache: its capacities, descending.
			if spread = minPrefix(p.blockDesc(d, gi), need); spread == 0 {
				spread = hi - lo + 1
			}
		} else {
			c.lbCap = slices.Grow(c.lbCap[:0], hi-lo)[:hi-lo]
			p.fastCaps(lo, hi, gi, c.lbCap)
			spread = fewest(c.lbCap, need)
		}
		p.cands = append(p.cands, candDom{spread: int32(spread), freeD: int32(min(p.free(p.lr, d), 1<<30)), d: int32(d)})
	}
	p.sortCands()
	var lb key
	for ki, l := 0, p.lr+1; l < p.nl && ki < maxKeyLevels; l++ {
		if l != p.lp {
			lb.levels[ki] = 1
			ki++
		}
	}
	for _, cd := range p.cands {
		lb.spread, lb.freeD, lb.d = int(cd.spread), p.free(p.lr, int(cd.d)), int(cd.d)
		if found && !lb.less(best) {
			break
		}
		k := key{freeD: lb.freeD, d: lb.d}
		p.compact(lb.d, gi, need, &k)
		if !found || k.less(best) {
			found, best = true, k
			p.best = append(p.best[:0], p.chosen...)
			p.bestL = p.chosenL
		}
	}
	return bestFit, found, best
}

// sortCands sorts p.cands by spread, then free GPUs, then index: as
// packed keys (spread, free, index in 17, 31 and 16 bits) when they fit,
// which sort faster than through a comparison function.
func (p *Placer) sortCands() {
	keys := p.ckeys[:0]
	for _, cd := range p.cands {
		if cd.spread < 0 || cd.spread >= 1<<17 || cd.freeD < 0 || cd.d < 0 || cd.d >= 1<<16 {
			keys = nil
			break
		}
		keys = append(keys, uint64(cd.spread)<<47|uint64(cd.freeD)<<16|uint64(cd.d))
	}
	if keys == nil && len(p.cands) > 0 {
		slices.SortFunc(p.cands, func(a, b candDom) int {
			if a.spread != b.spread {
				return int(a.spread - b.spread)
			}
			if a.freeD != b.freeD {
				return int(a.freeD - b.freeD)
			}
			return int(a.d - b.d)
		})
		return
	}
	p.ckeys = keys
	slices.Sort(keys)
	for i, k := range keys {
		p.cands[i] = candDom{spread: int32(k >> 47), freeD: int32(k >> 16 & (1<<31 - 1)), d: int32(k & (1<<16 - 1))}
	}
}

// fewest is the fewest of caps whose sum reaches need (len(caps)+1 when
// all do not); it reorders caps.
func fewest(caps []int32, need int) int {
	sortDesc(caps)
	s := 0
	for i, v := range caps {
		if s += int(v); s >= need {
			return i + 1
		}
	}
	return len(caps) + 1
}

// finishOne takes the members of single group gi on the winning domain
// (best.d; its chosen domains in p.best).
func (p *Placer) finishOne(gi *groupInfo, need int, best key) Result {
	if p.Scorer != nil {
		p.collectScored(best.d, gi)
		p.chooseScored(gi, need)
	} else {
		p.packOne(best.d, gi, need)
	}
	return Result{Found: true, Domain: best.d}
}

// choose picks the fewest domains of level il inside the containers cont
// (domains of level cl, ascending, none inside another) whose capacity
// reaches need (largest first, lower index on ties), then, from the
// smallest pick up, swaps a pick for the smallest unpicked domain (lower
// index on ties) that keeps the sum >= need (tightest fit). It leaves the
// picks, ascending, in p.chosen (p.chosenL = il) and returns their count
// and free GPUs. Capacities are counted into buckets, so the cost is linear
// in the domains read, with no sort of them. cont must not alias p.chosen.
func (p *Placer) choose(cl int, cont []int32, il int, gi *groupInfo, need int) (spread, freeChosen int) {
	if p.cmp.lpOK && il == p.lp {
		if spread, freeChosen, ok := p.chooseCached(cl, cont, gi, need); ok {
			return spread, freeChosen
		}
	}
	caps := p.caps[:0] // a local: appends in registers
	// The largest capacity: a bit per capacity seen, 63 for 63 and more
	// (a running max mispredicts on rack capacities), exact past it.
	var seen uint64
	var small [64]int32 // counts of the capacities below 63, in the same pass
	cc := &p.cmp
	for _, cd := range cont {
		lo, hi := p.span(cl, int(cd), il)
		if cc.lpOK && il == p.lp {
			// The cached capacities (capOf), read in a row.
			for i, c := range cc.lpCap[lo-cc.lpBase : hi-cc.lpBase] {
				if c > 0 {
					caps = append(caps, domCap{cap: c, idx: int32(lo + i)})
					seen |= 1 << min(c, 63)
					small[min(c, 63)]++
				}
			}
			continue
		}
		for i := lo; i < hi; i++ {
			if c := p.capOf(il, i, gi); c > 0 {
				caps = append(caps, domCap{cap: int32(c), idx: int32(i)})
				seen |= 1 << min(c, 63)
				small[min(c, 63)]++
			}
		}
	}
	p.caps = caps
	maxCap := 63 - bits.LeadingZeros64(seen|1)
	if maxCap == 63 {
		for _, c := range caps {
			maxCap = max(maxCap, int(c.cap))
		}
	}
	if maxCap > 1<<20 {
		// Huge domains: capacity beyond need never changes the count of
		// picks, so clamp it to keep the buckets small (tightness among
		// domains above need is then lost, which is harmless there).
		for i := range p.caps {
			p.caps[i].cap = min(p.caps[i].cap, int32(need))
		}
		maxCap = min(maxCap, need)
	}
	cnt := p.bucket(maxCap + 1)
	if maxCap < 63 {
		copy(cnt, small[:maxCap+1])
	} else {
		for _, c := range p.caps {
			cnt[c.cap]++
		}
	}
	// The picks: every domain above the threshold capacity thr, and the
	// first atThr domains (by index) at it.
	m, sum, thr, atThr := threshold(cnt, maxCap, need)
	p.pick = p.pick[:0]
	for i := range p.caps {
		c := &p.caps[i]
		if c.cap > int32(thr) || (c.cap == int32(thr) && atThr > 0) {
			if c.cap == int32(thr) {
				atThr--
			}
			p.pick = append(p.pick, int32(i))
			cnt[c.cap]-- // cnt now counts unpicked domains
		}
	}
	// Tighten, smallest pick first (higher index first on ties).
	slices.SortFunc(p.pick, func(a, b int32) int {
		if ca, cb := p.caps[a].cap, p.caps[b].cap; ca != cb {
			return int(ca - cb)
		}
		return int(b - a)
	})
	slack := sum - need
	for j := 0; j < len(p.pick) && slack > 0; j++ {
		cj := int(p.caps[p.pick[j]].cap)
		for v := max(cj-slack, 1); v < cj; v++ {
			if cnt[v] == 0 {
				continue
			}
			for u := range p.caps { // lowest index unpicked at v
				if int(p.caps[u].cap) == v && !slices.Contains(p.pick, int32(u)) {
					cnt[v]--
					cnt[cj]++
					p.pick[j] = int32(u)
					slack -= cj - v
					break
				}
			}
			break
		}
	}
	p.chosen = p.chosen[:0]
	p.chosenL = il
	for _, i := range p.pick {
		idx := p.caps[i].idx
		p.chosen = append(p.chosen, idx)
		freeChosen += p.free(il, int(idx))
	}
	slices.Sort(p.chosen)
	return m, freeChosen
}

// threshold counts choose's picks from cnt, the number of domains of each
// capacity 1..maxCap: the fewest, largest first, whose capacities reach
// need (all of them when they do not): m of them, holding sum, every one
// above capacity thr and atThr at it.
func threshold(cnt []int32, maxCap, need int) (m, sum, thr, atThr int) {
	for v := maxCap; v > 0; v-- {
		n := int(cnt[v])
		if n == 0 {
			continue
		}
		if k := (need - sum + v - 1) / v; k <= n {
			return m + k, sum + k*v, v, k
		}
		m, sum = m+n, sum+n*v
	}
	return m, sum, 0, 0
}

// bucket returns a zeroed scratch slice of n counters.
func (p *Placer) bucket(n int) []int32 {
	if cap(p.cnt) < n {
		p.cnt = make([]int32, n)
	}
	p.cnt = p.cnt[:n]
	clear(p.cnt)
	return p.cnt
}

// nodeRanges calls f for every node of the chosen domains (of level
// p.bestL: the preferred level or a finer one, see compact), or of
// required domain d when there is no preferred level), in ascending order.
func (p *Placer) nodeRanges(d int, f func(topo.NodeID)) {
	if p.lp < 0 {
		lo, hi := p.span(p.lr, d, p.nl)
		for n := lo; n < hi; n++ {
			f(topo.NodeID(n))
		}
		return
	}
	for _, c := range p.best {
		lo, hi := p.span(p.bestL, int(c), p.nl)
		for n := lo; n < hi; n++ {
			f(topo.NodeID(n))
		}
	}
}

// packOne takes need members from the nodes of the chosen domains, nodes
// with the fewest free GPUs first (ties: lower node ID).
func (p *Placer) packOne(d int, gi *groupInfo, need int) {
	var byFree [topo.MaxGPUsPerNode + 1]int
	// One scan of the nodes: those that hold a member, with their free GPUs.
	p.snodes, p.scaps, p.sfree = p.snodes[:0], p.scaps[:0], p.sfree[:0]
	if !gi.slow && gi.model < 0 && gi.models.n == 0 {
		// nodeCap is free GPUs / GPUs per member: a table, no closure.
		// Up to the cluster's largest node, counted (no division).
		var div [topo.MaxGPUsPerNode + 1]int32
		q, r := int32(0), 0
		for k := range min(p.c.MaxGPUsPerNode(), topo.MaxGPUsPerNode) + 1 {
			div[k] = q
			if r++; r == gi.per {
				q, r = q+1, 0
			}
		}
		nodes, caps, free := p.snodes, p.scaps, p.sfree
		scan := func(lo, hi int) {
			for n := topo.NodeID(lo); n < topo.NodeID(hi); n++ {
				k := p.s.NodeAvailable(n)
				if c := div[k]; c > 0 {
					byFree[k] += int(c)
					nodes, caps, free = append(nodes, n), append(caps, c), append(free, uint8(k))
				}
			}
		}
		if p.lp < 0 {
			scan(p.span(p.lr, d, p.nl))
		} else {
			for _, c := range p.best {
				scan(p.span(p.bestL, int(c), p.nl))
			}
		}
		p.snodes, p.scaps, p.sfree = nodes, caps, free
	} else {
		p.nodeRanges(d, func(n topo.NodeID) {
			if c := p.nodeCap(n, gi); c > 0 {
				k := p.s.NodeAvailable(n)
				byFree[k] += c
				p.snodes = append(p.snodes, n)
				p.scaps = append(p.scaps, int32(c))
				p.sfree = append(p.sfree, uint8(k))
			}
		})
	}
	cut, rem := 0, need
	for k := range byFree {
		if byFree[k] >= rem {
			cut = k
			break
		}
		rem -= byFree[k]
	}
	for i, n := range p.snodes {
		c := int(p.scaps[i])
		switch k := int(p.sfree[i]); {
		case k < cut:
		case k == cut && rem > 0:
			c = min(c, rem)
			rem -= c
		default:
			continue
		}
		p.takes = append(p.takes, take{group: 0, node: n, n: int32(c)})
	}
}

// anyNodeMatches reports whether some node could hold a member of group gi
// were it empty and ready.
func (p *Placer) anyNodeMatches(gi int) bool {
	g := &p.groups[gi]
	if g.noModel {
		return false
	}
	for n := range p.c.NumNodes() {
		id := topo.NodeID(n)
		info := p.c.Node(id)
		if !p.allows(g, p.c.NodeModel(id)) {
			continue
		}
		if info.GPUs < g.per || !p.c.MatchesSelector(id, g.g.Selector) {
			continue
		}
		if g.frac && !p.canShare(id, g) {
			continue
		}
		if (info.CPUMilli > 0 && info.CPUMilli < g.g.CPUMilli) || (info.MemoryMiB > 0 && info.MemoryMiB < g.g.MemoryMiB) {
			continue
		}
		return true
	}
	return false
}

// emit turns p.takes into assignments with exact GPUs, and the spread.
func (p *Placer) emit(res *Result) {
	total, members := 0, 0
	for _, t := range p.takes {
		total += int(t.n) * p.groups[t.group].per
		members += int(t.n)
	}
	res.gpus = slices.Grow(res.gpus[:0], total)
	res.Members = slices.Grow(res.Members[:0], members)
	// Per node, GPUs handed out so far in this placement (takes of one
	// node may come from several groups).
	var lastNode topo.NodeID = -1
	var used uint64
	noLevels := len(p.c.GPULevels()) == 0
	for _, t := range p.takes {
		gi := &p.groups[t.group]
		if t.node != lastNode {
			lastNode, used = t.node, p.usedBy(res, t.node)
		}
		first, _ := p.c.NodeGPUs(t.node)
		if gi.frac {
			p.emitShared(res, t)
			continue
		}
		freeMask := p.s.NodeFreeMask(t.node) &^ used
		// Locals, so that the appends stay in registers.
		gpus, ms := res.gpus, res.Members
		if noLevels && gi.per == 1 {
			// One GPU each: the lowest free ones, in turn.
			for range t.n {
				b := freeMask & -freeMask
				freeMask ^= b
				used |= b
				gpus = append(gpus, first+uint32(bits.TrailingZeros64(b)))
				ms = append(ms, Assignment{Group: t.group, Node: t.node, GPULo: int32(len(gpus) - 1), GPUHi: int32(len(gpus))})
			}
			res.gpus, res.Members = gpus, ms
			continue
		}
		for range t.n {
			var m uint64
			switch {
			case noLevels && bits.OnesCount64(freeMask) <= gi.per:
				m = freeMask // all of them (a whole node, say)
			case noLevels:
				m = lowest(freeMask, gi.per) // pickGPUs without GPU levels
			default:
				m = p.pickGPUs(t.node, freeMask, gi.per)
			}
			freeMask &^= m
			used |= m
			start := len(gpus)
			for mm := m; mm != 0; mm &= mm - 1 {
				gpus = append(gpus, first+uint32(bits.TrailingZeros64(mm)))
			}
			ms = append(ms, Assignment{
				Group: t.group, Node: t.node, GPULo: int32(start), GPUHi: int32(len(gpus)),
			})
		}
		res.gpus, res.Members = gpus, ms
	}
	if p.groups[0].frac {
		res.frac, res.mreq = true, p.groups[0].mreq
	}
	for gi := range p.groups {
		if g := p.groups[gi].g; g.CPUMilli > 0 || g.MemoryMiB > 0 {
			res.hosts = slices.Grow(res.hostBuf[:0], len(p.groups))[:len(p.groups)]
			res.hostBuf = res.hosts
			for gj := range p.groups {
				res.hosts[gj] = hostReq{p.groups[gj].g.CPUMilli, p.groups[gj].g.MemoryMiB}
			}
			break
		}
	}
	p.spreadOf(res)
}

// usedBy returns the GPUs of node n already given to members of res (only
// possible in multi-group gangs, whose takes are grouped by group).
func (p *Placer) usedBy(res *Result, n topo.NodeID) uint64 {
	if len(p.groups) == 1 {
		return 0
	}
	first, _ := p.c.NodeGPUs(n)
	var m uint64
	for i := range res.Members {
		if res.Members[i].Node == n {
			for _, g := range res.MemberGPUs(i) {
				m |= 1 << (g - first)
			}
		}
	}
	return m
}

// pickGPUs chooses per GPUs among free: inside the tightest domain that
// holds them all at the finest GPU level that has one (a PCIe switch, else
// an NVLink island, else a NUMA node, as the node's GPU levels say), else
// over the fewest domains of the coarsest GPU level (fewestDomains), else
// (no GPU levels) the lowest.
func (p *Placer) pickGPUs(n topo.NodeID, free uint64, per int) uint64 {
	for l := len(p.c.GPULevels()) - 1; l >= 0 && per > 0; l-- {
		bestMask, bestFree := uint64(0), 65
		for _, m := range p.c.GPUDomainMasks(n, l) {
			if f := bits.OnesCount64(free & m); f >= per && f < bestFree {
				bestMask, bestFree = m, f
			}
		}
		if bestMask != 0 {
			return lowest(free&bestMask, per)
		}
	}
	if len(p.c.GPULevels()) > 0 {
		return fewestDomains(free, per, p.c.GPUDomainMasks(n, 0))
	}
	return lowest(free, per)
}

// fewestDomains chooses per GPUs among free spread over the fewest of the
// domains masks (a member larger than any NVLink island, say): the domains
// with the most free GPUs first, until one holds what is left, which then
// comes from the tightest such domain. Ties: the lower domain.
func fewestDomains(free uint64, per int, masks []uint64) uint64 {
	var out, taken uint64
	for left := per; left > 0; {
		fit, fitFree, most, mostFree := -1, 65, -1, 0
		for i, m := range masks {
			if i >= 64 || taken&(1<<i) != 0 {
				continue
			}
			f := bits.OnesCount64(free & m)
			if f >= left && f < fitFree {
				fit, fitFree = i, f
			}
			if f > mostFree {
				most, mostFree = i, f
			}
		}
		switch {
		case fit >= 0:
			return out | lowest(free&masks[fit], left)
		case most < 0:
			return out | lowest(free&^out, left) // GPUs outside every domain
		}
		taken |= 1 << most
		out |= free & masks[most]
		left -= mostFree
	}
	return out
}

func lowest(m uint64, n int) uint64 {
	var out uint64
	for ; n > 0 && m != 0; n-- {
		b := m & -m
		out |= b
		m &^= b
	}
	return out
}

func (p *Placer) spreadOf(res *Result) {
	p.spread = p.spread[:0]
	for _, t := range p.takes {
		p.spread = append(p.spread, t.node)
	}
	if len(p.groups) > 1 {
		slices.Sort(p.spread)
	}
	res.Spread = slices.Grow(res.Spread[:0], p.nl)[:p.nl]
	clear(res.Spread)
	res.Nodes = 0
	for l := range p.nl {
		last := -1
		for _, n := range p.spread {
			if d := p.c.DomainOf(n, l); d != last {
				res.Spread[l]++
				last = d
			}
		}
	}
	last := topo.NodeID(-1)
	for _, n := range p.spread {
		if n != last {
			res.Nodes++
			last = n
		}
	}
}

// emitShared gives the t.n members of a fractional take a GPU each: GPUs
// already in MIG mode or shared first, fullest (fewest fits) first, then
// free GPUs from the lowest index, so shared GPUs fill up before new ones
// are opened.
func (p *Placer) emitShared(res *Result, t take) {
	gi := &p.groups[t.group]
	if p.Scorer != nil {
		if gpu, ok := p.chosenShare(res, t); ok {
			res.gpus = append(res.gpus, gpu)
			res.Members = append(res.Members, Assignment{Group: t.group, Node: t.node, GPULo: int32(len(res.gpus) - 1), GPUHi: int32(len(res.gpus))})
			return
		}
	}
	first, g := p.c.NodeGPUs(t.node)
	left := int(t.n)
	for pass := 0; pass < 2 && left > 0; pass++ {
		for left > 0 {
			best, bestFit := uint32(0), 0
			for i := range uint32(g) {
				gpu := first + i
				if p.s.IsSharedGPU(gpu) != (pass == 0) || p.isTaken(res, gpu) {
					continue
				}
				if f := p.s.SharedFits(gpu, gi.mreq); f > 0 && (bestFit == 0 || f < bestFit) {
					best, bestFit = gpu, f
				}
			}
			if bestFit == 0 {
				break
			}
			for range min(bestFit, left) {
				res.gpus = append(res.gpus, best)
				res.Members = append(res.Members, Assignment{Group: t.group, Node: t.node, GPULo: int32(len(res.gpus) - 1), GPUHi: int32(len(res.gpus))})
				left--
			}
		}
	}
}

// isTaken reports whether an earlier member of res already uses gpu (each
// GPU is filled once, to what it can hold, so it is never picked twice).
func (p *Placer) isTaken(res *Result, gpu uint32) bool {
	for _, x := range res.gpus {
		if x == gpu {
			return true
		}
	}
	return false
}

// canShare reports whether node id could ever hold a member of fractional
// group g: its GPUs are in MIG mode with a profile for the request, or
// shared, or free GPUs may be shared.
func (p *Placer) canShare(id topo.NodeID, g *groupInfo) bool {
	cfg, ok := p.c.NodeGPUConfig(id)
	switch {
	case !ok:
		return p.c.SharesFreeGPUs() && g.mreq.Profile == ""
	case cfg.MIG:
		_, err := cfg.Model.Resolve(g.mreq)
		return err == nil
	default:
		return g.mreq.Profile == ""
	}
}
