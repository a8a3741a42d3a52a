package slurm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/topo"
)

// The power-saving states sinfo --json showed on SLURM 22.05 (state and
// state_flags, from the test cluster), what the engine is told of each,
// and the pool's view: a powered-down, powering-up or powering-down node
// is never Ready; one asked to power down that still runs jobs drains.
func TestPowerStates(t *testing.T) {
	for _, c := range []struct {
		name   string
		state  string
		flags  []string
		reason string
		engine topo.NodeState
		power  power
		failed bool
	}{
		{"regular idle", "idle", nil, "", topo.Ready, powerUp, false},
		{"cloud up", "idle", []string{"CLOUD"}, "", topo.Ready, powerUp, false},
		{"cloud up, busy", "mixed", []string{"CLOUD"}, "", topo.Ready, powerUp, false},
		{"powered down", "idle", []string{"CLOUD", "POWERED_DOWN"}, "", topo.Down, powerOff, false},
		{"power up asked", "idle", []string{"CLOUD", "POWER_UP", "POWERED_DOWN"}, "", topo.Down, powerBooting, false},
		{"powering up", "idle", []string{"CLOUD", "POWERING_UP"}, "", topo.Down, powerBooting, false},
		{"power down asked (ASAP)", "idle", []string{"CLOUD", "DRAIN", "POWER_DOWN"}, "POWER_DOWN_ASAP", topo.Draining, powerGoing, false},
		{"power down asked, busy", "mixed", []string{"CLOUD", "DRAIN", "POWER_DOWN"}, "POWER_DOWN_ASAP", topo.Draining, powerGoing, false},
		{"powering down", "idle", []string{"CLOUD", "POWERING_DOWN"}, "", topo.Down, powerGoing, false},
		{"resume timed out", "down", []string{"CLOUD", "POWERED_DOWN", "NOT_RESPONDING"}, "ResumeTimeout reached", topo.Down, powerFailed, true},
		{"resumed by an admin after a failure", "idle", []string{"CLOUD", "POWERED_DOWN", "NOT_RESPONDING"}, "", topo.Down, powerOff, false},
		{"powered down and down by an admin", "down", []string{"POWERED_DOWN"}, "broken fan", topo.Down, powerFailed, false},
		{"regular down", "down", []string{"NOT_RESPONDING"}, "Not responding", topo.Down, powerUp, false},
	} {
		r := nodeRec{Name: "n1", State: c.state, StateFlags: c.flags, Reason: c.reason}
		assert.Equal(t, c.engine, nodeState(r), "%s: engine state", c.name)
		assert.Equal(t, c.power, powerOf(r), "%s: power", c.name)
		assert.Equal(t, c.failed, resumeFailed(r), "%s: resume failed", c.name)
	}
}

func TestPowerPoolsConfig(t *testing.T) {
	for _, c := range []struct {
		name  string
		pools []PowerPool
		ok    bool
	}{
		{"none", nil, true},
		{"by hostlist", []PowerPool{{Name: "cloud", Nodes: "node[13-16]"}}, true},
		{"by feature, rack domains", []PowerPool{{Name: "cloud", Feature: "burst", DomainLevel: "rack", Min: 1, Max: 4}}, true},
		{"no name", []PowerPool{{Nodes: "node1"}}, false},
		{"twice", []PowerPool{{Name: "a", Nodes: "n1"}, {Name: "a", Nodes: "n2"}}, false},
		{"no nodes", []PowerPool{{Name: "a"}}, false},
		{"min over max", []PowerPool{{Name: "a", Nodes: "n1", Min: 3, Max: 2}}, false},
		{"negative cost", []PowerPool{{Name: "a", Nodes: "n1", CostPerNodeHour: -1}}, false},
		{"unknown level", []PowerPool{{Name: "a", Nodes: "n1", DomainLevel: "row"}}, false},
		{"bad hostlist", []PowerPool{{Name: "a", Nodes: "node[1-"}}, false},
		{"bad node name", []PowerPool{{Name: "a", Nodes: "n1,-x"}}, false},
	} {
		cfg := Config{PowerPools: c.pools}
		_, err := cfg.withDefaults()
		if c.ok {
			assert.NoError(t, err, c.name)
		} else {
			assert.ErrorIs(t, err, ErrInvalidConfig, c.name)
		}
	}
}

// Pool membership by hostlist or feature, domains from the topology's leaf
// switches; a node in two pools, a hostlist node sinfo does not show (a
// hidden powered-down cloud node) and a node under no switch are errors.
func TestPoolNodes(t *testing.T) {
	recs := []nodeRec{
		{Name: "n1", State: "idle"},
		{Name: "n2", State: "idle", StateFlags: []string{"CLOUD", "POWERED_DOWN"}},
		{Name: "n3", State: "idle", StateFlags: []string{"CLOUD", "POWERING_UP"}, Features: "burst,rack2"},
		{Name: "n3", State: "idle", StateFlags: []string{"CLOUD", "POWERING_UP"}, Features: "burst,rack2"}, // one per partition
		{Name: "n4", State: "mixed", StateFlags: []string{"CLOUD"}, Features: "burst"},
	}
	under := map[string][]string{"n1": {"r1", "s"}, "n2": {"r2", "s"}, "n3": {"r2", "s"}, "n4": {"r3", "s"}}
	b := &Backend{cfg: Config{Levels: []string{"rack", "block"}, PowerPools: []PowerPool{
		{Name: "a", Nodes: "n2"}, {Name: "b", Feature: "burst", DomainLevel: "block"},
	}}, underSw: under}
	ns, err := b.poolNodes(recs, under)
	require.NoError(t, err)
	var got [][4]string
	for _, n := range ns {
		got = append(got, [4]string{n.rec.Name, n.pool, n.domain, []string{"up", "off", "booting", "going", "failed"}[n.power]})
	}
	assert.Equal(t, [][4]string{{"n2", "a", "r2", "off"}, {"n3", "b", "s", "booting"}, {"n4", "b", "s", "up"}}, got)

	b.cfg.PowerPools = []PowerPool{{Name: "a", Nodes: "n[2-3]"}, {Name: "b", Feature: "burst"}}
	_, err = b.poolNodes(recs, under)
	assert.ErrorIs(t, err, ErrInvalidConfig, "n3 in two pools")

	b.cfg.PowerPools = []PowerPool{{Name: "a", Nodes: "n[2-5]"}}
	_, err = b.poolNodes(recs, under)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "PrivateData=cloud")

	b.cfg.PowerPools = []PowerPool{{Name: "a", Nodes: "n2"}}
	_, err = b.poolNodes(recs, map[string][]string{"n9": {"r9"}})
	assert.ErrorIs(t, err, ErrInvalidConfig, "n2 under no rack switch")

	// Without a topology the pool has no domains.
	b.underSw = map[string][]string{}
	ns, err = b.poolNodes(recs, b.underSw)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.Empty(t, ns[0].domain)
}
