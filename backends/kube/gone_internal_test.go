package kube

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/berthsched/berth/engine"
)

// goneBackend is a backend whose informer cache no longer lists any pod.
func goneBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(fake.NewSimpleClientset(), nil, Config{SchedulerName: "berth"})
	require.NoError(t, err)
	b.podList = corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	return b
}

// gonePod is a pod bound to n1.
func gonePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: "n1", SchedulerName: "berth"},
	}
}

// hold makes a job the backend knows, every pod of it bound.
func hold(b *Backend, id string, ps ...*corev1.Pod) {
	j := &job{id: id, assigned: map[string]int{}, bound: map[int]engine.Member{}}
	for i, p := range ps {
		j.pods = append(j.pods, podRef{ns: p.Namespace, name: p.Name, uid: p.UID})
		j.bound[i] = engine.Member{Node: "n1", GPUs: []int{i}}
		b.byUID[p.UID] = id
	}
	b.jobs[id] = j
}

// A gang whose pods all ran to their end and were deleted before a sync
// listed them so (a preemption's eviction deletes a completed pod at once)
// finished: the informer's last state of each pod says so. The fault suite
// hung on this: the gang was reported cancelled, the engine dropped it,
// and its Job controller, which had seen it complete, made no new pods.
func TestGangDeletedAfterItsEndFinishes(t *testing.T) {
	cases := []struct {
		name      string
		phases    []corev1.PodPhase // each pod's last state; "": its delete not seen yet (then Succeeded)
		byBerth   bool              // berth deleted the pods (a rollback)
		tombstone bool              // the delete came as DeletedFinalStateUnknown
		want      engine.EventKind
	}{
		{name: "all succeeded", phases: []corev1.PodPhase{corev1.PodSucceeded, corev1.PodSucceeded}, want: engine.EventJobFinished},
		{name: "succeeded and failed", phases: []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}, want: engine.EventJobFinished},
		{name: "tombstones", phases: []corev1.PodPhase{corev1.PodSucceeded, corev1.PodSucceeded}, tombstone: true, want: engine.EventJobFinished},
		{name: "one still running", phases: []corev1.PodPhase{corev1.PodSucceeded, corev1.PodRunning}, want: engine.EventJobCancelled},
		// The cache dropped the second pod before its handler ran: the
		// job waits for it, then finishes.
		{name: "one delete not seen yet", phases: []corev1.PodPhase{corev1.PodSucceeded, ""}, want: engine.EventJobFinished},
		{name: "no delete seen yet", phases: []corev1.PodPhase{"", ""}, want: engine.EventJobFinished},
		{name: "deleted by berth", phases: []corev1.PodPhase{corev1.PodSucceeded, corev1.PodSucceeded}, byBerth: true, want: engine.EventJobCancelled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := goneBackend(t)
			const id = "ns/group/g"
			var pods []*corev1.Pod
			for i := range tc.phases {
				p := gonePod("g-" + string(rune('a'+i)))
				pods = append(pods, p)
				if tc.byBerth {
					b.deleted[p.UID] = true
				}
			}
			hold(b, id, pods...)
			for i, p := range pods {
				if tc.phases[i] == "" {
					continue
				}
				p.Status.Phase = tc.phases[i]
				var obj any = p
				if tc.tombstone {
					obj = cache.DeletedFinalStateUnknown{Key: p.Namespace + "/" + p.Name, Obj: p}
				}
				b.podGone(obj)
			}
			_, cancels, submits := b.syncPods(context.Background(), time.Now())
			require.Empty(t, submits)
			if slices.Contains(tc.phases, "") {
				require.Empty(t, cancels, "decided before every delete was seen")
				require.Contains(t, b.jobs, id)
				for i, p := range pods {
					if tc.phases[i] == "" {
						p.Status.Phase = corev1.PodSucceeded
						b.podGone(p)
					}
				}
				_, cancels, _ = b.syncPods(context.Background(), time.Now())
			}
			require.Len(t, cancels, 1)
			require.Equal(t, tc.want, cancels[0].Kind, "event for %s", cancels[0].JobID)
			require.Equal(t, id, cancels[0].JobID)
			require.Empty(t, b.jobs)
			require.Empty(t, b.gone, "forgotten with the job")
		})
	}
}

// Two jobs may hold one pod (a pod of a known gang bound by someone else is
// adopted alone, and the gang still lists it): the delete noted for it
// serves both, whichever is decided first.
func TestPodGoneServesEveryJobHoldingIt(t *testing.T) {
	b := goneBackend(t)
	a, c := gonePod("a"), gonePod("c")
	a.Status.Phase, c.Status.Phase = corev1.PodSucceeded, corev1.PodSucceeded
	hold(b, "ns/group/g", a, c)
	hold(b, "ns/a/adopted", a) // sorts first, and takes a in byUID
	b.podGone(a)
	b.podGone(c)
	_, evs, _ := b.syncPods(context.Background(), time.Now())
	require.Len(t, evs, 2, "both jobs decided in one sync")
	for _, ev := range evs {
		require.Equal(t, engine.EventJobFinished, ev.Kind, ev.JobID)
	}
	require.Empty(t, b.jobs)
	require.Empty(t, b.gone)
}
