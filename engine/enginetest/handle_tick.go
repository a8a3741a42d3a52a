package enginetest

import (
	"fmt"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleTick: tick DURATION advances the clock and steps a tick.
func (h *Harness) handleTick(d *datadriven.TestData) (string, error) {
	if len(d.CmdArgs) != 1 {
		return "", fmt.Errorf("tick DURATION")
	}
	dur, err := time.ParseDuration(d.CmdArgs[0].Key)
	if err != nil {
		return "", err
	}
	h.now = h.now.Add(dur)
	return "", h.E.Step(engine.Tick(h.now))
}
