package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/berthsched/berth/replay"
)

// parsePlacements reads --placement: a comma list of replay.Placements,
// each at most once; empty: none (the engine's default placement).
func parsePlacements(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, p := range parseList(s) {
		if !slices.Contains(replay.Placements(), p) {
			return nil, usagef("--placement %q: unknown placement %q (want %s)", s, p, strings.Join(replay.Placements(), ", "))
		}
		if slices.Contains(out, p) {
			return nil, usagef("--placement %q: %s twice", s, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// parsePrice reads --price: off, on (replay.DefaultPrice) or
// rack=F,block=F (either may be left out: 0).
func parsePrice(s string) (replay.Price, error) {
	switch strings.TrimSpace(s) {
	case "", "off":
		return replay.Price{}, nil
	case "on":
		return replay.DefaultPrice(), nil
	}
	var p replay.Price
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || !(f >= 0 && f <= 100) || seen[k] {
			return p, usagef("--price %q: want off, on, or rack=F,block=F with each F in 0..100 (a fraction of the runtime)", s)
		}
		seen[k] = true
		switch k {
		case "rack":
			p.PerRack = f
		case "block":
			p.PerBlock = f
		default:
			return p, usagef("--price %q: unknown factor %q (want rack or block)", s, k)
		}
	}
	return p, nil
}

// placementLabel is how a row names its policy: the policy, and
// "/placement" when --placement is given.
func placementLabel(policy, placement string) string {
	if placement == "" {
		return policy
	}
	return policy + "/" + placement
}

// priceNote is the table's line on what the price of placement did to a
// row (its first seed's run).
func priceNote(label string, st replay.PriceStats) string {
	return fmt.Sprintf("%s: %d of %d runs on more than one rack, mean runtime factor %.4f (largest %.2f)",
		label, st.Stretched, st.Runs, st.MeanAll, st.MaxFactor)
}
