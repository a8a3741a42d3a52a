package fgd

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/workload"
)

// writeSetTrace writes an openb-format trace (node and pod lists) into
// dir: 240 nodes of three models, 3,000 pods, a third of the GPU pods with a
// gpu_spec of two models joined by '|', a few with one, and one pod no
// node of its models can ever hold.
func writeSetTrace(t *testing.T, dir string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	var nodes strings.Builder
	nodes.WriteString("sn,cpu_milli,memory_mib,gpu,model\n")
	models := []string{"V100M32", "T4", "A10"}
	for i := range 240 {
		fmt.Fprintf(&nodes, "node-%03d,%d,%d,%d,%s\n", i, []int{32000, 64000, 96000}[i%3], 262144, []int{2, 4, 8}[i/3%3], models[i%3])
	}
	var pods strings.Builder
	pods.WriteString("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n")
	for i := range 3000 {
		k, u := 1, 1000
		switch rng.IntN(6) {
		case 0:
			k, u = 0, 0
		case 1, 2:
			u = []int{200, 300, 460, 500, 810}[rng.IntN(5)]
		case 3:
			k = []int{2, 4, 8}[rng.IntN(3)]
		}
		spec := ""
		if k > 0 {
			switch rng.IntN(6) {
			case 0, 1:
				a := rng.IntN(3)
				spec = models[a] + "|" + models[(a+1+rng.IntN(2))%3]
			case 2:
				spec = models[rng.IntN(3)]
			}
		}
		fmt.Fprintf(&pods, "pod-%04d,%d,%d,%d,%d,%s,LS,Running,0,0,0\n", i, 1000*(1+rng.IntN(8)), 1024*(1+rng.IntN(16)), k, u, spec)
	}
	// More CPU than any node of its models has: the placer fails it, the
	// engine refuses it on arrival (never fits); dropped either way.
	pods.WriteString("pod-9999,200000,1024,1,1000,T4|A10,LS,Running,0,0,0\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(workload.OpenbNodes)), []byte(nodes.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(workload.OpenbPods)), []byte(pods.String()), 0o644))
}

// TestModelSetTrace is issue 34's first "done when": an openb-format
// trace whose gpu_spec lists several models replays, directly and
// through the engine, with the same numbers, and no pod lands on a model
// outside its set (the experiment's own check counts 0).
func TestModelSetTrace(t *testing.T) {
	dir := t.TempDir()
	writeSetTrace(t, dir)
	tr, err := LoadTrace(dir)
	require.NoError(t, err)
	sets := 0
	for _, p := range tr.Pods {
		if len(p.GPUModels) > 1 {
			sets++
		}
	}
	require.Greater(t, sets, 50, "the trace asks for sets")
	placer, eng := bothWays(t, Config{Trace: tr, Policies: []string{"bestfit", "fgd", "berth"}, Seeds: []int64{42, 43}})
	for i := range placer {
		a, b := placer[i], eng[i]
		assert.Equal(t, a.Placed, b.Placed, "%s seed %d: pods placed", a.Policy, a.Seed)
		assert.Equal(t, a.Columns, b.Columns, "%s seed %d: allocation columns", a.Policy, a.Seed)
		assert.Zero(t, a.ModelViolations, "%s seed %d: pods on a model outside their set", a.Policy, a.Seed)
		assert.Zero(t, b.ModelViolations, "%s seed %d via the engine", a.Policy, a.Seed)
		assert.Less(t, a.Placed, a.Pods, "the cluster fills up")
	}
	pr, err := Summarize(placer)
	require.NoError(t, err)
	er, err := Summarize(eng)
	require.NoError(t, err)
	assert.Equal(t, pr, er)
	for _, r := range pr {
		assert.Zero(t, r.ModelViolations)
	}
}

// TestModelAllowed: the experiment's check rejects a model outside the
// set (so the 0 above can fail).
func TestModelAllowed(t *testing.T) {
	set := gang.Group{GPUModels: []string{"A", "B"}}
	assert.True(t, modelAllowed(&set, "B"))
	assert.False(t, modelAllowed(&set, "C"))
	one := gang.Group{GPUModel: "A"}
	assert.False(t, modelAllowed(&one, "B"))
	assert.True(t, modelAllowed(&gang.Group{}, "B"))
}

// TestModelRules: every rule (ConstrainModels is third) is reproducible,
// leaves its input and CPU-only pods alone,
// constrains about the share of GPU pods it says with sets of the sizes it
// says, each model held by a node that can take the pod.
func TestModelRules(t *testing.T) {
	tr := &Trace{Nodes: []workload.Node{
		{Name: "n0", GPUs: 2, Model: "P100"},
		{Name: "n1", GPUs: 8, Model: "G2"},
		{Name: "n2", GPUs: 4, Model: "T4"},
		{Name: "n3", GPUs: 8, Model: "V100"},
	}}
	for i := range 3000 {
		j := workload.Job{ID: fmt.Sprintf("p%04d", i), NumGPU: 1 + i%8, GPUMilli: 1000}
		switch i % 5 {
		case 0:
			j.NumGPU, j.GPUMilli = 0, 0
		case 1:
			j.NumGPU, j.GPUMilli = 1, 300
		}
		tr.Pods = append(tr.Pods, j)
	}
	gpuOf := map[string]int{"P100": 2, "G2": 8, "T4": 4, "V100": 8}
	for _, c := range []struct {
		rule   string
		share  float64
		lo, hi int
	}{{RuleThird, 1.0 / 3, 1, 1}, {RuleHalf, 0.5, 1, 1}, {RuleSets, 1.0 / 3, 2, 3}} {
		a, err := ApplyModelRule(tr, c.rule)
		require.NoError(t, err)
		b, _ := ApplyModelRule(tr, c.rule)
		picked, gpuPods, sizes := 0, 0, map[int]int{}
		for i, p := range a.Pods {
			require.Nil(t, tr.Pods[i].GPUModels, "input unchanged")
			assert.Equal(t, p.GPUModels, b.Pods[i].GPUModels, "%s: same draws", c.rule)
			if p.NumGPU == 0 {
				assert.Nil(t, p.GPUModels, "%s: CPU-only pods are left alone", c.rule)
				continue
			}
			gpuPods++
			if p.GPUModels == nil {
				continue
			}
			picked++
			fit := 0
			for _, m := range gpuOf {
				if m >= p.NumGPU {
					fit++
				}
			}
			assert.LessOrEqual(t, len(p.GPUModels), c.hi, c.rule)
			assert.GreaterOrEqual(t, len(p.GPUModels), min(c.lo, fit), c.rule)
			sizes[len(p.GPUModels)]++
			for j, m := range p.GPUModels {
				assert.GreaterOrEqual(t, gpuOf[m], p.NumGPU, "%s: a node of the model holds the pod", c.rule)
				assert.NotContains(t, p.GPUModels[:j], m, "%s: distinct models", c.rule)
			}
		}
		assert.InDelta(t, c.share, float64(picked)/float64(gpuPods), 0.03, "%s: %d of %d", c.rule, picked, gpuPods)
		t.Logf("%s: %d of %d GPU pods constrained, set sizes %v", c.rule, picked, gpuPods, sizes)
	}
	third, _ := ApplyModelRule(tr, RuleThird)
	assert.Equal(t, ConstrainModels(tr), third)
	_, err := ApplyModelRule(tr, "quarter")
	require.ErrorIs(t, err, ErrConfig)
}
