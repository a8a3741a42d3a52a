package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/require"
)

// Estimates and Explanations read only the View: a reader may compute
// them while the engine goes on (run under -race).
func TestExplainWhileTheEngineRuns(t *testing.T) {
	e, err := engine.New(engine.Config{
		Cluster:  topo.Uniform([]string{"rack"}, []int{2}, 2, 8, "H100"),
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q", Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(24)}}}}},
		Policy:   queue.StrictPriority(),
		Backfill: engine.BackfillConfig{Mode: engine.BackfillConservative},
		Start:    t0,
	})
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	explained := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v := e.View(); v != nil {
				for _, x := range v.Explanations() {
					if x.Limit != "" {
						explained++
					}
				}
				_ = v.Estimates()
			}
		}
	}()
	now := t0
	var running []string
	for i := range 60 {
		j := &queue.Job{ID: fmt.Sprintf("j%02d", i), Queue: "q", Submit: now,
			Request:         gang.Request{Groups: []gang.Group{{Members: 1 + i%3, GPUsPerMember: []int{2, 4, 8}[i%3]}}},
			RuntimeEstimate: 30 * time.Minute, RuntimeLimit: time.Hour}
		require.NoError(t, e.Step(engine.Submitted(now, j)))
		rd := e.Ready()
		for _, b := range rd.Binds {
			running = append(running, b.Job)
		}
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
		now = now.Add(10 * time.Minute)
		if len(running) > 0 && i%2 == 1 {
			require.NoError(t, e.Step(engine.Finished(now, running[0])))
			running = running[1:]
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d explanations read while the engine ran", explained)
}
