package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
)

// Config.CycleViewsOnly: Advance publishes no View for the binds it
// assumes (the latest cycle's stays, until Publish or the next cycle), and
// the decisions are those of
// an engine without it, through assumed binds, a refused bind, applied
// binds and finishes.
func TestCycleViewsOnly(t *testing.T) {
	mk := func(only bool) *engine.Engine {
		cfg := baseConfig()
		cfg.BindRetryBackoff = time.Minute
		cfg.CycleViewsOnly = only
		e, err := engine.New(cfg)
		require.NoError(t, err)
		return e
	}
	plain, only := mk(false), mk(true)
	engines := []*engine.Engine{plain, only}
	step := func(ev engine.Event) {
		for _, e := range engines {
			require.NoError(t, e.Step(ev))
		}
	}
	now := t0
	for i := range 12 {
		step(engine.Submitted(now, gpuJob(fmt.Sprintf("j%d", i), 1+i%2, 8, now)))
	}
	type jobRun struct {
		id  string
		run uint64
	}
	var running []jobRun
	total, refused := 0, 0
	for round := range 14 {
		var binds [2][]string
		var bound []jobRun // this round's, not refused
		for k, e := range engines {
			rd := e.Ready()
			for _, b := range rd.Binds {
				binds[k] = append(binds[k], fmt.Sprintf("%s/%d", b.Job, b.Run))
			}
			out := engine.Outcome{AssumeBinds: true}
			if round%2 == 0 && len(rd.Binds) > 0 {
				out.RefusedBinds = []string{rd.Binds[0].Job}
			}
			cycleView := e.View()
			require.NoError(t, e.Advance(rd, out))
			// (A refusal after a walk that stopped early publishes the
			// cycle's complete statuses: PendingAll.)
			if len(rd.Binds) > 0 && len(out.RefusedBinds) == 0 {
				if e == only {
					assert.Same(t, cycleView, e.View(), "round %d: Advance published a View", round)
				} else {
					assert.NotSame(t, cycleView, e.View(), "round %d: Advance published no View", round)
				}
			}
			if k == 0 {
				for _, b := range rd.Binds {
					if len(out.RefusedBinds) > 0 && b.Job == out.RefusedBinds[0] {
						refused++
						continue
					}
					bound = append(bound, jobRun{b.Job, b.Run})
				}
				total += len(rd.Binds)
			}
		}
		require.Equal(t, binds[0], binds[1], "round %d", round)
		now = now.Add(30 * time.Second)
		for _, jr := range bound {
			step(engine.BindApplied(now, jr.id, jr.run))
		}
		running = append(running, bound...)
		// An explicit Publish shows the applied binds running.
		only.Publish()
		for _, jr := range bound {
			_, _, isRunning := viewPlace(only.View(), jr.id)
			assert.True(t, isRunning, "%s runs after Publish", jr.id)
		}
		now = now.Add(10 * time.Minute)
		if round%2 == 1 {
			for _, jr := range running {
				step(engine.Finished(now, jr.id))
			}
			running = running[:0]
		}
		step(engine.Tick(now))
	}
	require.GreaterOrEqual(t, refused, 2)
	require.Greater(t, total, 12, "every job bound, the refused ones again")
	assert.Equal(t, len(plain.View().Running()), len(only.View().Running()))
}
