package slurm_test

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/slurm"
)

// gpuTypes reads the GPU GRES type of every node of the berth partition.
func gpuTypes(tb testing.TB, conf string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(cmd(tb, conf, "sinfo", "-h", "-N", "-p", "berth", "-o", "%N %G"), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		parts := strings.Split(strings.SplitN(f[1], "(", 2)[0], ":") // gpu:a100:8(S:0)
		if len(parts) == 3 {
			out[f[0]] = parts[1]
		}
	}
	return out
}

// A --constraint over GPU models is the job's allowed set: "a|b" lands
// only on nodes of those models (a model per node: a gang larger than
// either model's nodes takes both), "[a|b]" needs one model for the whole
// job (with fewer ready nodes of each model than it asks it waits,
// berth's reason naming the set; then it runs on one model), a typed GRES narrows the set to its type, and | over a feature
// that is not a GPU model is held with the reason. Needs a cluster of at
// least three GPU types: BERTH_SLURM_RACK_GPU_TYPES="h100 a100 l40"
// bash hack/slurm-up.sh (the other tests need the default layout; hack/test.sh
// starts that cluster last and sets BERTH_SLURM_REQUIRE_MODELS=1, which makes
// a cluster of fewer types a failure).
func TestIntegrationGPUModelConstraint(t *testing.T) {
	conf := slurmConf(t)
	types := gpuTypes(t, conf)
	perType := map[string][]string{}
	for n, ty := range types {
		perType[ty] = append(perType[ty], n)
	}
	if len(perType) < 3 {
		if os.Getenv("BERTH_SLURM_REQUIRE_MODELS") == "1" { // hack/test.sh's three-model step
			t.Fatalf("BERTH_SLURM_REQUIRE_MODELS=1 and the cluster has GPU types %v; want three", slices.Sorted(maps.Keys(perType)))
		}
		t.Skipf("the cluster has GPU types %v; this test needs three (BERTH_SLURM_RACK_GPU_TYPES=\"h100 a100 l40\" bash hack/slurm-up.sh)", slices.Sorted(maps.Keys(perType)))
	}
	// The set: the two types node01 does not have.
	var set []string
	for _, ty := range slices.Sorted(maps.Keys(perType)) {
		if ty != types["node01"] && len(set) < 2 {
			set = append(set, ty)
		}
	}
	a, b := set[0], set[1]
	n := max(len(perType[a]), len(perType[b])) + 1 // more than one model has
	require.LessOrEqual(t, n, len(perType[a])+len(perType[b]))
	constraint := a + "|" + b
	reset(t, conf)
	rn := startRunner(t, conf, func(c *slurm.Config) { c.ReasonInterval = 200 * time.Millisecond })
	defer rn.stop(t)
	defer reset(t, conf)

	either := sbatch(t, conf, "-p", "berth", "-N", strconv.Itoa(n), "--gres=gpu:8", "--constraint="+constraint, "-t", "5", "--wrap", "sleep 20")
	typed := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:"+b+":2", "--constraint="+constraint, "-t", "5", "--wrap", "sleep 20")
	mixed := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:2", "--constraint="+a+"|rack1", "-t", "5", "--wrap", "sleep 1")

	waitFor(t, 30*time.Second, "the a|b gang to run", func() bool { return showJob(t, conf, either).State == "RUNNING" })
	ms, ok := rn.bound(either)
	require.True(t, ok, "berth bound the a|b gang")
	ji := showJob(t, conf, either)
	nodes := hostnames(t, conf, ji.NodeList)
	assert.Equal(t, nodesOf(ms), nodes, "SLURM runs it on exactly berth's nodes")
	got := map[string]int{}
	for _, nd := range nodes {
		got[types[nd]]++
	}
	t.Logf("--constraint=%s -N %d: nodes %v, by model %v", constraint, n, nodes, got)
	assert.Len(t, nodes, n)
	assert.Equal(t, n, got[a]+got[b], "every node is %s or %s", a, b)
	assert.Positive(t, got[a], "a model per node: both models used")
	assert.Positive(t, got[b], "a model per node: both models used")

	waitFor(t, 30*time.Second, "the typed job to run", func() bool { return showJob(t, conf, typed).State == "RUNNING" })
	for _, nd := range hostnames(t, conf, showJob(t, conf, typed).NodeList) {
		assert.Equal(t, b, types[nd], "--gres=gpu:%s narrows the set", b)
	}

	cmd(t, conf, "scancel", either, typed)

	// One node of each model of the set drained: [a|b] over as many
	// nodes as a model has fits on no model (SLURM accepts the job: it
	// refuses at submission only a job no configured node set could run).
	m := min(len(perType[a]), len(perType[b]))
	drained := []string{perType[a][0], perType[b][0]}
	for _, nd := range drained {
		cmd(t, conf, "scontrol", "update", "NodeName="+nd, "State=DRAIN", "Reason=berth-test")
	}
	oneModel := sbatch(t, conf, "-p", "berth", "-N", strconv.Itoa(m), "--gres=gpu:8", "--constraint=["+constraint+"]", "-t", "5", "--wrap", "sleep 1")
	var ac string
	waitFor(t, 30*time.Second, "the [a|b] gang's reason naming the set", func() bool {
		ac = adminComment(t, conf, oneModel)
		return strings.Contains(ac, "berth:waiting")
	})
	t.Logf("--constraint=[%s] -N %d, %v drained: AdminComment=%s", constraint, m, drained, ac)
	assert.Contains(t, ac, "with a GPU in "+a+", "+b, "the reason names the set (an admin comment keeps no braces)")
	assert.Equal(t, "PENDING", showJob(t, conf, oneModel).State)
	_, bound := rn.bound(oneModel)
	assert.False(t, bound, "[a|b] fits nowhere: never bound")
	for _, nd := range drained {
		cmd(t, conf, "scontrol", "update", "NodeName="+nd, "State=RESUME")
	}
	waitFor(t, 30*time.Second, "the [a|b] gang to run once the nodes are back", func() bool {
		st := showJob(t, conf, oneModel).State
		return st == "RUNNING" || st == "COMPLETED"
	})
	got = map[string]int{}
	for _, nd := range hostnames(t, conf, showJob(t, conf, oneModel).NodeList) {
		got[types[nd]]++
	}
	assert.Len(t, got, 1, "[a|b]: one model for every node, got %v", got)
	assert.Subset(t, set, slices.Collect(maps.Keys(got)))

	waitFor(t, 30*time.Second, "the a|rack1 job held with berth's reason", func() bool {
		ac = adminComment(t, conf, mixed)
		return showJob(t, conf, mixed).Reason == "JobHeldUser" && strings.Contains(ac, "berth:rejected")
	})
	t.Logf("--constraint=%s|rack1: AdminComment=%s", a, ac)
	assert.Contains(t, ac, "rack1 is not a GPU model")
}

// Plain features joined with & become the job's selector: berth chooses
// only nodes SLURM accepts for the job (a node without the features would
// leave it pending for ever, "BadConstraints").
func TestIntegrationFeatureConstraint(t *testing.T) {
	conf := slurmConf(t)
	reset(t, conf)
	rn := startRunner(t, conf, nil)
	defer rn.stop(t)
	id := sbatch(t, conf, "-p", "berth", "-N", "1", "--gres=gpu:2", "--constraint=rack3&node10", "-t", "5", "--wrap", "sleep 1")
	waitFor(t, 30*time.Second, "the job to run", func() bool {
		st := showJob(t, conf, id).State
		return st == "RUNNING" || st == "COMPLETED"
	})
	ms, ok := rn.bound(id)
	require.True(t, ok, "berth bound it")
	assert.Equal(t, []string{"node10"}, nodesOf(ms))
	assert.Equal(t, []string{"node10"}, hostnames(t, conf, showJob(t, conf, id).NodeList))
}
