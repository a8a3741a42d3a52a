package kube_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

func serviceTemplate(gpus int64) corev1.PodTemplateSpec {
	grace := int64(1)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "llm"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "server", Image: "busybox", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)},
			}}},
		},
	}
}

func llmService(desired int) *engine.Service {
	return &engine.Service{
		Name: "llm", Queue: "default", QoS: engine.QoSGuaranteed,
		Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}}}},
		Max:     8, Desired: desired,
	}
}

// replicaPods lists the live pods of service name in the world's
// namespace (not being deleted): pod name -> node.
func (w *world) replicaPods(name string) map[string]string {
	w.t.Helper()
	l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelService + "=" + name})
	require.NoError(w.t, err)
	out := map[string]string{}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out
}

func serviceView(r *running, name string) (engine.ServiceStatus, bool) {
	v := r.runner.View()
	if v == nil {
		return engine.ServiceStatus{}, false
	}
	for _, s := range v.Services {
		if s.Name == name {
			return s, true
		}
	}
	return engine.ServiceStatus{}, false
}

// A service on Kubernetes: 2 replicas become 2 pods bound to the nodes
// berth chose; scaled to 4, two more pods; scaled to 1, three are deleted
// and the engine replaces none of them; restarted, the backend adopts the
// running replica (same pod, no new one); a replica pod that fails is
// replaced by a new one.
func TestServiceScaleUpDownAdopt(t *testing.T) {
	w := newWorld(t)
	for i := range 3 {
		w.node(fmt.Sprintf("n%d", i), 4)
	}
	r := w.start(w.config(), engine.Config{})
	require.NoError(t, r.b.SetService(llmService(2), w.ns, serviceTemplate(2)))
	eventually(t, 30*time.Second, "2 replica pods", func() bool { return len(w.replicaPods("llm")) == 2 })

	require.NoError(t, r.b.ScaleService("llm", 4))
	eventually(t, 30*time.Second, "4 replica pods", func() bool { return len(w.replicaPods("llm")) == 4 })
	pods := w.replicaPods("llm")
	perNode := map[string]int{}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("llm/%d", i)
		names := r.b.ReplicaPods(id)
		require.Len(t, names, 1, "replica %s has one pod", id)
		p := w.get(names[0][len(w.ns)+1:])
		assert.Equal(t, id, p.Annotations[kube.AnnotationReplica])
		assert.Equal(t, w.sched, p.Spec.SchedulerName)
		assert.Equal(t, "llm", p.Labels["app"], "the template's labels")
		perNode[p.Spec.NodeName]++
	}
	for n, k := range perNode {
		assert.LessOrEqual(t, k, 2, "node %s holds at most 4 GPUs = 2 replicas", n)
	}
	eventually(t, 10*time.Second, "the engine to count 4 running", func() bool {
		s, ok := serviceView(r, "llm")
		return ok && s.Running == 4 && s.Pending == 0
	})

	require.NoError(t, r.b.ScaleService("llm", 1))
	eventually(t, 30*time.Second, "3 pods deleted", func() bool { return len(w.replicaPods("llm")) == 1 })
	w.finishDeletes()
	left := w.replicaPods("llm")
	keep := slices.Collect(maps.Keys(left))[0]
	assert.Contains(t, pods, keep, "a pod of before, not a new one")
	time.Sleep(500 * time.Millisecond)
	s, ok := serviceView(r, "llm")
	require.True(t, ok)
	assert.Equal(t, 1, s.Running)
	assert.Equal(t, 0, s.Pending)
	assert.Equal(t, left, w.replicaPods("llm"), "no replica was replaced")
	uid := w.get(keep).UID
	r.stop()

	// Restart: the running pod is adopted, not replaced.
	r2 := w.start(w.config(), engine.Config{})
	require.NoError(t, r2.b.SetService(llmService(1), w.ns, serviceTemplate(2)))
	eventually(t, 30*time.Second, "the replica adopted", func() bool {
		s, ok := serviceView(r2, "llm")
		return ok && s.Running == 1 && s.Pending == 0
	})
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, left, w.replicaPods("llm"))
	assert.Equal(t, uid, w.get(keep).UID)

	// The pod fails: the engine replaces the replica with a new pod.
	w.setPhase(keep, corev1.PodFailed)
	eventually(t, 30*time.Second, "a new replica pod", func() bool {
		ps := w.replicaPods("llm")
		_, old := ps[keep]
		return len(ps) == 1 && !old
	})

	require.NoError(t, r2.b.DeleteService("llm"))
	eventually(t, 30*time.Second, "the service's pods deleted", func() bool { return len(w.replicaPods("llm")) == 0 })
}

// Services the backend cannot run are refused with ErrBadService.
func TestServiceSpecErrors(t *testing.T) {
	b, err := kube.New(fake.NewClientset(), nil, kube.Config{})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		svc  *engine.Service
		ns   string
		tmpl corev1.PodTemplateSpec
	}{
		"nil":         {nil, "ns", serviceTemplate(2)},
		"name":        {&engine.Service{Name: "LLM", Replica: llmService(1).Replica}, "ns", serviceTemplate(2)},
		"namespace":   {llmService(1), "", serviceTemplate(2)},
		"gpu count":   {llmService(1), "ns", serviceTemplate(1)},
		"fraction":    {&engine.Service{Name: "x", Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUMilli: 500}}}}}, "ns", serviceTemplate(0)},
		"two groups":  {&engine.Service{Name: "x", Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 2}, {Members: 1, GPUsPerMember: 2}}}}}, "ns", serviceTemplate(2)},
		"no template": {llmService(1), "ns", corev1.PodTemplateSpec{}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, b.SetService(tc.svc, tc.ns, tc.tmpl), kube.ErrBadService)
		})
	}
	assert.ErrorIs(t, b.ScaleService("nope", 1), kube.ErrBadService)
	assert.ErrorIs(t, b.DeleteService("nope"), kube.ErrBadService)
	require.NoError(t, b.SetService(llmService(1), "ns", serviceTemplate(2)))
	assert.NoError(t, b.ScaleService("llm", 2))
}

// A best-effort replica is preempted by a higher-priority pod: its pod is
// evicted (its end is not reported: the engine requeues the replica), the
// preemptor binds, and when it is gone the replica is bound again as a new
// pod with the same replica ID.
func TestServiceReplicaPreempted(t *testing.T) {
	ensurePriorityClasses(t)
	w := newWorld(t)
	w.node("n0", 4)
	r := w.start(w.config(), engine.Config{Preemption: engine.PreemptionConfig{Priority: true}})
	svc := llmService(2)
	svc.Name, svc.QoS, svc.Max = "be", engine.QoSBestEffort, 2
	require.NoError(t, r.b.SetService(svc, w.ns, serviceTemplate(2)))
	eventually(t, 30*time.Second, "2 replica pods", func() bool { return len(w.replicaPods("be")) == 2 })
	before := w.replicaPods("be")
	uids := map[types.UID]bool{}
	for name := range before {
		uids[w.get(name).UID] = true
		w.setPhase(name, corev1.PodRunning)
	}
	w.pod("high", 2, priorityClass("berth-high"))
	var victim string
	eventually(t, 30*time.Second, "a replica pod evicted", func() bool {
		now := w.replicaPods("be") // live pods not being deleted
		for name := range before {
			if _, ok := now[name]; !ok {
				victim = name
			}
		}
		return victim != ""
	})
	id := w.get(victim).Annotations[kube.AnnotationReplica]
	require.NotEmpty(t, id)
	w.finishDeletes()
	w.waitBound(90*time.Second, "high") // a hang bound: the preemption, the grace and the bind on a loaded machine
	eventually(t, 10*time.Second, "the replica requeued", func() bool {
		s, ok := serviceView(r, "be")
		return ok && s.Running == 1 && s.Pending == 1
	})
	require.NoError(t, cs.CoreV1().Pods(w.ns).Delete(context.Background(), "high", metav1.DeleteOptions{}))
	w.finishDeletes()
	eventually(t, 30*time.Second, "the replica bound again as a new pod", func() bool {
		ps := w.replicaPods("be")
		if len(ps) != 2 {
			return false
		}
		for name := range ps {
			if p := w.get(name); !uids[p.UID] {
				_, sameName := before[name]
				return p.Annotations[kube.AnnotationReplica] == id && !sameName
			}
		}
		return false
	})
}
