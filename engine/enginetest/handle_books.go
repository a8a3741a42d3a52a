package enginetest

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleBooks: books prints the GPUs every running job holds
// (Engine.Members), one job a line, and any GPU booked by two jobs.
func (h *Harness) handleBooks(*datadriven.TestData) (string, error) {
	var b strings.Builder
	var dups []string
	owner := map[string]string{}
	for _, rj := range h.E.View().Running() {
		ms, ok := h.E.Members(rj.Job)
		if !ok {
			fmt.Fprintf(&b, "%s: no members\n", rj.Job)
			continue
		}
		fmt.Fprintf(&b, "%s:", rj.Job)
		for _, m := range ms {
			fmt.Fprintf(&b, " %s:%v", m.Node, m.GPUs)
			for _, g := range m.GPUs {
				key := fmt.Sprintf("%s/%d", m.Node, g)
				if o, dup := owner[key]; dup {
					dups = append(dups, fmt.Sprintf("double booking: GPU %s held by %s and %s\n", key, o, rj.Job))
				}
				owner[key] = rj.Job
			}
		}
		b.WriteString("\n")
	}
	for _, d := range dups {
		b.WriteString(d)
	}
	return b.String(), nil
}
