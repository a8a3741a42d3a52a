package kube

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// nodeModel is what berth knows of a Kubernetes node.
type nodeModel struct {
	spec topo.NodeSpec
	// capacity per resource berth books: ResourceGPU, or a MIG resource.
	capacity map[string]int64
	// cause says why the node is not Ready (nodeStatus).
	cause string
}

// modelNode turns a Node into berth's model. ok is false for nodes without
// GPUs (berth does not place on them); err says why a GPU node cannot be
// modelled.
func (b *Backend) modelNode(n *corev1.Node) (nm nodeModel, ok bool, err error) {
	for k, v := range b.cfg.NodeSelector {
		if n.Labels[k] != v {
			return nm, false, nil
		}
	}
	alloc := n.Status.Allocatable
	if alloc == nil {
		alloc = n.Status.Capacity
	}
	nm.capacity = map[string]int64{}
	gpus := quantity(alloc, ResourceGPU)
	migs := map[string]int64{}
	for name, q := range alloc {
		if s := string(name); strings.HasPrefix(s, ResourceMIGPrefix) && q.Value() > 0 {
			migs[strings.TrimPrefix(s, ResourceMIGPrefix)] = q.Value()
			nm.capacity[s] = q.Value()
		}
	}
	var devs []draDevice
	isDRA := false
	if b.dra != nil {
		if devs, isDRA, err = b.draNode(n.Name); err != nil {
			return nm, true, err
		}
	}
	if gpus <= 0 && len(migs) == 0 && !isDRA {
		return nm, false, nil
	}
	sp := topo.NodeSpec{
		Name:     n.Name,
		GPUModel: strings.TrimPrefix(n.Labels[LabelGPUProduct], "NVIDIA-"),
		Labels:   maps.Clone(n.Labels),
	}
	sp.State, nm.cause = nodeStatus(n)
	if v, err := strconv.ParseInt(n.Labels[LabelGPUMemory], 10, 64); err == nil {
		sp.GPUMemoryMiB = v
	}
	parent := ""
	for _, l := range b.cfg.Levels {
		v, has := n.Labels[l.Label]
		switch {
		case has:
		case l.NodeWhenMissing:
			v = "node:" + n.Name
		default:
			v = "-"
		}
		parent += "/" + v
		sp.Domains = append(sp.Domains, parent)
	}
	switch {
	case isDRA:
		// The DRA driver's GPUs: berth allocates them by claim, and the
		// device plugin (if it runs here too) must not hand them out.
		b.modelDRANode(&sp, devs)
		nm.capacity = map[string]int64{"dra:" + b.dra.cfg.Driver: int64(sp.GPUs)}
		nm.spec = sp
		return nm, true, nil
	case len(migs) > 0 && gpus > 0:
		return nm, true, fmt.Errorf("node %s has both %s and MIG resources (mixed MIG and whole GPUs on one node is not modelled)", n.Name, ResourceGPU)
	case len(migs) > 0:
		m, err := lookupModel(n.Labels[LabelGPUProduct])
		if err != nil {
			return nm, true, fmt.Errorf("node %s: MIG resources on GPU product %q: %w", n.Name, n.Labels[LabelGPUProduct], err)
		}
		count, err := strconv.Atoi(n.Labels[LabelGPUCount])
		if err != nil || count < 1 {
			return nm, true, fmt.Errorf("node %s: MIG resources need the %s label (got %q)", n.Name, LabelGPUCount, n.Labels[LabelGPUCount])
		}
		// The device plugin says how many instances of each profile the
		// node has, not on which GPU: berth assumes the MIG manager's
		// usual "all GPUs alike" configuration.
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(migs)) {
			if migs[p]%int64(count) != 0 {
				return nm, true, fmt.Errorf("node %s: %d %s instances over %d GPUs are not the same on every GPU", n.Name, migs[p], p, count)
			}
			for range migs[p] / int64(count) {
				parts = append(parts, p)
			}
		}
		layout := strings.Join(parts, " ")
		if _, err := mig.ParseLayout(m, layout); err != nil {
			return nm, true, fmt.Errorf("node %s: MIG instances %q do not fit one %v GPU: %w", n.Name, layout, m, err)
		}
		sp.GPUModel, sp.GPUs, sp.MIG, sp.MIGLayout = m.String(), count, true, layout
	default:
		if gpus > topo.MaxGPUsPerNode {
			return nm, true, fmt.Errorf("node %s has %d GPUs, more than %d", n.Name, gpus, topo.MaxGPUsPerNode)
		}
		sp.GPUs = int(gpus)
		nm.capacity[ResourceGPU] = gpus
	}
	b.markDevicePluginNode(&sp)
	nm.spec = sp
	return nm, true, nil
}

// lookupModel finds the MIG model of a GPU feature discovery product
// label ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3").
func lookupModel(product string) (mig.Model, error) {
	p := strings.TrimPrefix(product, "NVIDIA-")
	m, err := mig.LookupModel(p)
	if err == nil {
		return m, nil
	}
	for _, suffix := range []string{"-HBM3", "-HBM3e", "-HBM2e", "-MIG"} {
		if q, ok := strings.CutSuffix(p, suffix); ok {
			if m, err2 := mig.LookupModel(q); err2 == nil {
				return m, nil
			}
		}
	}
	return 0, err
}

// nodeState: Down when not Ready (or deleted), Cordoned when unschedulable
// or tainted NoSchedule / NoExecute (berth does not match tolerations),
// else Ready.
func nodeState(n *corev1.Node) topo.NodeState {
	st, _ := nodeStatus(n)
	return st
}

// nodeStatus is nodeState and, for a node that is not Ready, why, in the
// words a user sees in a pending pod's reason: "not ready",
// "unschedulable", or the taints ("tainted
// node.kubernetes.io/not-ready:NoSchedule").
func nodeStatus(n *corev1.Node) (topo.NodeState, string) {
	// A node without a Ready condition (no kubelet has reported yet, or
	// a node object written by hand) is taken as ready.
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return topo.Down, "not ready"
		}
	}
	if n.Spec.Unschedulable {
		return topo.Cordoned, "unschedulable"
	}
	var taints []string
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			taints = append(taints, t.ToString())
		}
	}
	if len(taints) > 0 {
		return topo.Cordoned, "tainted " + strings.Join(taints, ",")
	}
	return topo.Ready, ""
}
