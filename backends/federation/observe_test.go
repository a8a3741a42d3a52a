package federation_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// observing is a member with its own Observe and OnStepError (as
// backends/kube has).
type observing struct {
	*fakeMember
	cycles []backends.Cycle
	errs   []engine.Event
}

func (o *observing) Observe(c backends.Cycle) { o.cycles = append(o.cycles, c) }
func (o *observing) OnStepError(ev engine.Event, err error) error {
	o.errs = append(o.errs, ev)
	return nil
}

var queueJob = queue.Job{ID: "j", Queue: "q", Submit: t0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}}

func TestObserveAndStepErrors(t *testing.T) {
	sl := newFake(t, "slurm", 2)
	ku := &observing{fakeMember: newFake(t, "kube", 2)}
	f, err := federation.New(federation.Config{Pools: []federation.Pool{{Name: "slurm", Backend: sl}, {Name: "kube", Backend: ku}},
		Clock: sl.Sim, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	_, err = f.Cluster(context.Background())
	require.NoError(t, err)

	pending := engine.PendingStatus{Job: "pod-job", Reason: engine.ReasonCapacity}
	f.Observe(backends.Cycle{Ready: engine.Ready{Pending: []engine.PendingStatus{pending},
		Reservations: []engine.Reservation{{Job: "pod-job", Start: t0, GPUs: roaring.BitmapOf(1, 2)}}}})
	require.Len(t, ku.cycles, 1)
	assert.Equal(t, []engine.PendingStatus{pending}, ku.cycles[0].Ready.Pending, "the pending reasons reach the member")
	assert.Empty(t, ku.cycles[0].Ready.Reservations, "GPU indices of the federation's inventory are not the member's")

	// A refused submission of a kube job goes to kube's handler; one of a
	// slurm job (no handler) is logged and skipped.
	refused := errors.New("refused")
	kev := f.Translate("kube", []engine.Event{engine.Submitted(t0, &queueJob)})[0]
	require.NoError(t, f.OnStepError(kev, refused))
	require.Len(t, ku.errs, 1)
	assert.Equal(t, "j", ku.errs[0].Job.ID)
	sev := f.Translate("slurm", []engine.Event{engine.Submitted(t0, &queueJob)})[0]
	require.NoError(t, f.OnStepError(sev, refused))
	assert.Len(t, ku.errs, 1, "not kube's")
	// A node event goes back with the member's own node name.
	nev := f.Translate("kube", []engine.Event{engine.NodeChanged(t0.Add(time.Second), "n1", topo.Ready, nil)})[0]
	require.NoError(t, f.OnStepError(nev, refused))
	require.Len(t, ku.errs, 2)
	assert.Equal(t, "n1", ku.errs[1].Node.Name)
}
