package slurm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/topo"
)

// A node berth resumed that SLURM flags NOT_RESPONDING within ResumeGrace
// is draining (kept, nothing new starts), not down; after the grace, or
// with a down base state, or for a node berth did not resume, it is down.
func TestNodeStateResumeGrace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := &Backend{}
	flaky := nodeRec{Name: "n1", State: "idle", StateFlags: []string{"NOT_RESPONDING"}}
	assert.Equal(t, topo.Down, b.nodeStateAt(flaky, t0), "not resumed by berth")
	b.noteResumed("n1", t0)
	assert.Equal(t, topo.Draining, b.nodeStateAt(flaky, t0.Add(time.Second)))
	assert.Equal(t, topo.Draining, b.nodeStateAt(flaky, t0.Add(ResumeGrace-time.Second)))
	down := nodeRec{Name: "n1", State: "down", StateFlags: []string{"NOT_RESPONDING"}}
	assert.Equal(t, topo.Down, b.nodeStateAt(down, t0.Add(time.Second)), "down base state")
	ok := nodeRec{Name: "n1", State: "idle"}
	assert.Equal(t, topo.Ready, b.nodeStateAt(ok, t0.Add(time.Second)))
	assert.Equal(t, topo.Down, b.nodeStateAt(flaky, t0.Add(ResumeGrace)), "after the grace")
	assert.Equal(t, topo.Down, b.nodeStateAt(flaky, t0.Add(time.Second)), "the grace is spent once over")
	other := nodeRec{Name: "n2", State: "idle", StateFlags: []string{"NOT_RESPONDING"}}
	assert.Equal(t, topo.Down, b.nodeStateAt(other, t0.Add(time.Second)))
}

// RequeueJob refuses a job berth does not run (before calling SLURM) and
// a bad ID.
func TestRequeueJobRefuses(t *testing.T) {
	b := &Backend{jobs: map[string]*tracked{"7": {state: inPending}}}
	for _, id := range []string{"7", "8", "x; rm"} {
		err := b.RequeueJob(context.Background(), id)
		assert.ErrorIs(t, err, backends.ErrRefused, id)
	}
}
