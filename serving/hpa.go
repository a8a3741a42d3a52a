package serving

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/berthsched/berth/engine"
)

// Metric names what a Signal measures.
type Metric uint8

// Metrics. A total is a quantity of the whole service (its target is per
// replica: the replicas wanted are total / target); a value is one
// quantity of the service (an average over its replicas, or a
// percentile), compared with its target as it is.
const (
	// QueueDepth: requests waiting for the service (a total).
	QueueDepth Metric = iota + 1
	// Latency: request latency, in seconds (a value).
	Latency
	// Utilization: the replicas' mean utilization, 0..1 (a value).
	Utilization
	// RequestRate: requests per second arriving at the service (a total).
	RequestRate
)

func (m Metric) String() string {
	switch m {
	case QueueDepth:
		return "queue-depth"
	case Latency:
		return "latency"
	case Utilization:
		return "utilization"
	case RequestRate:
		return "request-rate"
	}
	return fmt.Sprintf("Metric(%d)", uint8(m))
}

func (m Metric) valid() bool { return m >= QueueDepth && m <= RequestRate }

// total reports whether m is a quantity of the whole service.
func (m Metric) total() bool { return m == QueueDepth || m == RequestRate }

// Signal is one observation of a service at a time.
type Signal struct {
	At      time.Time
	Service string
	Metric  Metric
	Value   float64
}

// Errors (wrapped with details; match with errors.Is).
var (
	// ErrInvalid: a bad configuration, signal or count.
	ErrInvalid = errors.New("serving: invalid input")
	// ErrUnknownService: a signal or call names a service the Autoscaler
	// does not hold.
	ErrUnknownService = errors.New("serving: unknown service")
)

// A Scaler turns a service's signals into a desired replica count.
// Recommend takes one signal (times must not go backwards) and the
// service's current desired count, and returns the new desired count.
// A bad signal is an error and changes nothing.
type Scaler interface {
	Recommend(sig Signal, current int) (int, error)
}

// Target is the value of a metric the HPA keeps the service at: for a
// total, the amount one replica should take (say 40 requests per
// second); for a value, the value itself (say 0.7 utilization).
type Target struct {
	Metric Metric
	Value  float64
}

// Policy is one rate limit: at most Pods replicas, or Percent percent of
// the count at the start of the period, per Period (exactly one of Pods
// and Percent is set; Period > 0).
type Policy struct {
	Pods    int
	Percent int
	Period  time.Duration
}

// Select says how the limits of a direction's policies combine.
type Select uint8

const (
	// SelectMax (the default): the policy that allows the largest change.
	SelectMax Select = iota
	// SelectMin: the policy that allows the smallest change.
	SelectMin
	// SelectDisabled: no change in this direction.
	SelectDisabled
)

// Rules are the behaviour of one direction (scale-up or scale-down).
type Rules struct {
	// StabilizationWindow: 0 is the direction's default (up 0 s, down
	// 300 s); negative: none.
	StabilizationWindow time.Duration
	// Policies: nil is the direction's default (up: 4 pods or 100% per
	// 15 s; down: 100% per 15 s).
	Policies []Policy
	Select   Select
}

// Defaults of HPAConfig.
const (
	DefaultTolerance         = 0.1
	DefaultDownStabilization = 300 * time.Second
	DefaultIdleWindow        = 300 * time.Second
)

// HPAConfig configures an HPA.
type HPAConfig struct {
	// Min <= Max bound the count; Max <= engine.MaxReplicas and Max >= 1.
	// Min 0: scale to zero (see IdleWindow).
	Min, Max int
	// Targets: one or more metrics (each at most once); the recommendation
	// is the largest of theirs, as Kubernetes does with several metrics.
	Targets []Target
	// Tolerance: no change while |ratio - 1| <= Tolerance. 0 means
	// DefaultTolerance; negative means none.
	Tolerance float64
	// Up and Down: the behaviour of each direction.
	Up, Down Rules
	// IdleWindow (Min 0 only): the service scales to zero once every
	// target metric has been 0 for this long; 0 means DefaultIdleWindow,
	// negative: at once.
	IdleWindow time.Duration
}

// HPA is the Kubernetes Horizontal Pod Autoscaler's rule as a Scaler. For
// a signal at time t and the current count c:
//
//  1. per target metric with a known value v (the latest signal of it):
//     ratio = v / target (a value) or v / (target x c) (a total); the
//     proposal is c when |ratio - 1| <= tolerance, else ceil(c x ratio)
//     (for a total: ceil(v / target)). The raw recommendation is the
//     largest proposal, clamped to [max(Min, 1), Max].
//  2. Scale to zero (Min 0): at c = 0, a signal of demand (any target
//     metric > 0) recommends max(1, raw) and anything else 0; at c > 0,
//     once every target metric has been 0 for IdleWindow (since the first
//     signal without demand) the result is 0
//     at once (the idle window is its own stabilization: steps 3 and 4 do
//     not apply).
//  3. Stabilization: the recommendation is c raised to the lowest raw
//     recommendation of the scale-up window and lowered to the highest of
//     the scale-down window (both windows ending at t, raw included).
//  4. Rate limits: for scale-up, each policy allows p0 + Pods or
//     ceil(p0 x (1 + Percent/100)) where p0 = c minus the replicas added
//     in the policy's period before t; for scale-down, p0 - Pods or
//     floor(p0 x (1 - Percent/100)) with p0 = c plus the replicas removed
//     in the period. SelectMax takes the most permissive policy, SelectMin
//     the least, SelectDisabled allows no change. From zero, at least one
//     replica is always allowed.
//  5. The result is clamped to [Min, Max].
type HPA struct {
	cfg       HPAConfig
	upWin     time.Duration
	downWin   time.Duration
	tol       float64
	idle      time.Duration
	values    []float64 // per target: latest value
	known     []bool
	recs      []rec // raw recommendations, oldest first
	events    []rec // changes (n: +added / -removed), oldest first
	last      time.Time
	started   bool
	idle0     time.Time // first signal of the current idle spell
	idling    bool      // the latest signal showed no demand
	maxPeriod time.Duration
}

type rec struct {
	at time.Time
	n  int
}

// NewHPA validates cfg and returns an HPA. Errors wrap ErrInvalid.
func NewHPA(cfg HPAConfig) (*HPA, error) {
	bad := func(format string, args ...any) (*HPA, error) {
		return nil, fmt.Errorf("%w: HPA: "+format, append([]any{ErrInvalid}, args...)...)
	}
	switch {
	case cfg.Min < 0 || cfg.Max < 1 || cfg.Min > cfg.Max || cfg.Max > engine.MaxReplicas:
		return bad("replicas [%d, %d] (want 0 <= min <= max, 1 <= max <= %d)", cfg.Min, cfg.Max, engine.MaxReplicas)
	case len(cfg.Targets) == 0:
		return bad("no target metric")
	case math.IsNaN(cfg.Tolerance) || math.IsInf(cfg.Tolerance, 0) || cfg.Tolerance > 10:
		return bad("tolerance %v", cfg.Tolerance)
	}
	for i, t := range cfg.Targets {
		if !t.Metric.valid() {
			return bad("unknown metric %d", uint8(t.Metric))
		}
		if !(t.Value > 0) || math.IsInf(t.Value, 0) {
			return bad("target %v for %v (want a positive number)", t.Value, t.Metric)
		}
		for _, u := range cfg.Targets[:i] {
			if u.Metric == t.Metric {
				return bad("metric %v targeted twice", t.Metric)
			}
		}
	}
	h := &HPA{cfg: cfg, tol: cfg.Tolerance, idle: cfg.IdleWindow, upWin: cfg.Up.StabilizationWindow, downWin: cfg.Down.StabilizationWindow}
	h.cfg.Targets = append([]Target(nil), cfg.Targets...)
	switch {
	case h.tol == 0:
		h.tol = DefaultTolerance
	case h.tol < 0:
		h.tol = 0
	}
	if h.idle == 0 {
		h.idle = DefaultIdleWindow
	}
	h.upWin = max(h.upWin, 0)
	switch {
	case h.downWin == 0:
		h.downWin = DefaultDownStabilization
	case h.downWin < 0:
		h.downWin = 0
	}
	for _, r := range []*Rules{&h.cfg.Up, &h.cfg.Down} {
		if r.Select > SelectDisabled {
			return bad("unknown select %d", r.Select)
		}
		if r.Policies == nil {
			if r == &h.cfg.Up {
				r.Policies = []Policy{{Pods: 4, Period: 15 * time.Second}, {Percent: 100, Period: 15 * time.Second}}
			} else {
				r.Policies = []Policy{{Percent: 100, Period: 15 * time.Second}}
			}
		} else {
			r.Policies = append([]Policy(nil), r.Policies...)
		}
		if len(r.Policies) == 0 && r.Select != SelectDisabled {
			return bad("empty policy list (use nil for the default, or SelectDisabled)")
		}
		for _, p := range r.Policies {
			if p.Period <= 0 || p.Period > 24*time.Hour || (p.Pods > 0) == (p.Percent > 0) || p.Pods < 0 || p.Percent < 0 ||
				p.Pods > engine.MaxReplicas || p.Percent > 1000 {
				return bad("policy %+v (want exactly one of pods or percent, positive, and a period of (0, 24h])", p)
			}
			h.maxPeriod = max(h.maxPeriod, p.Period)
		}
	}
	h.values = make([]float64, len(cfg.Targets))
	h.known = make([]bool, len(cfg.Targets))
	return h, nil
}

// Config returns the configuration with its defaults filled in.
func (h *HPA) Config() HPAConfig {
	c := h.cfg
	c.Tolerance, c.IdleWindow = h.tol, h.idle
	c.Up.StabilizationWindow, c.Down.StabilizationWindow = h.upWin, h.downWin
	return c
}

// Recommend implements Scaler.
func (h *HPA) Recommend(sig Signal, current int) (int, error) {
	switch {
	case !sig.Metric.valid():
		return current, fmt.Errorf("%w: signal of unknown metric %d", ErrInvalid, uint8(sig.Metric))
	case math.IsNaN(sig.Value) || math.IsInf(sig.Value, 0) || sig.Value < 0:
		return current, fmt.Errorf("%w: %v signal value %v (want a finite number >= 0)", ErrInvalid, sig.Metric, sig.Value)
	case h.started && sig.At.Before(h.last):
		return current, fmt.Errorf("%w: signal at %v before the previous one at %v", ErrInvalid, sig.At, h.last)
	case current < 0 || current > engine.MaxReplicas:
		return current, fmt.Errorf("%w: current count %d", ErrInvalid, current)
	}
	t := sig.At
	h.started = true
	h.last = t
	for i, tg := range h.cfg.Targets {
		if tg.Metric == sig.Metric {
			h.values[i], h.known[i] = sig.Value, true
		}
	}
	h.prune(t)
	demand := false
	for i := range h.values {
		if h.known[i] && h.values[i] > 0 {
			demand = true
		}
	}
	switch {
	case demand:
		h.idling = false
	case !h.idling:
		h.idling, h.idle0 = true, t
	}
	lo := max(h.cfg.Min, 1)
	raw := h.raw(current)
	raw = min(max(raw, lo), h.cfg.Max)
	if h.cfg.Min == 0 {
		switch {
		case current == 0 && !demand:
			return 0, nil
		case current > 0 && !demand && t.Sub(h.idle0) >= h.idle:
			h.recs = h.recs[:0]
			h.event(t, -current)
			return 0, nil
		}
	}
	h.recs = append(h.recs, rec{t, raw})
	// Stabilization.
	up, down := raw, raw
	for _, r := range h.recs {
		if t.Sub(r.at) < h.upWin {
			up = min(up, r.n)
		}
		if t.Sub(r.at) < h.downWin {
			down = max(down, r.n)
		}
	}
	want := current
	if want < up {
		want = up
	}
	if want > down {
		want = down
	}
	// Rate limits.
	if want > current {
		want = min(want, h.upLimit(t, current))
		if current == 0 {
			want = max(want, 1)
		}
	} else if want < current {
		want = max(want, h.downLimit(t, current))
	}
	want = min(max(want, h.cfg.Min), h.cfg.Max)
	if want != current {
		h.event(t, want-current)
	}
	return want, nil
}

// raw is the largest per-metric proposal at count c (not clamped).
func (h *HPA) raw(c int) int {
	best := 0
	for i, tg := range h.cfg.Targets {
		if !h.known[i] {
			continue
		}
		v := h.values[i]
		var p float64
		switch {
		case c == 0:
			if tg.Metric.total() {
				p = math.Ceil(v / tg.Value)
			} else if v > 0 {
				p = 1
			}
		default:
			var ratio float64
			if tg.Metric.total() {
				ratio = v / (tg.Value * float64(c))
			} else {
				ratio = v / tg.Value
			}
			switch {
			case math.Abs(ratio-1) <= h.tol:
				p = float64(c)
			case tg.Metric.total():
				p = math.Ceil(v / tg.Value)
			default:
				p = math.Ceil(float64(c) * ratio)
			}
		}
		if p > float64(h.cfg.Max) || math.IsNaN(p) {
			p = float64(h.cfg.Max)
		}
		best = max(best, int(p))
	}
	if best == 0 {
		// No metric known yet: keep the count.
		if !h.anyKnown() {
			return c
		}
	}
	return best
}

func (h *HPA) anyKnown() bool {
	for _, k := range h.known {
		if k {
			return true
		}
	}
	return false
}

// changed sums the additions (up) or removals (down) within period
// before t.
func (h *HPA) changed(t time.Time, period time.Duration, up bool) int {
	n := 0
	for _, e := range h.events {
		if t.Sub(e.at) >= period {
			continue
		}
		if up && e.n > 0 {
			n += e.n
		} else if !up && e.n < 0 {
			n -= e.n
		}
	}
	return n
}

func (h *HPA) upLimit(t time.Time, c int) int {
	r := h.cfg.Up
	if r.Select == SelectDisabled {
		return c
	}
	limit := -1
	for _, p := range r.Policies {
		p0 := max(c-h.changed(t, p.Period, true), 0)
		var l int
		if p.Pods > 0 {
			l = p0 + p.Pods
		} else {
			l = int(math.Ceil(float64(p0) * (1 + float64(p.Percent)/100)))
		}
		switch {
		case limit < 0:
			limit = l
		case r.Select == SelectMax:
			limit = max(limit, l)
		default:
			limit = min(limit, l)
		}
	}
	return max(limit, c)
}

func (h *HPA) downLimit(t time.Time, c int) int {
	r := h.cfg.Down
	if r.Select == SelectDisabled {
		return c
	}
	limit := -1
	for _, p := range r.Policies {
		p0 := c + h.changed(t, p.Period, false)
		var l int
		if p.Pods > 0 {
			l = p0 - p.Pods
		} else {
			l = int(math.Floor(float64(p0) * (1 - float64(p.Percent)/100)))
		}
		l = max(l, 0)
		switch {
		case limit < 0:
			limit = l
		case r.Select == SelectMax:
			limit = min(limit, l)
		default:
			limit = max(limit, l)
		}
	}
	return min(limit, c)
}

func (h *HPA) event(t time.Time, n int) {
	h.events = append(h.events, rec{t, n})
}

// prune drops recommendations and events no window or period can see.
func (h *HPA) prune(t time.Time) {
	w := max(h.upWin, h.downWin)
	i := 0
	for i < len(h.recs) && t.Sub(h.recs[i].at) >= w {
		i++
	}
	h.recs = append(h.recs[:0], h.recs[i:]...)
	i = 0
	for i < len(h.events) && t.Sub(h.events[i].at) >= h.maxPeriod {
		i++
	}
	h.events = append(h.events[:0], h.events[i:]...)
}
