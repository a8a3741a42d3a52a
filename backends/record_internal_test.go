package backends

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// A job handed to the engine's Intake (no submission event reaches the
// recorder) is recorded from its bind, with its queue and submission.
func TestRecorderJobFromIntake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eng, err := engine.New(engine.Config{Policy: queue.StrictPriority(), Start: t0,
		Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Cluster: topo.Uniform(nil, nil, 1, 4, "H100")})
	require.NoError(t, err)
	require.NoError(t, eng.Intake().Submit(&queue.Job{ID: "in", Queue: "q", Submit: t0,
		Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}}}}))
	var recs []JobRecord
	rc := newRecorder(RecorderFunc(func(r JobRecord) { recs = append(recs, r) }), nil)
	rd := eng.Ready()
	require.Len(t, rd.Binds, 1)
	require.NoError(t, eng.Advance(rd, engine.Outcome{}))
	rc.cycle(&rd, &engine.Outcome{})
	require.Len(t, recs, 2)
	require.Equal(t, []RecordKind{RecordSubmit, RecordStart}, []RecordKind{recs[0].Kind, recs[1].Kind})
	require.Equal(t, "q", recs[1].Queue)
	require.Equal(t, t0, recs[0].Time)
	require.Equal(t, "n0:0,n0:1", FormatGPUs(recs[1].GPUs))
	rc.event(engine.Finished(t0.Add(time.Hour), "in"), nil)
	require.Equal(t, RecordEnd, recs[2].Kind)
	require.Equal(t, int64(2000*3_600_000), recs[2].GPUMicroseconds)
}
