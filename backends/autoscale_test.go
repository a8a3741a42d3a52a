package backends_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// provFake is a fake backend that is also a Provisioner and its own
// virtual clock: Next hands out the script, then moves the clock to each
// wake (at most maxWakes times) and delivers the nodes that came up.
type provFake struct {
	*fake
	mu       sync.Mutex
	now      time.Time
	maxWakes int
	wakeN    int
	nodes    map[string]*autoscale.Node // the pool's nodes up or booting
	failNext int                        // scale-ups that fail to provision
	failed   []backends.ProvisionFailure
	arriving []string // booted: delivered at the next Next
	ups      []autoscale.ScaleUp
	downs    []string
	upAt     []time.Time
}

func (p *provFake) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *provFake) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func (p *provFake) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	if len(p.script) > 0 {
		return p.fake.Next(ctx, wake)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if wake.IsZero() || p.wakeN >= p.maxWakes {
		return nil, backends.ErrClosed
	}
	p.wakeN++
	if wake.After(p.now) {
		p.now = wake
	}
	evs := []engine.Event{}
	for _, n := range p.arriving {
		p.nodes[n].Booting = false
		var labels map[string]string
		for _, sn := range p.spec.Nodes {
			if sn.Name == n {
				labels = sn.Labels
			}
		}
		evs = append(evs, engine.NodeChanged(p.now, n, topo.Ready, labels))
	}
	p.arriving = nil
	return evs, nil
}

func (p *provFake) ScaleUp(_ context.Context, up autoscale.ScaleUp) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ups = append(p.ups, up)
	p.upAt = append(p.upAt, p.now)
	if p.failNext > 0 {
		p.failNext--
		p.failed = append(p.failed, backends.ProvisionFailure{At: p.now, Pool: up.Pool, Nodes: up.Nodes, Reason: "no capacity in the zone"})
		return nil
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		if up.Nodes == 0 {
			break
		}
		if _, ok := p.nodes[name]; !ok {
			p.nodes[name] = &autoscale.Node{Name: name, Pool: "p", Booting: true}
			p.arriving = append(p.arriving, name)
			up.Nodes--
		}
	}
	if up.Nodes > 0 {
		return errors.New("out of nodes")
	}
	return nil
}

func (p *provFake) ScaleDown(_ context.Context, node string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downs = append(p.downs, node)
	delete(p.nodes, node)
	return nil
}

func (p *provFake) Provisioning(context.Context) (backends.ProvisionState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st backends.ProvisionState
	for _, name := range []string{"n0", "n1", "n2", "n3"} {
		if n, ok := p.nodes[name]; ok {
			st.Nodes = append(st.Nodes, *n)
		}
	}
	st.Failed, p.failed = p.failed, nil
	return st, nil
}

// newProvFake: four nodes of 8 GPUs, n0 up, n1..n3 down until provisioned.
func newProvFake() *provFake {
	f := newFake(4, 8)
	for i := 1; i < 4; i++ {
		f.spec.Nodes[i].State = topo.Down
	}
	f.closeAtEnd = true
	return &provFake{fake: f, now: t0, maxWakes: 20, nodes: map[string]*autoscale.Node{"n0": {Name: "n0", Pool: "p"}}}
}

func provConfig(p *provFake) backends.RunnerConfig {
	return backends.RunnerConfig{
		Engine: engine.Config{
			Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
			Policy: queue.StrictPriority(),
		},
		Backend: p, Clock: p,
		Autoscale: &autoscale.Config{Pools: []autoscale.Pool{
			{Name: "p", GPUModel: "H100", GPUsPerNode: 8, Min: 1, Max: 4, CostPerNodeHour: 1},
		}, ScaleDownDelay: 3 * time.Minute},
	}
}

func TestRunnerAutoscaleConfigErrors(t *testing.T) {
	cfg := config(newFake(1, 8), &clock{}, new([]backends.Cycle))
	cfg.Autoscale = &autoscale.Config{}
	_, err := backends.NewRunner(cfg)
	require.ErrorIs(t, err, backends.ErrNotProvisioner)
	require.ErrorIs(t, err, backends.ErrInvalidConfig)

	p := newProvFake()
	cfg = provConfig(p)
	cfg.Autoscale.Pools[0].Max = -1
	_, err = backends.NewRunner(cfg)
	require.ErrorIs(t, err, autoscale.ErrInvalid)
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	cfg = provConfig(p)
	cfg.AutoscaleInterval = -time.Second
	_, err = backends.NewRunner(cfg)
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	cfg = provConfig(p)
	cfg.Engine.CycleViewsOnly = true // autoscaling reads Views between cycles
	_, err = backends.NewRunner(cfg)
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	cfg.Engine.CycleViewsOnly = false
	_, err = backends.NewRunner(cfg)
	require.NoError(t, err)
}

// A two-node gang on one node up: the first provisioning fails and the
// pool backs off a minute; the next round after it asks again, the node
// boots and the gang runs. Nothing is released while it runs.
func TestRunnerAutoscalesAGang(t *testing.T) {
	p := newProvFake()
	p.failNext = 1
	p.script = [][]engine.Event{{engine.Submitted(t0, job("g", 2, 8))}}
	r, err := backends.NewRunner(provConfig(p))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))

	require.Len(t, p.ups, 2, "one failed, one retried")
	assert.Equal(t, autoscale.ScaleUp{Pool: "p", Nodes: 1, Jobs: []string{"g"}}, p.ups[0])
	assert.Equal(t, p.ups[0], p.ups[1])
	// Rounds every minute: asked at t0+1m (the first round, at t0, came
	// before the submission); the failure is read at t0+2m, backing off
	// to t0+3m; asked again then.
	assert.Equal(t, []time.Time{t0.Add(time.Minute), t0.Add(3 * time.Minute)}, p.upAt)
	st := r.AutoscaleStats()
	assert.Equal(t, 2, st.ScaleUps)
	assert.Equal(t, 1, st.Failures)
	assert.Empty(t, p.downs, "n0 and n1 run the gang")
	require.Len(t, r.View().Running(), 1)
	assert.Equal(t, "g", r.View().Running()[0].Job)
}

// A job pinned by a node selector counts only the capacity it may use:
// n0, a free node no pool holds, is labelled pool=a; the job selects
// pool=b, the label of the pool's nodes (Pool.Labels). The Runner asks a
// node of the pool for it and it runs there, not on n0 (which the
// planner used to count as the job's capacity: nothing was asked and the
// job waited for ever).
func TestRunnerAutoscaleHonoursSelectors(t *testing.T) {
	p := newProvFake()
	delete(p.nodes, "n0") // n0: no pool's
	p.spec.Nodes[0].Labels = map[string]string{"pool": "a"}
	for i := 1; i < 4; i++ {
		p.spec.Nodes[i].Labels = map[string]string{"pool": "b"}
	}
	j := job("g", 1, 8)
	j.Request.Groups[0].Selector = map[string]string{"pool": "b"}
	p.script = [][]engine.Event{{engine.Submitted(t0, j)}}
	cfg := provConfig(p)
	cfg.Autoscale.Pools[0].Min = 0
	cfg.Autoscale.Pools[0].Labels = map[string]string{"pool": "b"}
	r, err := backends.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.NotEmpty(t, p.ups)
	assert.Equal(t, autoscale.ScaleUp{Pool: "p", Nodes: 1, Jobs: []string{"g"}}, p.ups[0])
	running := r.View().Running()
	require.Len(t, running, 1)
	assert.Equal(t, "g", running[0].Job)
	require.Len(t, p.bound["g"], 1)
	assert.Equal(t, "n1", p.bound["g"][0].Node)
}

// Idle nodes above Min are released after the delay, by name, never
// below Min.
func TestRunnerAutoscaleReleasesIdleNodes(t *testing.T) {
	p := newProvFake()
	for i := 1; i < 4; i++ {
		p.spec.Nodes[i].State = topo.Ready
		name := p.spec.Nodes[i].Name
		p.nodes[name] = &autoscale.Node{Name: name, Pool: "p"}
	}
	p.maxWakes = 6
	r, err := backends.NewRunner(provConfig(p))
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	// Idle from the round at t0; released at the round at t0+3m.
	assert.Equal(t, []string{"n0", "n1", "n2"}, p.downs)
	assert.Equal(t, 3, r.AutoscaleStats().ScaleDowns)
	assert.Empty(t, p.ups)
}
