package autoscale

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
)

var pt0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func randomInput(rng *rand.Rand) (Config, []Node, []Demand) {
	models := []string{"A", "B"}
	var cfg Config
	for i := range 1 + rng.IntN(4) {
		pl := Pool{Name: fmt.Sprintf("p%d", i), GPUModel: models[rng.IntN(2)], GPUsPerNode: []int{4, 8}[rng.IntN(2)],
			Max: rng.IntN(13), CostPerNodeHour: float64(1 + rng.IntN(4))}
		pl.Min = rng.IntN(min(pl.Max, 2) + 1)
		if rng.IntN(2) == 0 {
			if rng.IntN(3) > 0 {
				pl.DomainLevel = "rack"
			}
			for j := range 1 + rng.IntN(3) {
				pl.Domains = append(pl.Domains, Domain{Name: fmt.Sprintf("r%d", j), Room: rng.IntN(7)})
			}
		}
		if rng.IntN(5) == 0 {
			pl.BackoffUntil = pt0.Add(time.Minute)
		}
		cfg.Pools = append(cfg.Pools, pl)
	}
	var nodes []Node
	for i := range rng.IntN(16) {
		pl := cfg.Pools[rng.IntN(len(cfg.Pools))]
		n := Node{Name: fmt.Sprintf("n%02d", i), Pool: pl.Name, FreeGPUs: rng.IntN(pl.GPUsPerNode + 1)}
		if len(pl.Domains) > 0 {
			n.Domain = pl.Domains[rng.IntN(len(pl.Domains))].Name
		}
		switch rng.IntN(5) {
		case 0:
			n.Booting, n.FreeGPUs = true, 0
		case 1:
			n.Reserved = true
		case 2:
			n.IdleSince, n.FreeGPUs = pt0.Add(-time.Hour), pl.GPUsPerNode
		}
		nodes = append(nodes, n)
	}
	var demand []Demand
	for i := range rng.IntN(10) {
		var r gang.Request
		for range 1 + rng.IntN(2) {
			g := gang.Group{Members: 1 + rng.IntN(12), GPUsPerMember: []int{1, 2, 3, 4, 8, 16}[rng.IntN(6)]}
			switch rng.IntN(4) {
			case 0:
				g.GPUModels = []string{"A", "B"}
			case 1:
				g.GPUModel = models[rng.IntN(2)]
			}
			r.Groups = append(r.Groups, g)
		}
		if rng.IntN(3) == 0 {
			r.Required = "rack"
		}
		demand = append(demand, Demand{Job: fmt.Sprintf("j%d", i), Request: r})
	}
	return cfg, nodes, demand
}

// TestPropertyGangAware: on random input, every gang a plan serves has a
// placement (the planner's witness) on capacity idle, on the way or
// planned, that no two gangs share and that obeys models, GPUs per node
// and the required domain; a gang it does not serve gets nothing; pools
// never pass Max, domains never their Room, pools in backoff get no node.
func TestPropertyGangAware(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg, nodes, demand := randomInput(rng)
		p, err := newPlanner(&cfg, pt0, nodes, demand)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		p.trace = true
		plan := p.run()
		if err := checkPlan(p, plan, nodes, demand); err != nil {
			t.Fatalf("seed %d: %v\npools %+v\nnodes %+v\ndemand %+v\nplan %+v", seed, err, cfg.Pools, nodes, demand, plan)
		}
	}
}

func checkPlan(p *planner, plan Plan, nodes []Node, demand []Demand) error {
	pools := map[string]*Pool{}
	for i := range p.cfg.Pools {
		pools[p.cfg.Pools[i].Name] = &p.cfg.Pools[i]
	}
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Pool]++
	}
	// Max, Room, backoff.
	added := map[string]int{}
	for _, up := range plan.Up {
		pl := pools[up.Pool]
		added[up.Pool] += up.Nodes
		if p.now.Before(pl.BackoffUntil) {
			return fmt.Errorf("pool %s in backoff gets %d nodes", up.Pool, up.Nodes)
		}
		if len(pl.Domains) > 0 {
			i := slices.IndexFunc(pl.Domains, func(d Domain) bool { return d.Name == up.Domain })
			if i < 0 || up.Nodes > pl.Domains[i].Room {
				return fmt.Errorf("scale-up %+v passes its domain's room", up)
			}
		}
	}
	for name, n := range added {
		if count[name]+n > pools[name].Max {
			return fmt.Errorf("pool %s: %d nodes + %d added > Max %d", name, count[name], n, pools[name].Max)
		}
	}
	unserved := map[string]bool{}
	for _, u := range plan.Unserved {
		unserved[u.Job] = true
	}
	listed := map[string]bool{}
	for _, up := range plan.Up {
		for _, j := range up.Jobs {
			if unserved[j] {
				return fmt.Errorf("unserved %s has nodes planned: %+v", j, up)
			}
			listed[j] = true
		}
	}
	// The witness: capacity per cap node, and each gang placed whole.
	capOf := func(c int) int {
		cn := p.caps[c]
		if cn.node < 0 {
			return p.pools[cn.pool].p.GPUsPerNode
		}
		n := p.nodes[cn.node]
		switch {
		case n.Reserved:
			return 0
		case n.Booting:
			return p.pools[cn.pool].p.GPUsPerNode
		}
		return n.FreeGPUs
	}
	domOf := func(c int) string {
		cn := p.caps[c]
		if cn.node >= 0 {
			return p.nodes[cn.node].Domain
		}
		if d := p.pools[cn.pool].p.Domains; cn.dom < len(d) {
			return d[cn.dom].Name
		}
		return ""
	}
	usedGPUs := map[int]int{}
	placed := map[[2]int]int{}
	gangCaps := map[int][]int{}
	for _, a := range p.witness {
		usedGPUs[a.cap] += a.k * a.gpm
		placed[[2]int{a.demand, a.group}] += a.k
		gangCaps[a.demand] = append(gangCaps[a.demand], a.cap)
		pl := p.pools[p.caps[a.cap].pool].p
		g := &demand[a.demand].Request.Groups[a.group]
		if !modelOK(g.Models(), pl.GPUModel) {
			return fmt.Errorf("%s group %d on pool %s of model %s", demand[a.demand].Job, a.group, pl.Name, pl.GPUModel)
		}
	}
	for c, u := range usedGPUs {
		if u > capOf(c) {
			return fmt.Errorf("cap node %d (%+v): %d GPUs used of %d", c, p.caps[c], u, capOf(c))
		}
	}
	for d, dm := range demand {
		if unserved[dm.Job] {
			if len(gangCaps[d]) > 0 {
				return fmt.Errorf("unserved %s has a placement", dm.Job)
			}
			continue
		}
		for _, g := range gpuGroups(&dm.Request) {
			if placed[[2]int{d, g.idx}] != g.members {
				return fmt.Errorf("%s group %d: %d of %d members placed", dm.Job, g.idx, placed[[2]int{d, g.idx}], g.members)
			}
		}
		if lvl := dm.Request.Required; lvl != "" {
			cs := gangCaps[d]
			pool, dom := p.caps[cs[0]].pool, domOf(cs[0])
			pl := p.pools[pool].p
			if !(pl.DomainLevel == lvl || pl.DomainLevel == "" && len(pl.Domains) == 0) {
				return fmt.Errorf("%s requires %s, placed in pool %s (level %q)", dm.Job, lvl, pl.Name, pl.DomainLevel)
			}
			for _, c := range cs {
				if p.caps[c].pool != pool || (len(pl.Domains) > 0 && domOf(c) != dom) {
					return fmt.Errorf("%s requires one %s, placed in %s/%s and %s/%s", dm.Job, lvl, pl.Name, dom, p.pools[p.caps[c].pool].p.Name, domOf(c))
				}
			}
		}
	}
	// Planned nodes: as many per pool and domain as the ScaleUps say, each
	// listed for the gang it was planned for.
	planned := map[[2]string]int{}
	for c := range p.caps {
		cn := p.caps[c]
		if cn.node >= 0 {
			continue
		}
		key := [2]string{p.pools[cn.pool].p.Name, domOf(c)}
		planned[key]++
		if cn.origin >= 0 && !listed[demand[cn.origin].Job] {
			return fmt.Errorf("a node planned for %s, not listed in Jobs", demand[cn.origin].Job)
		}
	}
	for _, up := range plan.Up {
		if planned[[2]string{up.Pool, up.Domain}] != up.Nodes {
			return fmt.Errorf("scale-up %+v, %d nodes planned", up, planned[[2]string{up.Pool, up.Domain}])
		}
	}
	// Scale-down: never a node the plan uses.
	for _, name := range plan.Down {
		for c := range usedGPUs {
			if cn := p.caps[c]; cn.node >= 0 && p.nodes[cn.node].Name == name {
				return fmt.Errorf("node %s released and used", name)
			}
		}
	}
	return nil
}
