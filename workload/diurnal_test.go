package workload_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/workload"
)

func TestDiurnal(t *testing.T) {
	cfg := workload.DiurnalConfig{Services: 5, Peak: 1000, Trough: 200, Seed: 7}
	d, err := workload.NewDiurnal(cfg)
	require.NoError(t, err)
	again, err := workload.NewDiurnal(cfg)
	require.NoError(t, err)
	other, err := workload.NewDiurnal(workload.DiurnalConfig{Services: 5, Peak: 1000, Trough: 200, Seed: 8})
	require.NoError(t, err)
	total := func(d *workload.Diurnal, t time.Duration) float64 {
		var s float64
		for i := range d.Services() {
			s += d.Rate(i, t)
		}
		return s
	}
	differs := false
	for m := 0; m < 48*60; m += 7 {
		at := time.Duration(m) * time.Minute
		for i := range 5 {
			assert.Equal(t, d.Rate(i, at), again.Rate(i, at), "same seed, same rate")
			assert.GreaterOrEqual(t, d.Rate(i, at), 0.0)
		}
		differs = differs || total(d, at) != total(other, at)
	}
	assert.True(t, differs, "another seed, other rates")
	// Day above night: the afternoon (14:30) well above 02:30, and near
	// the configured peak and trough (noise 10%).
	day, night := total(d, 14*time.Hour+30*time.Minute), total(d, 2*time.Hour+30*time.Minute)
	assert.InDelta(t, 1000, day, 150)
	assert.InDelta(t, 200, night, 60)
	for i := range 5 {
		assert.True(t, d.PeakHour(i) >= 13 && d.PeakHour(i) < 16)
	}
	assert.Zero(t, d.Rate(5, 0))
	// Without noise the curve is exact.
	flat, err := workload.NewDiurnal(workload.DiurnalConfig{Services: 1, Peak: 10, Trough: 10, Noise: -1})
	require.NoError(t, err)
	assert.InDelta(t, 10, flat.Rate(0, 5*time.Hour), 1e-9)
}

func TestDiurnalInvalid(t *testing.T) {
	for _, c := range []workload.DiurnalConfig{
		{Peak: 1},
		{Services: 1},
		{Services: 1, Peak: 1, Trough: 2},
		{Services: 1, Peak: 1, Trough: -1},
		{Services: 1, Peak: 1, Noise: 20},
		{Services: 1, Peak: 1, Slot: -time.Second},
	} {
		_, err := workload.NewDiurnal(c)
		assert.ErrorIs(t, err, workload.ErrConfig, "%+v", c)
	}
}
