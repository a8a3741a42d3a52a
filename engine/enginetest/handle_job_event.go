package enginetest

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleJobEvent: finish|finish-failed|cancel|checkpoint JOB... steps one event a job;
// errors are printed, one a line.
func (h *Harness) handleJobEvent(d *datadriven.TestData) (string, error) {
	var b strings.Builder
	for _, a := range d.CmdArgs {
		var ev engine.Event
		switch d.Cmd {
		case "finish":
			ev = engine.Finished(h.now, a.Key)
		case "cancel":
			ev = engine.Cancelled(h.now, a.Key)
		case "finish-failed":
			ev = engine.FinishedFailed(h.now, a.Key)
		default:
			ev = engine.Checkpointed(h.now, a.Key)
		}
		if err := h.E.Step(ev); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}
