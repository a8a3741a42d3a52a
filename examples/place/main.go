// Command place shows the core of berth in one screen: a cluster model, a
// snapshot, a gang placement with a required and a preferred topology level,
// apply / undo, and an explained "no".
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "place:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	// 2 blocks x 4 racks x 8 nodes x 8 GPUs = 512 GPUs.
	c, err := topo.New(topo.Uniform([]string{"block", "rack"}, []int{2, 4}, 8, 8, "H100"))
	if err != nil {
		return err
	}
	s := c.NewSnapshot()
	// Busy work: three GPUs on every third node.
	for n := 0; n < c.NumNodes(); n += 3 {
		first, _ := c.NodeGPUs(topo.NodeID(n))
		if err := s.Allocate([]uint32{first, first + 1, first + 2}); err != nil {
			return err
		}
	}
	req := gang.Request{
		Groups:    []gang.Group{{Name: "worker", Members: 16, GPUsPerMember: 8}},
		Required:  "block",
		Preferred: "rack",
	}
	res, err := gang.Place(s, &req)
	if err != nil {
		return err
	}
	if !res.Found {
		fmt.Fprintln(w, "no:", res.Reason)
		return nil
	}
	block, _ := c.Level("block")
	rack, _ := c.Level("rack")
	fmt.Fprintf(w, "placed %d workers in block %s on %d racks, %d nodes\n",
		len(res.Members), c.Domain(block, res.Domain).Name, res.Spread[rack], res.Nodes)
	for i, m := range res.Members[:3] {
		fmt.Fprintf(w, "  worker %d: node %s GPUs %v\n", i, c.NodeName(m.Node), res.MemberGPUs(i))
	}
	if err := res.Apply(s); err != nil {
		return err
	}
	fmt.Fprintf(w, "free GPUs after apply: %d of %d\n", s.Free(), c.NumGPUs())

	// A gang of 24 whole nodes fits in no block any more: the "no" says
	// why in numbers.
	big := req
	big.Groups = []gang.Group{{Name: "worker", Members: 24, GPUsPerMember: 8}}
	res2, err := gang.Place(s, &big)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "24-node gang:", res2.Reason)

	if err := res.Undo(s); err != nil {
		return err
	}
	fmt.Fprintf(w, "free GPUs after undo: %d\n", s.Free())
	return nil
}
