package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
)

// The test DRA driver: ResourceSlices of 8 GPUs per node, in two NVLink
// islands of 4, with the attributes the NVIDIA driver publishes (index,
// productName, type) and two it does not (nvlinkIsland, migCapable).
const testDriver = "gpu.test.berth.dev"

// draWorld is a world with a DeviceClass of its own for testDriver.
func (w *world) draConfig() kube.Config {
	w.t.Helper()
	class := w.pool + "-gpu"
	_, err := cs.ResourceV1().DeviceClasses().Create(context.Background(), &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", testDriver)},
		}}},
	}, metav1.CreateOptions{})
	require.NoError(w.t, err)
	w.t.Cleanup(func() {
		_ = cs.ResourceV1().DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	cfg := w.config()
	cfg.DRA = kube.DRAConfig{Driver: testDriver, DeviceClasses: []string{class}, IslandAttribute: "nvlinkIsland"}
	return cfg
}

// draNode makes a node without nvidia.com/gpu whose 8 GPUs the test
// driver publishes.
func (w *world) draNode(name string) string {
	w.t.Helper()
	node := w.node(name, 0)
	str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &s} }
	num := func(n int64) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{IntValue: &n} }
	yes := true
	var devs []resourcev1.Device
	for i := range int64(8) {
		devs = append(devs, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"index": num(i), "productName": str("NVIDIA H100 80GB HBM3"), "type": str("gpu"),
			"nvlinkIsland": num(i / 4), "migCapable": {BoolValue: &yes},
		}})
	}
	_, err := cs.ResourceV1().ResourceSlices().Create(context.Background(), &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: testDriver, NodeName: &node, Devices: devs,
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}, metav1.CreateOptions{})
	require.NoError(w.t, err)
	w.t.Cleanup(func() {
		_ = cs.ResourceV1().ResourceSlices().Delete(context.Background(), node+"-gpus", metav1.DeleteOptions{})
	})
	return node
}

// claim makes a ResourceClaim for n GPUs of the world's class (edit
// changes it before it is created).
func (w *world) claim(name string, n int64, edit ...func(*resourcev1.ResourceClaim)) {
	w.t.Helper()
	c := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: w.pool + "-gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n,
			},
		}}}},
	}
	for _, e := range edit {
		e(c)
	}
	_, err := cs.ResourceV1().ResourceClaims(w.ns).Create(context.Background(), c, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

func (w *world) getClaim(name string) *resourcev1.ResourceClaim {
	w.t.Helper()
	c, err := cs.ResourceV1().ResourceClaims(w.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(w.t, err)
	return c
}

// withClaim gives a pod the ResourceClaim claim, used by its container.
func withClaim(claim string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpus", ResourceClaimName: &claim})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: "gpus"})
	}
}

// A 2-member gang whose pods claim 4 GPUs each gets its claims allocated
// by berth: each claim's devices are the GPUs the engine chose for its
// member (the berth.dev/gpus annotation), inside one NVLink island, on
// the member's node (the allocation's node selector), reserved for the
// pod; the two claims share no device. A pod asking nvidia.com/gpu keeps
// the device-plugin path (a node with the extended resource, never a DRA
// node). When the gang ends its claims are released: no allocation, no
// reservation, no finalizer.
func TestDRAGangClaimsAllocated(t *testing.T) {
	w := newWorld(t)
	cfg := w.draConfig()
	dra := map[string]bool{w.draNode("d0"): true, w.draNode("d1"): true}
	plain := w.node("p0", 8)
	w.start(cfg, engine.Config{})

	w.pod("plain", 2)
	pods := []string{"g-0", "g-1"}
	for _, p := range pods {
		w.claim(p+"-gpus", 4)
		w.pod(p, 0, inKueueGroup("g", 2), withClaim(p+"-gpus"))
	}
	w.waitBound(30*time.Second, append(pods, "plain")...)
	require.Equal(t, plain, w.nodeOf("plain"))

	held := map[string]string{}
	for _, p := range pods {
		pod := w.get(p)
		require.True(t, dra[pod.Spec.NodeName], "pod %s on %s, not a DRA node", p, pod.Spec.NodeName)
		c := w.getClaim(p + "-gpus")
		a := c.Status.Allocation
		require.NotNil(t, a, "claim of %s not allocated", p)
		require.Equal(t, []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: p, UID: pod.UID}}, c.Status.ReservedFor)
		require.Contains(t, c.Finalizers, resourcev1.Finalizer)
		require.Equal(t, []string{pod.Spec.NodeName}, a.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values)
		var want, got []string
		islands := map[int]bool{}
		for _, f := range strings.Split(pod.Annotations[kube.AnnotationGPUs], ",") {
			i, err := strconv.Atoi(f)
			require.NoError(t, err)
			want = append(want, fmt.Sprintf("gpu-%d", i))
			islands[i/4] = true
		}
		for _, r := range a.Devices.Results {
			require.Equal(t, "gpus", r.Request)
			require.Equal(t, testDriver, r.Driver)
			require.Equal(t, pod.Spec.NodeName, r.Pool)
			got = append(got, r.Device)
			k := pod.Spec.NodeName + "/" + r.Device
			require.Empty(t, held[k], "%s held by %s and %s", k, held[k], p)
			held[k] = p
		}
		require.Equal(t, want, got, "claim of %s", p)
		require.Len(t, islands, 1, "pod %s spans NVLink islands: %v", p, want)
		t.Logf("%s on %s: %v", p, pod.Spec.NodeName, got)
	}

	for _, p := range pods {
		w.setPhase(p, corev1.PodSucceeded)
	}
	for _, p := range pods {
		eventually(t, 30*time.Second, "claim of "+p+" released", func() bool {
			c := w.getClaim(p + "-gpus")
			return c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0 && !slices.Contains(c.Finalizers, resourcev1.Finalizer)
		})
	}
}

// A claim for more GPUs than any node publishes waits with a reason that
// says so; a claim berth does not allocate (a CEL selector, another
// class) is Invalid with the reason; neither is bound nor allocated.
func TestDRAClaimReasons(t *testing.T) {
	w := newWorld(t)
	cfg := w.draConfig()
	w.draNode("d0")
	w.start(cfg, engine.Config{})

	w.claim("big", 16)
	w.pod("big", 0, withClaim("big"))
	w.claim("cel", 1, func(c *resourcev1.ResourceClaim) {
		c.Spec.Devices.Requests[0].Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}}
	})
	w.pod("cel", 0, withClaim("cel"))
	w.claim("other", 1, func(c *resourcev1.ResourceClaim) {
		c.Spec.Devices.Requests[0].Exactly.DeviceClassName = "mig.nvidia.com"
	})
	w.pod("other", 0, withClaim("other"))
	for pod, want := range map[string]string{"big": "needs 16 GPUs on one node", "cel": "CEL selectors", "other": `device class "mig.nvidia.com"`} {
		eventually(t, 30*time.Second, "a reason for "+pod, func() bool {
			c, ok := condition(w.get(pod))
			return ok && c.Status == corev1.ConditionFalse && contains(c.Message, want)
		})
		c, _ := condition(w.get(pod))
		t.Logf("%s: %s: %s", pod, c.Reason, c.Message)
		require.Empty(t, w.nodeOf(pod))
		require.Nil(t, w.getClaim(pod).Status.Allocation)
	}
}

// devicesOf returns the devices of a claim's allocation.
func devicesOf(c *resourcev1.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

// A restarted berth adopts a bound pod with a claim on the GPUs its claim
// holds, so a new claim on the same node gets the other GPUs; a pod that
// is deleted (a member unbound, a gang preempted) has its claim
// released.
func TestDRARestartAndRelease(t *testing.T) {
	w := newWorld(t)
	cfg := w.draConfig()
	node := w.draNode("d0")
	r := w.start(cfg, engine.Config{})
	w.claim("a", 4)
	w.pod("a", 0, withClaim("a"))
	w.waitBound(30*time.Second, "a")
	w.setPhase("a", corev1.PodRunning)
	r.stop()

	w.start(cfg, engine.Config{})
	w.claim("b", 4)
	w.pod("b", 0, withClaim("b"))
	w.waitBound(30*time.Second, "b")
	require.Equal(t, node, w.nodeOf("b"))
	a, b := devicesOf(w.getClaim("a")), devicesOf(w.getClaim("b"))
	require.Len(t, b, 4)
	for _, d := range b {
		require.NotContains(t, a, d, "claims a %v and b %v share a device", a, b)
	}

	require.NoError(t, cs.CoreV1().Pods(w.ns).Delete(context.Background(), "a", metav1.DeleteOptions{}))
	w.finishDeletes()
	eventually(t, 30*time.Second, "claim a released", func() bool {
		c := w.getClaim("a")
		return c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0 && !slices.Contains(c.Finalizers, resourcev1.Finalizer)
	})
	require.NotNil(t, w.getClaim("b").Status.Allocation)
}

// A pod whose claim comes from a ResourceClaimTemplate waits until the
// resource claim controller has made the claim and named it in the pod's
// status (the test plays the controller), then is allocated like a
// direct claim.
func TestDRATemplateClaim(t *testing.T) {
	w := newWorld(t)
	cfg := w.draConfig()
	node := w.draNode("d0")
	w.start(cfg, engine.Config{})
	tmpl := "two-gpus"
	p := w.podSpec("t", 0)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &tmpl}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	_, err := cs.CoreV1().Pods(w.ns).Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 30*time.Second, "a reason naming the template", func() bool {
		c, ok := condition(w.get("t"))
		return ok && contains(c.Message, "waiting for the claim of template two-gpus")
	})
	require.Empty(t, w.nodeOf("t"))

	w.claim("t-gpus-x1", 2)
	got := w.get("t")
	name := "t-gpus-x1"
	got.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: &name}}
	_, err = cs.CoreV1().Pods(w.ns).UpdateStatus(context.Background(), got, metav1.UpdateOptions{})
	require.NoError(t, err)
	w.waitBound(30*time.Second, "t")
	require.Equal(t, node, w.nodeOf("t"))
	require.Len(t, devicesOf(w.getClaim(name)), 2)
}

// examples/kube-scheduler/rbac-dra.yaml grants exactly kube.DRAAccess.
func TestRBACDRA(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "kube-scheduler", "rbac-dra.yaml"))
	require.NoError(t, err)
	var role rbacv1.ClusterRole
	doc, _, _ := strings.Cut(string(raw), "\n---\n")
	require.NoError(t, yaml.Unmarshal([]byte(doc), &role))
	require.Equal(t, "ClusterRole", role.Kind)
	var want []string
	for _, a := range kube.DRAAccess() {
		want = append(want, a.String())
	}
	slices.Sort(want)
	require.Equal(t, want, roleAccess(&role))
}

// NVLink islands from the slices reach the devices: after a 2-GPU claim
// took part of one island, a 4-GPU claim gets the other whole island, not
// the next four indices across both.
func TestDRAIslands(t *testing.T) {
	w := newWorld(t)
	cfg := w.draConfig()
	w.draNode("d0")
	w.start(cfg, engine.Config{})
	w.claim("a", 2)
	w.pod("a", 0, withClaim("a"))
	w.waitBound(30*time.Second, "a")
	w.claim("b", 4)
	w.pod("b", 0, withClaim("b"))
	w.waitBound(30*time.Second, "b")
	island := func(dev string) int {
		_, n, _ := strings.Cut(dev, "/gpu-")
		i, err := strconv.Atoi(n)
		require.NoError(t, err)
		return i / 4
	}
	a, b := devicesOf(w.getClaim("a")), devicesOf(w.getClaim("b"))
	t.Logf("a %v, b %v", a, b)
	require.Len(t, b, 4)
	for _, d := range b {
		require.Equal(t, island(b[0]), island(d), "b spans islands: %v", b)
		require.NotEqual(t, island(a[0]), island(d), "b shares a's island: a %v b %v", a, b)
	}
}
