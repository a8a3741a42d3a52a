package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// horizon ends a simulation at a virtual time: a demand no plan serves
// would otherwise keep pod-by-pod's useless nodes (and the run) alive.
type horizon struct {
	*sim.Sim
	end time.Time
}

func (h horizon) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	if !h.Now().Before(h.end) {
		return nil, backends.ErrClosed
	}
	if wake.After(h.end) {
		wake = h.end
	}
	return h.Sim.Next(ctx, wake)
}

// autoSim: two static nodes of 8 GPUs and a pool "gpu" of up to max more
// (none up at the start), booting in 5 minutes.
func autoSim(t *testing.T, max int, failureRate float64, seed uint64) *sim.Sim {
	t.Helper()
	s, err := sim.New(sim.Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{1}, 2, 8, "H100"), Start: t0,
		Autoscale: &sim.Autoscale{
			Pools:     []sim.Pool{{Pool: autoscale.Pool{Name: "gpu", GPUModel: "H100", GPUsPerNode: 8, Max: max, CostPerNodeHour: 10}}},
			BootDelay: 5 * time.Minute, FailureRate: failureRate, Seed: seed,
		},
	})
	require.NoError(t, err)
	return s
}

func runAuto(t *testing.T, s *sim.Sim, policy autoscale.Policy, end time.Duration) *backends.Runner {
	t.Helper()
	return runAutoMax(t, s, policy, end, 0)
}

// runAutoMax is runAuto with the Runner's pool Max set to max (> 0).
func runAutoMax(t *testing.T, s *sim.Sim, policy autoscale.Policy, end time.Duration, max int) *backends.Runner {
	t.Helper()
	ac := s.AutoscaleConfig()
	ac.Policy, ac.ScaleDownDelay = policy, 10*time.Minute
	if max > 0 {
		ac.Pools[0].Max = max
	}
	h := horizon{Sim: s, end: t0.Add(end)}
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Policy: queue.StrictPriority()},
		Backend: h, Clock: s, Autoscale: &ac,
	})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Empty(t, s.Violations())
	return r
}

// A four-node gang that the two static nodes cannot hold: the round
// after its submission (the rounds are a minute apart) asks for two pool
// nodes (the static ones hold the other two members), they boot in 5
// minutes and it runs for an hour; then the pool's idle nodes are
// released after the 10-minute delay and the run ends. The pool is paid
// for 2 nodes x (5 min + 1 h + 10 min, and up to a round's minute).
func TestAutoscaleGangGetsNodesAndReleasesThem(t *testing.T) {
	s := autoSim(t, 4, 0, 1)
	require.NoError(t, s.Submit(wholeJob("g", 0, 4, 8), time.Hour))
	r := runAuto(t, s, autoscale.GangAware, 24*time.Hour)

	out := s.Outcomes()
	require.Len(t, out, 1)
	assert.True(t, out[0].Finished)
	assert.Equal(t, t0.Add(6*time.Minute), out[0].Start, "runs when the nodes are up")
	st := s.ProvisionStats()
	assert.Equal(t, 1, st.ScaleUps)
	assert.Equal(t, 2, st.NodesAsked)
	assert.Equal(t, 2, st.NodesBooted)
	assert.Equal(t, 2, st.ScaleDowns)
	assert.InDelta(t, 2*(75.5/60), st.NodeHours["gpu"], 2*0.5/60, "2 x 75 or 76 minutes")
	assert.InDelta(t, 10*st.NodeHours["gpu"], st.Cost, 1e-9)
	as := r.AutoscaleStats()
	assert.Equal(t, 1, as.ScaleUps)
	assert.Equal(t, 2, as.ScaleDowns)
	assert.Less(t, s.Now(), t0.Add(2*time.Hour), "the run ends once the nodes are released")
}

// Every boot fails at first (seed chosen so that the first draws fail):
// the pool backs off and is asked again until nodes come up.
func TestAutoscaleFailedProvisioningBacksOffAndRetries(t *testing.T) {
	s := autoSim(t, 4, 0.5, 3)
	require.NoError(t, s.Submit(wholeJob("g", 0, 4, 8), time.Hour))
	r := runAuto(t, s, autoscale.GangAware, 24*time.Hour)

	st := s.ProvisionStats()
	as := r.AutoscaleStats()
	require.Positive(t, st.BootFailures, "the seed makes boots fail")
	assert.Equal(t, st.BootFailures, as.Failures, "each failure reported and counted")
	assert.Greater(t, st.ScaleUps, 1, "asked again after the backoff")
	out := s.Outcomes()
	require.True(t, out[0].Finished, "the gang ran in the end")
	assert.Greater(t, out[0].Start, t0.Add(5*time.Minute), "later than without failures")
	t.Logf("boot failures %d, scale-ups %d, start after %v", st.BootFailures, st.ScaleUps, out[0].Start.Sub(t0))
}

// The Runner's budget caps the pool at 4 nodes (the simulated pool holds
// 6): a 4-node job is served (2 static nodes + 2 new), a 7-node gang can
// never be (2 static + 4). Gang-aware buys only the first job's nodes and
// releases them; pod-by-pod also buys 2 nodes for the big gang's members,
// which count as its capacity and stay until the end. Over the same 6
// hours both serve the same job; gang-aware pays fewer node-hours.
func TestAutoscaleGangAwarePaysLessThanPodByPod(t *testing.T) {
	hours := map[autoscale.Policy]float64{}
	for _, pol := range []autoscale.Policy{autoscale.GangAware, autoscale.PodByPod} {
		s := autoSim(t, 6, 0, 1)
		require.NoError(t, s.Submit(wholeJob("small", 0, 4, 8), time.Hour))
		require.NoError(t, s.Submit(wholeJob("huge", time.Minute, 7, 8), time.Hour))
		r := runAutoMax(t, s, pol, 6*time.Hour, 4)
		out := s.Outcomes()
		require.Len(t, out, 2)
		assert.True(t, out[0].Finished, "%s: small ran", pol)
		assert.False(t, out[1].Started, "%s: huge can never run", pol)
		hours[pol] = s.ProvisionStats().NodeHours["gpu"]
		t.Logf("%s: %.2f node-hours, %+v, unserved %v", pol, hours[pol], s.ProvisionStats(), r.AutoscaleStats().Unserved)
	}
	assert.Less(t, hours[autoscale.GangAware], hours[autoscale.PodByPod])
	assert.InDelta(t, 2*(75.5/60), hours[autoscale.GangAware], 2*0.5/60, "2 nodes: boot, the hour, the delay")
}

func TestAutoscaleConfigErrors(t *testing.T) {
	for _, a := range []sim.Autoscale{
		{FailureRate: 1},
		{FailureRate: -0.1},
		{BootDelay: -1},
		{Pools: []sim.Pool{{Pool: autoscale.Pool{Name: "p", GPUsPerNode: 8, Max: -1}}}},
		{Pools: []sim.Pool{{Pool: autoscale.Pool{Name: "p", GPUsPerNode: 8, Max: 1, DomainLevel: "block", Domains: []autoscale.Domain{{Name: "b", Room: 1}}}}}},
	} {
		_, err := sim.New(sim.Config{Cluster: topo.Uniform([]string{"rack"}, []int{1}, 1, 8, "H100"), Start: t0, Autoscale: &a})
		assert.ErrorIs(t, err, sim.ErrInvalid, "%+v", a)
	}
	// Without pools the calls are refused.
	s := newSim(t, 1, 8)
	require.ErrorIs(t, s.ScaleUp(context.Background(), autoscale.ScaleUp{Pool: "p", Nodes: 1}), backends.ErrRefused)
	require.ErrorIs(t, s.ScaleDown(context.Background(), "n0"), backends.ErrRefused)
}

// A gang that requires a rack, with a pool of two racks (room for 2 and
// 4 nodes): the planner asks for 4 nodes in the rack that holds them,
// the simulator boots nodes of that rack, and the engine places the gang
// there.
func TestAutoscaleRackRequiredGang(t *testing.T) {
	s, err := sim.New(sim.Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{1}, 1, 8, "H100"), Start: t0,
		Autoscale: &sim.Autoscale{
			Pools: []sim.Pool{{Pool: autoscale.Pool{Name: "gpu", GPUModel: "H100", GPUsPerNode: 8, Max: 6, CostPerNodeHour: 10,
				DomainLevel: "rack", Domains: []autoscale.Domain{{Name: "pa", Room: 2}, {Name: "pb", Room: 4}}}}},
			BootDelay: 5 * time.Minute,
		},
	})
	require.NoError(t, err)
	g := wholeJob("g", 0, 4, 8)
	g.Request.Required = "rack"
	require.NoError(t, s.Submit(g, time.Hour))
	var binds []engine.Bind
	ac := s.AutoscaleConfig()
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Policy: queue.StrictPriority()},
		Backend: horizon{Sim: s, end: t0.Add(24 * time.Hour)}, Clock: s, Autoscale: &ac,
		Observe: func(c backends.Cycle) { binds = append(binds, c.Ready.Binds...) },
	})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	require.Empty(t, s.Violations())
	require.True(t, s.Outcomes()[0].Finished)
	require.Len(t, binds, 1)
	// The pool's nodes are gpu-0, gpu-1 (rack pa) and gpu-2..gpu-5 (pb).
	var nodes []string
	for _, m := range binds[0].Members {
		nodes = append(nodes, m.Node)
	}
	assert.ElementsMatch(t, []string{"gpu-2", "gpu-3", "gpu-4", "gpu-5"}, nodes)
	st := s.ProvisionStats()
	assert.Equal(t, 4, st.NodesAsked)
	assert.Equal(t, 4, st.ScaleDowns)
}
