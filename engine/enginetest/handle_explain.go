package enginetest

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleExplain: explain prints, for every pending job of the published
// View, its estimate (View.Estimates) and its explanation (View.Explain).
func (h *Harness) handleExplain(*datadriven.TestData) (string, error) {
	v := h.E.View()
	var b strings.Builder
	for _, x := range v.Estimates() {
		ex, ok := v.Explain(x.Job)
		if !ok {
			return "", fmt.Errorf("explain: %s is pending but has no explanation", x.Job)
		}
		fmt.Fprintf(&b, "%s [%s]: %s\n", x.Job, ex.Kind, ex)
		if x.Why == engine.EstimateGiven {
			fmt.Fprintf(&b, "  estimate: %s\n", rel(x.Start))
		} else {
			fmt.Fprintf(&b, "  no estimate: %v", x.Why)
			if len(x.Behind) > 0 {
				fmt.Fprintf(&b, " behind %s", strings.Join(x.Behind, ","))
			}
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}
