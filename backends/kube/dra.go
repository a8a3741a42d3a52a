package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	listersresourcev1 "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/berthsched/berth/topo"
)

// DRAConfig turns on berth's allocation of ResourceClaims
// (resource.k8s.io/v1, dynamic resource allocation): berth does the
// scheduler's part of DRA for the GPUs of one driver. See the package
// documentation and docs/backends/kube.md.
type DRAConfig struct {
	// Driver is the DRA driver whose GPUs berth allocates, as its
	// ResourceSlices name it ("gpu.nvidia.com"). Empty: DRA is off, and
	// nothing of this config is read.
	Driver string
	// DeviceClasses are the DeviceClasses whose requests are GPUs of
	// Driver. Nil: {Driver} (the NVIDIA driver's GPU class has the
	// driver's name). A pod's claim for another class is refused.
	DeviceClasses []string
	// IndexAttribute is the device attribute (an int) holding a GPU's
	// index on its node: the order of berth's node-local GPU indices.
	// Empty: "index". A device without it is ordered by the number its
	// name ends with (the NVIDIA driver's "gpu-<minor>").
	IndexAttribute string
	// ProductAttribute is the device attribute (a string) naming the GPU
	// product ("NVIDIA A100-SXM4-80GB"). Empty: "productName". A node
	// whose devices have none takes its model from LabelGPUProduct.
	ProductAttribute string
	// TypeAttribute (a string), when a device has it, must be "gpu" for
	// the device to be a GPU berth allocates (the NVIDIA driver publishes
	// MIG devices beside the GPUs, with type "mig"). Empty: "type".
	TypeAttribute string
	// IslandAttribute, if set, is the device attribute (an int) naming
	// the NVLink island of a GPU on its node: the engine then knows a GPU
	// level (GPULevelIsland) and keeps a member inside one island when one
	// holds it. Empty: no islands.
	IslandAttribute string
}

// LabelGPUPath is a label berth adds to its own model of a node (not to
// the Node object) when DRA is on: GPUPathDRA on nodes whose GPUs the DRA
// driver publishes, GPUPathDevicePlugin on the others. Pods with claims
// select the first, pods asking for nvidia.com/gpu the second: the
// kubelet gives a pod GPUs only through the path it asked.
const (
	LabelGPUPath        = "berth.dev/gpu-path"
	GPUPathDRA          = "dra"
	GPUPathDevicePlugin = "device-plugin"
	// GPULevelIsland is the GPU level of NVLink islands read from
	// DRAConfig.IslandAttribute.
	GPULevelIsland = "nvlink-island"
	// AnnotationAllocatedBy marks the ResourceClaims berth allocated (the
	// scheduler name): berth releases only those.
	AnnotationAllocatedBy = "berth.dev/allocated-by"
)

// ErrClaim: a pod's ResourceClaim asks what berth does not allocate (a
// class of another driver, CEL selectors, constraints, FirstAvailable,
// All mode, admin access, a claim shared with another pod). The pod is
// Invalid with the reason; it is never placed without its devices.
var ErrClaim = errors.New("kube: unsupported ResourceClaim")

func (c DRAConfig) withDefaults() DRAConfig {
	if c.DeviceClasses == nil && c.Driver != "" {
		c.DeviceClasses = []string{c.Driver}
	}
	c.IndexAttribute = cmp.Or(c.IndexAttribute, "index")
	c.ProductAttribute = cmp.Or(c.ProductAttribute, "productName")
	c.TypeAttribute = cmp.Or(c.TypeAttribute, "type")
	return c
}

func (c DRAConfig) validate() error {
	switch {
	case c.Driver == "" && (c.DeviceClasses != nil || c.IndexAttribute != "" || c.ProductAttribute != "" || c.TypeAttribute != "" || c.IslandAttribute != ""):
		return fmt.Errorf("%w: DRA fields set without a DRA.Driver (DRA is off without one)", ErrInvalidConfig)
	case c.Driver != "" && c.DeviceClasses != nil && len(c.DeviceClasses) == 0:
		return fmt.Errorf("%w: DRA.DeviceClasses is empty: no claim could be allocated (nil: the class named as the driver)", ErrInvalidConfig)
	}
	return nil
}

// DRAAccess lists the permissions DRA adds to RequiredAccess (checked by
// Start when DRA is on, unless Config.SkipAccessCheck).
func DRAAccess() []Access {
	const g = "resource.k8s.io"
	return []Access{
		{g, "resourceslices", "", "list", "DRA inventory"},
		{g, "resourceslices", "", "watch", "DRA inventory"},
		{g, "deviceclasses", "", "list", "DRA device classes"},
		{g, "deviceclasses", "", "watch", "DRA device classes"},
		{g, "resourceclaims", "", "list", "pods' claims"},
		{g, "resourceclaims", "", "watch", "pods' claims"},
		{g, "resourceclaims", "", "get", "pods' claims"},
		{g, "resourceclaims", "", "update", "claim finalizer"},
		{g, "resourceclaims", "status", "update", "claim allocation and release"},
	}
}

// draState is the DRA part of a Backend (nil when DRA is off).
type draState struct {
	cfg     DRAConfig
	slices  cache.SharedIndexInformer
	claims  listersresourcev1.ResourceClaimLister
	classes listersresourcev1.DeviceClassLister
	kick    chan struct{}
}

// draDevice is one GPU a ResourceSlice publishes.
type draDevice struct {
	pool, name string
	index      int64
	product    string
	island     int64
}

func (d draDevice) key() string { return d.pool + "/" + d.name }

// startDRA registers the DRA informers on b.factory (before it starts),
// the GPU level of islands, and the release loop. Called by Start.
func (b *Backend) startDRA(ctx context.Context, h cache.ResourceEventHandler) error {
	if b.cfg.DRA.Driver == "" {
		return nil
	}
	if !b.cfg.SkipAccessCheck {
		if err := checkAccess(ctx, b.cs, DRAAccess()); err != nil {
			return err
		}
	}
	// Informers on a group the API server does not serve would never
	// sync: Start would wait for its context.
	if _, err := b.cs.Discovery().ServerResourcesForGroupVersion(resourcev1.SchemeGroupVersion.String()); err != nil {
		return fmt.Errorf("%w: DRA needs %s, which the API server does not serve: %v", ErrInvalidConfig, resourcev1.SchemeGroupVersion, err)
	}
	d := &draState{cfg: b.cfg.DRA.withDefaults(), kick: make(chan struct{}, 1)}
	r := b.factory.Resource().V1()
	d.slices = r.ResourceSlices().Informer()
	if err := d.slices.AddIndexers(cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil && s.Spec.Driver == d.cfg.Driver {
			return []string{*s.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("kube: resource slice index: %w", err)
	}
	d.claims = r.ResourceClaims().Lister()
	d.classes = r.DeviceClasses().Lister()
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.poke() },
		UpdateFunc: func(any, any) { d.poke() },
		DeleteFunc: func(any) { d.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{d.slices, r.ResourceClaims().Informer(), r.DeviceClasses().Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("kube: DRA handler: %w", err)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{r.ResourceClaims().Informer(), b.podInf} {
		if _, err := inf.AddEventHandler(kick); err != nil {
			return fmt.Errorf("kube: DRA handler: %w", err)
		}
	}
	if d.cfg.IslandAttribute != "" {
		b.spec.GPULevels = []string{GPULevelIsland}
	}
	b.dra = d
	b.wg.Go(func() { b.releaseLoop(ctx) })
	return nil
}

func (d *draState) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func attr(dev *resourcev1.Device, driver, name string) (resourcev1.DeviceAttribute, bool) {
	if a, ok := dev.Attributes[resourcev1.QualifiedName(name)]; ok {
		return a, true
	}
	a, ok := dev.Attributes[resourcev1.QualifiedName(driver+"/"+name)]
	return a, ok
}

// draNode returns the GPUs the driver's ResourceSlices publish for node
// (of each pool its newest generation), sorted by index: the engine's
// node-local GPU i is devs[i]. ok is false when the driver publishes
// nothing there.
func (b *Backend) draNode(node string) (devs []draDevice, ok bool, err error) {
	d := b.dra
	objs, err := d.slices.GetIndexer().ByIndex(nodeIndex, node)
	if err != nil {
		return nil, false, fmt.Errorf("kube: resource slices of %s: %w", node, err)
	}
	newest := map[string]int64{}
	for _, o := range objs {
		s := o.(*resourcev1.ResourceSlice)
		newest[s.Spec.Pool.Name] = max(newest[s.Spec.Pool.Name], s.Spec.Pool.Generation)
	}
	for _, o := range objs {
		s := o.(*resourcev1.ResourceSlice)
		if s.Spec.Pool.Generation < newest[s.Spec.Pool.Name] {
			continue
		}
		for i := range s.Spec.Devices {
			dev := &s.Spec.Devices[i]
			if t, has := attr(dev, d.cfg.Driver, d.cfg.TypeAttribute); has && (t.StringValue == nil || *t.StringValue != "gpu") {
				continue
			}
			x := draDevice{pool: s.Spec.Pool.Name, name: dev.Name}
			if idx, has := attr(dev, d.cfg.Driver, d.cfg.IndexAttribute); has && idx.IntValue != nil {
				x.index = *idx.IntValue
			} else if x.index, err = nameIndex(dev.Name); err != nil {
				return nil, true, fmt.Errorf("node %s: device %s of pool %s has no int attribute %q, and its name ends in no number", node, dev.Name, x.pool, d.cfg.IndexAttribute)
			}
			if p, has := attr(dev, d.cfg.Driver, d.cfg.ProductAttribute); has && p.StringValue != nil {
				x.product = *p.StringValue
			}
			if d.cfg.IslandAttribute != "" {
				is, has := attr(dev, d.cfg.Driver, d.cfg.IslandAttribute)
				if !has || is.IntValue == nil {
					return nil, true, fmt.Errorf("node %s: device %s has no int attribute %q", node, dev.Name, d.cfg.IslandAttribute)
				}
				x.island = *is.IntValue
			}
			devs = append(devs, x)
		}
	}
	if len(devs) == 0 {
		return nil, false, nil
	}
	slices.SortFunc(devs, func(a, c draDevice) int { return cmp.Compare(a.index, c.index) })
	for i := 1; i < len(devs); i++ {
		if devs[i].index == devs[i-1].index {
			return nil, true, fmt.Errorf("node %s: devices %s and %s both have index %d", node, devs[i-1].key(), devs[i].key(), devs[i].index)
		}
		if devs[i].product != devs[0].product {
			return nil, true, fmt.Errorf("node %s: GPUs of products %q and %q (berth models one GPU model per node)", node, devs[0].product, devs[i].product)
		}
	}
	if len(devs) > topo.MaxGPUsPerNode {
		return nil, true, fmt.Errorf("node %s: the driver publishes %d GPUs, more than %d", node, len(devs), topo.MaxGPUsPerNode)
	}
	return devs, true, nil
}

// nameIndex reads the number a device name ends with ("gpu-3": 3), the
// order of GPUs whose driver publishes no index attribute (the NVIDIA
// driver names its GPUs gpu-<minor>).
func nameIndex(name string) (int64, error) {
	i := strings.LastIndexFunc(name, func(r rune) bool { return r < '0' || r > '9' })
	return strconv.ParseInt(name[i+1:], 10, 64)
}

// modelDRANode fills sp from the node's devices: GPU count, model (the
// product attribute, "NVIDIA A100-SXM4-80GB" -> "A100-SXM4-80GB", as
// LabelGPUProduct's values are read; else sp's from the label) and NVLink
// islands.
func (b *Backend) modelDRANode(sp *topo.NodeSpec, devs []draDevice) {
	sp.GPUs = len(devs)
	if p := devs[0].product; p != "" {
		sp.GPUModel = strings.TrimPrefix(strings.ReplaceAll(p, " ", "-"), "NVIDIA-")
	}
	if b.dra.cfg.IslandAttribute != "" {
		rank := map[int64]int{}
		islands := make([]int, len(devs))
		for i, d := range devs {
			if _, ok := rank[d.island]; !ok {
				rank[d.island] = len(rank)
			}
			islands[i] = rank[d.island]
		}
		sp.GPUDomains = [][]int{islands}
	}
	if sp.Labels == nil {
		sp.Labels = map[string]string{}
	}
	sp.Labels[LabelGPUPath] = GPUPathDRA
}

// markDevicePluginNode labels a node whose GPUs are not DRA's, and gives
// it one island per GPU level. No-op with DRA off.
func (b *Backend) markDevicePluginNode(sp *topo.NodeSpec) {
	if b.dra == nil {
		return
	}
	if sp.Labels == nil {
		sp.Labels = map[string]string{}
	}
	sp.Labels[LabelGPUPath] = GPUPathDevicePlugin
	if b.dra.cfg.IslandAttribute != "" {
		sp.GPUDomains = [][]int{make([]int, sp.GPUs)}
	}
}

// podClaim is one ResourceClaim of a pod berth allocates, with its GPU
// requests (ExactCount, a class of DRAConfig.DeviceClasses).
type podClaim struct {
	claim    *resourcev1.ResourceClaim
	requests []resourcev1.DeviceRequest
	gpus     int
}

// podClaims reads the claims of p: direct (resourceClaimName) or made
// from a template (the name the resource claim controller wrote in the
// pod's status). A claim that does not exist yet is an error that clears
// once it does; what berth does not allocate is ErrClaim. Nil with DRA
// off or without claims.
func (b *Backend) podClaims(p *corev1.Pod) ([]podClaim, int, error) {
	if b.dra == nil || len(p.Spec.ResourceClaims) == 0 {
		return nil, 0, nil
	}
	cfg := b.dra.cfg
	var out []podClaim
	total := 0
	for _, rc := range p.Spec.ResourceClaims {
		name := ""
		switch {
		case rc.ResourceClaimName != nil:
			name = *rc.ResourceClaimName
		case rc.ResourceClaimTemplateName != nil:
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.Name == rc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
			if name == "" {
				return nil, 0, fmt.Errorf("claim %q: waiting for the claim of template %s to be created", rc.Name, *rc.ResourceClaimTemplateName)
			}
		default:
			return nil, 0, fmt.Errorf("%w: claim %q names neither a claim nor a template", ErrClaim, rc.Name)
		}
		c, err := b.dra.claims.ResourceClaims(p.Namespace).Get(name)
		if err != nil {
			return nil, 0, fmt.Errorf("claim %s/%s: %w", p.Namespace, name, err)
		}
		if c.Status.Allocation != nil && !reservedFor(c, p.UID) {
			return nil, 0, fmt.Errorf("%w: claim %s is allocated for another consumer (berth does not share claims)", ErrClaim, name)
		}
		if len(c.Spec.Devices.Constraints) > 0 {
			return nil, 0, fmt.Errorf("%w: claim %s has constraints (berth places GPUs by its own topology)", ErrClaim, name)
		}
		pc := podClaim{claim: c}
		for _, r := range c.Spec.Devices.Requests {
			e := r.Exactly
			switch {
			case e == nil:
				return nil, 0, fmt.Errorf("%w: claim %s request %s: only exactly requests (not firstAvailable)", ErrClaim, name, r.Name)
			case !slices.Contains(cfg.DeviceClasses, e.DeviceClassName):
				return nil, 0, fmt.Errorf("%w: claim %s request %s: device class %q is not one berth allocates (%s)", ErrClaim, name, r.Name, e.DeviceClassName, strings.Join(cfg.DeviceClasses, ", "))
			case len(e.Selectors) > 0:
				return nil, 0, fmt.Errorf("%w: claim %s request %s: CEL selectors are not evaluated by berth", ErrClaim, name, r.Name)
			case e.AllocationMode != "" && e.AllocationMode != resourcev1.DeviceAllocationModeExactCount:
				return nil, 0, fmt.Errorf("%w: claim %s request %s: allocation mode %s (berth allocates ExactCount)", ErrClaim, name, r.Name, e.AllocationMode)
			case e.AdminAccess != nil && *e.AdminAccess:
				return nil, 0, fmt.Errorf("%w: claim %s request %s: admin access", ErrClaim, name, r.Name)
			}
			pc.gpus += int(max(e.Count, 1))
			pc.requests = append(pc.requests, r)
		}
		total += pc.gpus
		out = append(out, pc)
	}
	return out, total, nil
}

func reservedFor(c *resourcev1.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == uid })
}

// claimDemand adds p's claims to its demand d (from its resources):
// whole GPUs, on DRA nodes. dra is false for a pod without claims.
func (b *Backend) claimDemand(p *corev1.Pod, d demand) (demand, bool, error) {
	_, n, err := b.podClaims(p)
	if err != nil || n == 0 {
		return d, false, err
	}
	if d.gpus > 0 || d.mig != "" {
		return d, false, fmt.Errorf("%w: the pod asks for %v and for GPUs through claims", ErrClaim, d)
	}
	d.gpus = n
	return d, true, nil
}

// memberDemand is what a pod holds on its node, claims included (errors
// read as no claims).
func (b *Backend) memberDemand(p *corev1.Pod) demand {
	d, _ := podDemand(p)
	if dd, ok, err := b.claimDemand(p, d); err == nil && ok {
		return dd
	}
	return d
}
