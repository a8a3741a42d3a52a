package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/topo"
)

// AnnotationLent marks a Node that berth cordoned to lend it to another
// system (backends/federation).
const AnnotationLent = "berth.io/lent"

// LendNode cordons node (spec.unschedulable=true, annotated
// AnnotationLent): nothing new is placed there, running pods stay. It
// implements federation.NodeLender; it needs the "patch nodes" permission.
func (b *Backend) LendNode(ctx context.Context, node string) error {
	return b.cordon(ctx, node, true)
}

// ReclaimNode uncordons node (spec.unschedulable=false, annotation
// removed). A node that is not Ready stays Down in berth's model.
func (b *Backend) ReclaimNode(ctx context.Context, node string) error {
	return b.cordon(ctx, node, false)
}

func (b *Backend) cordon(ctx context.Context, node string, on bool) error {
	ann := `{"` + AnnotationLent + `":"true"}`
	if !on {
		ann = `{"` + AnnotationLent + `":null}`
	}
	body := fmt.Sprintf(`{"metadata":{"annotations":%s},"spec":{"unschedulable":%t}}`, ann, on)
	_, err := b.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kube: cordon %s=%v: %w", node, on, err)
	}
	return nil
}

// NodeStatus reads node from the API server (not the informer cache, so
// that a move sees its own cordon): schedulable when berth models it
// Ready (not cordoned, tainted NoSchedule or NotReady); busy while a pod
// that is not done and not a DaemonSet's is bound to it.
func (b *Backend) NodeStatus(ctx context.Context, node string) (federation.NodeStatus, error) {
	n, err := b.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return federation.NodeStatus{}, fmt.Errorf("kube: node %s: %w", node, err)
	}
	pods, err := b.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return federation.NodeStatus{}, fmt.Errorf("kube: pods on %s: %w", node, err)
	}
	busy := false
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || daemonPod(p) {
			continue
		}
		busy = true
		break
	}
	return federation.NodeStatus{Schedulable: nodeState(n) == topo.Ready, Busy: busy}, nil
}

func daemonPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

var _ federation.NodeLender = (*Backend)(nil)
