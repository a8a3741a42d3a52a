package enginetest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleAdvance: advance [refuse=J,...] [refuse-preempt=J,...]
// [refuse-resize=J,...] [refuse-mig=NODE:GPU,...] reports the last Ready's
// outcome.
func (h *Harness) handleAdvance(d *datadriven.TestData) (string, error) {
	if !h.haveRd {
		return "", fmt.Errorf("advance before ready")
	}
	var o engine.Outcome
	if v, ok := arg(d, "refuse"); ok {
		o.RefusedBinds = strings.Split(v, ",")
	}
	if v, ok := arg(d, "refuse-preempt"); ok {
		o.RefusedPreemptions = strings.Split(v, ",")
	}
	if v, ok := arg(d, "refuse-resize"); ok {
		o.RefusedResizes = strings.Split(v, ",")
	}
	if v, ok := arg(d, "refuse-mig"); ok {
		for _, item := range strings.Split(v, ",") {
			node, g, _ := strings.Cut(item, ":")
			gi, err := strconv.Atoi(g)
			if err != nil {
				return "", fmt.Errorf("refuse-mig=node:gpu,...: %v", err)
			}
			o.RefusedMIG = append(o.RefusedMIG, engine.MIGReconfiguration{Node: node, GPU: gi})
		}
	}
	return "", h.E.Advance(h.last, o)
}
