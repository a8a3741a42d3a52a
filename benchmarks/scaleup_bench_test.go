package benchmarks

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// BenchmarkScaleUp times one cycle that places the new replicas of a
// service (issue 14): the ServiceScaled event from 0 to 100 replicas, the
// Ready that places them, and its Advance, on B2K after the standard
// random60 fill (represented as running jobs, one per used node, as in
// BenchmarkCycle). Between timed cycles the service is scaled back to 0
// (not timed), so every timed cycle places 100 replicas on the same free
// GPUs.
//
// replicas=100: 1-GPU replicas. replicas=100/mig=1g: "1g" MIG replicas on
// MIG nodes: the first rack of every block (256 nodes, 2,048 GPUs) is
// H100-80GB in MIG mode with seven 1g instances a GPU; the fill's jobs on
// those nodes are left out (their GPUs are idle MIG capacity), the rest of
// the cluster runs random60 as above.
func BenchmarkScaleUp(b *testing.B) {
	b.Run("cluster=B2K/replicas=100", func(b *testing.B) { scaleUpBench(b, 100, false) })
	b.Run("cluster=B2K/replicas=100/mig=1g", func(b *testing.B) { scaleUpBench(b, 100, true) })
}

func scaleUpBench(b *testing.B, replicas int, migNodes bool) {
	e := scaleUpSetup(b, B2K(), migNodes)
	g := gang.Group{Members: 1, GPUsPerMember: 1}
	if migNodes {
		g = gang.Group{Members: 1, MIGProfile: "1g"}
	}
	now := e.Now()
	svc := &engine.Service{Name: "svc", Queue: "serving", QoS: engine.QoSGuaranteed,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{g}}}, Max: replicas}
	if err := e.Step(engine.ServiceSet(now, svc)); err != nil {
		b.Fatal(err)
	}
	cycle := func(ev engine.Event) engine.Ready {
		if err := e.Step(ev); err != nil {
			b.Fatal(err)
		}
		rd := e.Ready()
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			b.Fatal(err)
		}
		return rd
	}
	cycle(engine.Tick(now))
	binds, pending := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		rd := cycle(engine.ServiceScaled(now, "svc", replicas))
		binds += len(rd.Binds)
		pending += len(rd.Pending)
		b.StopTimer()
		now = now.Add(time.Second)
		cycle(engine.ServiceScaled(now, "svc", 0))
		b.StartTimer()
	}
	n := float64(b.N)
	if binds != replicas*b.N {
		b.Fatalf("%d binds in %d cycles, want %d a cycle", binds, b.N, replicas)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "µs/cycle")
	b.ReportMetric(float64(binds)/n, "binds/cycle")
	b.ReportMetric(float64(pending)/n, "pending/cycle")
}

// scaleUpSetup builds B2K (migNodes: with the MIG racks above) with the
// random60 fill adopted as running jobs and one queue "serving" for the
// service and "fill" for the fill.
func scaleUpSetup(b *testing.B, sh ClusterShape, migNodes bool) *engine.Engine {
	b.Helper()
	spec := topo.Uniform(sh.Levels, sh.Fanout, sh.NodesPerLeaf, sh.GPUsPerNode, "H100")
	c, err := topo.New(spec)
	if err != nil {
		b.Fatal(err)
	}
	s := c.NewSnapshot()
	st, err := ApplyFill(s, sh, Random60)
	if err != nil {
		b.Fatal(err)
	}
	if st.Checksum != 0x7faf8a5b6c63b8e1 {
		b.Fatalf("random60 checksum %x: not the standard work", st.Checksum)
	}
	perBlock := sh.Fanout[1] * sh.NodesPerLeaf
	isMIG := func(i int) bool { return migNodes && i%perBlock < sh.NodesPerLeaf }
	for i := range spec.Nodes {
		if isMIG(i) {
			n := &spec.Nodes[i]
			n.GPUModel, n.MIG, n.MIGLayout = "H100-80GB", true, "1g 1g 1g 1g 1g 1g 1g"
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{
		Cluster: spec, Start: t0, Policy: queue.DRS(), Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
		Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "serving"}, {Name: "fill"}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	for id := range topo.NodeID(c.NumNodes()) {
		used := c.Node(id).GPUs - s.NodeAvailable(id)
		if used == 0 || isMIG(int(id)) {
			continue
		}
		gpus := make([]int, used)
		for i := range gpus {
			gpus[i] = i
		}
		j := &queue.Job{
			ID: fmt.Sprintf("run-%04d", id), Queue: "fill", Submit: t0,
			Request:         gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: used}}},
			RuntimeEstimate: 12 * time.Hour, RuntimeLimit: 24 * time.Hour,
		}
		if err := e.Step(engine.Adopted(t0, j, []engine.Member{{Node: c.NodeName(id), GPUs: gpus}})); err != nil {
			b.Fatal(err)
		}
	}
	return e
}
