package serving_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/berthsched/berth/serving"
)

// FuzzHPA: any configuration NewHPA accepts, fed any signals, returns
// counts within [Min, Max] (from a current count within them), never
// panics, and rejects bad signals with ErrInvalid without changing the
// count.
func FuzzHPA(f *testing.F) {
	f.Add(uint8(0), uint8(10), int8(0), uint16(300), uint8(4), uint8(100), []byte{0, 10, 1, 0, 200, 30, 2, 0, 0, 100, 3, 0})
	f.Add(uint8(2), uint8(3), int8(-1), uint16(0), uint8(0), uint8(50), []byte{255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, lo, hi uint8, tol int8, win uint16, pods, pct uint8, data []byte) {
		cfg := serving.HPAConfig{Min: int(lo), Max: int(hi), Tolerance: float64(tol) / 50,
			Down:       serving.Rules{StabilizationWindow: time.Duration(int(win)-100) * time.Second},
			Up:         serving.Rules{StabilizationWindow: time.Duration(win%120) * time.Second, Select: serving.Select(pods % 4)},
			IdleWindow: time.Duration(int(win%200)-50) * time.Second,
			Targets:    []serving.Target{{Metric: serving.RequestRate, Value: 10}, {Metric: serving.Utilization, Value: 0.6}},
		}
		if pods > 0 || pct > 0 {
			cfg.Down.Policies = []serving.Policy{{Pods: int(pods), Period: 15 * time.Second}, {Percent: int(pct), Period: time.Minute}}
		}
		h, err := serving.NewHPA(cfg)
		if err != nil {
			if !errors.Is(err, serving.ErrInvalid) {
				t.Fatalf("config error %v not ErrInvalid", err)
			}
			return
		}
		cur := min(max(int(lo), 0), int(hi))
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		seen := false
		for len(data) >= 4 {
			step := int(data[0]) - 16 // sometimes backwards
			m := serving.Metric(data[1]%5 + 0)
			v := float64(binary.LittleEndian.Uint16(data[2:4]))
			switch data[1] >> 5 {
			case 1:
				v = -v
			case 2:
				v = math.NaN()
			case 3:
				v /= 1000
			}
			data = data[4:]
			s := serving.Signal{At: at.Add(time.Duration(step) * time.Second), Service: "s", Metric: m, Value: v}
			bad := (step < 0 && seen) || m == 0 || v < 0 || math.IsNaN(v)
			got, err := h.Recommend(s, cur)
			if bad {
				if !errors.Is(err, serving.ErrInvalid) || got != cur {
					t.Fatalf("bad signal %+v: got %d, %v", s, got, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("signal %+v: %v", s, err)
			}
			if got < cfg.Min || got > cfg.Max {
				t.Fatalf("signal %+v: %d outside [%d, %d]", s, got, cfg.Min, cfg.Max)
			}
			at, cur, seen = s.At, got, true
		}
	})
}
