package engine_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// migAsyncEngine is Example_mig's engine up to the cycle that plans the
// change (destroy 1g@4..6, create 3g@4 for "big"), advanced with
// AssumeMIG and AssumeBinds; it returns the change.
func migAsyncEngine(t *testing.T, journal bool) (*engine.Engine, engine.MIGReconfiguration) {
	t.Helper()
	e, err := engine.New(engine.Config{
		Cluster: topo.Spec{Nodes: []topo.NodeSpec{
			{Name: "gpu0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g 1g 1g 1g 1g 1g 1g"},
		}},
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
		MIG:      engine.MIGConfig{RetryBackoff: 10 * time.Minute},
		Start:    t0,
	})
	require.NoError(t, err)
	if journal {
		require.NoError(t, e.EnableJournal())
	}
	require.NoError(t, e.Step(engine.Submitted(t0, migJob("small", "1g.10gb"))))
	require.NoError(t, e.Step(engine.Submitted(t0, migJob("big", "3g.40gb"))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	out := engine.Outcome{AssumeBinds: true, AssumePreemptions: true, AssumeMIG: true}
	require.NoError(t, e.Advance(rd, out))
	require.NoError(t, e.Step(engine.BindApplied(t0, "small", rd.Binds[0].Run)))
	require.NoError(t, e.Step(engine.Tick(t0.Add(time.Minute))))
	rd = e.Ready()
	require.Len(t, rd.MIG, 1, "%+v", rd.Pending)
	ch := rd.MIG[0]
	assert.Equal(t, rd.Seq, ch.Seq, "a change names the Ready that planned it")
	require.NoError(t, e.Advance(rd, out))
	got, unknown, ok := e.MIGChange("gpu0", 0)
	require.True(t, ok, "an assumed change is in flight")
	assert.False(t, unknown)
	assert.Equal(t, ch.Seq, got.Seq)
	assert.Equal(t, []engine.MIGReconfiguration{got}, e.MIGChanges())
	return e, ch
}

func migJob(id, profile string) *queue.Job {
	return &queue.Job{ID: id, Queue: "team", Submit: t0, RuntimeEstimate: time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: profile}}}}
}

// placedOneG submits n 1g jobs at at and returns how many the next cycle
// binds: on the old layout (six idle 1g instances besides small's) all
// four of n = 4, on the new one (three idle 1g, no free slice) three.
func placedOneG(t *testing.T, e *engine.Engine, at time.Time, prefix string, n int) int {
	t.Helper()
	for i := range n {
		require.NoError(t, e.Step(engine.Submitted(at, migJob(fmt.Sprintf("%s%d", prefix, i), "1g.10gb"))))
	}
	rd := e.Ready()
	k := 0
	for _, b := range rd.Binds {
		if b.Members[0].Instance.Profile.Name() == "1g.10gb" {
			k++
		}
	}
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))
	return k
}

func TestMIGAssumedApplied(t *testing.T) {
	e, ch := migAsyncEngine(t, false)
	// The new layout is booked: the next cycle binds big on the new 3g
	// instance while the change is in flight (a caller issues the bind
	// after the change succeeded).
	at := t0.Add(time.Minute)
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	assert.Equal(t, "big", rd.Binds[0].Job)
	assert.Equal(t, "3g.40gb@4", rd.Binds[0].Members[0].Instance.String())
	assert.False(t, rd.Binds[0].Members[0].Created)
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))

	// Unknown, then applied.
	require.NoError(t, e.Step(engine.MIGUnknown(at, ch)))
	_, unknown, ok := e.MIGChange("gpu0", 0)
	assert.True(t, ok && unknown)
	require.NoError(t, e.Step(engine.MIGApplied(at, ch)))
	_, _, ok = e.MIGChange("gpu0", 0)
	assert.False(t, ok)
	assert.Empty(t, e.MIGChanges())
	// A late failure of the same change is ignored: big stays bound.
	require.NoError(t, e.Step(engine.MIGFailed(at, ch, "late")))
	_, _, ok = e.Binding("big")
	assert.True(t, ok, "big's bind is untouched by a late answer")
	assert.Equal(t, 3, placedOneG(t, e, at, "x", 4), "the new layout stays")
}

func TestMIGAssumedFailed(t *testing.T) {
	e, ch := migAsyncEngine(t, false)
	at := t0.Add(2 * time.Minute)
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	require.Equal(t, "big", rd.Binds[0].Job)
	run := rd.Binds[0].Run
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))

	// An answer about another change of the GPU is a late one.
	other := ch
	other.Seq++
	require.NoError(t, e.Step(engine.MIGFailed(at, other, "not this one")))
	_, _, ok := e.MIGChange("gpu0", 0)
	require.True(t, ok)

	require.NoError(t, e.Step(engine.MIGFailed(at, ch, "nvml: in use")))
	_, _, ok = e.MIGChange("gpu0", 0)
	assert.False(t, ok)
	// big depended on the change: withdrawn, pending again, no try counted.
	_, _, ok = e.Binding("big")
	assert.False(t, ok)
	_, held := e.Held("big")
	assert.False(t, held)
	// A late outcome of its bind changes nothing.
	require.NoError(t, e.Step(engine.BindApplied(at, "big", run)))
	_, ok = e.Members("big")
	assert.False(t, ok, "big is not running")

	// The old layout is booked again: four more 1g jobs all fit, and no
	// change is planned during the backoff.
	rd = e.Ready()
	assert.Empty(t, rd.MIG, "backoff")
	assert.Empty(t, rd.Binds)
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))
	assert.Equal(t, 4, placedOneG(t, e, at, "x", 4))
}

func TestMIGAssumedFailedKeepsOtherBinds(t *testing.T) {
	e, ch := migAsyncEngine(t, false)
	at := t0.Add(2 * time.Minute)
	// A 1g job bound on an instance the old layout has too does not
	// depend on the change.
	require.NoError(t, e.Step(engine.Submitted(at, migJob("one", "1g.10gb"))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 2)
	require.NoError(t, e.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))
	require.NoError(t, e.Step(engine.MIGFailed(at, ch, "refused")))
	_, _, ok := e.Binding("one")
	assert.True(t, ok, "one holds 1g@1, in both layouts")
	_, _, ok = e.Binding("big")
	assert.False(t, ok)
}

func TestMIGOutcomeInvalid(t *testing.T) {
	e, _ := migAsyncEngine(t, false)
	err := e.Step(engine.MIGApplied(t0.Add(time.Minute), engine.MIGReconfiguration{GPU: 0, Seq: 1}))
	assert.ErrorIs(t, err, engine.ErrInvalidEvent)
	// An answer for a GPU with no change is a late one.
	require.NoError(t, e.Step(engine.MIGFailed(t0.Add(time.Minute), engine.MIGReconfiguration{Node: "nope", Seq: 2}, "x")))
}

// A saved state keeps a change in flight: the restored engine has it,
// once (its outcome event applies, and the GPU gets no second change).
func TestMIGAssumedSaveRestore(t *testing.T) {
	for _, outcome := range []string{"applied", "failed"} {
		t.Run(outcome, func(t *testing.T) {
			e, ch := migAsyncEngine(t, true)
			require.NoError(t, e.Step(engine.MIGUnknown(t0.Add(time.Minute), ch)))
			st, err := e.Save()
			require.NoError(t, err)
			b, err := json.Marshal(st)
			require.NoError(t, err)
			var st2 engine.State
			require.NoError(t, json.Unmarshal(b, &st2))
			cfg := engine.Config{
				Cluster:  st2.Cluster,
				Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
				Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
				MIG:      engine.MIGConfig{RetryBackoff: 10 * time.Minute},
			}
			r, err := engine.Restore(cfg, &st2)
			require.NoError(t, err)
			got, unknown, ok := r.MIGChange("gpu0", 0)
			require.True(t, ok, "restored with the change in flight")
			assert.True(t, unknown)
			assert.Equal(t, ch.Seq, got.Seq)
			assert.Equal(t, ch.To, got.To)
			at := t0.Add(2 * time.Minute)
			require.NoError(t, r.Step(engine.Tick(at)))
			rd := r.Ready()
			assert.Empty(t, rd.MIG, "no second change of the GPU")
			assert.Empty(t, rd.Binds, "nothing is placed on a GPU whose change is unknown")
			require.Len(t, rd.Pending, 1)
			assert.Equal(t, engine.ReasonReconfiguring, rd.Pending[0].Reason)
			require.NoError(t, r.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))
			if outcome == "applied" {
				require.NoError(t, r.Step(engine.MIGApplied(at, ch)))
				assert.Empty(t, r.MIGChanges())
				rd = r.Ready()
				require.Len(t, rd.Binds, 1)
				assert.Equal(t, "big", rd.Binds[0].Job)
				assert.Equal(t, "3g.40gb@4", rd.Binds[0].Members[0].Instance.String())
				require.NoError(t, r.Advance(rd, engine.Outcome{AssumeBinds: true, AssumeMIG: true}))
				assert.Equal(t, 3, placedOneG(t, r, at, "x", 4))
				return
			}
			require.NoError(t, r.Step(engine.MIGFailed(at, ch, "refused")))
			assert.Empty(t, r.MIGChanges())
			_, _, ok = r.Binding("big")
			assert.False(t, ok)
			assert.Equal(t, 4, placedOneG(t, r, at, "x", 4))
		})
	}
}
