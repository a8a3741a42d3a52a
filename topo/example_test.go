package topo_test

import (
	"fmt"

	"github.com/berthsched/berth/topo"
)

func Example() {
	// 2 blocks x 2 racks x 4 nodes of 8 GPUs.
	c, err := topo.New(topo.Uniform([]string{"block", "rack"}, []int{2, 2}, 4, 8, "H100"))
	if err != nil {
		panic(err)
	}
	s := c.NewSnapshot()
	if err := s.Allocate([]uint32{0, 1, 2, 3, 8}); err != nil {
		panic(err)
	}
	rack, _ := c.Level("rack")
	fmt.Printf("%s free=%d whole nodes: %d\n", c.Domain(rack, 0).Name, s.DomainFree(rack, 0), s.DomainWholeNodes(rack, 0))
	fmt.Println("4-GPU members that fit:", s.DomainCapacity(rack, 0, 4, -1))

	what := s.Clone() // copy-on-write: s does not see what the clone books
	_ = what.Allocate([]uint32{16, 17})
	fmt.Println("free:", s.Free(), "clone free:", what.Free())

	fmt.Println(s.Allocate([]uint32{0}))
	// Output:
	// b0/r0 free=27 whole nodes: 2
	// 4-GPU members that fit: 6
	// free: 123 clone free: 121
	// topo: GPU already allocated: GPU 0 on node "n0"
}
