package slurm_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/topo"
)

// Power-saving integration tests (node autoscaling on SLURM). They need a
// test cluster started with State=CLOUD nodes, e.g.
//
//	BERTH_SLURM_DIR=/tmp/berth-slurm-ps BERTH_SLURM_CTLD_PORT=7817 BERTH_SLURM_SLURMD_PORT=7900 \
//	  BERTH_SLURM_NODES=8 BERTH_SLURM_CLOUD_NODES=4 bash hack/slurm-up.sh
//	BERTH_SLURM_DIR=/tmp/berth-slurm-ps go test -run PowerSave ./backends/slurm/
//
// (at least one rack whose nodes are all CLOUD, and one node that is not).
// On a cluster without cloud nodes (the default one) they skip, or fail
// under BERTH_SLURM_REQUIRE_POWER_SAVE=1 (hack/test.sh's power-saving
// step); without any cluster they skip, or fail under
// BERTH_REQUIRE_INTEGRATION=1.

// psNode is what sinfo --json says of a node, for the tests.
type psNode struct {
	Name   string   `json:"name"`
	State  string   `json:"state"`
	Flags  []string `json:"state_flags"`
	Reason string   `json:"reason"`
	Feats  string   `json:"active_features"`
}

func (n psNode) has(flag string) bool { return slices.Contains(n.Flags, flag) }

// off: powered down and idle, nothing asked of it (ready to power up).
// A node whose resume failed keeps NOT_RESPONDING once resumed by an admin
// (22.05), until its slurmd registers.
func (n psNode) off() bool {
	return n.has("POWERED_DOWN") && n.State == "idle" && !n.has("POWER_UP") && !n.has("POWERING_UP") &&
		!n.has("POWERING_DOWN") && !n.has("POWER_DOWN") && !n.has("DRAIN")
}

// upIdle: powered up, idle, responding.
func (n psNode) upIdle() bool {
	// COMPLETING: a job's end is still being cleaned up (its epilog);
	// ScaleDown refuses such a node as busy (nodeBusy).
	return n.State == "idle" && !slices.ContainsFunc(n.Flags, func(f string) bool {
		return strings.HasPrefix(f, "POWER") || f == "NOT_RESPONDING" || f == "DRAIN" || f == "COMPLETING"
	})
}

func psNodes(tb testing.TB, conf string) map[string]psNode {
	tb.Helper()
	var out struct {
		Nodes []psNode `json:"nodes"`
	}
	require.NoError(tb, json.Unmarshal([]byte(cmd(tb, conf, "sinfo", "--json")), &out))
	m := map[string]psNode{}
	for _, n := range out.Nodes {
		m[n.Name] = n
	}
	return m
}

// psCluster is a power-saving test cluster: its conf and state dir, its
// CLOUD nodes by rack and its other nodes.
type psCluster struct {
	conf, dir string
	rack      string   // a rack whose nodes are all CLOUD
	cloud     []string // that rack's nodes, sorted
	fixed     []string // nodes that are never powered down
	all       []string // every cloud node
}

func powerSaveCluster(t *testing.T) psCluster {
	t.Helper()
	conf := slurmConf(t)
	c := psCluster{conf: conf, dir: slurmDir()}
	byRack := map[string][]string{}
	mixed := map[string]bool{}
	for _, n := range psNodes(t, conf) {
		rack := ""
		for _, f := range strings.Split(n.Feats, ",") {
			if strings.HasPrefix(f, "rack") {
				rack = f
			}
		}
		if n.has("CLOUD") {
			byRack[rack] = append(byRack[rack], n.Name)
			c.all = append(c.all, n.Name)
		} else {
			c.fixed = append(c.fixed, n.Name)
			mixed[rack] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(byRack)) {
		if !mixed[r] && len(byRack[r]) >= 2 {
			c.rack, c.cloud = r, byRack[r]
			break
		}
	}
	_, ferr := os.Stat(filepath.Join(c.dir, "power", "fail-resume"))
	if c.rack == "" || len(c.fixed) == 0 || ferr != nil {
		msg := "the SLURM test cluster has no power saving (a rack of State=CLOUD nodes, power/fail-resume): start one with BERTH_SLURM_CLOUD_NODES=4 BERTH_SLURM_NODES=8 bash hack/slurm-up.sh"
		if os.Getenv("BERTH_SLURM_REQUIRE_POWER_SAVE") == "1" {
			t.Fatal("BERTH_SLURM_REQUIRE_POWER_SAVE=1: " + msg)
		}
		t.Skip(msg)
	}
	slices.Sort(c.cloud)
	slices.Sort(c.fixed)
	slices.Sort(c.all)
	c.reset(t)
	return c
}

// failResume makes the ResumeProgram fail (start no slurmd) for nodes.
func (c psCluster) failResume(t *testing.T, nodes ...string) {
	t.Helper()
	body := ""
	if len(nodes) > 0 {
		body = strings.Join(nodes, "\n") + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "power", "fail-resume"), []byte(body), 0o644))
}

// reset cancels every job and brings every cloud node back to powered
// down, idle, every other node to idle.
func (c psCluster) reset(t *testing.T) {
	t.Helper()
	c.failResume(t)
	if ids := strings.Fields(cmd(t, c.conf, "squeue", "-h", "-o", "%i")); len(ids) > 0 {
		_, _ = cmdErr(c.conf, "scancel", ids...)
	}
	waitFor(t, 30*time.Second, "jobs to end", func() bool {
		return cmd(t, c.conf, "squeue", "-h", "-t", "R,CG,CF,S,PD", "-o", "%i") == ""
	})
	for _, n := range psNodes(t, c.conf) {
		if !n.has("CLOUD") {
			if n.has("DRAIN") || strings.HasPrefix(n.State, "down") {
				_, _ = cmdErr(c.conf, "scontrol", "update", "NodeName="+n.Name, "State=RESUME")
			}
			continue
		}
		switch {
		case strings.HasPrefix(n.State, "down") || n.has("DRAIN"):
			_, _ = cmdErr(c.conf, "scontrol", "update", "NodeName="+n.Name, "State=RESUME")
		case !n.has("POWERED_DOWN") && !n.has("POWERING_DOWN"):
			_, _ = cmdErr(c.conf, "scontrol", "update", "NodeName="+n.Name, "State=POWER_DOWN_FORCE")
		}
	}
	waitFor(t, 60*time.Second, "cloud nodes powered down, the others idle", func() bool {
		for _, n := range psNodes(t, c.conf) {
			if n.has("CLOUD") && !n.off() || !n.has("CLOUD") && !n.upIdle() {
				return false
			}
		}
		return true
	})
}

func (c psCluster) pool() []slurm.PowerPool {
	return []slurm.PowerPool{{Name: "cloud", Nodes: strings.Join(c.all, ","), CostPerNodeHour: 2}}
}

// A 2-node gang that must stay in one rack does not fit on the nodes that
// are up (berth's own jobs fill them): the engine leaves it pending and
// never places it on the powered-down nodes (which SLURM would power up
// for a bind). ScaleUp powers up two nodes of the all-cloud rack (asking
// more than the rack has powered down is refused, nothing powered up);
// SLURM brings their slurmd up, the poll reports them Ready and the gang
// runs there. Then a busy node cannot be scaled down, an idle one is
// powered down (POWER_DOWN_ASAP) and leaves the pool; berth places
// nothing on it.
func TestIntegrationPowerSaveScaleUpForGang(t *testing.T) {
	c := powerSaveCluster(t)
	defer c.reset(t)
	ctx := context.Background()
	rn := startRunner(t, c.conf, func(bc *slurm.Config) { bc.PowerPools = c.pool() })
	defer rn.stop(t)

	// The engine: only the fixed nodes' GPUs are allocatable.
	waitFor(t, 20*time.Second, "the engine's first view", func() bool { return rn.r.View() != nil })
	v := rn.r.View()
	assert.Equal(t, 8*len(c.fixed), v.FreeGPUs, "powered-down nodes are not allocatable")
	assert.Equal(t, 8*(len(c.fixed)+len(c.all)), v.TotalGPUs)

	pools, err := rn.b.Pools(ctx)
	require.NoError(t, err)
	require.Len(t, pools, 1)
	p := pools[0]
	assert.Equal(t, "cloud", p.Name)
	assert.Equal(t, "h100", p.GPUModel)
	assert.Equal(t, 8, p.GPUsPerNode)
	assert.Equal(t, "rack", p.DomainLevel)
	assert.Equal(t, len(c.all), p.Max)
	assert.Contains(t, p.Domains, autoscale.Domain{Name: c.rack, Room: len(c.cloud)})
	st, err := rn.b.Provisioning(ctx)
	require.NoError(t, err)
	assert.Empty(t, st.Nodes, "no cloud node is up")
	assert.Empty(t, st.Failed)

	// Fill every node that is up.
	var blockers []string
	for range c.fixed {
		blockers = append(blockers, sbatch(t, c.conf, "-p", "berth", "-N", "1", "--gres=gpu:8", "-t", "5", "--wrap", "sleep 300"))
	}
	waitFor(t, 30*time.Second, "the blockers to run", func() bool {
		for _, id := range blockers {
			if showJob(t, c.conf, id).State != "RUNNING" {
				return false
			}
		}
		return true
	})
	gang := sbatch(t, c.conf, "-p", "berth", "-N", "2", "--gres=gpu:8", "-t", "5",
		"--comment", "berth:required=rack", "--wrap", "sleep 300")
	time.Sleep(3 * time.Second) // cycles in which the gang fits nowhere up
	assert.Equal(t, "PENDING", showJob(t, c.conf, gang).State)
	assert.Equal(t, "berth", showJob(t, c.conf, gang).Partition, "not bound")
	for _, n := range c.cloud {
		assert.True(t, psNodes(t, c.conf)[n].off(), "%s still powered down: berth placed nothing there", n)
	}

	// All or none: more than the rack has is refused, nothing powers up.
	err = rn.b.ScaleUp(ctx, autoscale.ScaleUp{Pool: "cloud", Domain: c.rack, Nodes: len(c.cloud) + 1, Jobs: []string{gang}})
	require.ErrorIs(t, err, backends.ErrRefused)
	t.Logf("too many: %v", err)
	for _, n := range c.cloud {
		assert.True(t, psNodes(t, c.conf)[n].off(), "%s: a refused scale-up powers nothing up", n)
	}
	require.ErrorIs(t, rn.b.ScaleUp(ctx, autoscale.ScaleUp{Pool: "nope", Nodes: 1}), backends.ErrRefused)

	up := time.Now()
	require.NoError(t, rn.b.ScaleUp(ctx, autoscale.ScaleUp{Pool: "cloud", Domain: c.rack, Nodes: 2, Jobs: []string{gang}}))
	st, err = rn.b.Provisioning(ctx)
	require.NoError(t, err)
	require.Len(t, st.Nodes, 2, "the two nodes asked for are the pool's now")
	var powered []string
	for _, n := range st.Nodes {
		assert.Equal(t, "cloud", n.Pool)
		assert.Equal(t, c.rack, n.Domain)
		powered = append(powered, n.Name)
		t.Logf("right after ScaleUp: %s booting=%v", n.Name, n.Booting)
	}
	slices.Sort(powered)
	waitFor(t, 30*time.Second, "the gang to run on the powered-up nodes", func() bool { return showJob(t, c.conf, gang).State == "RUNNING" })
	t.Logf("gang running %v after ScaleUp", time.Since(up).Round(100*time.Millisecond))
	ms, ok := rn.bound(gang)
	require.True(t, ok, "berth bound the gang")
	assert.Equal(t, powered, nodesOf(ms))
	assert.Equal(t, powered, hostnames(t, c.conf, showJob(t, c.conf, gang).NodeList), "SLURM runs it on the nodes powered up")
	st, err = rn.b.Provisioning(ctx)
	require.NoError(t, err)
	for _, n := range st.Nodes {
		assert.False(t, n.Booting, "%s is up", n.Name)
	}
	pools, err = rn.b.Pools(ctx)
	require.NoError(t, err)
	assert.Contains(t, pools[0].Domains, autoscale.Domain{Name: c.rack, Room: len(c.cloud) - 2})

	// Scale down: a busy node is refused, so is a node of no pool.
	require.ErrorIs(t, rn.b.ScaleDown(ctx, powered[0]), backends.ErrRefused)
	require.ErrorIs(t, rn.b.ScaleDown(ctx, c.fixed[0]), backends.ErrRefused)
	cmd(t, c.conf, "scancel", gang)
	waitFor(t, 30*time.Second, "the powered-up nodes to be idle", func() bool {
		ns := psNodes(t, c.conf)
		return ns[powered[0]].upIdle() && ns[powered[1]].upIdle()
	})
	require.NoError(t, rn.b.ScaleDown(ctx, powered[0]))
	waitFor(t, 30*time.Second, powered[0]+" powered down", func() bool { return psNodes(t, c.conf)[powered[0]].off() })
	st, err = rn.b.Provisioning(ctx)
	require.NoError(t, err)
	require.Len(t, st.Nodes, 1)
	assert.Equal(t, powered[1], st.Nodes[0].Name)
	_, err = os.Stat(filepath.Join(c.dir, "run", "slurmd-"+powered[0]+".pid"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "the SuspendProgram stopped %s's slurmd", powered[0])
	waitFor(t, 10*time.Second, "the engine to count the node up and not the one down", func() bool {
		return rn.r.View().FreeGPUs == 8
	})

	// A 2-node gang in one rack: one node up there, the other powered
	// down: it waits, and berth leaves the powered-down node off.
	again := sbatch(t, c.conf, "-p", "berth", "-N", "2", "--gres=gpu:8", "-t", "5",
		"--comment", "berth:required=rack", "--wrap", "sleep 300")
	time.Sleep(3 * time.Second)
	assert.Equal(t, "PENDING", showJob(t, c.conf, again).State)
	assert.True(t, psNodes(t, c.conf)[powered[0]].off(), "berth placed nothing on the node powered down")
	assert.Equal(t, 2, rn.b.Stats().PowerUps)
	assert.Equal(t, 1, rn.b.Stats().PowerDowns)
}

// A resume that does not come within ResumeTimeout (the ResumeProgram
// starts no slurmd for the node): SLURM marks the node DOWN ("ResumeTimeout
// reached"); Provisioning reports it once as a failure of the pool in its
// domain, lists it no more, and Pools no longer counts it as room. The
// engine never had it Ready.
func TestIntegrationPowerSaveResumeFailure(t *testing.T) {
	c := powerSaveCluster(t)
	defer c.reset(t)
	ctx := context.Background()
	bc := backendConfig(c.conf, t)
	bc.PowerPools = c.pool()
	b, err := slurm.New(bc)
	require.NoError(t, err)
	defer b.Close()

	c.failResume(t, c.all...)
	asked := time.Now()
	require.NoError(t, b.ScaleUp(ctx, autoscale.ScaleUp{Pool: "cloud", Domain: c.rack, Nodes: 1, Jobs: []string{"j"}}))
	st, err := b.Provisioning(ctx)
	require.NoError(t, err)
	require.Len(t, st.Nodes, 1)
	node := st.Nodes[0].Name
	assert.True(t, st.Nodes[0].Booting, "%s powering up", node)

	var failed []backends.ProvisionFailure
	waitFor(t, 60*time.Second, "the resume failure to be reported", func() bool {
		st, err := b.Provisioning(ctx)
		require.NoError(t, err)
		failed = append(failed, st.Failed...)
		return len(failed) > 0
	})
	t.Logf("failure after %v: %+v", time.Since(asked).Round(100*time.Millisecond), failed)
	require.Len(t, failed, 1)
	f := failed[0]
	assert.Equal(t, "cloud", f.Pool)
	assert.Equal(t, c.rack, f.Domain)
	assert.Equal(t, 1, f.Nodes)
	assert.Contains(t, f.Reason, node)
	assert.Contains(t, f.Reason, "ResumeTimeout")
	assert.False(t, f.At.Before(asked.Add(-2*time.Second)), "failed after it was asked")

	// Reported once; the node is not the pool's, nor its room.
	for range 3 {
		st, err = b.Provisioning(ctx)
		require.NoError(t, err)
		assert.Empty(t, st.Failed, "a failure is reported once")
		assert.Empty(t, st.Nodes)
	}
	pools, err := b.Pools(ctx)
	require.NoError(t, err)
	assert.Contains(t, pools[0].Domains, autoscale.Domain{Name: c.rack, Room: len(c.cloud) - 1})
	n := psNodes(t, c.conf)[node]
	assert.True(t, strings.HasPrefix(n.State, "down"), "SLURM marks %s down: %s %v", node, n.State, n.Flags)

	// The engine's view of the node: down all along.
	spec, err := b.Cluster(ctx)
	require.NoError(t, err)
	for _, ns := range spec.Nodes {
		if ns.Name == node {
			assert.Equal(t, topo.Down, ns.State)
		}
	}

	// Resumed by an admin and failing again: reported again.
	cmd(t, c.conf, "scontrol", "update", "NodeName="+node, "State=RESUME")
	waitFor(t, 20*time.Second, node+" powered down again", func() bool { return psNodes(t, c.conf)[node].off() })
	require.NoError(t, b.ScaleUp(ctx, autoscale.ScaleUp{Pool: "cloud", Domain: c.rack, Nodes: len(c.cloud)}))
	failed = nil
	waitFor(t, 60*time.Second, "the second resume's failures", func() bool {
		st, err := b.Provisioning(ctx)
		require.NoError(t, err)
		failed = append(failed, st.Failed...)
		return len(failed) >= len(c.cloud)
	})
	var names []string
	for _, f := range failed {
		names = append(names, strings.TrimSuffix(strings.Fields(f.Reason)[1], ":"))
	}
	slices.Sort(names)
	assert.Equal(t, c.cloud, slices.Compact(names), "every node once, %s again: %v", node, names)
}
