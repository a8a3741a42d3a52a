package enginetest

import (
	"github.com/cockroachdb/datadriven"
)

// handleView: view prints the published View (FormatView).
func (h *Harness) handleView(*datadriven.TestData) (string, error) {
	return FormatView(h.E.View()), nil
}
