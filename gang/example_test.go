package gang_test

import (
	"fmt"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

func Example() {
	c, _ := topo.New(topo.Uniform([]string{"block", "rack"}, []int{2, 4}, 4, 8, "H100"))
	s := c.NewSnapshot()
	// 6 workers of 8 GPUs, inside one block, on the fewest racks.
	req := gang.Request{
		Groups:    []gang.Group{{Name: "worker", Members: 6, GPUsPerMember: 8}},
		Required:  "block",
		Preferred: "rack",
	}
	res, err := gang.Place(s, &req)
	if err != nil {
		panic(err)
	}
	rack, _ := c.Level("rack")
	fmt.Println("found:", res.Found, "racks:", res.Spread[rack], "nodes:", res.Nodes)
	if err := res.Apply(s); err != nil {
		panic(err)
	}

	// Ask for more than any block holds: a "no" with numbers.
	req.Groups[0].Members = 40
	res, _ = gang.Place(s, &req)
	fmt.Println(res.Reason)
	// Output:
	// found: true racks: 2 nodes: 6
	// group 0: at most 16 of 40 members fit in any block
}

// A scorer chooses the node: berth's fragmentation-aware scorer, against a
// target workload of half GPUs and whole GPUs, puts a second half GPU
// beside the first instead of opening a fresh GPU.
func ExampleScorer() {
	c, _ := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "a", GPUs: 2, CPUMilli: 32000, MemoryMiB: 65536},
		{Name: "b", GPUs: 4, CPUMilli: 64000, MemoryMiB: 131072},
	}})
	s := c.NewSnapshot()
	halfGPU := gang.Group{Members: 1, GPUMilli: 500, CPUMilli: 4000}
	workload := []gang.Group{halfGPU, halfGPU, halfGPU, {Members: 1, GPUsPerMember: 1, CPUMilli: 8000}}
	sc, err := gang.NewScorer(gang.ScorerSpec{Name: "berth", Target: gang.NewTarget(workload, 0.95).Shapes})
	if err != nil {
		panic(err)
	}
	p := gang.Placer{Scorer: sc}
	req := gang.Request{Groups: []gang.Group{halfGPU}}
	for range 2 {
		res, err := p.Place(s, &req)
		if err != nil || !res.Found {
			panic(fmt.Sprint(err, res.Reason))
		}
		if err := res.Apply(s); err != nil {
			panic(err)
		}
		fmt.Println(c.NodeName(res.Members[0].Node), res.MemberGPUs(0), gang.NodeGPUMilli(s, res.Members[0].Node, nil))
	}
	// Output:
	// a [0] [500 1000]
	// a [0] [0 1000]
}
