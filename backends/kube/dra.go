package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	listersresourcev1 "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/berthsched/berth/engine"
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

// allocateClaims writes the allocation of the claims of the pod pr to the
// GPUs of member m (on m.Node, in the order of the pod's claims and their
// requests), and reserves them for the pod, as kube-scheduler's DRA
// plugin does before it binds: the finalizer first (an update), then
// status.allocation with reservedFor (a status update). A claim already
// allocated for the pod is left as it is. On failure the claims written
// are released. A no-op with DRA off or for a pod without claims.
func (b *Backend) allocateClaims(ctx context.Context, pr podRef, m engine.Member) error {
	if b.dra == nil {
		return nil
	}
	p, err := b.podList.Pods(pr.ns).Get(pr.name)
	if err != nil || p.UID != pr.uid {
		return refused("pod %s is gone", pr.key())
	}
	pcs, n, err := b.podClaims(p)
	if err != nil {
		return refused("pod %s: %v", pr.key(), err)
	}
	if n == 0 {
		return nil
	}
	devs, ok, err := b.draNode(m.Node)
	if err != nil || !ok {
		return refused("pod %s: node %s has no GPUs of DRA driver %s (%v)", pr.key(), m.Node, b.dra.cfg.Driver, err)
	}
	if len(m.GPUs) != n {
		return refused("pod %s: its claims ask %d GPUs, the member has %d", pr.key(), n, len(m.GPUs))
	}
	chosen := make([]draDevice, 0, n)
	for _, g := range m.GPUs {
		if g < 0 || g >= len(devs) {
			return refused("pod %s: GPU %d of %s is not one the driver publishes", pr.key(), g, m.Node)
		}
		chosen = append(chosen, devs[g])
	}
	if err := b.devicesFree(p, chosen); err != nil {
		return err
	}
	var written []*resourcev1.ResourceClaim
	next := 0
	for _, pc := range pcs {
		take := chosen[next : next+pc.gpus]
		next += pc.gpus
		if a := pc.claim.Status.Allocation; a != nil {
			if sameAllocation(a, m.Node, take) {
				continue // ours, from an earlier try
			}
			// Allocated for this pod by an earlier try elsewhere.
			if err := b.releaseClaim(ctx, pc.claim.Namespace, pc.claim.Name, p.UID); err != nil {
				return fmt.Errorf("kube: releasing claim %s/%s of an earlier try: %w", pc.claim.Namespace, pc.claim.Name, err)
			}
			if pc.claim, err = b.cs.ResourceV1().ResourceClaims(pc.claim.Namespace).Get(ctx, pc.claim.Name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("kube: claim %s/%s: %w", pc.claim.Namespace, pc.claim.Name, err)
			}
		}
		c, err := b.writeAllocation(ctx, p, m.Node, pc, take)
		if err != nil {
			for _, w := range written {
				if rerr := b.releaseClaim(ctx, w.Namespace, w.Name, p.UID); rerr != nil {
					b.cfg.Logf("kube: releasing claim %s/%s after a failed allocation: %v", w.Namespace, w.Name, rerr)
				}
			}
			switch {
			case apierrors.IsNotFound(err), apierrors.IsConflict(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err), errors.Is(err, errAllocatedElsewhere):
				return refused("allocating claim %s/%s for pod %s: %v", pc.claim.Namespace, pc.claim.Name, pr.key(), err)
			}
			return fmt.Errorf("kube: allocating claim %s/%s for pod %s: %w", pc.claim.Namespace, pc.claim.Name, pr.key(), err)
		}
		written = append(written, c)
	}
	return nil
}

// sameAllocation: a allocates exactly devs on node.
func sameAllocation(a *resourcev1.AllocationResult, node string, devs []draDevice) bool {
	if a.NodeSelector == nil || len(a.NodeSelector.NodeSelectorTerms) != 1 || len(a.Devices.Results) != len(devs) {
		return false
	}
	t := a.NodeSelector.NodeSelectorTerms[0]
	if len(t.MatchFields) != 1 || !slices.Equal(t.MatchFields[0].Values, []string{node}) {
		return false
	}
	for i, r := range a.Devices.Results {
		if r.Pool != devs[i].pool || r.Device != devs[i].name {
			return false
		}
	}
	return true
}

// releasePodClaims releases the claims allocated for pod pr when its
// bind failed (the pod is live, so releaseLoop keeps them): best effort,
// even when ctx has just ended; a claim left allocated is allocated anew
// by the pod's next bind (allocateClaims).
func (b *Backend) releasePodClaims(ctx context.Context, pr podRef) {
	if b.dra == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	p, err := b.podList.Pods(pr.ns).Get(pr.name)
	if err != nil || p.UID != pr.uid {
		return // gone: releaseLoop releases its claims
	}
	pcs, _, _ := b.podClaims(p)
	for _, pc := range pcs {
		if err := b.releaseClaim(ctx, pc.claim.Namespace, pc.claim.Name, pr.uid); err != nil {
			b.cfg.Logf("kube: releasing claim %s/%s after a failed bind: %v", pc.claim.Namespace, pc.claim.Name, err)
		}
	}
}

var errAllocatedElsewhere = errors.New("allocated for another consumer meanwhile")

// devicesFree checks that no claim but p's holds one of devs: the
// engine's books and the cluster's allocations agree. A device held by a
// claim whose pods have all ended is being released (a transient error);
// any other holder is a refusal.
func (b *Backend) devicesFree(p *corev1.Pod, devs []draDevice) error {
	want := map[string]bool{}
	for _, d := range devs {
		want[d.key()] = true
	}
	all, err := b.dra.claims.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("kube: listing claims: %w", err)
	}
	for _, c := range all {
		if c.Status.Allocation == nil || reservedFor(c, p.UID) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != b.dra.cfg.Driver || !want[r.Pool+"/"+r.Device] {
				continue
			}
			if len(b.liveConsumers(c)) == 0 {
				return fmt.Errorf("kube: device %s/%s is held by claim %s/%s, whose pods have ended: pod %s waits for its release", r.Pool, r.Device, c.Namespace, c.Name, podKey(p))
			}
			return refused("device %s/%s is held by claim %s/%s: pod %s cannot have it (the engine's books and the cluster differ)", r.Pool, r.Device, c.Namespace, c.Name, podKey(p))
		}
	}
	return nil
}

// writeAllocation allocates one claim (finalizer, then allocation and
// reservation), retrying on conflicts with the claim read again.
func (b *Backend) writeAllocation(ctx context.Context, p *corev1.Pod, node string, pc podClaim, devs []draDevice) (*resourcev1.ResourceClaim, error) {
	api := b.cs.ResourceV1().ResourceClaims(pc.claim.Namespace)
	alloc := &resourcev1.AllocationResult{
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}
	k := 0
	byClass := map[string][]string{}
	for _, r := range pc.requests {
		byClass[r.Exactly.DeviceClassName] = append(byClass[r.Exactly.DeviceClassName], r.Name)
		for range max(r.Exactly.Count, 1) {
			alloc.Devices.Results = append(alloc.Devices.Results, resourcev1.DeviceRequestAllocationResult{
				Request: r.Name, Driver: b.dra.cfg.Driver, Pool: devs[k].pool, Device: devs[k].name,
			})
			k++
		}
	}
	// The driver's kubelet plugin reads the configuration from the
	// allocation: the classes' first, then the claim's.
	for _, class := range slices.Sorted(maps.Keys(byClass)) {
		dc, err := b.dra.classes.Get(class)
		if err != nil {
			return nil, fmt.Errorf("device class %s: %w", class, err)
		}
		for _, cc := range dc.Spec.Config {
			alloc.Devices.Config = append(alloc.Devices.Config, resourcev1.DeviceAllocationConfiguration{
				Source: resourcev1.AllocationConfigSourceClass, Requests: byClass[class], DeviceConfiguration: cc.DeviceConfiguration,
			})
		}
	}
	for _, cc := range pc.claim.Spec.Devices.Config {
		alloc.Devices.Config = append(alloc.Devices.Config, resourcev1.DeviceAllocationConfiguration{
			Source: resourcev1.AllocationConfigSourceClaim, Requests: cc.Requests, DeviceConfiguration: cc.DeviceConfiguration,
		})
	}
	c := pc.claim.DeepCopy()
	for attempt := 0; ; attempt++ {
		if c.DeletionTimestamp != nil {
			return nil, fmt.Errorf("%w: claim is being deleted", errAllocatedElsewhere)
		}
		if c.Status.Allocation != nil {
			if reservedFor(c, p.UID) {
				return c, nil
			}
			return nil, errAllocatedElsewhere
		}
		if !slices.Contains(c.Finalizers, resourcev1.Finalizer) || c.Annotations[AnnotationAllocatedBy] != b.cfg.SchedulerName {
			if !slices.Contains(c.Finalizers, resourcev1.Finalizer) {
				c.Finalizers = append(c.Finalizers, resourcev1.Finalizer)
			}
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[AnnotationAllocatedBy] = b.cfg.SchedulerName
			up, err := api.Update(ctx, c, metav1.UpdateOptions{})
			if err == nil {
				c = up
			}
			if err != nil && (!apierrors.IsConflict(err) || attempt >= 4) {
				return nil, err
			}
			if err != nil {
				if c, err = api.Get(ctx, c.Name, metav1.GetOptions{}); err != nil {
					return nil, err
				}
				continue
			}
		}
		c.Status.Allocation = alloc
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
		up, err := api.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err == nil {
			return up, nil
		}
		if !apierrors.IsConflict(err) || attempt >= 4 {
			return nil, err
		}
		if c, err = api.Get(ctx, c.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
}

// liveConsumers are the entries of c's reservedFor that are live pods.
func (b *Backend) liveConsumers(c *resourcev1.ResourceClaim) []resourcev1.ResourceClaimConsumerReference {
	var out []resourcev1.ResourceClaimConsumerReference
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup != "" || r.Resource != "pods" {
			out = append(out, r) // not a pod: not berth's to judge
			continue
		}
		p, err := b.podList.Pods(c.Namespace).Get(r.Name)
		if err == nil && p.UID == r.UID && podLive(p) {
			out = append(out, r)
		}
	}
	return out
}

// releaseClaim removes uid from the claim's reservedFor and, when no
// consumer is left, clears its allocation and drops the finalizer, as
// the resource claim controller does.
func (b *Backend) releaseClaim(ctx context.Context, ns, name string, uid types.UID) error {
	api := b.cs.ResourceV1().ResourceClaims(ns)
	for attempt := 0; ; attempt++ {
		c, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		keep := slices.DeleteFunc(slices.Clone(c.Status.ReservedFor), func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == uid })
		err = b.writeRelease(ctx, c, keep)
		if !apierrors.IsConflict(err) || attempt >= 4 {
			return err
		}
	}
}

// writeRelease sets c's reservedFor to keep, clearing the allocation
// (and then the finalizer) when keep is empty.
func (b *Backend) writeRelease(ctx context.Context, c *resourcev1.ResourceClaim, keep []resourcev1.ResourceClaimConsumerReference) error {
	api := b.cs.ResourceV1().ResourceClaims(c.Namespace)
	c = c.DeepCopy()
	if len(keep) != len(c.Status.ReservedFor) || len(keep) == 0 && c.Status.Allocation != nil {
		c.Status.ReservedFor = keep
		if len(keep) == 0 {
			c.Status.Allocation = nil
		}
		up, err := api.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		c = up
	}
	if c.Status.Allocation == nil && slices.Contains(c.Finalizers, resourcev1.Finalizer) {
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == resourcev1.Finalizer })
		if _, err := api.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// releaseLoop releases the claims berth allocated whose pods have ended
// or are gone (the member was unbound, the job finished or was
// preempted): their reservedFor drops those pods, and a claim without
// consumers is deallocated.
func (b *Backend) releaseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.dra.kick:
		}
		retry := false
		all, err := b.dra.claims.List(labels.Everything())
		if err != nil {
			b.logf("dra", "kube: listing claims: %v", err)
			continue
		}
		for _, c := range all {
			if c.Annotations[AnnotationAllocatedBy] != b.cfg.SchedulerName {
				continue
			}
			if c.Status.Allocation == nil {
				continue // not allocated, or being allocated right now
			}
			keep := b.liveConsumers(c)
			if len(keep) == len(c.Status.ReservedFor) && len(keep) > 0 {
				continue
			}
			if err := b.writeRelease(ctx, c, keep); err != nil {
				if !apierrors.IsNotFound(err) {
					b.logf("dra/"+c.Namespace+"/"+c.Name, "kube: releasing claim %s/%s: %v", c.Namespace, c.Name, err)
					retry = true
				}
			}
		}
		if retry {
			// A conflict: the informer brings the claim anew; try again
			// shortly even if nothing else changes.
			time.AfterFunc(500*time.Millisecond, b.dra.poke)
		}
	}
}
