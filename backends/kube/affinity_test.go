package kube_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
)

// allowing gives a pod a required node affinity over the GPU product
// label with operator op.
func allowing(op corev1.NodeSelectorOperator, products ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: kube.LabelGPUProduct, Operator: op, Values: products}},
			}}},
		}}
	}
}

// A gang whose pods allow {A100, H100} (node affinity In over the GPU
// product label) lands only on A100 or H100 nodes, though L40S nodes are
// free and packing alone would fill them first (they come first by name);
// a pod allowing models no node has waits with a reason that names its
// set; a NotIn is refused as Invalid, not placed unconstrained.
func TestAffinityModelSet(t *testing.T) {
	w := newWorld(t)
	product := func(p string) nodeOpt { return withLabels(kube.LabelGPUProduct, p) }
	model := map[string]string{}
	for _, n := range []struct{ name, product string }{
		{"a-l40s-0", "NVIDIA-L40S"}, {"a-l40s-1", "NVIDIA-L40S"},
		{"b-a100", "NVIDIA-A100-SXM4-80GB"}, {"c-h100", "NVIDIA-H100-80GB-HBM3"},
	} {
		model[w.node(n.name, 8, product(n.product))] = n.product
	}
	w.start(w.config(), engine.Config{})
	set := allowing(corev1.NodeSelectorOpIn, "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")
	for i := range 2 {
		w.pod(fmt.Sprintf("g-%d", i), 8, inKueueGroup("g", 2), set)
	}
	w.waitBound(30*time.Second, "g-0", "g-1")
	for _, n := range []string{"g-0", "g-1"} {
		node := w.nodeOf(n)
		require.Contains(t, []string{"NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"}, model[node], "pod %s on %s", n, node)
	}
	require.NotEqual(t, w.nodeOf("g-0"), w.nodeOf("g-1"))

	w.pod("none", 1, allowing(corev1.NodeSelectorOpIn, "NVIDIA-B200", "NVIDIA-GB200"))
	w.pod("notin", 1, allowing(corev1.NodeSelectorOpNotIn, "NVIDIA-L40S"))
	eventually(t, 30*time.Second, "reasons for none and notin", func() bool {
		c, ok := condition(w.get("none"))
		if !ok || !contains(c.Message, "B200") || !contains(c.Message, "GB200") {
			return false
		}
		c, ok = condition(w.get("notin"))
		return ok && c.Reason == "Invalid" && contains(c.Message, "NotIn")
	})
	c, _ := condition(w.get("none"))
	t.Logf("none: %s: %s", c.Reason, c.Message)
	c, _ = condition(w.get("notin"))
	t.Logf("notin: %s: %s", c.Reason, c.Message)
	require.Empty(t, w.nodeOf("none"))
	require.Empty(t, w.nodeOf("notin"))
}
