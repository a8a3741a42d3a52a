package enginetest

import (
	"github.com/cockroachdb/datadriven"
)

// handleReady: ready runs a cycle and prints its decisions (Format), or
// says that nothing changed.
func (h *Harness) handleReady(*datadriven.TestData) (string, error) {
	rd := h.E.Ready()
	ran := !h.haveRd || rd.Seq != h.last.Seq
	h.last, h.haveRd = rd, true
	if !ran {
		return "no cycle: nothing changed\n", nil
	}
	return Format(h.E, rd), nil
}
