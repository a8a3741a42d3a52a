package enginetest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleAdopt: adopt with one running job a line.
func (h *Harness) handleAdopt(d *datadriven.TestData) (string, error) {
	return h.adopt(d.Input)
}

func (h *Harness) adopt(input string) (string, error) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		j, err := h.Job(line)
		if err != nil {
			return "", err
		}
		on := kvs(strings.Fields(line)[1:])["on"]
		var ms []engine.Member
		for _, item := range strings.Split(on, ",") {
			node, rng, ok := strings.Cut(item, ":")
			if !ok {
				return "", fmt.Errorf("on=node:lo-hi,...")
			}
			lo, hi, _ := strings.Cut(rng, "-")
			a, err1 := strconv.Atoi(lo)
			z, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return "", fmt.Errorf("bad range %q", rng)
			}
			m := engine.Member{Node: node}
			for g := a; g <= z; g++ {
				m.GPUs = append(m.GPUs, g)
			}
			ms = append(ms, m)
		}
		j.Request.Groups[0].Members = len(ms)
		if err := h.E.Step(engine.Adopted(h.now, j, ms)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}
