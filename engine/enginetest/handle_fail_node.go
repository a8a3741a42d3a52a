package enginetest

import (
	"fmt"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleFailNode: fail-node NAME steps a NodeFailed event.
func (h *Harness) handleFailNode(d *datadriven.TestData) (string, error) {
	if len(d.CmdArgs) != 1 {
		return "", fmt.Errorf("fail-node NAME")
	}
	return "", h.E.Step(engine.NodeFailed(h.now, d.CmdArgs[0].Key))
}
