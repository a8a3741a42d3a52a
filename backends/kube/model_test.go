package kube

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

func limits(kv ...any) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i].(string))] = *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)
	}
	return corev1.ResourceRequirements{Limits: l}
}

func TestPodDemand(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Resources: limits(ResourceGPU, 4)}},
		Containers:     []corev1.Container{{Resources: limits(ResourceGPU, 1)}, {Resources: limits(ResourceGPU, 2)}},
	}}
	d, err := podDemand(p)
	require.NoError(t, err)
	require.Equal(t, demand{gpus: 4}, d, "init containers count at their largest")

	p.Spec.InitContainers = nil
	d, err = podDemand(p)
	require.NoError(t, err)
	require.Equal(t, demand{gpus: 3}, d)

	p = &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: limits(ResourceMIGPrefix+"1g.10gb", 1)}}}}
	d, err = podDemand(p)
	require.NoError(t, err)
	require.Equal(t, demand{mig: "1g.10gb"}, d)

	for _, bad := range []corev1.ResourceRequirements{
		limits(ResourceMIGPrefix+"1g.10gb", 2),
		limits(ResourceMIGPrefix+"1g.10gb", 1, ResourceMIGPrefix+"3g.40gb", 1),
		limits(ResourceMIGPrefix+"1g.10gb", 1, ResourceGPU, 1),
	} {
		_, err := podDemand(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: bad}}}})
		require.Error(t, err, "%v", bad.Limits)
	}
}

func testBackend(t *testing.T) *Backend {
	b, err := New(&kubernetes.Clientset{}, nil, Config{})
	require.NoError(t, err)
	return b
}

func node(name string, labels map[string]string, res ...any) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Allocatable: limits(res...).Limits}}
}

func TestModelNode(t *testing.T) {
	b := testBackend(t)
	nm, ok, err := b.modelNode(node("n", map[string]string{"berth.dev/rack": "r1", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3"}, ResourceGPU, 8))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 8, nm.spec.GPUs)
	require.Equal(t, []string{"/-", "/-/-", "/-/-/r1", "/-/-/r1/node:n"}, nm.spec.Domains)
	require.Equal(t, topo.Ready, nm.spec.State)

	_, ok, err = b.modelNode(node("cpu", nil, "cpu", 8))
	require.NoError(t, err)
	require.False(t, ok, "a node without GPUs is not berth's")

	nm, ok, err = b.modelNode(node("m", map[string]string{LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", LabelGPUCount: "2"}, ResourceMIGPrefix+"1g.10gb", 14))
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, nm.spec.MIG)
	require.Equal(t, 2, nm.spec.GPUs)
	require.Equal(t, "A100-80GB", nm.spec.GPUModel)

	for _, bad := range []*corev1.Node{
		node("uneven", map[string]string{LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", LabelGPUCount: "2"}, ResourceMIGPrefix+"1g.10gb", 7),
		node("nocount", map[string]string{LabelGPUProduct: "NVIDIA-A100-SXM4-80GB"}, ResourceMIGPrefix+"1g.10gb", 7),
		node("unknown", map[string]string{LabelGPUProduct: "Tesla-T4", LabelGPUCount: "1"}, ResourceMIGPrefix+"1g.10gb", 7),
		node("toomany", map[string]string{LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", LabelGPUCount: "1"}, ResourceMIGPrefix+"1g.10gb", 8),
		node("both", map[string]string{LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", LabelGPUCount: "1"}, ResourceMIGPrefix+"1g.10gb", 7, ResourceGPU, 1),
	} {
		_, ok, err := b.modelNode(bad)
		require.True(t, ok)
		require.Error(t, err, bad.Name)
	}

	n := node("t", nil, ResourceGPU, 8)
	n.Spec.Taints = []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectNoSchedule}}
	require.Equal(t, topo.Cordoned, nodeState(n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	require.Equal(t, topo.Down, nodeState(n))
}

func TestBuildJob(t *testing.T) {
	b := testBackend(t)
	pod := func(name string, gpus int, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: limits(ResourceGPU, gpus)}}}}
	}
	ann := map[string]string{KueueRequiredTopology: "berth.dev/block", KueuePreferredTopology: "rack", AnnotationRuntimeEstimate: "90m"}
	j, groups, err := b.buildJob("ns/group/g", []*corev1.Pod{pod("a", 8, ann), pod("b", 8, ann), pod("c", 1, ann)}, true, metav1.Now().Time)
	require.NoError(t, err)
	require.Equal(t, []int{0, 0, 1}, groups)
	require.Len(t, j.Request.Groups, 2)
	require.Equal(t, 2, j.Request.Groups[0].Members)
	require.Equal(t, "block", j.Request.Required)
	require.Equal(t, "rack", j.Request.Preferred)
	require.True(t, j.Preemptible)
	require.Equal(t, "default", j.Queue)

	_, _, err = b.buildJob("x", []*corev1.Pod{pod("a", 1, map[string]string{KueueRequiredTopology: "nope"})}, true, metav1.Now().Time)
	require.Error(t, err)
	_, _, err = b.buildJob("x", []*corev1.Pod{pod("a", 1, map[string]string{AnnotationRuntimeEstimate: "soon"})}, true, metav1.Now().Time)
	require.Error(t, err)
	p := pod("a", 1, nil)
	p.Labels = map[string]string{LabelQueue: "nope"}
	_, _, err = b.buildJob("x", []*corev1.Pod{p}, true, metav1.Now().Time)
	require.Error(t, err)
}

func TestReasonName(t *testing.T) {
	require.Equal(t, "ReservedGPUs", reasonName(engine.ReasonReservedGPUs))
	require.Equal(t, "BindRefused", reasonName(engine.ReasonBindRefused))
	require.Equal(t, "Capacity", reasonName(engine.ReasonCapacity))
}

func TestNodeDevs(t *testing.T) {
	d := newNodeDevs(topo.NodeSpec{GPUs: 4})
	m, ok := d.take("a", demand{gpus: 3})
	require.True(t, ok)
	require.Equal(t, []int{0, 1, 2}, m.GPUs)
	_, ok = d.take("b", demand{gpus: 2})
	require.False(t, ok)
	d.free("a", nil)
	m, ok = d.take("b", demand{gpus: 4})
	require.True(t, ok)
	require.Len(t, m.GPUs, 4)
}

// A job's submit time is the API server's record, not the moment berth
// saw it: the PodGroup's creation for a coscheduling gang, else the
// earliest pod's; never after now. A new leader then orders pending work
// as the old one did.
func TestSubmitTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := func(ago time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-ago))}}
	}
	pods := []*corev1.Pod{pod(10 * time.Second), pod(42 * time.Second), pod(time.Second)}
	require.Equal(t, now.Add(-42*time.Second), submitTime(pods, time.Time{}, now), "the earliest pod")
	require.Equal(t, now.Add(-time.Minute), submitTime(pods, now.Add(-time.Minute), now), "the PodGroup")
	require.Equal(t, now, submitTime([]*corev1.Pod{pod(-time.Minute)}, time.Time{}, now), "a creation in berth's future")
	require.Equal(t, now, submitTime([]*corev1.Pod{{}}, time.Time{}, now), "no creation time")
}

// A node that is not Ready says why, in the words the pending pods'
// reasons use; notCounted tallies them for a job's selectors.
func TestNotCountedNamesTaints(t *testing.T) {
	taint := func(key string, e corev1.TaintEffect) corev1.Taint { return corev1.Taint{Key: key, Effect: e} }
	st, why := nodeStatus(&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		taint("node.kubernetes.io/not-ready", corev1.TaintEffectNoSchedule), taint("soft", corev1.TaintEffectPreferNoSchedule)}}})
	require.Equal(t, topo.Cordoned, st)
	require.Equal(t, "tainted node.kubernetes.io/not-ready:NoSchedule", why)
	st, why = nodeStatus(&corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}})
	require.Equal(t, topo.Cordoned, st)
	require.Equal(t, "unschedulable", why)
	st, why = nodeStatus(&corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}})
	require.Equal(t, topo.Down, st)
	require.Equal(t, "not ready", why)
	st, why = nodeStatus(&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{taint("soft", corev1.TaintEffectPreferNoSchedule)}}})
	require.Equal(t, topo.Ready, st)
	require.Empty(t, why)

	tainted := "tainted node.kubernetes.io/not-ready:NoSchedule"
	ex := []*toldNode{
		{state: topo.Cordoned, cause: tainted, labels: map[string]string{"pool": "a"}},
		{state: topo.Cordoned, cause: tainted, labels: map[string]string{"pool": "a"}},
		{state: topo.Cordoned, cause: "unschedulable", labels: map[string]string{"pool": "b"}},
	}
	require.Equal(t, "; not counted: 2 nodes "+tainted+", 1 node unschedulable", notCounted(ex, nil))
	require.Equal(t, "; not counted: 1 node unschedulable", notCounted(ex, []map[string]string{{"pool": "b"}}))
	require.Equal(t, "; not counted: 2 nodes "+tainted+", 1 node unschedulable", notCounted(ex, []map[string]string{nil, {"pool": "a"}}), "a group without a selector may use any node")
	require.Empty(t, notCounted(ex, []map[string]string{{"pool": "c"}}))
	require.Empty(t, notCounted(nil, nil))
}
