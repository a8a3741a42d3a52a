package kube

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berthsched/berth/backends"
)

// Node affinity over the GPU product label becomes the group's models, in
// the names nodes get (modelNode): a set of one is GPUModel, as a single
// model always was; pods of different sets are different groups; a MIG
// demand maps to the MIG model's name; a bound pod's constraint is not
// read (it is adopted where it is).
func TestBuildJobAffinityModels(t *testing.T) {
	b := testBackend(t)
	pod := func(name string, res string, n int, op corev1.NodeSelectorOperator, products ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: limits(res, n)}}}}
		if products != nil {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "other", Operator: corev1.NodeSelectorOpExists},
						{Key: LabelGPUProduct, Operator: op, Values: products},
					},
				}}},
			}}
		}
		return p
	}
	in := corev1.NodeSelectorOpIn
	j, groups, err := b.buildJob("ns/group/g", []*corev1.Pod{
		pod("a", ResourceGPU, 8, in, "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"),
		pod("b", ResourceGPU, 8, in, "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"),
		pod("c", ResourceGPU, 8, in, "NVIDIA-H100-80GB-HBM3"),
		pod("d", ResourceGPU, 8, ""),
	}, true, metav1.Now().Time)
	require.NoError(t, err)
	require.Equal(t, []int{0, 0, 1, 2}, groups)
	require.Equal(t, []string{"A100-SXM4-80GB", "H100-80GB-HBM3"}, j.Request.Groups[0].GPUModels)
	require.Empty(t, j.Request.Groups[0].GPUModel)
	require.False(t, j.Request.Groups[0].SameModel)
	require.Equal(t, "H100-80GB-HBM3", j.Request.Groups[1].GPUModel)
	require.Nil(t, j.Request.Groups[1].GPUModels)
	require.Empty(t, j.Request.Groups[2].GPUModel)
	require.Nil(t, j.Request.Groups[2].GPUModels)

	j, _, err = b.buildJob("ns/pod/m", []*corev1.Pod{pod("m", ResourceMIGPrefix+"1g.10gb", 1, in, "NVIDIA-A100-SXM4-80GB")}, true, metav1.Now().Time)
	require.NoError(t, err)
	require.Equal(t, "A100-80GB", j.Request.Groups[0].GPUModel)

	for _, op := range []corev1.NodeSelectorOperator{corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpGt} {
		_, _, err = b.buildJob("ns/pod/x", []*corev1.Pod{pod("x", ResourceGPU, 1, op, "1")}, true, metav1.Now().Time)
		require.ErrorIs(t, err, backends.ErrModelConstraint, op)
		bound := pod("x", ResourceGPU, 1, op, "1")
		bound.Spec.NodeName = "n"
		_, _, err = b.buildJob("ns/pod/x", []*corev1.Pod{bound}, false, metav1.Now().Time)
		require.NoError(t, err, op)
	}
}
