package serving_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/serving"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one signal (at t0 + sec) and the count the HPA must return;
// the current count is the previous step's result.
type step struct {
	sec   float64
	m     serving.Metric
	value float64
	want  int
}

func run(t *testing.T, cfg serving.HPAConfig, current int, steps []step) {
	t.Helper()
	h, err := serving.NewHPA(cfg)
	require.NoError(t, err)
	for i, s := range steps {
		m := s.m
		if m == 0 {
			m = serving.RequestRate
		}
		at := t0.Add(time.Duration(s.sec * float64(time.Second)))
		got, err := h.Recommend(serving.Signal{At: at, Service: "s", Metric: m, Value: s.value}, current)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, s.want, got, "step %d (%+v) from %d", i, s, current)
		current = got
	}
}

func rate(target float64) []serving.Target {
	return []serving.Target{{Metric: serving.RequestRate, Value: target}}
}

func TestHPARules(t *testing.T) {
	util := []serving.Target{{Metric: serving.Utilization, Value: 0.5}}
	for name, tc := range map[string]struct {
		cfg     serving.HPAConfig
		current int
		steps   []step
	}{
		// ceil(current x metric/target), a value metric and a total.
		"formula value": {serving.HPAConfig{Max: 100, Targets: util}, 10, []step{{0, serving.Utilization, 0.6, 12}}},
		"formula total": {serving.HPAConfig{Max: 100, Targets: rate(10)}, 2, []step{{0, 0, 35, 4}}},
		// Within 1 +- 0.1 nothing changes; 0.2 off it does.
		"tolerance": {serving.HPAConfig{Max: 100, Targets: util}, 10, []step{
			{0, serving.Utilization, 0.54, 10}, {1, serving.Utilization, 0.46, 10}, {2, serving.Utilization, 0.6, 12}}},
		"tolerance none": {serving.HPAConfig{Max: 100, Targets: util, Tolerance: -1}, 10, []step{{0, serving.Utilization, 0.54, 11}}},
		"tolerance wide": {serving.HPAConfig{Max: 100, Targets: util, Tolerance: 0.3}, 10, []step{{0, serving.Utilization, 0.6, 10}}},
		// Scale-down waits for the highest recommendation of the last
		// 300 s: 10 at t0 holds until t0+300.
		"down stabilization": {serving.HPAConfig{Max: 100, Targets: rate(10)}, 10, []step{
			{0, 0, 100, 10}, {60, 0, 50, 10}, {299, 0, 50, 10}, {300, 0, 50, 5}}},
		// The highest in the window, not the latest: 8 at t0+100 holds
		// after 10 has left the window.
		"down stabilization max": {serving.HPAConfig{Max: 100, Targets: rate(10)}, 10, []step{
			{0, 0, 100, 10}, {100, 0, 80, 10}, {300, 0, 20, 8}, {400, 0, 20, 2}}},
		"down stabilization none": {serving.HPAConfig{Max: 100, Targets: rate(10), Down: serving.Rules{StabilizationWindow: -1}}, 10, []step{
			{0, 0, 50, 5}}},
		// Scale-up waits for the lowest of its window (here 60 s), then
		// the rate limit (2 + 4 pods) applies.
		"up stabilization": {serving.HPAConfig{Max: 100, Targets: rate(10), Up: serving.Rules{StabilizationWindow: time.Minute}}, 2, []step{
			{0, 0, 20, 2}, {10, 0, 80, 2}, {59, 0, 80, 2}, {70, 0, 80, 6}}},
		// Default up policies: 4 pods or 100% per 15 s, the larger.
		"up rate default": {serving.HPAConfig{Max: 100, Targets: rate(1)}, 1, []step{
			{0, 0, 100, 5}, {5, 0, 100, 5}, {15, 0, 100, 10}, {30, 0, 100, 20}, {45, 0, 100, 40}}},
		"up rate select min": {serving.HPAConfig{Max: 100, Targets: rate(1), Up: serving.Rules{Select: serving.SelectMin}}, 10, []step{
			{0, 0, 100, 14}}},
		"up disabled": {serving.HPAConfig{Max: 100, Targets: rate(1), Up: serving.Rules{Select: serving.SelectDisabled}}, 10, []step{
			{0, 0, 100, 10}}},
		"down rate": {serving.HPAConfig{Max: 100, Targets: rate(10), Down: serving.Rules{StabilizationWindow: -1,
			Policies: []serving.Policy{{Pods: 2, Period: time.Minute}}}}, 10, []step{
			{0, 0, 10, 8}, {30, 0, 10, 8}, {60, 0, 10, 6}}},
		"down percent": {serving.HPAConfig{Max: 100, Targets: rate(10), Down: serving.Rules{StabilizationWindow: -1,
			Policies: []serving.Policy{{Percent: 50, Period: time.Minute}}}}, 10, []step{
			{0, 0, 10, 5}, {59, 0, 10, 5}, {60, 0, 10, 2}}},
		"clamp max": {serving.HPAConfig{Max: 7, Targets: rate(1)}, 3, []step{{0, 0, 1000, 7}}},
		"clamp min": {serving.HPAConfig{Min: 3, Max: 7, Targets: rate(1), Down: serving.Rules{StabilizationWindow: -1}}, 6, []step{
			{0, 0, 0, 3}}},
		// Scale to zero after 120 s idle, and back on the first demand.
		"zero and back": {serving.HPAConfig{Max: 10, Targets: rate(10), IdleWindow: 2 * time.Minute, Down: serving.Rules{StabilizationWindow: -1}}, 3, []step{
			{0, 0, 0, 1}, {60, 0, 0, 1}, {119, 0, 0, 1}, {120, 0, 0, 0}, {180, 0, 0, 0}, {200, 0, 25, 3}, {210, 0, 0, 1}}},
		// Zero waits for the idle window, whatever the stabilization.
		"zero after demand": {serving.HPAConfig{Max: 10, Targets: rate(10), IdleWindow: time.Minute}, 2, []step{
			{0, 0, 20, 2}, {30, 0, 0, 2}, {89, 0, 0, 2}, {90, 0, 0, 0}}},
		// A value metric from zero: one replica, then the ratio.
		"zero back value": {serving.HPAConfig{Max: 10, Targets: util, IdleWindow: -1}, 0, []step{
			{0, serving.Utilization, 0.9, 1}, {1, serving.Utilization, 2, 4}}},
		// From zero at least one, even when the policies allow none.
		"zero back percent only": {serving.HPAConfig{Max: 10, Targets: rate(10), Up: serving.Rules{Policies: []serving.Policy{{Percent: 100, Period: time.Minute}}}}, 0, []step{
			{0, 0, 50, 1}}},
		// Several metrics: the largest recommendation; a signal of a
		// metric without a target is ignored.
		"several metrics": {serving.HPAConfig{Max: 100, Targets: []serving.Target{{Metric: serving.RequestRate, Value: 10}, {Metric: serving.QueueDepth, Value: 5}}}, 4, []step{
			{0, 0, 40, 4}, {1, serving.QueueDepth, 30, 6}, {2, serving.Latency, 9, 6}}},
		"latency": {serving.HPAConfig{Max: 100, Targets: []serving.Target{{Metric: serving.Latency, Value: 0.2}}}, 4, []step{
			{0, serving.Latency, 0.3, 6}}},
	} {
		t.Run(name, func(t *testing.T) { run(t, tc.cfg, tc.current, tc.steps) })
	}
}

func TestHPADefaults(t *testing.T) {
	h, err := serving.NewHPA(serving.HPAConfig{Max: 4, Targets: rate(1)})
	require.NoError(t, err)
	c := h.Config()
	assert.Equal(t, serving.DefaultTolerance, c.Tolerance)
	assert.Equal(t, 300*time.Second, c.Down.StabilizationWindow)
	assert.Zero(t, c.Up.StabilizationWindow)
	assert.Equal(t, []serving.Policy{{Pods: 4, Period: 15 * time.Second}, {Percent: 100, Period: 15 * time.Second}}, c.Up.Policies)
	assert.Equal(t, []serving.Policy{{Percent: 100, Period: 15 * time.Second}}, c.Down.Policies)
}

func TestHPAInvalid(t *testing.T) {
	for name, cfg := range map[string]serving.HPAConfig{
		"max 0":         {Targets: rate(1)},
		"min > max":     {Min: 3, Max: 2, Targets: rate(1)},
		"max too big":   {Max: engine.MaxReplicas + 1, Targets: rate(1)},
		"no target":     {Max: 2},
		"zero target":   {Max: 2, Targets: rate(0)},
		"nan target":    {Max: 2, Targets: rate(math.NaN())},
		"bad metric":    {Max: 2, Targets: []serving.Target{{Metric: 9, Value: 1}}},
		"twice":         {Max: 2, Targets: append(rate(1), rate(2)...)},
		"nan tolerance": {Max: 2, Targets: rate(1), Tolerance: math.NaN()},
		"both":          {Max: 2, Targets: rate(1), Up: serving.Rules{Policies: []serving.Policy{{Pods: 1, Percent: 1, Period: time.Second}}}},
		"no period":     {Max: 2, Targets: rate(1), Down: serving.Rules{Policies: []serving.Policy{{Pods: 1}}}},
		"empty":         {Max: 2, Targets: rate(1), Down: serving.Rules{Policies: []serving.Policy{}}},
		"select":        {Max: 2, Targets: rate(1), Up: serving.Rules{Select: 7}},
	} {
		_, err := serving.NewHPA(cfg)
		assert.ErrorIs(t, err, serving.ErrInvalid, name)
	}
	h, err := serving.NewHPA(serving.HPAConfig{Max: 4, Targets: rate(1)})
	require.NoError(t, err)
	n, err := h.Recommend(serving.Signal{At: t0.Add(time.Minute), Metric: serving.RequestRate, Value: 2}, 1)
	require.NoError(t, err)
	for name, s := range map[string]serving.Signal{
		"nan":       {At: t0.Add(time.Minute), Metric: serving.RequestRate, Value: math.NaN()},
		"inf":       {At: t0.Add(time.Minute), Metric: serving.RequestRate, Value: math.Inf(1)},
		"negative":  {At: t0.Add(time.Minute), Metric: serving.RequestRate, Value: -1},
		"metric":    {At: t0.Add(time.Minute), Value: 1},
		"backwards": {At: t0, Metric: serving.RequestRate, Value: 1},
	} {
		got, err := h.Recommend(s, n)
		assert.ErrorIs(t, err, serving.ErrInvalid, name)
		assert.Equal(t, n, got, name)
	}
	_, err = h.Recommend(serving.Signal{At: t0.Add(time.Minute), Metric: serving.RequestRate, Value: 1}, -1)
	assert.ErrorIs(t, err, serving.ErrInvalid)
}

func TestAutoscaler(t *testing.T) {
	a := serving.NewAutoscaler()
	h, err := serving.NewHPA(serving.HPAConfig{Max: 8, Targets: rate(10)})
	require.NoError(t, err)
	require.NoError(t, a.Add("llama", h, 1))
	assert.ErrorIs(t, a.Add("llama", h, 1), serving.ErrInvalid)
	assert.ErrorIs(t, a.Add("a/b", h, 1), serving.ErrInvalid)
	assert.ErrorIs(t, a.Add("x", nil, 1), serving.ErrInvalid)
	assert.ErrorIs(t, a.Add("x", h, -1), serving.ErrInvalid)
	_, _, err = a.Observe(serving.Signal{At: t0, Service: "other", Metric: serving.RequestRate, Value: 1})
	assert.ErrorIs(t, err, serving.ErrUnknownService)

	ev, ok, err := a.Observe(serving.Signal{At: t0, Service: "llama", Metric: serving.RequestRate, Value: 10})
	require.NoError(t, err)
	assert.False(t, ok, "within tolerance: no event")
	ev, ok, err = a.Observe(serving.Signal{At: t0.Add(time.Second), Service: "llama", Metric: serving.RequestRate, Value: 45})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, engine.ServiceScaled(t0.Add(time.Second), "llama", 5), ev)
	n, _ := a.Desired("llama")
	assert.Equal(t, 5, n)
	require.NoError(t, a.SetDesired("llama", 2))
	assert.ErrorIs(t, a.SetDesired("none", 2), serving.ErrUnknownService)
	assert.Equal(t, []string{"llama"}, a.Services())
	a.Remove("llama")
	_, ok = a.Desired("llama")
	assert.False(t, ok)
}
