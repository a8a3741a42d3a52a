package enginetest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleAdopt: adopt with one running job a line, "JOB ... on=node:GPUs,..."
// (see parseOn).
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
		ms, err := parseOn(kvs(strings.Fields(line)[1:])["on"])
		if err != nil {
			return "", err
		}
		j.Request.Groups[0].Members = len(ms)
		started := h.now
		if v, ok := kvs(strings.Fields(line)[1:])["since"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", fmt.Errorf("since: %v", err)
			}
			started = h.now.Add(-d)
		}
		if err := h.E.Step(engine.AdoptedSince(h.now, started, j, ms)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}

// parseOn reads members "node:lo-hi,node:g+g+g,..." (node-local GPUs).
func parseOn(on string) ([]engine.Member, error) {
	var ms []engine.Member
	for _, item := range strings.Split(on, ",") {
		node, rng, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("on=node:lo-hi,...")
		}
		m := engine.Member{Node: node}
		if lo, hi, isRange := strings.Cut(rng, "-"); isRange {
			a, err1 := strconv.Atoi(lo)
			z, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bad range %q", rng)
			}
			for g := a; g <= z; g++ {
				m.GPUs = append(m.GPUs, g)
			}
		} else {
			for _, x := range strings.Split(rng, "+") {
				g, err := strconv.Atoi(x)
				if err != nil {
					return nil, fmt.Errorf("bad GPU %q", x)
				}
				m.GPUs = append(m.GPUs, g)
			}
		}
		ms = append(ms, m)
	}
	return ms, nil
}
