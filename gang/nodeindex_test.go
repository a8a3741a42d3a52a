package gang

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// indexCluster is a random cluster for the node index's differential
// test: plain, time-sliced, MPS and MIG nodes, host resources tracked or
// not, two models, some nodes not ready, flat or in racks of eight.
func indexCluster(rng *rand.Rand) *topo.Cluster {
	spec := topo.Spec{ShareFreeGPUs: rng.Intn(2) == 0}
	racks := rng.Intn(2) == 0
	if racks {
		spec.Levels = []string{"rack"}
	}
	n := 1 + rng.Intn(150)
	for i := range n {
		ns := topo.NodeSpec{Name: fmt.Sprintf("n%03d", i), GPUs: 1 + rng.Intn(8), GPUModel: []string{"A10", "V100"}[rng.Intn(2)]}
		if racks {
			ns.Domains = []string{fmt.Sprintf("r%d", i/8)}
		}
		switch rng.Intn(10) {
		case 0:
			ns.Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: []int{2, 4, 1000}[rng.Intn(3)]}
		case 1:
			ns.Sharing = mig.Sharing{Mode: mig.MPS, Replicas: 4}
		case 2:
			ns.GPUModel, ns.MIG, ns.GPUs = "H100-80GB", true, 1+rng.Intn(4)
		}
		if rng.Intn(4) > 0 {
			ns.CPUMilli = int64(8000 * (1 + rng.Intn(8)))
		}
		if rng.Intn(4) > 0 {
			ns.MemoryMiB = int64(16384 * (1 + rng.Intn(8)))
		}
		if rng.Intn(15) == 0 {
			ns.State = topo.Cordoned
		}
		spec.Nodes = append(spec.Nodes, ns)
	}
	c, err := topo.New(spec)
	if err != nil {
		panic(err)
	}
	return c
}

func indexGroup(rng *rand.Rand) Group {
	g := Group{Members: 1}
	if rng.Intn(4) == 0 {
		g.Members = 1 + rng.Intn(4)
	}
	switch rng.Intn(6) {
	case 0: // CPU only
	case 1, 2:
		g.GPUMilli = []int{50, 100, 120, 250, 333, 500, 700, 999}[rng.Intn(8)]
	case 3:
		g.MIGProfile = "1g.10gb"
	default:
		g.GPUsPerMember = 1 + rng.Intn(9)
	}
	if rng.Intn(4) > 0 {
		g.CPUMilli = int64(rng.Intn(40000))
	}
	if rng.Intn(3) > 0 {
		g.MemoryMiB = int64(rng.Intn(65536))
	}
	switch rng.Intn(5) {
	case 0:
		g.GPUModel = "A10"
	case 1:
		g.GPUModels = []string{"V100", "H100-80GB"}
	case 2:
		g.GPUModel = "T4" // none in the cluster
	}
	if g.MIGProfile != "" {
		g.GPUModel, g.GPUModels = "", nil
	}
	return g
}

// TestNodeIndexDifferential places random gangs with a scorer on random
// clusters with and without the node index (a full scan of the nodes),
// through bookings, releases, node state changes and clones, and wants
// the same results, byte for byte.
func TestNodeIndexDifferential(t *testing.T) {
	trials := 300
	if testing.Short() {
		trials = 60
	}
	target := Target{Shapes: NewTarget([]Group{
		{Members: 1, GPUMilli: 500, CPUMilli: 4000, MemoryMiB: 1024},
		{Members: 1, GPUsPerMember: 1, CPUMilli: 8000, MemoryMiB: 2048},
	}, 1).Shapes}
	placed, compared := 0, 0
	for trial := range trials {
		rng := rand.New(rand.NewSource(int64(trial)))
		c := indexCluster(rng)
		name := ScorerNames()[rng.Intn(7)]
		mk := func() Scorer {
			if name == ScorerRandom {
				return &Random{Rand: rand.New(rand.NewSource(int64(trial)))}
			}
			sc, err := NewScorer(ScorerSpec{Name: name, Target: target.Shapes})
			if err != nil {
				t.Fatal(err)
			}
			return sc
		}
		ties := make([]int32, c.NumNodes())
		for i, v := range rng.Perm(c.NumNodes()) {
			ties[i] = int32(v)
		}
		with := &Placer{Scorer: mk(), Ties: ties}
		without := &Placer{Scorer: mk(), Ties: ties, noIndex: true}
		s := c.NewSnapshot()
		var booked []*Result
		for step := range 120 {
			switch r := rng.Intn(20); {
			case r == 0 && len(booked) > 0:
				i := rng.Intn(len(booked))
				if err := booked[i].Undo(s); err != nil {
					t.Fatalf("trial %d step %d: undo: %v", trial, step, err)
				}
				booked = append(booked[:i], booked[i+1:]...)
				continue
			case r == 1:
				s = s.Clone() // stamps carry over; the old one is dropped
			case r == 2:
				_ = s.SetNodeState(topo.NodeID(rng.Intn(c.NumNodes())), []topo.NodeState{topo.Ready, topo.Cordoned}[rng.Intn(2)])
			}
			req := Request{Groups: []Group{indexGroup(rng)}}
			if c.Levels()[len(c.Levels())-1] == "rack" && rng.Intn(2) == 0 {
				req.Preferred = "rack"
			}
			a, errA := with.Place(s, &req)
			b, errB := without.Place(s, &req)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("trial %d step %d: errors %v / %v", trial, step, errA, errB)
			}
			if errA != nil {
				continue
			}
			compared++
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("trial %d step %d (%s, %+v): with the index %+v, without %+v", trial, step, name, req, a, b)
			}
			if a.Found {
				if err := a.Apply(s); err != nil {
					t.Fatalf("trial %d step %d: apply: %v", trial, step, err)
				}
				if gc, ok := with.Scorer.(*GpuClustering); ok {
					gc.Bound(a.Members[0].Node, &req.Groups[0], len(a.Members))
					without.Scorer.(*GpuClustering).Bound(a.Members[0].Node, &req.Groups[0], len(a.Members))
				}
				booked = append(booked, &a)
				placed++
			}
		}
	}
	t.Logf("%d placements compared, %d booked", compared, placed)
	if placed < trials*10 {
		t.Fatalf("only %d placements booked: the test does not exercise the index", placed)
	}
}
