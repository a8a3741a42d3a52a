package autoscale

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/gang"
)

// DefaultScaleDownDelay is Config.ScaleDownDelay when it is zero.
const DefaultScaleDownDelay = 10 * time.Minute

// MaxPoolNodes bounds Pool.Max (and so the nodes one plan can ask for in
// a pool), so that a plan's work and memory stay bounded whatever the
// demand asks.
const MaxPoolNodes = 1 << 20

// Decide plans one round of node autoscaling at now: from the pools of
// cfg, the pools' nodes (up and booting) and the demand (the jobs that
// cannot start for want of capacity, in the scheduler's order), which
// nodes to add and which to release. It is pure and deterministic: the
// same input gives the same plan; its work is bounded by the sizes of the
// input (and by the pools' Max, at most MaxPoolNodes each).
//
// Capacity. A node's capacity is its FreeGPUs; a booting node's is its
// pool's GPUsPerNode (it is on the way, and no job holds it yet); a
// Reserved node gives none (its free GPUs are held for a job). A member
// of a group needs GPUsPerMember GPUs on one node; a fractional member
// (GPUMilli or MIGProfile) is planned as if it needed one whole GPU of
// room (the share of a GPU it gets is the engine's business: the plan
// only makes sure a GPU is there for it). Members that need no GPU (CPU
// only) are not planned for: the autoscaler adds GPU nodes, and a gang
// that asks for no GPU at all is Unserved. A pool serves a group when its
// GPUModel is one of the group's models (gang.Group.Models; none: any)
// and its GPUsPerNode holds a member, and its Labels agree with the
// group's node selector (a key the pool does not declare is not
// checked). Capacity is used in demand order and tracked as it is
// assigned, so that two gangs never count the same GPUs, and the room
// left on nodes planned for one gang serves the next.
// It is taken first-fit: pools by name, nodes up before nodes booting,
// each by name, then nodes planned, in the order planned.
//
// GangAware (the default): each gang is served whole or not at all. Its
// members go first onto capacity that is idle or on the way, then onto
// new nodes, each group (in order) taking new nodes from the pool with
// the lowest CostPerNodeHour per GPU (ties: by name) that can give every
// node the group still needs: not in backoff at now (BackoffUntil), and
// with Max (counting its nodes up and booting and those planned) and the
// domains' Room left. A gang that requires a topology level
// (gang.Request.Required) lands whole in one domain of one pool: a pool
// whose DomainLevel is that level (in one of its Domains, using only the
// capacity of its nodes in that domain), or a pool that describes no
// topology at all (no DomainLevel, no Domains: its nodes are taken as one
// domain of every level, e.g. a cloud placement group); a pool whose
// DomainLevel is another level, or whose Domains have no level, does not
// serve it. Among the domains that can hold the gang, one that needs no
// new node wins, then the cheapest pool per GPU, then the fewest new
// nodes, then the pool's name and the order of its Domains. A gang that
// cannot be served is in Plan.Unserved with the limit that stopped it,
// and nothing is planned or counted for it.
//
// PodByPod: the baseline, as cluster-autoscaler treats plain pods: each
// member alone goes first-fit onto capacity idle, on the way or planned,
// else onto a new node of the cheapest pool not in backoff and below Max,
// in the first of its domains with room, until every pool is at Max,
// whether or not the whole gang fits and ignoring the domain it requires.
// A gang some member of which got no room is also in Plan.Unserved.
//
// Pools below Min get nodes up to Min first (when not in backoff); their
// room serves the demand.
//
// Scale-down: a node that is up (not Booting), not Reserved, idle since
// IdleSince for at least ScaleDownDelay, with all its pool's GPUsPerNode
// free, and not counted as capacity for any demand of this plan, is
// released, by name, as long as its pool keeps Min nodes.
//
// The ScaleUps are merged per pool and domain (Jobs lists every gang they
// are for), sorted by pool name, then the order of the pool's Domains.
//
// Errors wrap ErrInvalid: an unknown Policy, a negative ScaleDownDelay,
// a pool without a name or a duplicate one, GPUsPerNode < 1, Min < 0,
// Max < Min or Max > MaxPoolNodes, a cost that is negative, NaN or
// infinite, a DomainLevel without Domains, a domain without a name, a
// duplicate one or a negative Room; a node without a name, a duplicate
// one, of an unknown pool or with negative FreeGPUs; a demand without a
// job name, a duplicate one or with a request that does not validate.
func Decide(cfg Config, now time.Time, nodes []Node, demand []Demand) (Plan, error) {
	p, err := newPlanner(&cfg, now, nodes, demand)
	if err != nil {
		return Plan{}, err
	}
	return p.run(), nil
}

// ------------------------------------------------------------ validation

func validate(cfg *Config, nodes []Node, demand []Demand) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	switch cfg.Policy {
	case "", GangAware, PodByPod:
	default:
		return bad("unknown Policy %q (want %q or %q)", cfg.Policy, GangAware, PodByPod)
	}
	if cfg.ScaleDownDelay < 0 {
		return bad("ScaleDownDelay must not be negative, got %v", cfg.ScaleDownDelay)
	}
	pools := make(map[string]bool, len(cfg.Pools))
	for i := range cfg.Pools {
		pl := &cfg.Pools[i]
		switch {
		case pl.Name == "":
			return bad("pool %d has no Name", i)
		case pools[pl.Name]:
			return bad("pool %q is listed twice", pl.Name)
		case pl.GPUsPerNode < 1:
			return bad("pool %q: GPUsPerNode must be at least 1, got %d", pl.Name, pl.GPUsPerNode)
		case pl.Min < 0:
			return bad("pool %q: Min must not be negative, got %d", pl.Name, pl.Min)
		case pl.Max < pl.Min:
			return bad("pool %q: Max (%d) must not be below Min (%d)", pl.Name, pl.Max, pl.Min)
		case pl.Max > MaxPoolNodes:
			return bad("pool %q: Max (%d) must not exceed %d", pl.Name, pl.Max, MaxPoolNodes)
		case math.IsNaN(pl.CostPerNodeHour) || math.IsInf(pl.CostPerNodeHour, 0) || pl.CostPerNodeHour < 0:
			return bad("pool %q: CostPerNodeHour must be finite and not negative, got %v", pl.Name, pl.CostPerNodeHour)
		case pl.DomainLevel != "" && len(pl.Domains) == 0:
			return bad("pool %q: DomainLevel %q without Domains (list the domains new nodes may land in)", pl.Name, pl.DomainLevel)
		}
		pools[pl.Name] = true
		doms := make(map[string]bool, len(pl.Domains))
		for j, d := range pl.Domains {
			switch {
			case d.Name == "":
				return bad("pool %q: domain %d has no Name", pl.Name, j)
			case doms[d.Name]:
				return bad("pool %q: domain %q is listed twice", pl.Name, d.Name)
			case d.Room < 0:
				return bad("pool %q: domain %q: Room must not be negative, got %d", pl.Name, d.Name, d.Room)
			}
			doms[d.Name] = true
		}
	}
	seen := make(map[string]bool, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		switch {
		case n.Name == "":
			return bad("node %d has no Name", i)
		case seen[n.Name]:
			return bad("node %q is listed twice", n.Name)
		case !pools[n.Pool]:
			return bad("node %q: unknown pool %q", n.Name, n.Pool)
		case n.FreeGPUs < 0:
			return bad("node %q: FreeGPUs must not be negative, got %d", n.Name, n.FreeGPUs)
		}
		seen[n.Name] = true
	}
	jobs := make(map[string]bool, len(demand))
	for i := range demand {
		d := &demand[i]
		switch {
		case d.Job == "":
			return bad("demand %d has no Job", i)
		case jobs[d.Job]:
			return bad("demand: job %q is listed twice", d.Job)
		}
		if err := d.Request.Validate(); err != nil {
			return bad("demand: job %q: %w", d.Job, err)
		}
		jobs[d.Job] = true
	}
	return nil
}

// -------------------------------------------------------------- planner

// capNode is capacity a plan may use: a node (up or booting) or a node
// the plan adds.
type capNode struct {
	pool   int
	dom    int // bucket index in its pool (see poolState.buckets)
	free   int
	node   int // index in planner.nodes; -1: planned
	used   bool
	origin int // planned: the gang it was planned for (-1: Min)
}

type poolState struct {
	p       *Pool
	perGPU  float64 // cost per GPU-hour
	count   int     // nodes up or booting
	planned int
	// room: per domain, how many more nodes it takes; a pool without
	// Domains has one domain of room Max.
	room []int
	// buckets: the capNodes with free GPUs of each domain, then (for
	// pools with Domains) the nodes in none of them; skip[b]: how many of
	// the first of bucket b have no free GPU left (not scanned again).
	buckets [][]int
	skip    []int
	backoff bool
	down    int // nodes released by the plan
}

type undoKind uint8

const (
	undoFree undoKind = iota
	undoPlanned
	undoRoom
	undoVNode
	undoSkip
)

type undoRec struct {
	kind   undoKind
	a, b   int
	old    int
	gpm    int // undoFree of a gang's use: the member's GPUs (witness)
	group  int
	demand int
}

// assign is one witness record: k members of group of demand on capNode.
type assign struct {
	demand, group, cap, k, gpm int
}

type planner struct {
	cfg     *Config
	now     time.Time
	nodes   []Node // up, then booting, by name
	demand  []Demand
	pools   []poolState // sorted by name
	byName  map[string]int
	caps    []capNode
	log     []undoRec
	witness []assign // when trace
	trace   bool
	plan    Plan
	ups     map[[2]int]int // pool, bucket -> index in plan.Up
}

func newPlanner(cfg *Config, now time.Time, nodes []Node, demand []Demand) (*planner, error) {
	if err := validate(cfg, nodes, demand); err != nil {
		return nil, err
	}
	if cfg.Policy == "" {
		cfg.Policy = GangAware
	}
	if cfg.ScaleDownDelay == 0 {
		cfg.ScaleDownDelay = DefaultScaleDownDelay
	}
	p := &planner{cfg: cfg, now: now, demand: demand, byName: make(map[string]int, len(cfg.Pools)), ups: map[[2]int]int{}}
	// Capacity is used first-fit in this order: nodes up, then booting
	// ones, each by name (sorted by index: Nodes are large to move).
	idx := make([]int32, len(nodes))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(x, y int32) int {
		a, b := &nodes[x], &nodes[y]
		if a.Booting != b.Booting {
			if a.Booting {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	p.nodes = make([]Node, len(nodes))
	for i, j := range idx {
		p.nodes[i] = nodes[j]
	}
	p.caps = make([]capNode, 0, len(nodes)+len(nodes)/4)
	order := make([]int, len(cfg.Pools))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(cfg.Pools[a].Name, cfg.Pools[b].Name) })
	p.pools = make([]poolState, len(order))
	for i, j := range order {
		pl := &cfg.Pools[j]
		ps := &p.pools[i]
		ps.p = pl
		ps.perGPU = pl.CostPerNodeHour / float64(pl.GPUsPerNode)
		ps.backoff = now.Before(pl.BackoffUntil)
		if len(pl.Domains) == 0 {
			ps.room = []int{pl.Max}
			ps.buckets, ps.skip = make([][]int, 1), make([]int, 1)
		} else {
			ps.room = make([]int, len(pl.Domains))
			for d, dom := range pl.Domains {
				ps.room[d] = dom.Room
			}
			ps.buckets, ps.skip = make([][]int, len(pl.Domains)+1), make([]int, len(pl.Domains)+1)
		}
		p.byName[pl.Name] = i
	}
	for i := range p.nodes {
		n := &p.nodes[i]
		pi := p.byName[n.Pool]
		ps := &p.pools[pi]
		ps.count++
		b := 0
		if len(ps.p.Domains) > 0 {
			b = len(ps.p.Domains) // none of them, unless named
			for d := range ps.p.Domains {
				if ps.p.Domains[d].Name == n.Domain {
					b = d
					break
				}
			}
		}
		free := n.FreeGPUs
		if n.Booting {
			free = ps.p.GPUsPerNode
		}
		if n.Reserved {
			free = 0
		}
		if free > 0 { // a full node is no capacity: not scanned
			ps.buckets[b] = append(ps.buckets[b], len(p.caps))
		}
		p.caps = append(p.caps, capNode{pool: pi, dom: b, free: free, node: i, origin: -1})
	}
	return p, nil
}

func (p *planner) run() Plan {
	p.scaleToMin()
	for i := range p.demand {
		if p.cfg.Policy == PodByPod {
			p.podByPod(i)
		} else {
			p.gangAware(i)
		}
	}
	p.scaleDown()
	slices.SortFunc(p.plan.Up, func(a, b ScaleUp) int {
		pa, pb := p.byName[a.Pool], p.byName[b.Pool]
		if c := cmp.Compare(pa, pb); c != 0 {
			return c
		}
		return cmp.Compare(p.domIndex(pa, a.Domain), p.domIndex(pb, b.Domain))
	})
	return p.plan
}

func (p *planner) domIndex(pool int, name string) int {
	for i, d := range p.pools[pool].p.Domains {
		if d.Name == name {
			return i
		}
	}
	return -1
}

// --------------------------------------------------------------- undo log

// useFree takes k members of gpm GPUs of group of demand d from capNode c.
func (p *planner) useFree(c, k, gpm, d, group int) {
	p.log = append(p.log, undoRec{kind: undoFree, a: c, old: p.caps[c].free, gpm: gpm, group: group, demand: d, b: k})
	p.caps[c].free -= k * gpm
}

func (p *planner) addNode(pool, bucket, free, origin int) int {
	ps := &p.pools[pool]
	p.log = append(p.log, undoRec{kind: undoPlanned, a: pool, old: ps.planned})
	ps.planned++
	p.log = append(p.log, undoRec{kind: undoRoom, a: pool, b: bucket, old: ps.room[bucket]})
	ps.room[bucket]--
	c := len(p.caps)
	p.caps = append(p.caps, capNode{pool: pool, dom: bucket, free: free, node: -1, origin: origin})
	ps.buckets[bucket] = append(ps.buckets[bucket], c)
	p.log = append(p.log, undoRec{kind: undoVNode, a: pool, b: bucket})
	return c
}

// rollback undoes the log back to mark.
func (p *planner) rollback(mark int) {
	for i := len(p.log) - 1; i >= mark; i-- {
		u := p.log[i]
		switch u.kind {
		case undoFree:
			p.caps[u.a].free = u.old
		case undoPlanned:
			p.pools[u.a].planned = u.old
		case undoRoom:
			p.pools[u.a].room[u.b] = u.old
		case undoSkip:
			p.pools[u.a].skip[u.b] = u.old
		case undoVNode:
			bk := p.pools[u.a].buckets[u.b]
			p.pools[u.a].buckets[u.b] = bk[:len(bk)-1]
			p.caps = p.caps[:len(p.caps)-1]
		}
	}
	p.log = p.log[:mark]
}

// commit keeps the log since mark: nodes used are marked, new nodes go
// into the plan's ScaleUps for demand d (-1: Min).
func (p *planner) commit(mark, d int) {
	for _, u := range p.log[mark:] {
		switch u.kind {
		case undoFree:
			c := &p.caps[u.a]
			if u.gpm > 0 {
				c.used = true
				if p.trace {
					p.witness = append(p.witness, assign{demand: u.demand, group: u.group, cap: u.a, k: u.b, gpm: u.gpm})
				}
			}
		case undoVNode:
			key := [2]int{u.a, u.b}
			ps := &p.pools[u.a]
			i, ok := p.ups[key]
			if !ok {
				i = len(p.plan.Up)
				p.ups[key] = i
				dom := ""
				if u.b < len(ps.p.Domains) && len(ps.p.Domains) > 0 {
					dom = ps.p.Domains[u.b].Name
				}
				p.plan.Up = append(p.plan.Up, ScaleUp{Pool: ps.p.Name, Domain: dom})
			}
			up := &p.plan.Up[i]
			up.Nodes++
			if d >= 0 {
				if job := p.demand[d].Job; len(up.Jobs) == 0 || up.Jobs[len(up.Jobs)-1] != job {
					up.Jobs = append(up.Jobs, job)
				}
			}
		}
	}
	p.log = p.log[:mark]
}

// ------------------------------------------------------------- Min, down

func (p *planner) scaleToMin() {
	for pi := range p.pools {
		ps := &p.pools[pi]
		if ps.backoff {
			continue
		}
		mark := len(p.log)
		for ps.count+ps.planned < ps.p.Min {
			b := p.firstRoom(pi, 1)
			if b < 0 {
				break
			}
			p.addNode(pi, b, ps.p.GPUsPerNode, -1)
		}
		p.commit(mark, -1)
	}
}

// firstRoom is the first domain of pool with room for n more nodes, -1
// if none.
func (p *planner) firstRoom(pool, n int) int {
	for b, r := range p.pools[pool].room {
		if r >= n {
			return b
		}
	}
	return -1
}

func (p *planner) scaleDown() {
	for c := range p.caps {
		cn := &p.caps[c]
		if cn.node < 0 || cn.used {
			continue
		}
		n := &p.nodes[cn.node]
		ps := &p.pools[cn.pool]
		if n.Booting || n.Reserved || n.IdleSince.IsZero() || p.now.Sub(n.IdleSince) < p.cfg.ScaleDownDelay ||
			n.FreeGPUs < ps.p.GPUsPerNode || ps.count-ps.down <= ps.p.Min {
			continue
		}
		ps.down++
		p.plan.Down = append(p.plan.Down, n.Name)
	}
	slices.Sort(p.plan.Down)
}

// ------------------------------------------------------------ gang-aware

// group is a demand's group as planned: its GPU need per member.
type group struct {
	idx      int
	members  int
	gpm      int
	models   []string
	selector map[string]string
}

func gpuGroups(r *gang.Request) []group {
	var gs []group
	for i := range r.Groups {
		g := &r.Groups[i]
		gpm := g.GPUsPerMember
		if gpm == 0 && (g.GPUMilli > 0 || g.MIGProfile != "") {
			gpm = 1 // a fraction of a GPU: one GPU's room
		}
		if gpm == 0 {
			continue // CPU only
		}
		gs = append(gs, group{idx: i, members: g.Members, gpm: gpm, models: g.Models(), selector: g.Selector})
	}
	return gs
}

func modelOK(models []string, model string) bool {
	return len(models) == 0 || slices.Contains(models, model)
}

// poolOK reports whether pool pl's nodes may hold a member of g: its GPU
// model is one g accepts, and g's node selector agrees with the labels
// the pool declares (Pool.Labels; a key the pool does not declare is not
// checked).
func poolOK(g group, pl *Pool) bool {
	return modelOK(g.models, pl.GPUModel) && labelsOK(g.selector, pl.Labels)
}

func labelsOK(sel, labels map[string]string) bool {
	for k, v := range sel {
		if have, ok := labels[k]; ok && have != v {
			return false
		}
	}
	return true
}

// labelText names the first selector term of g that pl's labels refuse.
func labelText(g group, pl *Pool) string {
	keys := make([]string, 0, len(g.selector))
	for k := range g.selector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if have, ok := pl.Labels[k]; ok && have != g.selector[k] {
			return fmt.Sprintf("pool %s has label %s=%s, group %d selects %s=%s", pl.Name, k, have, g.idx, k, g.selector[k])
		}
	}
	return ""
}

func (p *planner) unserved(d int, reason string) {
	p.plan.Unserved = append(p.plan.Unserved, Unserved{Job: p.demand[d].Job, Reason: reason})
}

func (p *planner) gangAware(d int) {
	r := &p.demand[d].Request
	gs := gpuGroups(r)
	if len(gs) == 0 {
		p.unserved(d, "asks for no GPU: the autoscaler adds GPU nodes only")
		return
	}
	if r.Required != "" {
		p.gangInDomain(d, r.Required, gs)
		return
	}
	mark := len(p.log)
	for _, g := range gs {
		if f := p.placeGroup(d, g, -1, -1); f != nil {
			p.rollback(mark)
			p.unserved(d, p.failureText(f))
			return
		}
	}
	p.commit(mark, d)
}

// gangInDomain serves a gang that requires level: whole in one domain of
// one pool.
func (p *planner) gangInDomain(d int, level string, gs []group) {
	type cand struct {
		pool, bucket, added int
	}
	var best *cand
	var why []string // the pools that cannot serve it at all
	type poolFail struct {
		pool int
		f    *failure
	}
	var fails []poolFail
	better := func(a, b *cand) bool { // a before b
		if (a.added > 0) != (b.added > 0) {
			return a.added == 0
		}
		pa, pb := &p.pools[a.pool], &p.pools[b.pool]
		if pa.perGPU != pb.perGPU {
			return pa.perGPU < pb.perGPU
		}
		if a.added != b.added {
			return a.added < b.added
		}
		if a.pool != b.pool {
			return a.pool < b.pool
		}
		return a.bucket < b.bucket
	}
	for pi := range p.pools {
		ps := &p.pools[pi]
		if r := p.servesGroups(pi, gs); r != "" {
			why = append(why, r)
			continue
		}
		switch {
		case ps.p.DomainLevel == "" && len(ps.p.Domains) > 0:
			why = append(why, fmt.Sprintf("pool %s: its domains have no level, the gang requires one %s", ps.p.Name, level))
			continue
		case ps.p.DomainLevel != "" && ps.p.DomainLevel != level:
			why = append(why, fmt.Sprintf("pool %s: its domains are at level %s, the gang requires one %s", ps.p.Name, ps.p.DomainLevel, level))
			continue
		}
		// The reason a pool cannot hold the gang is that of its domain
		// with the most room.
		var poolWhy *failure
		whyRoom := -1
		for b := range ps.room { // the domains, not the bucket of nodes in none
			mark, before := len(p.log), len(p.caps)
			ok := true
			for _, g := range gs {
				if f := p.placeGroup(d, g, pi, b); f != nil {
					ok = false
					if ps.room[b] > whyRoom {
						poolWhy, whyRoom = f, ps.room[b]
					}
					break
				}
			}
			if ok {
				c := &cand{pool: pi, bucket: b, added: len(p.caps) - before}
				if best == nil || better(c, best) {
					best = c
				}
			}
			p.rollback(mark)
		}
		if poolWhy != nil && (best == nil || best.pool != pi) {
			// Kept as a failure: formatted only if the gang is unserved.
			fails = append(fails, poolFail{pi, poolWhy})
		}
	}
	if best == nil {
		for _, pf := range fails {
			t := p.failureText(pf.f)
			if ps := &p.pools[pf.pool]; len(ps.p.Domains) > 0 {
				t = fmt.Sprintf("pool %s: no %s holds the whole gang (%s)", ps.p.Name, level, t)
			}
			why = append(why, t)
		}
		if len(why) == 0 {
			why = append(why, "no pool")
		}
		p.unserved(d, "needs one "+level+": "+strings.Join(why, "; "))
		return
	}
	mark := len(p.log)
	for _, g := range gs {
		p.placeGroup(d, g, best.pool, best.bucket) // succeeds as in the trial
	}
	p.commit(mark, d)
}

// servesGroups says why pool cannot hold every group ("" : it can).
func (p *planner) servesGroups(pi int, gs []group) string {
	pl := p.pools[pi].p
	for _, g := range gs {
		if !modelOK(g.models, pl.GPUModel) {
			return fmt.Sprintf("pool %s has model %s, group %d accepts %s", pl.Name, pl.GPUModel, g.idx, modelsText(g.models))
		}
		if !labelsOK(g.selector, pl.Labels) {
			return labelText(g, pl)
		}
		if pl.GPUsPerNode < g.gpm {
			return fmt.Sprintf("pool %s has %d GPUs per node, group %d needs %d per member", pl.Name, pl.GPUsPerNode, g.idx, g.gpm)
		}
	}
	return ""
}

func modelsText(models []string) string {
	if len(models) == 0 {
		return "(any)"
	}
	if len(models) == 1 {
		return models[0]
	}
	return "{" + strings.Join(models, ", ") + "}"
}

// takeFree puts up to rem members of g on the capacity of bucket b of
// pool pi (first-fit, in order) and returns how many are left.
func (p *planner) takeFree(d int, g group, pi, b, rem int) int {
	ps := &p.pools[pi]
	bk, skip := ps.buckets[b], ps.skip[b]
	for skip < len(bk) && p.caps[bk[skip]].free == 0 {
		skip++
	}
	if skip != ps.skip[b] {
		p.log = append(p.log, undoRec{kind: undoSkip, a: pi, b: b, old: ps.skip[b]})
		ps.skip[b] = skip
	}
	for _, c := range bk[skip:] {
		if rem == 0 {
			break
		}
		free := p.caps[c].free
		if free < g.gpm {
			continue
		}
		k := min(rem, free/g.gpm)
		p.useFree(c, k, g.gpm, d, g.idx)
		rem -= k
	}
	return rem
}

// limit is one reason a pool gave no new node to a group, formatted
// only when a demand is reported Unserved.
type limit struct {
	kind             uint8 // limGPUs, limBackoff, limMax, limDomain, limRoom
	pool, bucket     int
	need, left, room int
}

const (
	limGPUs uint8 = iota
	limBackoff
	limMax
	limDomain
	limRoom
)

// failure is why a group could not be placed.
type failure struct {
	g    group
	rem  int
	lims []limit
}

func (p *planner) limitText(l limit, gpm int) string {
	pl := p.pools[l.pool].p
	switch l.kind {
	case limGPUs:
		return fmt.Sprintf("pool %s has %d GPUs per node, a member needs %d", pl.Name, pl.GPUsPerNode, gpm)
	case limBackoff:
		return fmt.Sprintf("pool %s backs off until %s", pl.Name, pl.BackoffUntil.UTC().Format(time.RFC3339))
	case limMax:
		return fmt.Sprintf("needs %d more nodes, pool %s allows %d more (max %d)", l.need, pl.Name, l.left, pl.Max)
	case limDomain:
		return fmt.Sprintf("needs %d more nodes in %s %s of pool %s, it has room for %d", l.need, pl.DomainLevel, pl.Domains[l.bucket].Name, pl.Name, l.room)
	}
	return fmt.Sprintf("needs %d more nodes, the domains of pool %s have room for %d", l.need, pl.Name, l.room)
}

func (p *planner) failureText(f *failure) string {
	if len(f.lims) == 0 {
		if len(f.g.selector) > 0 {
			return fmt.Sprintf("group %d: no pool has GPU model %s and labels that agree with its node selector", f.g.idx, modelsText(f.g.models))
		}
		return fmt.Sprintf("group %d: no pool has GPU model %s", f.g.idx, modelsText(f.g.models))
	}
	why := make([]string, len(f.lims))
	for i, l := range f.lims {
		why[i] = p.limitText(l, f.g.gpm)
	}
	return fmt.Sprintf("group %d (%d members of %d GPUs, %d without room): %s", f.g.idx, f.g.members, f.g.gpm, f.rem, strings.Join(why, "; "))
}

// placeGroup places every member of g for demand d: on capacity first,
// then on new nodes of one pool. With pool >= 0, only bucket b of that
// pool is used. It returns why it could not (nil: placed); the caller
// rolls back.
func (p *planner) placeGroup(d int, g group, pool, b int) *failure {
	rem := g.members
	if pool >= 0 {
		rem = p.takeFree(d, g, pool, b, rem)
	} else {
		for pi := range p.pools {
			if !poolOK(g, p.pools[pi].p) {
				continue
			}
			for bk := range p.pools[pi].buckets {
				if rem = p.takeFree(d, g, pi, bk, rem); rem == 0 {
					break
				}
			}
			if rem == 0 {
				break
			}
		}
	}
	if rem == 0 {
		return nil
	}
	// New nodes: the cheapest pool that gives them all.
	best, bestNeed := -1, 0
	var lims []limit
	pools := p.pools
	lo, hi := 0, len(pools)
	if pool >= 0 {
		lo, hi = pool, pool+1
	}
	for pi := lo; pi < hi; pi++ {
		ps := &pools[pi]
		pl := ps.p
		if !poolOK(g, pl) {
			continue
		}
		if pl.GPUsPerNode < g.gpm {
			lims = append(lims, limit{kind: limGPUs, pool: pi})
			continue
		}
		per := pl.GPUsPerNode / g.gpm
		need := (rem + per - 1) / per
		if ps.backoff {
			lims = append(lims, limit{kind: limBackoff, pool: pi})
			continue
		}
		left := max(0, pl.Max-ps.count-ps.planned)
		if need > left {
			lims = append(lims, limit{kind: limMax, pool: pi, need: need, left: left})
			continue
		}
		if pool >= 0 {
			if len(pl.Domains) > 0 && ps.room[b] < need {
				lims = append(lims, limit{kind: limDomain, pool: pi, bucket: b, need: need, room: ps.room[b]})
				continue
			}
		} else if room := p.roomSum(pi, need); room < need {
			lims = append(lims, limit{kind: limRoom, pool: pi, need: need, room: room})
			continue
		}
		if best < 0 || ps.perGPU < pools[best].perGPU {
			best, bestNeed = pi, need
		}
	}
	if best < 0 {
		return &failure{g: g, rem: rem, lims: lims}
	}
	pl := pools[best].p
	per := pl.GPUsPerNode / g.gpm
	bk := b
	for range bestNeed {
		if pool < 0 {
			bk = p.firstRoom(best, 1)
		}
		k := min(rem, per)
		c := p.addNode(best, bk, pl.GPUsPerNode, d)
		p.useFree(c, k, g.gpm, d, g.idx)
		rem -= k
	}
	return nil
}

// roomSum is the room of pool's domains, counted up to want.
func (p *planner) roomSum(pi, want int) int {
	s := 0
	for _, r := range p.pools[pi].room {
		s += r
		if s >= want {
			return s
		}
	}
	return s
}

// ------------------------------------------------------------- pod-by-pod

func (p *planner) podByPod(d int) {
	r := &p.demand[d].Request
	gs := gpuGroups(r)
	if len(gs) == 0 {
		p.unserved(d, "asks for no GPU: the autoscaler adds GPU nodes only")
		return
	}
	mark := len(p.log)
	short := 0
	var why string
	for _, g := range gs {
		rem := g.members
		for pi := range p.pools {
			if rem == 0 {
				break
			}
			if !poolOK(g, p.pools[pi].p) {
				continue
			}
			for bk := range p.pools[pi].buckets {
				if rem = p.takeFree(d, g, pi, bk, rem); rem == 0 {
					break
				}
			}
		}
		// New nodes, member by member: the cheapest pool below Max with a
		// domain with room (pools by cost per GPU, then name).
		for rem > 0 {
			best, bk := -1, -1
			for pi := range p.pools {
				ps := &p.pools[pi]
				pl := ps.p
				if !poolOK(g, pl) || pl.GPUsPerNode < g.gpm || ps.backoff || ps.count+ps.planned >= pl.Max {
					continue
				}
				b := p.firstRoom(pi, 1)
				if b < 0 {
					continue
				}
				if best < 0 || ps.perGPU < p.pools[best].perGPU {
					best, bk = pi, b
				}
			}
			if best < 0 {
				why = fmt.Sprintf("group %d: no pool below its Max with room, not in backoff, has GPU model %s and %d GPUs per node", g.idx, modelsText(g.models), g.gpm)
				break
			}
			pl := p.pools[best].p
			k := min(rem, pl.GPUsPerNode/g.gpm)
			c := p.addNode(best, bk, pl.GPUsPerNode, d)
			p.useFree(c, k, g.gpm, d, g.idx)
			rem -= k
		}
		short += rem
	}
	p.commit(mark, d)
	if short > 0 {
		p.unserved(d, fmt.Sprintf("pod-by-pod: %d members got no room: %s", short, why))
	}
}
