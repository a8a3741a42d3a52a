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
