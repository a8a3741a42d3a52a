package gang_test

import (
	"fmt"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// The README's first snippet: a cluster declared node by node, one gang of
// 32 whole 8-GPU nodes that must sit in one block on the fewest racks,
// placed and applied twice, and a third that no block can hold any more.
func Example_readme() {
	// 2 blocks x 3 racks x 12 nodes x 8 GPUs = 576 GPUs.
	spec := topo.Spec{Levels: []string{"block", "rack"}}
	for b := range 2 {
		for r := range 3 {
			for n := range 12 {
				spec.Nodes = append(spec.Nodes, topo.NodeSpec{
					Name:    fmt.Sprintf("b%d-r%d-n%02d", b, r, n),
					Domains: []string{fmt.Sprintf("b%d", b), fmt.Sprintf("r%d", r)},
					GPUs:    8, GPUModel: "H100",
				})
			}
		}
	}
	c, err := topo.New(spec)
	if err != nil {
		panic(err)
	}
	s := c.NewSnapshot()
	req := gang.Request{
		Groups:    []gang.Group{{Members: 32, GPUsPerMember: 8}},
		Required:  "block", // every member inside one block
		Preferred: "rack",  // on the fewest racks
	}
	block, _ := c.Level("block")
	rack, _ := c.Level("rack")
	for range 3 {
		res, err := gang.Place(s, &req)
		if err != nil {
			panic(err) // a malformed request, never "does not fit"
		}
		if !res.Found {
			fmt.Println("no:", res.Reason) // why, in numbers
			continue
		}
		if err := res.Apply(s); err != nil { // all or nothing; res.Undo(s) rolls back
			panic(err)
		}
		fmt.Printf("block %s, %d racks, %d nodes; %d GPUs free\n",
			c.Domain(block, res.Domain).Name, res.Spread[rack], res.Nodes, s.Free())
	}
	// Output:
	// block b0, 3 racks, 32 nodes; 320 GPUs free
	// block b1, 3 racks, 32 nodes; 64 GPUs free
	// no: group 0: at most 4 of 32 members fit in any block
}
