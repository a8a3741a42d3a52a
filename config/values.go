package config

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Quantity is a non-negative decimal amount with at most three decimal
// places (thousandths), read and written as a number: 2, 0.5, 1.125. It is
// stored exactly (in thousandths), never through a float, so it
// round-trips.
type Quantity struct {
	milli int64
}

// Milli returns q in thousandths.
func Milli(m int64) Quantity { return Quantity{milli: m} }

// Whole returns n units.
func Whole(n int64) Quantity { return Quantity{milli: n * 1000} }

// Milli returns q in thousandths.
func (q Quantity) Milli() int64 { return q.milli }

// String formats q as a decimal without trailing zeros.
func (q Quantity) String() string {
	s := strconv.FormatInt(q.milli/1000, 10)
	if f := q.milli % 1000; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%03d", f), "0")
	}
	return s
}

// ParseQuantity reads a decimal with at most three decimal places.
func ParseQuantity(s string) (Quantity, error) {
	bad := fmt.Errorf("want a non-negative number with at most 3 decimals, got %q", s)
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || strings.ContainsAny(whole, "+-") || (dot && (frac == "" || len(frac) > 3)) {
		return Quantity{}, bad
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/1000-1 {
		return Quantity{}, bad
	}
	m := w * 1000
	if dot {
		f, err := strconv.ParseUint(frac, 10, 16)
		if err != nil {
			return Quantity{}, bad
		}
		for i := len(frac); i < 3; i++ {
			f *= 10
		}
		m += int64(f)
	}
	return Quantity{milli: m}, nil
}

func (q Quantity) MarshalJSON() ([]byte, error) { return []byte(q.String()), nil }

func (q *Quantity) UnmarshalJSON(b []byte) error {
	v, err := ParseQuantity(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	*q = v
	return nil
}

func (q Quantity) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: numTag(q.milli), Value: q.String()}, nil
}

func (q *Quantity) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return fmt.Errorf("line %d: want a number, got %q", n.Line, n.Value)
	}
	v, err := ParseQuantity(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*q = v
	return nil
}

func numTag(milli int64) string {
	if milli%1000 == 0 {
		return "!!int"
	}
	return "!!float"
}

// Unlimited is how an absent limit is written.
const Unlimited = "unlimited"

// Limit is a quota limit as written: a Quantity or "unlimited". The zero
// Limit is "not written", which Validate refuses where a limit is
// required: unlimited is written, never implied by absence.
type Limit struct {
	q         Quantity
	set       bool // written
	unlimited bool
}

// Cap returns the limit q.
func Cap(q Quantity) Limit { return Limit{q: q, set: true} }

// NoLimit returns the written "unlimited".
func NoLimit() Limit { return Limit{set: true, unlimited: true} }

// IsSet reports whether the limit was written.
func (l Limit) IsSet() bool { return l.set }

// Get returns the cap and whether there is one (false for unlimited and
// for a limit not written).
func (l Limit) Get() (Quantity, bool) { return l.q, l.set && !l.unlimited }

// String is the cap, "unlimited", or "" when not written.
func (l Limit) String() string {
	switch {
	case !l.set:
		return ""
	case l.unlimited:
		return Unlimited
	}
	return l.q.String()
}

func (l Limit) IsZero() bool { return !l.set }

func (l Limit) MarshalJSON() ([]byte, error) {
	switch {
	case !l.set:
		return []byte("null"), nil
	case l.unlimited:
		return []byte(`"` + Unlimited + `"`), nil
	}
	return l.q.MarshalJSON()
}

func (l *Limit) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	switch s {
	case "null":
		*l = Limit{}
		return nil
	case `"` + Unlimited + `"`:
		*l = NoLimit()
		return nil
	}
	var q Quantity
	if err := q.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("want a number or %q: %w", Unlimited, err)
	}
	*l = Cap(q)
	return nil
}

func (l Limit) MarshalYAML() (any, error) {
	switch {
	case !l.set:
		return nil, nil
	case l.unlimited:
		return Unlimited, nil
	}
	return l.q.MarshalYAML()
}

func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == Unlimited {
		*l = NoLimit()
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		*l = Limit{}
		return nil
	}
	var q Quantity
	if err := q.UnmarshalYAML(n); err != nil {
		return fmt.Errorf("%w (or %q)", err, Unlimited)
	}
	*l = Cap(q)
	return nil
}

// Duration is a time.Duration written as Go writes one: "90s", "1h30m",
// "0s".
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration such as 90s or 1h30m, got %q", b)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 90s", n.Line)
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

var _ json.Marshaler = Limit{}

// IsZero reports whether q is zero.
func (q Quantity) IsZero() bool { return q.milli == 0 }
