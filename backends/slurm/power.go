package slurm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
)

// Node autoscaling through SLURM's power saving (docs/backends/slurm.md,
// "Node autoscaling (power saving)"): the nodes of a PowerPool are powered
// up and down with scontrol update NodeName=... State=POWER_UP /
// POWER_DOWN_ASAP; slurmctld runs the site's ResumeProgram /
// SuspendProgram. A powered-down node is a node of the engine's cluster
// (Cluster lists it) that is Down: nothing is placed on it; once SLURM
// has it up, the poll reports it Ready (engine.NodeChanged) like a
// resumed node. Provisioning reports a pool's nodes that are up or
// booting; the powered-down ones are the pool's Room.

// PowerPool is a pool of SLURM nodes that berth powers up and down
// (backends.Provisioner). A node belongs to the pool if it is in Nodes or
// carries Feature (one of the two, or both: either matches); a node may be
// in one pool only. All its nodes must have the same GPU model and count.
type PowerPool struct {
	Name string
	// Nodes is a SLURM hostlist ("node[13-16],gpu7"); Feature a node
	// feature (slurm.conf Features=).
	Nodes   string
	Feature string
	// Min and Max bound the pool's nodes up or booting (autoscale.Pool);
	// Max 0 is every node of the pool.
	Min, Max        int
	CostPerNodeHour float64
	// DomainLevel is the topology level (a name of Config.Levels) whose
	// switches are the pool's domains: a scale-up lands in one switch of
	// it. Default: the leaf level (Levels[0], "rack") when slurm.conf has
	// a topology/tree, none otherwise.
	DomainLevel string
}

// power is a pool node's power state as sinfo shows it.
type power int

const (
	powerUp      power = iota // up (idle, allocated, drained: running slurmd)
	powerOff                  // powered down, available to power up
	powerBooting              // POWER_UP asked or POWERING_UP
	powerGoing                // POWER_DOWN asked or POWERING_DOWN
	powerFailed               // powered down and DOWN (a resume that timed out, or an admin's)
)

// powerOf classifies a node by its power-saving state flags (22.05:
// POWERED_DOWN, POWER_UP, POWERING_UP, POWER_DOWN, POWERING_DOWN).
func powerOf(r nodeRec) power {
	fl := map[string]bool{}
	for _, f := range r.StateFlags {
		fl[strings.ToUpper(f)] = true
	}
	st := strings.ToLower(r.State)
	switch {
	case fl["POWER_UP"] || fl["POWERING_UP"]:
		return powerBooting
	case fl["POWER_DOWN"] || fl["POWERING_DOWN"]:
		return powerGoing
	case fl["POWERED_DOWN"] && (strings.HasPrefix(st, "down") || strings.HasPrefix(st, "fail") || fl["DRAIN"]):
		return powerFailed
	case fl["POWERED_DOWN"]:
		return powerOff
	}
	return powerUp
}

// resumeFailed reports whether SLURM marked a node down because its
// resume did not come within ResumeTimeout.
func resumeFailed(r nodeRec) bool {
	return powerOf(r) == powerFailed && strings.Contains(r.Reason, "ResumeTimeout")
}

// powerNode is a node of a pool as one read saw it.
type powerNode struct {
	rec    nodeRec
	pool   string
	domain string
	power  power
}

// powerView reads the pools' nodes: sinfo --json, and the topology (read
// once, then cached: it changes only with slurm.conf).
func (b *Backend) powerView(ctx context.Context) ([]powerNode, error) {
	if len(b.cfg.PowerPools) == 0 {
		return nil, fmt.Errorf("%w: no PowerPools: node autoscaling is not configured", ErrInvalidConfig)
	}
	out, err := b.cli.run(ctx, "sinfo", "--json")
	if err != nil {
		return nil, err
	}
	recs, err := parseSinfo(out)
	if err != nil {
		return nil, err
	}
	under, err := b.switchesOf(ctx)
	if err != nil {
		return nil, err
	}
	return b.poolNodes(recs, under)
}

// switchesOf maps each node to its switch per level (leaf first), read
// once from scontrol show topology.
func (b *Backend) switchesOf(ctx context.Context) (map[string][]string, error) {
	b.mu.Lock()
	under := b.underSw
	b.mu.Unlock()
	if under != nil {
		return under, nil
	}
	tout, err := b.cli.run(ctx, "scontrol", "show", "topology")
	if err != nil {
		return nil, err
	}
	sws, err := parseTopology(tout)
	if err != nil {
		return nil, err
	}
	under = map[string][]string{}
	for _, s := range sws {
		for _, n := range s.Nodes {
			for len(under[n]) <= s.Level {
				under[n] = append(under[n], "")
			}
			under[n][s.Level] = s.Name
		}
	}
	b.mu.Lock()
	b.underSw = under
	b.mu.Unlock()
	return under, nil
}

// poolNodes sorts sinfo's nodes into the pools (by name), with their
// domains. A node of a pool's hostlist that sinfo does not list is an
// error: SLURM hides powered-down State=CLOUD nodes unless slurm.conf has
// PrivateData=cloud.
func (b *Backend) poolNodes(recs []nodeRec, under map[string][]string) ([]powerNode, error) {
	byName := map[string]nodeRec{}
	for _, r := range recs {
		if _, dup := byName[r.Name]; !dup {
			byName[r.Name] = r
		}
	}
	pools := b.cfg.PowerPools
	listed := make([]map[string]bool, len(pools))
	for i, p := range pools {
		listed[i] = map[string]bool{}
		if p.Nodes == "" {
			continue
		}
		names, err := expandHostlist(p.Nodes)
		if err != nil {
			return nil, fmt.Errorf("%w: pool %q: Nodes %q: %w", ErrInvalidConfig, p.Name, p.Nodes, err)
		}
		for _, n := range names {
			if _, ok := byName[n]; !ok {
				return nil, fmt.Errorf("%w: pool %q: node %s is not in sinfo (a powered-down State=CLOUD node is hidden unless slurm.conf has PrivateData=cloud)", ErrInvalidConfig, p.Name, n)
			}
			listed[i][n] = true
		}
	}
	var out []powerNode
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		r := byName[name]
		fs := features(r.Features)
		pool := -1
		for i, p := range pools {
			if !listed[i][name] && (p.Feature == "" || fs[p.Feature] == "") {
				continue
			}
			if pool >= 0 {
				return nil, fmt.Errorf("%w: node %s is in pools %q and %q", ErrInvalidConfig, name, pools[pool].Name, p.Name)
			}
			pool = i
		}
		if pool < 0 {
			continue
		}
		dom := ""
		if l := b.domainLevel(pools[pool]); l >= 0 {
			sw := under[name]
			if l >= len(sw) || sw[l] == "" {
				return nil, fmt.Errorf("%w: pool %q: node %s is under no %s switch of topology.conf", ErrInvalidConfig, pools[pool].Name, name, b.cfg.Levels[l])
			}
			dom = sw[l]
		}
		out = append(out, powerNode{rec: r, pool: pools[pool].Name, domain: dom, power: powerOf(r)})
	}
	return out, nil
}

// domainLevel is the index (leaf first) of p's domain level in
// Config.Levels, -1 for none. b.underSw must be read.
func (b *Backend) domainLevel(p PowerPool) int {
	if p.DomainLevel == "" {
		b.mu.Lock()
		topo := len(b.underSw) > 0
		b.mu.Unlock()
		if topo {
			return 0
		}
		return -1
	}
	return slices.Index(b.cfg.Levels, p.DomainLevel)
}

// checkPowerPools validates Config.PowerPools (withDefaults).
func checkPowerPools(c *Config) error {
	seen := map[string]bool{}
	for _, p := range c.PowerPools {
		switch {
		case p.Name == "" || !levelRE.MatchString(p.Name):
			return fmt.Errorf("%w: PowerPools: pool name %q", ErrInvalidConfig, p.Name)
		case seen[p.Name]:
			return fmt.Errorf("%w: PowerPools: pool %q twice", ErrInvalidConfig, p.Name)
		case p.Nodes == "" && p.Feature == "":
			return fmt.Errorf("%w: pool %q: set Nodes (a hostlist) or Feature", ErrInvalidConfig, p.Name)
		case p.Min < 0 || p.Max < 0 || (p.Max > 0 && p.Min > p.Max):
			return fmt.Errorf("%w: pool %q: Min %d, Max %d", ErrInvalidConfig, p.Name, p.Min, p.Max)
		case p.CostPerNodeHour < 0:
			return fmt.Errorf("%w: pool %q: negative CostPerNodeHour", ErrInvalidConfig, p.Name)
		case p.DomainLevel != "" && !slices.Contains(c.Levels, p.DomainLevel):
			return fmt.Errorf("%w: pool %q: DomainLevel %q is not one of Levels %v", ErrInvalidConfig, p.Name, p.DomainLevel, c.Levels)
		}
		if p.Nodes != "" {
			names, err := expandHostlist(p.Nodes)
			if err != nil || len(names) == 0 {
				return fmt.Errorf("%w: pool %q: Nodes %q is not a hostlist", ErrInvalidConfig, p.Name, p.Nodes)
			}
			for _, n := range names {
				if err := checkNode(n); err != nil {
					return fmt.Errorf("%w: pool %q: %w", ErrInvalidConfig, p.Name, err)
				}
			}
		}
		seen[p.Name] = true
	}
	return nil
}

func (b *Backend) powerPool(name string) (PowerPool, bool) {
	for _, p := range b.cfg.PowerPools {
		if p.Name == name {
			return p, true
		}
	}
	return PowerPool{}, false
}

// Pools returns the autoscaler's pools (autoscale.Config.Pools) as SLURM
// has them now: each PowerPool's shape (its nodes' GPU GRES: one model and
// count for the whole pool), Min, Max (default: its node count) and cost,
// and its domains with their Room: the nodes powered down there, ready to
// power up (not those down after a failed resume). Call it before each
// plan: Room changes as nodes power up and down.
func (b *Backend) Pools(ctx context.Context) ([]autoscale.Pool, error) {
	ns, err := b.powerView(ctx)
	if err != nil {
		return nil, err
	}
	var out []autoscale.Pool
	for _, p := range b.cfg.PowerPools {
		ap := autoscale.Pool{Name: p.Name, Min: p.Min, Max: p.Max, CostPerNodeHour: p.CostPerNodeHour}
		if l := b.domainLevel(p); l >= 0 {
			ap.DomainLevel = b.cfg.Levels[l]
		}
		room := map[string]int{}
		count := 0
		for _, n := range ns {
			if n.pool != p.Name {
				continue
			}
			count++
			g, ok, err := parseGPUGres(n.rec.Gres)
			if err != nil || !ok || g.Count == 0 {
				return nil, fmt.Errorf("%w: pool %q: node %s has no GPU GRES (%q)", ErrInvalidConfig, p.Name, n.rec.Name, n.rec.Gres)
			}
			if ap.GPUsPerNode == 0 {
				ap.GPUModel, ap.GPUsPerNode = g.Type, g.Count
			} else if ap.GPUModel != g.Type || ap.GPUsPerNode != g.Count {
				return nil, fmt.Errorf("%w: pool %q: node %s has gpu:%s:%d, the pool gpu:%s:%d (one shape per pool)", ErrInvalidConfig, p.Name, n.rec.Name, g.Type, g.Count, ap.GPUModel, ap.GPUsPerNode)
			}
			if _, ok := room[n.domain]; !ok {
				room[n.domain] = 0
			}
			if n.power == powerOff {
				room[n.domain]++
			}
		}
		if count == 0 {
			return nil, fmt.Errorf("%w: pool %q has no node in sinfo", ErrInvalidConfig, p.Name)
		}
		if ap.Max == 0 {
			ap.Max = count
		}
		if ap.DomainLevel != "" {
			for _, d := range slices.Sorted(maps.Keys(room)) {
				ap.Domains = append(ap.Domains, autoscale.Domain{Name: d, Room: room[d]})
			}
		}
		out = append(out, ap)
	}
	return out, nil
}

// ScaleUp powers up up.Nodes powered-down nodes of up.Pool in up.Domain
// (anywhere in the pool for ""), in one scontrol update NodeName=<nodes>
// State=POWER_UP: all of them or none. Fewer powered-down nodes there
// than asked is refused (backends.ErrRefused) and nothing is powered up.
// A nil error means SLURM runs the ResumeProgram, not that the nodes are
// up: they come into the engine as NodeChanged (Ready) once slurmd
// registers, and a resume that does not come within ResumeTimeout is a
// failure Provisioning reports.
func (b *Backend) ScaleUp(ctx context.Context, up autoscale.ScaleUp) error {
	if _, ok := b.powerPool(up.Pool); !ok {
		return fmt.Errorf("%w: no power pool %q", backends.ErrRefused, up.Pool)
	}
	if up.Nodes <= 0 {
		return fmt.Errorf("%w: scale-up of %d nodes", backends.ErrRefused, up.Nodes)
	}
	ns, err := b.powerView(ctx)
	if err != nil {
		return err
	}
	var pick []string
	for _, n := range ns {
		if n.pool == up.Pool && n.power == powerOff && (up.Domain == "" || n.domain == up.Domain) {
			pick = append(pick, n.rec.Name)
		}
	}
	if len(pick) < up.Nodes {
		where := "pool " + up.Pool
		if up.Domain != "" {
			where += " in " + up.Domain
		}
		return fmt.Errorf("%w: %d nodes asked, %d powered down in %s", backends.ErrRefused, up.Nodes, len(pick), where)
	}
	pick = pick[:up.Nodes]
	for _, n := range pick {
		if err := checkNode(n); err != nil {
			return fmt.Errorf("%w: %w", backends.ErrRefused, err)
		}
	}
	if _, err := b.cli.run(ctx, "scontrol", "update", "NodeName="+strings.Join(pick, ","), "State=POWER_UP"); err != nil {
		return refusal(err)
	}
	b.mu.Lock()
	b.stats.PowerUps += len(pick)
	b.mu.Unlock()
	return nil
}

// ScaleDown powers down an idle node of a power pool: scontrol update
// NodeName=node State=POWER_DOWN_ASAP (SLURM drains it and powers it down
// once no job is left on it: a job that started since berth saw the node
// idle ends first, nothing is killed). A node that is not up, not in a
// pool, or runs jobs is refused (backends.ErrRefused). The engine sees it
// go Draining, then Down.
func (b *Backend) ScaleDown(ctx context.Context, node string) error {
	if err := checkNode(node); err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	ns, err := b.powerView(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ns, func(n powerNode) bool { return n.rec.Name == node })
	switch {
	case i < 0:
		return fmt.Errorf("%w: node %s is in no power pool", backends.ErrRefused, node)
	case ns[i].power != powerUp:
		return fmt.Errorf("%w: node %s is not up (%s %v)", backends.ErrRefused, node, ns[i].rec.State, ns[i].rec.StateFlags)
	case nodeBusy(ns[i].rec):
		return fmt.Errorf("%w: node %s runs jobs (%s)", backends.ErrRefused, node, ns[i].rec.State)
	}
	if _, err := b.cli.run(ctx, "scontrol", "update", "NodeName="+node, "State=POWER_DOWN_ASAP"); err != nil {
		return refusal(err)
	}
	b.mu.Lock()
	b.stats.PowerDowns++
	b.mu.Unlock()
	return nil
}

// Provisioning reports the power pools' nodes that are up (Booting false)
// or powering up (Booting true), with their pool and domain; powered-down
// nodes are not nodes of the pool yet (they are its Room, Pools), nor are
// nodes powering down. Failed lists the nodes whose resume SLURM gave up
// on since the last call (DOWN, "ResumeTimeout reached"), each reported
// once (again only if it fails again). Such a node stays DOWN until an
// admin resumes it (scontrol update State=RESUME: powered down again).
func (b *Backend) Provisioning(ctx context.Context) (backends.ProvisionState, error) {
	ns, err := b.powerView(ctx)
	if err != nil {
		return backends.ProvisionState{}, err
	}
	var st backends.ProvisionState
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failSeen == nil {
		b.failSeen = map[string]int64{}
	}
	for _, n := range ns {
		switch n.power {
		case powerUp, powerBooting:
			st.Nodes = append(st.Nodes, autoscale.Node{Name: n.rec.Name, Pool: n.pool, Domain: n.domain, Booting: n.power == powerBooting})
		}
		if !resumeFailed(n.rec) {
			delete(b.failSeen, n.rec.Name)
			continue
		}
		if at, seen := b.failSeen[n.rec.Name]; seen && at == n.rec.ReasonChangedAt {
			continue
		}
		b.failSeen[n.rec.Name] = n.rec.ReasonChangedAt
		at := time.Now()
		if n.rec.ReasonChangedAt > 0 {
			at = time.Unix(n.rec.ReasonChangedAt, 0)
		}
		st.Failed = append(st.Failed, backends.ProvisionFailure{
			At: at, Pool: n.pool, Domain: n.domain, Nodes: 1,
			Reason: fmt.Sprintf("node %s: %s", n.rec.Name, n.rec.Reason),
		})
	}
	return st, nil
}

var _ backends.Provisioner = (*Backend)(nil)
