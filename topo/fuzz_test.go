package topo_test

import (
	"errors"
	"testing"

	"github.com/berthsched/berth/topo"
)

// FuzzSpec builds specs from bytes: New must return a cluster or a
// *SpecError, never panic, and a built cluster must verify.
func FuzzSpec(f *testing.F) {
	f.Add([]byte{2, 3, 1, 8, 0, 1, 1, 8, 0, 0})
	f.Add([]byte{0, 1, 0, 0})
	f.Add([]byte{1, 2, 1, 65, 3, 2, 1, 1, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		spec := topo.Spec{}
		levels := []string{"block", "rack", "", "node", "block"}
		for range next() % 4 {
			spec.Levels = append(spec.Levels, levels[next()%len(levels)])
		}
		names := []string{"a", "b", "c", "", "d"}
		for range next() % 6 {
			n := topo.NodeSpec{Name: names[next()%len(names)], GPUs: next()%70 - 2, State: topo.NodeState(next() % 5)}
			for range next() % 4 {
				n.Domains = append(n.Domains, []string{"x", "y", ""}[next()%3])
			}
			if next()%4 == 0 {
				n.CPUMilli = int64(next() - 10)
			}
			spec.Nodes = append(spec.Nodes, n)
		}
		c, err := topo.New(spec)
		if err != nil {
			var se *topo.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		s := c.NewSnapshot()
		if err := s.Verify(); err != nil {
			t.Fatal(err)
		}
	})
}
