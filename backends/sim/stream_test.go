package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// streamJobs are jobs in submission order with ties, some of which queue
// on a cluster of 2 nodes of 4 GPUs.
func streamJobs() ([]*queue.Job, []time.Duration) {
	var js []*queue.Job
	var rts []time.Duration
	for i := range 40 {
		js = append(js, wholeJob(fmt.Sprintf("j%02d", i), time.Duration(i/3)*time.Minute, 1+i%2, 1+i%4))
		rts = append(rts, time.Duration(5+i%7)*time.Minute)
	}
	return js, rts
}

func sliceStream(js []*queue.Job, rts []time.Duration) func() (*queue.Job, time.Duration, bool) {
	i := 0
	return func() (*queue.Job, time.Duration, bool) {
		if i == len(js) {
			return nil, 0, false
		}
		i++
		return js[i-1], rts[i-1], true
	}
}

// Streamed jobs run exactly as the same jobs given to Submit at set-up:
// the same outcomes, in the same order, and the same events cycle by cycle.
func TestStreamRunsAsSubmit(t *testing.T) {
	runOne := func(stream bool) ([]sim.Outcome, []cyc) {
		s := newSim(t, 2, 4)
		js, rts := streamJobs()
		if stream {
			s.Stream(sliceStream(js, rts))
		} else {
			for i := range js {
				require.NoError(t, s.Submit(js[i], rts[i]))
			}
		}
		var cs []cyc
		run(t, s, engine.Config{Policy: queue.StrictPriority(), Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}}, func(c backends.Cycle) {
			cs = append(cs, cyc{c.Ready.At, len(c.Ready.Pending) + c.Ready.Unwalked, len(c.Ready.Binds)})
		})
		assert.Empty(t, s.Violations())
		var each []sim.Outcome
		s.EachOutcome(func(o *sim.Outcome) { each = append(each, *o) })
		assert.Equal(t, s.Outcomes(), each)
		return each, cs
	}
	outA, cycA := runOne(false)
	outB, cycB := runOne(true)
	require.Len(t, outB, 40)
	for _, o := range outB {
		assert.True(t, o.Finished, o.ID)
	}
	assert.Equal(t, outA, outB)
	assert.Equal(t, cycA, cycB)
	assert.Greater(t, slicesMax(cycA), 0, "the jobs queue")
}

type cyc struct {
	at      time.Time
	pending int
	binds   int
}

func slicesMax(cs []cyc) int {
	m := 0
	for _, c := range cs {
		m = max(m, c.pending)
	}
	return m
}

// A job counts as submitted only once its time has come.
func TestStreamSubmitsWhenTimeComes(t *testing.T) {
	s := newSim(t, 1, 4)
	js := []*queue.Job{wholeJob("a", 0, 1, 1), wholeJob("b", time.Hour, 1, 1)}
	s.Stream(sliceStream(js, []time.Duration{time.Minute, time.Minute}))
	ctx := context.Background()
	evs, err := s.Next(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Len(t, s.Outcomes(), 1, "b has not arrived")
	p, err := s.Pending(ctx)
	require.NoError(t, err)
	require.Len(t, p, 1)
	assert.Equal(t, "a", p[0].ID)
	evs, err = s.Next(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, t0.Add(time.Hour), s.Now())
	assert.Len(t, s.Outcomes(), 2)
	// a never ran: the stream is over, but a is pending, so Next waits
	// for wake-ups; with none it closes.
	_, err = s.Next(ctx, time.Time{})
	assert.ErrorIs(t, err, backends.ErrClosed)
}

// Bad jobs end the stream with the error Submit would give, after the
// jobs before them.
func TestStreamBadJob(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		second *queue.Job
		rt     time.Duration
		want   error
	}{
		"out of order": {wholeJob("b", -time.Minute, 1, 1), time.Minute, sim.ErrInvalid},
		"duplicate":    {wholeJob("a", time.Hour, 1, 1), time.Minute, sim.ErrDuplicateJob},
		"no runtime":   {wholeJob("b", time.Hour, 1, 1), 0, sim.ErrInvalid},
		"nil":          {nil, time.Minute, sim.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSim(t, 1, 4)
			first := wholeJob("a", time.Minute, 1, 1)
			s.Stream(sliceStream([]*queue.Job{first, tc.second}, []time.Duration{time.Minute, tc.rt}))
			var err error
			for range 5 {
				if _, err = s.Next(ctx, time.Time{}); err != nil {
					break
				}
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "%v", err)
			assert.Len(t, s.Outcomes(), 1, "a was submitted")
		})
	}
}

// A finished job's record keeps its outcome only: binding it again is
// refused.
func TestBindFinishedRefused(t *testing.T) {
	s := newSim(t, 1, 4)
	require.NoError(t, s.Submit(wholeJob("a", 0, 1, 1), time.Minute))
	run(t, s, engine.Config{Policy: queue.StrictPriority()}, nil)
	require.True(t, s.Outcomes()[0].Finished)
	err := s.BindMember(context.Background(), "a", engine.Member{Node: "n0", GPUs: []int{0}})
	assert.ErrorIs(t, err, backends.ErrRefused)
	assert.Equal(t, 0, s.State(nil).BusyGPUs)
}
