package engine_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func baseConfig() engine.Config {
	return engine.Config{
		Cluster: topo.Uniform([]string{"block", "rack"}, []int{2, 2}, 2, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}},
		Start:   t0,
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, (&engine.Config{}).Validate(), "the zero config is valid: no nodes, no queues")
	for name, mutate := range map[string]func(*engine.Config){
		"bad cluster":      func(c *engine.Config) { c.Cluster.Nodes[0].GPUs = 0 },
		"bad tree":         func(c *engine.Config) { c.Queues.Queues = append(c.Queues.Queues, queue.QueueSpec{Name: "team"}) },
		"negative aging":   func(c *engine.Config) { c.Pending.AgingPeriod = -1 },
		"intake too large": func(c *engine.Config) { c.IntakeCapacity = 1<<30 + 1 },
		"unknown backfill": func(c *engine.Config) { c.Backfill.Mode = 9 },
		"negative depth":   func(c *engine.Config) { c.Backfill.Depth = -1 },
		"negative window":  func(c *engine.Config) { c.Backfill.Window = -time.Second },
		"negative probes":  func(c *engine.Config) { c.Backfill.MaxProbes = -1 },
		"negative victims": func(c *engine.Config) { c.Preemption.MaxVictimsPerCycle = -1 },
		"negative preemptors": func(c *engine.Config) {
			c.Preemption.MaxPreemptorsPerCycle = -1
		},
		"unknown failure policy": func(c *engine.Config) { c.NodeFailure = 7 },
		"negative backoff":       func(c *engine.Config) { c.BindRetryBackoff = -time.Second },
	} {
		t.Run(name, func(t *testing.T) {
			c := baseConfig()
			c.Cluster.Nodes = append([]topo.NodeSpec(nil), c.Cluster.Nodes...)
			mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, engine.ErrInvalidConfig)
			_, err = engine.New(c)
			assert.ErrorIs(t, err, engine.ErrInvalidConfig)
		})
	}
}

func gpuJob(id string, members, per int, at time.Time) *queue.Job {
	return &queue.Job{ID: id, Queue: "team", Submit: at, RuntimeEstimate: time.Hour, RuntimeLimit: time.Hour,
		Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}}}
}

func TestStepErrors(t *testing.T) {
	e, err := engine.New(baseConfig())
	require.NoError(t, err)
	require.NoError(t, e.Step(engine.Submitted(t0.Add(time.Hour), gpuJob("a", 1, 8, t0))))

	assert.ErrorIs(t, e.Step(engine.Tick(t0)), engine.ErrTimeBackwards)
	at := t0.Add(time.Hour)
	assert.ErrorIs(t, e.Step(engine.Submitted(at, gpuJob("a", 1, 1, t0))), engine.ErrDuplicateJob)
	assert.ErrorIs(t, e.Step(engine.Submitted(at, nil)), engine.ErrInvalidEvent)
	assert.ErrorIs(t, e.Step(engine.Finished(at, "nope")), engine.ErrUnknownJob)
	assert.ErrorIs(t, e.Step(engine.Finished(at, "a")), engine.ErrInvalidEvent, "a pending job cannot finish")
	assert.ErrorIs(t, e.Step(engine.NodeFailed(at, "nope")), engine.ErrUnknownNode)
	assert.ErrorIs(t, e.Step(engine.Event{Kind: 99, Time: at}), engine.ErrInvalidEvent)
	bad := gpuJob("b", 1, 1, t0)
	bad.Queue = "nowhere"
	assert.ErrorIs(t, e.Step(engine.Submitted(at, bad)), queue.ErrUnknownQueue)
	assert.ErrorIs(t, e.Step(engine.NodeAdded(at, topo.NodeSpec{Name: "n0", Domains: []string{"b0", "r0"}, GPUs: 8})), engine.ErrInvalidEvent)
	assert.ErrorIs(t, e.Step(engine.Adopted(at, gpuJob("c", 1, 8, t0), []engine.Member{{Node: "zz", GPUs: []int{0}}})), engine.ErrUnknownNode)
	assert.ErrorIs(t, e.Step(engine.Adopted(at, gpuJob("c", 2, 8, t0), []engine.Member{{Node: "n0", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}})),
		engine.ErrInvalidEvent, "a gang of two adopted with one member is not whole")

	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	assert.ErrorIs(t, e.Advance(engine.Ready{Seq: rd.Seq - 1}, engine.Outcome{}), engine.ErrStaleReady)
	assert.ErrorIs(t, e.Advance(rd, engine.Outcome{RefusedBinds: []string{"zz"}}), engine.ErrInvalidEvent)
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	assert.False(t, e.HasReady())
	assert.Equal(t, rd.Seq, e.Ready().Seq, "no change, no cycle")
}

// A node added while a job runs on a cordoned node: the rebuilt cluster
// keeps the job on its GPUs and the node cordoned.
func TestNodeAddedKeepsJobsAndStates(t *testing.T) {
	e, err := engine.New(baseConfig())
	require.NoError(t, err)
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("a", 1, 4, t0))))
	rd := e.Ready()
	require.Len(t, rd.Binds, 1)
	node := rd.Binds[0].Members[0].Node
	require.NoError(t, e.Advance(rd, engine.Outcome{}))
	require.NoError(t, e.Step(engine.NodeChanged(t0, node, topo.Cordoned, nil)))
	require.NoError(t, e.Step(engine.NodeAdded(t0, topo.NodeSpec{Name: "new", Domains: []string{"b0", "r0"}, GPUs: 8, GPUModel: "H100"})))
	c := e.Cluster()
	id, ok := c.NodeByName("new")
	require.True(t, ok)
	assert.Equal(t, 72, c.NumGPUs())
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("b", 9, 8, t0))))
	rd = e.Ready()
	require.Len(t, rd.Binds, 0, "one node is cordoned, half of another is busy: nine whole nodes are not free")
	require.NoError(t, e.Step(engine.Cancelled(t0, "b")))
	require.NoError(t, e.Step(engine.Submitted(t0, gpuJob("c", 8, 8, t0))))
	rd = e.Ready()
	require.Len(t, rd.Binds, 1)
	nodes := map[string]bool{}
	for _, m := range rd.Binds[0].Members {
		nodes[m.Node] = true
	}
	assert.True(t, nodes[c.NodeName(id)], "the new node is used")
	assert.False(t, nodes[node], "the cordoned node is not")
	running := e.View().Running()
	require.Len(t, running, 2)
	assert.Equal(t, "a", running[0].Job)
	assert.Equal(t, 4, running[0].GPUs)
}

// Submissions from many goroutines through the intake, and observers
// reading the View, while the owner runs cycles (run with -race).
func TestIntakeAndViewConcurrency(t *testing.T) {
	cfg := baseConfig()
	cfg.Cluster = topo.Uniform([]string{"rack"}, []int{4}, 4, 8, "H100")
	e, err := engine.New(cfg)
	require.NoError(t, err)
	const producers, each = 4, 25
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				j := gpuJob(fmt.Sprintf("p%d-%d", p, i), 1, 1, t0)
				for errors.Is(e.Intake().Submit(j), queue.ErrIntakeFull) {
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
				v := e.View()
				_ = v.Running()
				_ = len(v.Pending)
			}
		}
	}()
	placed := 0
	now := t0
	for round := 0; placed < producers*each; round++ {
		require.Less(t, round, 100000, "the intake is not drained")
		now = now.Add(time.Second)
		require.NoError(t, e.Step(engine.Tick(now)))
		rd := e.Ready()
		placed += len(rd.Binds)
		require.NoError(t, e.Advance(rd, engine.Outcome{}))
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	assert.Len(t, e.View().Running(), producers*each)
	assert.Equal(t, 128-producers*each, e.View().FreeGPUs)
}
