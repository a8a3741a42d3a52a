package enginetest

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleDevices: devices with one DevicesReported event a line, "JOB
// on=node:GPUs,..." (see parseOn).
func (h *Harness) handleDevices(d *datadriven.TestData) (string, error) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", fmt.Errorf("devices: JOB on=node:GPUs,...")
		}
		ms, err := parseOn(kvs(f[1:])["on"])
		if err != nil {
			return "", err
		}
		if err := h.E.Step(engine.DevicesReported(h.now, f[0], ms)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}
