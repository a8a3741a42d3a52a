package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berthsched/berth/engine"
)

// The write side of DRA (dra.go reads): allocating a pod's claims before
// its bind, and releasing them when it ends.

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
