package sim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// With RecycleEvents the Runner hands each answer's slice back to
// NextInto: the same binds, cycle for cycle, and the same outcomes as with
// a new slice per answer (Next), on a workload that queues.
func TestRecycleEventsDecidesAlike(t *testing.T) {
	runOnce := func(recycle bool) ([]string, []string) {
		s := newSim(t, 3, 4)
		for i := range 40 {
			members := 1 + i%3
			per := []int{1, 2, 4}[i%3]
			require.NoError(t, s.Submit(wholeJob(fmt.Sprintf("j%02d", i), time.Duration(i%7)*time.Minute, members, per),
				time.Duration(10+i*7%50)*time.Minute))
		}
		var cycles []string
		r, err := backends.NewRunner(backends.RunnerConfig{
			Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Policy: queue.StrictPriority()},
			Backend: s, Clock: s, Parallelism: 1, Inline: true, RecycleEvents: recycle,
			Observe: func(c backends.Cycle) {
				cycles = append(cycles, fmt.Sprintf("%s %+v", c.Ready.At.Format(time.RFC3339), c.Ready.Binds))
			},
		})
		require.NoError(t, err)
		require.NoError(t, r.Run(context.Background()))
		require.Empty(t, s.Violations())
		var outs []string
		for _, o := range s.Outcomes() {
			outs = append(outs, fmt.Sprintf("%+v", o))
		}
		return cycles, outs
	}
	c0, o0 := runOnce(false)
	c1, o1 := runOnce(true)
	require.Len(t, o0, 40)
	assert.Greater(t, len(c0), 10)
	assert.Equal(t, c0, c1)
	assert.Equal(t, o0, o1)
}

// NextInto appends to the slice given (its first elements overwritten),
// and answers a wake-up with an empty slice, not nil.
func TestNextIntoReusesTheSlice(t *testing.T) {
	s := newSim(t, 1, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 1, 4), time.Hour))
	buf := make([]engine.Event, 3, 8)
	evs, err := s.NextInto(context.Background(), time.Time{}, buf)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, engine.EventJobSubmitted, evs[0].Kind)
	assert.Same(t, &buf[0], &evs[0], "appended to buf[:0]")
	evs, err = s.NextInto(context.Background(), t0.Add(time.Minute), evs)
	require.NoError(t, err)
	assert.NotNil(t, evs)
	assert.Empty(t, evs, "a wake-up")
}
