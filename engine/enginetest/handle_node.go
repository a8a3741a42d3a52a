package enginetest

import (
	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// handleNode: node name=... [state=...] [labels=...] steps a NodeChanged
// event; without labels the node keeps its own.
func (h *Harness) handleNode(d *datadriven.TestData) (string, error) {
	name, _ := arg(d, "name")
	st := topo.Ready
	if s, ok := arg(d, "state"); ok {
		var err error
		if st, err = topo.ParseNodeState(s); err != nil {
			return "", err
		}
	}
	labels := parseLabels(d)
	if _, ok := arg(d, "labels"); !ok {
		labels = h.labelsOf(name)
	}
	return "", h.E.Step(engine.NodeChanged(h.now, name, st, labels))
}

func (h *Harness) labelsOf(name string) map[string]string {
	c := h.E.Cluster()
	id, ok := c.NodeByName(name)
	if !ok {
		return nil
	}
	return c.Node(id).Labels
}
