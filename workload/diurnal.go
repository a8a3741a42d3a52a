package workload

import (
	"fmt"
	"math"
	"time"
)

// DiurnalConfig configures a Diurnal request-rate model.
type DiurnalConfig struct {
	// Services is the number of services; at least 1.
	Services int
	// Peak and Trough are the request rates (per second) of all services
	// together at the top and the bottom of the day; 0 <= Trough <= Peak,
	// Peak > 0.
	Peak, Trough float64
	// Noise is the relative standard deviation of each service's rate per
	// Slot (a factor 1 + Noise x N(0,1), at least 0); 0 means 0.1,
	// negative means none.
	Noise float64
	// Slot is the length of one noise step; 0 means 15 minutes.
	Slot time.Duration
	// Seed draws the services' weights, peak hours and noise.
	Seed uint64
}

// Diurnal is a seeded day/night (diurnal) request-rate model of a set of
// services, the traffic of the serving replay (issue 14). Service i has a
// weight w_i (uniform in [0.5, 1.5), normalised to sum 1) and a peak hour
// p_i (uniform in [13, 16)); at an offset t (hours h) its rate is
//
//	rate_i(t) = w_i x (base + amp x cos(2 pi (h - p_i) / 24)) x (1 + Noise x z)
//
// with base = (Peak + Trough) / 2, amp = (Peak - Trough) / 2 and z a
// standard normal drawn per service and Slot (from a SplitMix64 stream of
// Seed, the service and the slot, so any instant can be asked in any
// order), clamped at 0. The shape is the one of replay/hybrid's curve.
type Diurnal struct {
	cfg    DiurnalConfig
	weight []float64
	peak   []float64
}

// NewDiurnal validates cfg and draws the services. Errors wrap ErrConfig.
func NewDiurnal(cfg DiurnalConfig) (*Diurnal, error) {
	if math.IsInf(cfg.Noise, -1) {
		return nil, fmt.Errorf("%w: diurnal: noise %v", ErrConfig, cfg.Noise)
	}
	if cfg.Noise == 0 {
		cfg.Noise = 0.1
	}
	cfg.Noise = max(cfg.Noise, 0)
	if cfg.Slot == 0 {
		cfg.Slot = 15 * time.Minute
	}
	switch {
	case cfg.Services < 1 || cfg.Services > 1<<16:
		return nil, fmt.Errorf("%w: diurnal: %d services (want 1..65536)", ErrConfig, cfg.Services)
	case !(cfg.Peak > 0) || math.IsInf(cfg.Peak, 0) || !(cfg.Trough >= 0) || cfg.Trough > cfg.Peak:
		return nil, fmt.Errorf("%w: diurnal: peak %v, trough %v (want 0 <= trough <= peak, peak > 0)", ErrConfig, cfg.Peak, cfg.Trough)
	case math.IsNaN(cfg.Noise) || math.IsInf(cfg.Noise, 0) || cfg.Noise > 10:
		return nil, fmt.Errorf("%w: diurnal: noise %v", ErrConfig, cfg.Noise)
	case cfg.Slot < 0:
		return nil, fmt.Errorf("%w: diurnal: slot %v", ErrConfig, cfg.Slot)
	}
	d := &Diurnal{cfg: cfg}
	rng := newStream(cfg.Seed, streamDiurnal)
	var sum float64
	for range cfg.Services {
		w := 0.5 + rng.float()
		d.weight = append(d.weight, w)
		d.peak = append(d.peak, 13+3*rng.float())
		sum += w
	}
	for i := range d.weight {
		d.weight[i] /= sum
	}
	return d, nil
}

// Services returns the number of services.
func (d *Diurnal) Services() int { return len(d.weight) }

// PeakHour returns service i's peak hour.
func (d *Diurnal) PeakHour(i int) float64 { return d.peak[i] }

// Rate returns service i's request rate at offset t from the start (the
// start is midnight). i out of range is 0.
func (d *Diurnal) Rate(i int, t time.Duration) float64 {
	if i < 0 || i >= len(d.weight) {
		return 0
	}
	c := d.cfg
	h := t.Hours()
	base, amp := (c.Peak+c.Trough)/2, (c.Peak-c.Trough)/2
	v := d.weight[i] * (base + amp*math.Cos(2*math.Pi*(h-d.peak[i])/24))
	if c.Noise > 0 {
		slot := uint64(t / c.Slot)
		s := newStream(c.Seed^uint64(i+1)*0x9e3779b97f4a7c15, streamDiurnal+1+slot)
		v *= 1 + c.Noise*s.norm()
	}
	return max(v, 0)
}

// norm returns a standard normal variate (Box-Muller).
func (s *SplitMix64) norm() float64 {
	u1 := 1 - s.float() // (0, 1]
	u2 := s.float()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
