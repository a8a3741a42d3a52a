package kube

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/berthsched/berth/topo"
)

// draBackend is a Backend with DRA on whose informers' stores the test
// fills by hand (nothing is started).
func draBackend(t *testing.T, cfg DRAConfig) (*Backend, cache.Indexer, cache.Indexer) {
	b := testBackend(t)
	f := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	r := f.Resource().V1()
	d := &draState{cfg: cfg.withDefaults(), slices: r.ResourceSlices().Informer(),
		claims: r.ResourceClaims().Lister(), classes: r.DeviceClasses().Lister()}
	require.NoError(t, d.slices.AddIndexers(cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		return []string{*obj.(*resourcev1.ResourceSlice).Spec.NodeName}, nil
	}}))
	b.dra = d
	return b, d.slices.GetIndexer(), r.ResourceClaims().Informer().GetIndexer()
}

func slice(node, pool string, gen int64, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + pool + string(rune('0'+gen))},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: &node, Devices: devs,
			Pool: resourcev1.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: 1}}}
}

func gpuDev(name string, kv ...any) resourcev1.Device {
	d := resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
	for i := 0; i+1 < len(kv); i += 2 {
		var a resourcev1.DeviceAttribute
		switch v := kv[i+1].(type) {
		case int:
			n := int64(v)
			a.IntValue = &n
		case string:
			a.StringValue = &v
		}
		d.Attributes[resourcev1.QualifiedName(kv[i].(string))] = a
	}
	return d
}

// A node's GPUs come from the newest generation of each pool, sorted by
// index; MIG devices (type "mig") are not GPUs; the product names the
// model as the GPU product label does; islands become GPUDomains; the
// attribute may be qualified with the driver's domain. Missing or
// repeated indices and mixed products leave the node out with a reason.
func TestDRANodeModel(t *testing.T) {
	b, slices, _ := draBackend(t, DRAConfig{Driver: "gpu.nvidia.com", IslandAttribute: "island"})
	p := "NVIDIA H100 80GB HBM3"
	require.NoError(t, slices.Add(slice("n", "n", 1, gpuDev("old-0", "index", 0, "island", 0))))
	require.NoError(t, slices.Add(slice("n", "n", 2,
		gpuDev("gpu-1", "index", 1, "productName", p, "island", 7),
		gpuDev("gpu-0", "gpu.nvidia.com/index", 0, "productName", p, "island", 7),
		gpuDev("mig-0", "type", "mig", "index", 0),
		gpuDev("gpu-2", "index", 2, "productName", p, "island", 3, "type", "gpu"),
	)))
	nm, ok, err := b.modelNode(node("n", map[string]string{"x": "y"}))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3, nm.spec.GPUs)
	require.Equal(t, "H100-80GB-HBM3", nm.spec.GPUModel)
	require.Equal(t, [][]int{{0, 0, 1}}, nm.spec.GPUDomains)
	require.Equal(t, GPUPathDRA, nm.spec.Labels[LabelGPUPath])
	// No index attribute: the number the name ends with.
	require.NoError(t, slices.Add(slice("m", "m", 1, gpuDev("gpu-10", "island", 0), gpuDev("gpu-9", "island", 1))))
	nm, ok, err = b.modelNode(node("m", nil))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, [][]int{{0, 1}}, nm.spec.GPUDomains) // gpu-9 first
	devs, _, _ := b.draNode("n")
	require.Equal(t, []string{"n/gpu-0", "n/gpu-1", "n/gpu-2"}, []string{devs[0].key(), devs[1].key(), devs[2].key()})

	// A device-plugin node: labelled so, one island.
	nm, ok, err = b.modelNode(node("plain", nil, ResourceGPU, 4))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, GPUPathDevicePlugin, nm.spec.Labels[LabelGPUPath])
	require.Equal(t, [][]int{{0, 0, 0, 0}}, nm.spec.GPUDomains)
	spec := topo.Spec{Levels: b.spec.Levels, GPULevels: []string{GPULevelIsland}, Nodes: []topo.NodeSpec{nm.spec}}
	_, err = topo.New(spec)
	require.NoError(t, err)

	for name, devs := range map[string][]resourcev1.Device{
		"noindex":  {gpuDev("gpu", "island", 0)},
		"twice":    {gpuDev("a", "index", 0, "island", 0), gpuDev("b", "index", 0, "island", 0)},
		"mixed":    {gpuDev("a", "index", 0, "island", 0, "productName", "A"), gpuDev("b", "index", 1, "island", 0, "productName", "B")},
		"noisland": {gpuDev("a", "index", 0)},
	} {
		require.NoError(t, slices.Add(slice(name, name, 1, devs...)))
		_, ok, err := b.modelNode(node(name, nil))
		require.Error(t, err, name)
		require.True(t, ok, name)
	}
}

func TestDRAConfigValidate(t *testing.T) {
	for _, c := range []DRAConfig{{IslandAttribute: "island"}, {DeviceClasses: []string{"x"}}, {Driver: "d", DeviceClasses: []string{}}} {
		cfg := Config{DRA: c}
		require.ErrorIs(t, cfg.Validate(), ErrInvalidConfig, c)
	}
	cfg := Config{DRA: DRAConfig{Driver: "gpu.nvidia.com"}}
	require.NoError(t, cfg.Validate())
	require.Equal(t, []string{"gpu.nvidia.com"}, cfg.DRA.withDefaults().DeviceClasses)
}

// A pod's claims are its GPU demand; what berth does not allocate is
// ErrClaim, and a pod asking both nvidia.com/gpu and claims is refused.
func TestDRAPodClaims(t *testing.T) {
	b, _, claims := draBackend(t, DRAConfig{Driver: "gpu.nvidia.com"})
	exact := func(class string, n int64) *resourcev1.ExactDeviceRequest {
		return &resourcev1.ExactDeviceRequest{DeviceClassName: class, Count: n}
	}
	add := func(name string, reqs ...resourcev1.DeviceRequest) {
		require.NoError(t, claims.Add(&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}}))
	}
	add("two", resourcev1.DeviceRequest{Name: "a", Exactly: exact("gpu.nvidia.com", 2)}, resourcev1.DeviceRequest{Name: "b", Exactly: exact("gpu.nvidia.com", 0)})
	add("mig", resourcev1.DeviceRequest{Name: "a", Exactly: exact("mig.nvidia.com", 1)})
	add("first", resourcev1.DeviceRequest{Name: "a", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "x", DeviceClassName: "gpu.nvidia.com"}}})
	all := exact("gpu.nvidia.com", 0)
	all.AllocationMode = resourcev1.DeviceAllocationModeAll
	add("all", resourcev1.DeviceRequest{Name: "a", Exactly: all})
	pod := func(res string, n int, claims ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: limits(res, n)}}}}
		for _, c := range claims {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: &c})
		}
		return p
	}
	d, dra, err := b.claimDemand(pod(ResourceGPU, 0, "two"), demand{})
	require.NoError(t, err)
	require.True(t, dra)
	require.Equal(t, 3, d.gpus) // count 0 reads as 1, as the API server defaults it
	for _, c := range []string{"mig", "first", "all"} {
		_, _, err = b.claimDemand(pod(ResourceGPU, 0, c), demand{})
		require.ErrorIs(t, err, ErrClaim, c)
	}
	_, _, err = b.claimDemand(pod(ResourceGPU, 1, "two"), demand{gpus: 1})
	require.ErrorIs(t, err, ErrClaim)
	_, _, err = b.claimDemand(pod(ResourceGPU, 0, "missing"), demand{})
	require.Error(t, err)

	j, _, err := b.buildJob("ns/pod/p", []*corev1.Pod{pod(ResourceGPU, 0, "two")}, true, metav1.Now().Time)
	require.NoError(t, err)
	require.Equal(t, map[string]string{LabelGPUPath: GPUPathDRA}, j.Request.Groups[0].Selector)
	require.Equal(t, 3, j.Request.Groups[0].GPUsPerMember)
	j, _, err = b.buildJob("ns/pod/p", []*corev1.Pod{pod(ResourceGPU, 2)}, true, metav1.Now().Time)
	require.NoError(t, err)
	require.Equal(t, map[string]string{LabelGPUPath: GPUPathDevicePlugin}, j.Request.Groups[0].Selector)
}
