package enginetest

import (
	"errors"

	"github.com/cockroachdb/datadriven"
)

var errStale = errors.New("PendingAll: stale right after the cycle")

// handleReady: ready runs a cycle and prints its decisions (Format), or
// says that nothing changed. The pending statuses printed are every
// job's: after a walk that stopped early, those after the cut are
// computed on demand (Engine.PendingAll), as a full walk gives them.
func (h *Harness) handleReady(*datadriven.TestData) (string, error) {
	rd := h.E.Ready()
	ran := !h.haveRd || rd.Seq != h.last.Seq
	h.last, h.haveRd = rd, true
	if !ran {
		return "no cycle: nothing changed\n", nil
	}
	if rd.Unwalked > 0 {
		all, ok := h.E.PendingAll()
		if !ok {
			return "", errStale
		}
		rd.Pending, rd.Unwalked = all, 0
	}
	return Format(h.E, rd), nil
}
