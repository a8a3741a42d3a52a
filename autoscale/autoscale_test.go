package autoscale_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/gang"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// whole is a one-group gang of n members of gpus GPUs.
func whole(job string, n, gpus int, models ...string) autoscale.Demand {
	return autoscale.Demand{Job: job, Request: gang.Request{Groups: []gang.Group{{Members: n, GPUsPerMember: gpus, GPUModels: models}}}}
}

func inRack(d autoscale.Demand, level string) autoscale.Demand {
	d.Request.Required = level
	return d
}

func decide(t *testing.T, cfg autoscale.Config, nodes []autoscale.Node, demand ...autoscale.Demand) autoscale.Plan {
	t.Helper()
	p, err := autoscale.Decide(cfg, t0, nodes, demand)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return p
}

func wantUp(t *testing.T, p autoscale.Plan, want ...autoscale.ScaleUp) {
	t.Helper()
	if len(want) == 0 && len(p.Up) == 0 {
		return
	}
	if !reflect.DeepEqual(p.Up, want) {
		t.Fatalf("Up = %+v, want %+v (unserved %+v)", p.Up, want, p.Unserved)
	}
}

func wantUnserved(t *testing.T, p autoscale.Plan, job, reason string) {
	t.Helper()
	for _, u := range p.Unserved {
		if u.Job == job {
			if !strings.Contains(u.Reason, reason) {
				t.Fatalf("unserved %s: reason %q, want it to say %q", job, u.Reason, reason)
			}
			return
		}
	}
	t.Fatalf("%s not unserved (plan %+v), want it unserved for %q", job, p, reason)
}

func a100(max int) autoscale.Pool {
	return autoscale.Pool{Name: "a100", GPUModel: "A100", GPUsPerNode: 8, Max: max, CostPerNodeHour: 16}
}

// A 32-node gang in a pool that can grow by 20: gang-aware buys nothing
// and says why; pod-by-pod buys 20 nodes the gang can never use.
func TestGangTooBigForPool(t *testing.T) {
	cfg := autoscale.Config{Pools: []autoscale.Pool{a100(20)}}
	big := whole("big", 32, 8)
	p := decide(t, cfg, nil, big)
	wantUp(t, p)
	wantUnserved(t, p, "big", "needs 32 more nodes, pool a100 allows 20 more (max 20)")

	cfg.Policy = autoscale.PodByPod
	p = decide(t, cfg, nil, big)
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 20, Jobs: []string{"big"}})
	wantUnserved(t, p, "big", "pod-by-pod: 12 members got no room")
}

func racks(rooms ...int) autoscale.Pool {
	p := a100(100)
	p.DomainLevel = "rack"
	for i, r := range rooms {
		p.Domains = append(p.Domains, autoscale.Domain{Name: fmt.Sprintf("r%d", i+1), Room: r})
	}
	return p
}

// A gang that requires a rack gets all its nodes in one rack with room,
// counting the free nodes already there; pod-by-pod spreads it.
func TestRackRequiredLandsInOneRack(t *testing.T) {
	cfg := autoscale.Config{Pools: []autoscale.Pool{racks(2, 3, 4)}}
	nodes := []autoscale.Node{
		{Name: "n1", Pool: "a100", Domain: "r1", FreeGPUs: 8},
		{Name: "n2", Pool: "a100", Domain: "r2", FreeGPUs: 8},
		{Name: "n3", Pool: "a100", Domain: "r2", FreeGPUs: 0},
	}
	g := inRack(whole("g", 4, 8), "rack")
	p := decide(t, cfg, nodes, g)
	// r1 holds 1 free + 2 new = 3 < 4; r2 holds 1 free + 3 new = 4; r3 4 new.
	// The fewest new nodes at the same cost: r2.
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Domain: "r2", Nodes: 3, Jobs: []string{"g"}})

	// Too big for any rack: unserved, with the largest rack's limit.
	p = decide(t, cfg, nodes, inRack(whole("huge", 6, 8), "rack"))
	wantUp(t, p)
	wantUnserved(t, p, "huge", "no rack holds the whole gang (group 0 (6 members of 8 GPUs, 6 without room): needs 6 more nodes in rack r3 of pool a100, it has room for 4)")

	// A level the pool does not describe.
	p = decide(t, cfg, nodes, inRack(whole("blk", 2, 8), "block"))
	wantUnserved(t, p, "blk", "pool a100: its domains are at level rack, the gang requires one block")

	// A pool that describes no topology is one domain of every level.
	flat := autoscale.Config{Pools: []autoscale.Pool{a100(10)}}
	p = decide(t, flat, nil, inRack(whole("blk", 2, 8), "block"))
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 2, Jobs: []string{"blk"}})

	// Pod by pod ignores the rack: the free nodes first (n1, n2), then
	// new nodes in the first rack with room.
	cfg.Policy = autoscale.PodByPod
	p = decide(t, cfg, nodes, g)
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Domain: "r1", Nodes: 2, Jobs: []string{"g"}})
}

// Capacity on the way (booting nodes) and free now is used once: the
// first gang takes it, the second gets new nodes.
func TestBootingCapacityNotPlannedTwice(t *testing.T) {
	cfg := autoscale.Config{Pools: []autoscale.Pool{a100(10)}}
	nodes := []autoscale.Node{
		{Name: "b1", Pool: "a100", Booting: true},
		{Name: "b2", Pool: "a100", Booting: true},
		{Name: "up", Pool: "a100", FreeGPUs: 4},
	}
	p := decide(t, cfg, nodes, whole("first", 2, 8), whole("second", 3, 8), whole("third", 1, 4))
	// first: b1, b2. second: 3 new. third: the 4 free GPUs of "up".
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 3, Jobs: []string{"second"}})
	if len(p.Unserved) != 0 {
		t.Fatalf("unserved %+v", p.Unserved)
	}
	// Room left on a node planned for one gang serves the next.
	p = decide(t, cfg, nil, whole("x", 3, 4), whole("y", 1, 4))
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 2, Jobs: []string{"x"}})
	// A reserved node's free GPUs are held for another job.
	p = decide(t, cfg, []autoscale.Node{{Name: "r", Pool: "a100", FreeGPUs: 8, Reserved: true}}, whole("z", 1, 8))
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 1, Jobs: []string{"z"}})
}

func TestBackoff(t *testing.T) {
	cheap := a100(10)
	cheap.BackoffUntil = t0.Add(time.Minute)
	dear := autoscale.Pool{Name: "dear", GPUModel: "A100", GPUsPerNode: 8, Max: 10, CostPerNodeHour: 40}
	cfg := autoscale.Config{Pools: []autoscale.Pool{cheap, dear}}
	p := decide(t, cfg, nil, whole("g", 2, 8))
	wantUp(t, p, autoscale.ScaleUp{Pool: "dear", Nodes: 2, Jobs: []string{"g"}})

	cfg.Pools = cfg.Pools[:1]
	p = decide(t, cfg, nil, whole("g", 2, 8))
	wantUp(t, p)
	wantUnserved(t, p, "g", "pool a100 backs off until 2025-01-01T00:01:00Z")
	// Its free nodes still serve (no new node needed), and the backoff
	// ends at BackoffUntil.
	p = decide(t, cfg, []autoscale.Node{{Name: "n", Pool: "a100", FreeGPUs: 8}}, whole("g", 1, 8))
	wantUp(t, p)
	if len(p.Unserved) != 0 {
		t.Fatalf("unserved %+v", p.Unserved)
	}
	p, err := autoscale.Decide(cfg, t0.Add(time.Minute), nil, []autoscale.Demand{whole("g", 2, 8)})
	if err != nil {
		t.Fatal(err)
	}
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 2, Jobs: []string{"g"}})
}

func TestMinMax(t *testing.T) {
	pl := a100(10)
	pl.Min = 2
	cfg := autoscale.Config{Pools: []autoscale.Pool{pl}}
	p := decide(t, cfg, []autoscale.Node{{Name: "n", Pool: "a100", FreeGPUs: 0}})
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 1})
	// The Min node serves the demand: nothing more.
	p = decide(t, cfg, []autoscale.Node{{Name: "n", Pool: "a100", FreeGPUs: 0}}, whole("g", 1, 8))
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 1})
	// Max counts nodes up and booting, and those the plan adds.
	var nodes []autoscale.Node
	for i := range 8 {
		nodes = append(nodes, autoscale.Node{Name: fmt.Sprint("n", i), Pool: "a100", Booting: i%2 == 0})
	}
	p = decide(t, cfg, nodes, whole("a", 4+1, 8), whole("b", 1, 8), whole("c", 2, 8))
	// a takes the 4 booting nodes and 1 new; b 1 new; c would pass Max.
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 2, Jobs: []string{"a", "b"}})
	wantUnserved(t, p, "c", "needs 2 more nodes, pool a100 allows 0 more (max 10)")
}

// A group's model set chooses the cheapest pool per GPU among the models
// it accepts.
func TestModelSetsChooseCheaperPool(t *testing.T) {
	cfg := autoscale.Config{Pools: []autoscale.Pool{
		{Name: "h100", GPUModel: "H100", GPUsPerNode: 8, Max: 10, CostPerNodeHour: 32},
		{Name: "a100", GPUModel: "A100", GPUsPerNode: 8, Max: 10, CostPerNodeHour: 16},
		{Name: "a100x4", GPUModel: "A100", GPUsPerNode: 4, Max: 10, CostPerNodeHour: 10}, // 2.5 per GPU
	}}
	p := decide(t, cfg, nil, whole("set", 2, 8, "H100", "A100"), whole("h", 1, 8, "H100"), whole("any", 1, 4))
	wantUp(t, p,
		autoscale.ScaleUp{Pool: "a100", Nodes: 3, Jobs: []string{"set", "any"}},
		autoscale.ScaleUp{Pool: "h100", Nodes: 1, Jobs: []string{"h"}})
	p = decide(t, cfg, nil, whole("b", 1, 8, "B200"))
	wantUnserved(t, p, "b", "no pool has GPU model B200")
	p = decide(t, cfg, nil, whole("wide", 1, 16))
	wantUnserved(t, p, "wide", "pool a100 has 8 GPUs per node, a member needs 16")
}

// A pool's Labels against a group's node selector: two pools of one
// shape, each declaring its pool label (as a federation's members'
// pools do); a job pinned to one pool is planned there, on its free
// capacity only, even when the other pool is cheaper or has free GPUs. A
// key a pool does not declare is not checked; a selector no pool agrees
// with is unserved, with why.
func TestLabelsAgainstSelectors(t *testing.T) {
	pool := func(name, label string, cost float64) autoscale.Pool {
		return autoscale.Pool{Name: name, GPUModel: "H100", GPUsPerNode: 8, Max: 4, CostPerNodeHour: cost,
			Labels: map[string]string{"berth.io/pool": label}}
	}
	cfg := autoscale.Config{Pools: []autoscale.Pool{pool("kube/h100", "kube", 20), pool("slurm/h100", "slurm", 10)}}
	pinned := func(job, label string) autoscale.Demand {
		d := whole(job, 1, 8)
		d.Request.Groups[0].Selector = map[string]string{"berth.io/pool": label, "rack": "r1"}
		return d
	}
	// slurm's node is free, but kube's job cannot run there: one kube node.
	free := []autoscale.Node{{Name: "slurm/n0", Pool: "slurm/h100", FreeGPUs: 8}}
	p := decide(t, cfg, free, pinned("infer", "kube"))
	wantUp(t, p, autoscale.ScaleUp{Pool: "kube/h100", Nodes: 1, Jobs: []string{"infer"}})
	// slurm's job takes the free node: nothing to buy.
	p = decide(t, cfg, free, pinned("train", "slurm"))
	wantUp(t, p)
	// Pod by pod too.
	cfg.Policy = autoscale.PodByPod
	p = decide(t, cfg, free, pinned("infer", "kube"))
	wantUp(t, p, autoscale.ScaleUp{Pool: "kube/h100", Nodes: 1, Jobs: []string{"infer"}})
	cfg.Policy = ""
	// No pool agrees: unserved, with why.
	p = decide(t, cfg, free, pinned("x", "other"))
	wantUp(t, p)
	wantUnserved(t, p, "x", "no pool has GPU model (any) and labels that agree with its node selector")
	// A pool without Labels serves any selector (the cheapest wins).
	cfg.Pools = append(cfg.Pools, autoscale.Pool{Name: "any", GPUModel: "H100", GPUsPerNode: 8, Max: 4, CostPerNodeHour: 1})
	p = decide(t, cfg, nil, pinned("x", "other"))
	wantUp(t, p, autoscale.ScaleUp{Pool: "any", Nodes: 1, Jobs: []string{"x"}})
}

func TestFractionalAndMultiGroup(t *testing.T) {
	cfg := autoscale.Config{Pools: []autoscale.Pool{a100(10)}}
	frac := autoscale.Demand{Job: "frac", Request: gang.Request{Groups: []gang.Group{{Members: 9, GPUMilli: 250}}}}
	p := decide(t, cfg, nil, frac)
	// One GPU's room per member: 9 GPUs, 2 nodes.
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 2, Jobs: []string{"frac"}})
	multi := autoscale.Demand{Job: "multi", Request: gang.Request{Groups: []gang.Group{
		{Name: "launcher", Members: 1, CPUMilli: 1000},
		{Name: "ps", Members: 1, GPUsPerMember: 4},
		{Name: "worker", Members: 3, GPUsPerMember: 4},
	}}}
	p = decide(t, cfg, nil, multi)
	wantUp(t, p, autoscale.ScaleUp{Pool: "a100", Nodes: 2, Jobs: []string{"multi"}})
	cpu := autoscale.Demand{Job: "cpu", Request: gang.Request{Groups: []gang.Group{{Members: 1, CPUMilli: 1000}}}}
	p = decide(t, cfg, nil, cpu)
	wantUnserved(t, p, "cpu", "asks for no GPU")
	// A multi-group gang whose second group cannot be served gets nothing.
	cfg.Pools = append(cfg.Pools, autoscale.Pool{Name: "h100", GPUModel: "H100", GPUsPerNode: 8, Max: 1, CostPerNodeHour: 30})
	mixed := autoscale.Demand{Job: "mixed", Request: gang.Request{Groups: []gang.Group{
		{Members: 2, GPUsPerMember: 8, GPUModel: "A100"},
		{Members: 2, GPUsPerMember: 8, GPUModel: "H100"},
	}}}
	p = decide(t, cfg, nil, mixed)
	wantUp(t, p)
	wantUnserved(t, p, "mixed", "group 1")
}

func TestScaleDown(t *testing.T) {
	pl := a100(10)
	pl.Min = 1
	other := autoscale.Pool{Name: "other", GPUModel: "H100", GPUsPerNode: 8, Max: 10, CostPerNodeHour: 16}
	cfg := autoscale.Config{Pools: []autoscale.Pool{pl, other}, ScaleDownDelay: 5 * time.Minute}
	long := t0.Add(-time.Hour)
	nodes := []autoscale.Node{
		{Name: "idle1", Pool: "a100", FreeGPUs: 8, IdleSince: long},
		{Name: "idle2", Pool: "a100", FreeGPUs: 8, IdleSince: long},
		{Name: "idle3", Pool: "a100", FreeGPUs: 8, IdleSince: long},
		{Name: "recent", Pool: "a100", FreeGPUs: 8, IdleSince: t0.Add(-4 * time.Minute)},
		{Name: "reserved", Pool: "a100", FreeGPUs: 8, IdleSince: long, Reserved: true},
		{Name: "boot", Pool: "a100", FreeGPUs: 8, Booting: true},
		{Name: "busy", Pool: "a100", FreeGPUs: 4},
		{Name: "h1", Pool: "other", FreeGPUs: 8, IdleSince: long},
	}
	p := decide(t, cfg, nodes)
	if want := []string{"h1", "idle1", "idle2", "idle3"}; !reflect.DeepEqual(p.Down, want) {
		t.Fatalf("Down = %v, want %v", p.Down, want)
	}
	// A node counted as capacity for a demand stays.
	p = decide(t, cfg, nodes, whole("g", 1, 8, "A100"))
	if want := []string{"h1", "idle2", "idle3"}; !reflect.DeepEqual(p.Down, want) {
		t.Fatalf("Down = %v, want %v", p.Down, want)
	}
	// Min: nodes go only while the pool keeps Min (booting ones count).
	cfg.Pools[0].Min = 6 // of its 7 nodes
	p = decide(t, cfg, nodes)
	if want := []string{"h1", "idle1"}; !reflect.DeepEqual(p.Down, want) {
		t.Fatalf("Down = %v, want %v", p.Down, want)
	}
	// The default delay is ten minutes.
	cfg.ScaleDownDelay = 0
	nodes[0].IdleSince = t0.Add(-9 * time.Minute)
	p = decide(t, cfg, nodes[:1])
	if len(p.Down) != 0 {
		t.Fatalf("Down = %v after 9 minutes idle", p.Down)
	}
}

func TestInvalidInput(t *testing.T) {
	ok := a100(10)
	for _, c := range []struct {
		name   string
		cfg    autoscale.Config
		nodes  []autoscale.Node
		demand []autoscale.Demand
		want   string
	}{
		{"policy", autoscale.Config{Policy: "greedy"}, nil, nil, "unknown Policy"},
		{"delay", autoscale.Config{ScaleDownDelay: -1}, nil, nil, "ScaleDownDelay"},
		{"noname", autoscale.Config{Pools: []autoscale.Pool{{GPUsPerNode: 8, Max: 1}}}, nil, nil, "no Name"},
		{"dup", autoscale.Config{Pools: []autoscale.Pool{ok, ok}}, nil, nil, "listed twice"},
		{"gpus", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", Max: 1}}}, nil, nil, "GPUsPerNode"},
		{"min", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Min: -1}}}, nil, nil, "Min must not be negative"},
		{"max", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Min: 3, Max: 2}}}, nil, nil, "below Min"},
		{"huge", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1 << 40}}}, nil, nil, "must not exceed"},
		{"nan", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1, CostPerNodeHour: math.NaN()}}}, nil, nil, "CostPerNodeHour"},
		{"inf", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1, CostPerNodeHour: math.Inf(1)}}}, nil, nil, "CostPerNodeHour"},
		{"neg cost", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1, CostPerNodeHour: -1}}}, nil, nil, "CostPerNodeHour"},
		{"level", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1, DomainLevel: "rack"}}}, nil, nil, "without Domains"},
		{"room", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1, Domains: []autoscale.Domain{{Name: "r", Room: -1}}}}}, nil, nil, "Room"},
		{"domdup", autoscale.Config{Pools: []autoscale.Pool{{Name: "p", GPUsPerNode: 8, Max: 1, Domains: []autoscale.Domain{{Name: "r"}, {Name: "r"}}}}}, nil, nil, "listed twice"},
		{"node pool", autoscale.Config{Pools: []autoscale.Pool{ok}}, []autoscale.Node{{Name: "n", Pool: "x"}}, nil, "unknown pool"},
		{"node dup", autoscale.Config{Pools: []autoscale.Pool{ok}}, []autoscale.Node{{Name: "n", Pool: "a100"}, {Name: "n", Pool: "a100"}}, nil, "listed twice"},
		{"node free", autoscale.Config{Pools: []autoscale.Pool{ok}}, []autoscale.Node{{Name: "n", Pool: "a100", FreeGPUs: -1}}, nil, "FreeGPUs"},
		{"node name", autoscale.Config{Pools: []autoscale.Pool{ok}}, []autoscale.Node{{Pool: "a100"}}, nil, "no Name"},
		{"job", autoscale.Config{}, nil, []autoscale.Demand{whole("", 1, 1)}, "no Job"},
		{"job dup", autoscale.Config{}, nil, []autoscale.Demand{whole("j", 1, 1), whole("j", 1, 1)}, "listed twice"},
		{"request", autoscale.Config{}, nil, []autoscale.Demand{whole("j", 0, 1)}, "Members"},
	} {
		_, err := autoscale.Decide(c.cfg, t0, c.nodes, c.demand)
		if !errors.Is(err, autoscale.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
}

// Decide is deterministic: node and pool order in the input do not
// matter.
func TestDeterministic(t *testing.T) {
	cfg := autoscale.Config{Pools: []autoscale.Pool{racks(3, 3), {Name: "b", GPUModel: "A100", GPUsPerNode: 8, Max: 5, CostPerNodeHour: 16}}}
	nodes := []autoscale.Node{{Name: "z", Pool: "a100", Domain: "r2", FreeGPUs: 8}, {Name: "a", Pool: "b", FreeGPUs: 8}}
	dem := []autoscale.Demand{whole("x", 3, 8), inRack(whole("y", 3, 8), "rack")}
	p1 := decide(t, cfg, nodes, dem...)
	cfg.Pools[0], cfg.Pools[1] = cfg.Pools[1], cfg.Pools[0]
	nodes[0], nodes[1] = nodes[1], nodes[0]
	p2 := decide(t, cfg, nodes, dem...)
	if !reflect.DeepEqual(p1, p2) {
		t.Fatalf("plans differ:\n%+v\n%+v", p1, p2)
	}
}

// BenchmarkDecide plans for 1,000 pending gangs over 10,000 nodes in four
// pools of 25 racks each (a fifth of the gangs require a rack).
func BenchmarkDecide(b *testing.B) {
	for _, pol := range []autoscale.Policy{autoscale.GangAware, autoscale.PodByPod} {
		b.Run(string(pol), func(b *testing.B) {
			cfg := autoscale.Config{Policy: pol}
			models := []string{"A100", "H100"}
			for i := range 4 {
				pl := autoscale.Pool{Name: fmt.Sprint("p", i), GPUModel: models[i%2], GPUsPerNode: 8, Max: 4000,
					CostPerNodeHour: float64(10 + i), DomainLevel: "rack"}
				for r := range 25 {
					pl.Domains = append(pl.Domains, autoscale.Domain{Name: fmt.Sprint("r", r), Room: 40})
				}
				cfg.Pools = append(cfg.Pools, pl)
			}
			var nodes []autoscale.Node
			for i := range 10000 {
				pl := cfg.Pools[i%4]
				n := autoscale.Node{Name: fmt.Sprintf("n%05d", i), Pool: pl.Name, Domain: pl.Domains[(i/4)%25].Name}
				switch i % 10 {
				case 0:
					n.FreeGPUs = 8
				case 1:
					n.FreeGPUs = 3
				case 2:
					n.Booting = true
				}
				nodes = append(nodes, n)
			}
			var demand []autoscale.Demand
			for i := range 1000 {
				d := whole(fmt.Sprint("j", i), 1+i%32, []int{1, 2, 4, 8}[i%4], models[i%2])
				if i%5 == 0 {
					d.Request.Required = "rack"
				}
				demand = append(demand, d)
			}
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				if _, err := autoscale.Decide(cfg, t0, nodes, demand); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/plan")
		})
	}
}
