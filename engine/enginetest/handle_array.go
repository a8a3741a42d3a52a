package enginetest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleArray: array tasks=N [throttle=K] with one job line as input
// submits a job array (tasks ID_1 .. ID_N). Errors are printed.
func (h *Harness) handleArray(d *datadriven.TestData) (string, error) {
	v, _ := arg(d, "tasks")
	n, err := strconv.Atoi(v)
	if err != nil {
		return "", fmt.Errorf("array tasks=N: %v", err)
	}
	k := 0
	if v, ok := arg(d, "throttle"); ok {
		if k, err = strconv.Atoi(v); err != nil {
			return "", fmt.Errorf("array throttle=K: %v", err)
		}
	}
	j, err := h.Job(strings.TrimSpace(d.Input))
	if err != nil {
		return "", err
	}
	if err := h.E.Step(engine.ArraySubmitted(h.now, j, n, k)); err != nil {
		return fmt.Sprintf("error: %v\n", err), nil
	}
	return "", nil
}
