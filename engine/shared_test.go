package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sharedConfig() engine.Config {
	return engine.Config{
		Cluster: topo.Spec{
			Levels: []string{"rack"},
			Nodes: []topo.NodeSpec{
				{Name: "m0", Domains: []string{"r0"}, GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "3g 2g 1g 1g"},
				{Name: "t0", Domains: []string{"r0"}, GPUs: 1, GPUModel: "A10", Sharing: mig.Sharing{Mode: mig.TimeSlicing, Replicas: 4}},
			},
		},
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
		Start:    t0,
	}
}

func fracJob(id string, members int, milli int, profile string) *queue.Job {
	return &queue.Job{ID: id, Queue: "team", Submit: t0, RuntimeEstimate: time.Hour, RuntimeLimit: time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: members, GPUMilli: milli, MIGProfile: profile}}}}
}

func TestConfigValidateMIG(t *testing.T) {
	for name, mutate := range map[string]func(*engine.Config){
		"negative factor":  func(c *engine.Config) { c.MIG.WaitFactor = -1 },
		"negative max":     func(c *engine.Config) { c.MIG.MaxGPUs = -1 },
		"negative backoff": func(c *engine.Config) { c.MIG.RetryBackoff = -time.Second },
		"negative cost":    func(c *engine.Config) { c.MIG.Costs.Reset = -time.Second },
	} {
		c := sharedConfig()
		mutate(&c)
		assert.ErrorIs(t, c.Validate(), engine.ErrInvalidConfig, name)
	}
}

func TestAdoptFractional(t *testing.T) {
	e, err := engine.New(sharedConfig())
	require.NoError(t, err)
	h100, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)
	l, err := mig.ParseLayout(h100, "3g 2g 1g 1g")
	require.NoError(t, err)
	in, ok := l.At(0) // the 3g instance
	require.True(t, ok)

	// A MIG member names its instance; a share names its GPU.
	a := fracJob("a", 1, 0, in.Profile.Name())
	require.NoError(t, e.Step(engine.Adopted(t0, a, []engine.Member{{Node: "m0", GPUs: []int{0}, Fractional: true, Instance: in}})))
	b := fracJob("b", 2, 500, "")
	require.NoError(t, e.Step(engine.Adopted(t0, b, []engine.Member{
		{Node: "t0", GPUs: []int{0}, Fractional: true}, {Node: "t0", GPUs: []int{0}, Fractional: true}})))

	// The instance is taken: a second adoption of it is refused, whole.
	err = e.Step(engine.Adopted(t0, fracJob("c", 1, 0, in.Profile.Name()), []engine.Member{{Node: "m0", GPUs: []int{0}, Fractional: true, Instance: in}}))
	assert.ErrorIs(t, err, engine.ErrInvalidEvent)
	// A fractional member must say so.
	err = e.Step(engine.Adopted(t0, fracJob("d", 1, 250, ""), []engine.Member{{Node: "t0", GPUs: []int{0}}}))
	assert.ErrorIs(t, err, engine.ErrInvalidEvent)

	// The time-sliced GPU is full (2 x 2 replicas): a 250m job waits; the
	// 1g instances are free.
	require.NoError(t, e.Step(engine.Submitted(t0, fracJob("e", 1, 250, ""))))
	require.NoError(t, e.Step(engine.Submitted(t0, fracJob("f", 2, 0, "1g"))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1, "%+v", rd)
	assert.Equal(t, "f", rd.Binds[0].Job)
	for _, m := range rd.Binds[0].Members {
		assert.True(t, m.Fractional)
		assert.Equal(t, "1g.10gb", m.Instance.Profile.Name())
		assert.False(t, m.Created, "the layout has two idle 1g instances")
	}
	require.Len(t, rd.Pending, 1)
	assert.Equal(t, engine.ReasonCapacity, rd.Pending[0].Reason)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))

	// A node joins: the cluster is rebuilt and every grant is kept.
	require.NoError(t, e.Step(engine.NodeAdded(t0, topo.NodeSpec{Name: "x", Domains: []string{"r0"}, GPUs: 1, GPUModel: "H100-80GB", MIG: true})))
	require.NoError(t, e.Step(engine.Finished(t0.Add(time.Minute), "b")))
	rd = e.Ready()
	require.Len(t, rd.Binds, 1)
	assert.Equal(t, "e", rd.Binds[0].Job, "b's replicas were released after the rebuild")
	running := map[string]int{}
	for _, r := range e.View().Running() {
		running[r.Job] = r.Shared
	}
	assert.Equal(t, map[string]int{"a": 1, "e": 1, "f": 2}, running)
}

func TestAdvanceRefusedMIGNotMade(t *testing.T) {
	e, err := engine.New(sharedConfig())
	require.NoError(t, err)
	rd := e.Ready()
	err = e.Advance(rd, engine.Outcome{RefusedMIG: []engine.MIGReconfiguration{{Node: "m0", GPU: 0}}})
	assert.ErrorIs(t, err, engine.ErrInvalidEvent)
}

// A GPU in MIG mode is split into seven 1g instances. A one-member job
// takes one of them; a 3g job finds no 3g instance and no free memory
// slices. Once it has waited longer than a reconfiguration costs, the
// engine plans one (destroy three idle 1g instances, create a 3g; the
// instance in use stays), the backend applies it, and the next cycle binds
// the job.
func Example_mig() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{
		Cluster: topo.Spec{Nodes: []topo.NodeSpec{
			{Name: "gpu0", GPUs: 1, GPUModel: "H100-80GB", MIG: true, MIGLayout: "1g 1g 1g 1g 1g 1g 1g"},
		}},
		Queues:   queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
		Start:    t0,
	})
	if err != nil {
		panic(err)
	}
	mk := func(id string, profile string) *queue.Job {
		return &queue.Job{ID: id, Queue: "team", Submit: t0, RuntimeEstimate: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: profile}}}}
	}
	_ = e.Step(engine.Submitted(t0, mk("small", "1g.10gb")))
	_ = e.Step(engine.Submitted(t0, mk("big", "3g.40gb")))
	rd := e.Ready()
	m := rd.Binds[0].Members[0]
	fmt.Println("bind", rd.Binds[0].Job, m.Node, m.Instance, "created:", m.Created)
	fmt.Println("pending", rd.Pending[0].Job, rd.Pending[0].Reason)
	_ = e.Advance(rd, engine.Outcome{})

	_ = e.Step(engine.Tick(t0.Add(time.Minute)))
	rd = e.Ready()
	for _, r := range rd.MIG {
		fmt.Println("reconfigure", r.Node, r.GPU, "destroy", r.Destroy, "create", r.Create)
	}
	fmt.Println("pending", rd.Pending[0].Job, rd.Pending[0].Reason)
	_ = e.Advance(rd, engine.Outcome{})

	rd = e.Ready()
	fmt.Println("bind", rd.Binds[0].Job, rd.Binds[0].Members[0].Instance)
	// Output:
	// bind small gpu0 1g.10gb@0 created: false
	// pending big capacity
	// reconfigure gpu0 0 destroy [1g.10gb@4 1g.10gb@5 1g.10gb@6] create [3g.40gb@4]
	// pending big reconfiguring
	// bind big 3g.40gb@4
}
