package kube_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// A job launched for a federation becomes berth-scheduled pods from the
// site template, bound by BindMember, whose end is the job's end; they
// are never submitted as a new job. A withdrawn job's pods are deleted
// without an event.
func TestLaunchJobPods(t *testing.T) {
	w := newWorld(t)
	node := w.node("a", 8)
	cfg := w.config()
	cfg.Launch = kube.LaunchConfig{Namespace: w.ns, Image: "registry.example/infer:1", Command: []string{"serve", "--port=8080"}, Labels: map[string]string{"team": "inference", kube.LabelJob: "overridden"}}
	var mu sync.Mutex
	var evs []engine.Event
	b, ctx := startAlone(t, cs, cfg, func(got []engine.Event) {
		mu.Lock()
		evs = append(evs, got...)
		mu.Unlock()
	})
	kinds := func(job string) []engine.EventKind {
		mu.Lock()
		defer mu.Unlock()
		var out []engine.EventKind
		for _, ev := range evs {
			if ev.JobID == job || ev.Job != nil && ev.Job.ID == job {
				out = append(out, ev.Kind)
			}
		}
		return out
	}
	submitted := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ev := range evs {
			if ev.Kind == engine.EventJobSubmitted {
				n++
			}
		}
		return n
	}
	job := func(id string, members, gpus int) *queue.Job {
		return &queue.Job{ID: id, Queue: "inference", Submit: time.Now(), RuntimeEstimate: 90 * time.Minute, RuntimeLimit: 2 * time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: gpus}}}}
	}

	// Refused: an ID that is no label value, two groups, MIG.
	require.ErrorIs(t, b.LaunchJob(ctx, job("Bad ID!", 1, 1)), backends.ErrRefused)
	two := job("two", 1, 1)
	two.Request.Groups = append(two.Request.Groups, gang.Group{Members: 1, GPUsPerMember: 2})
	require.ErrorIs(t, b.LaunchJob(ctx, two), kube.ErrBadJob)
	mig := job("mig", 1, 1)
	mig.Request.Groups[0].MIGProfile = "1g.10gb"
	require.ErrorIs(t, b.LaunchJob(ctx, mig), kube.ErrBadJob)

	j := job("infer-1", 2, 4)
	require.NoError(t, b.LaunchJob(ctx, j))
	require.NoError(t, b.LaunchJob(ctx, j), "idempotent")
	pods := b.LaunchedPods(j.ID)
	require.Len(t, pods, 2)
	l, err := cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelJob + "=infer-1"})
	require.NoError(t, err)
	require.Len(t, l.Items, 2, "one pod per member, created once")
	for _, p := range l.Items {
		assert.Equal(t, "berth", p.Labels[kube.LabelManagedBy])
		assert.Equal(t, "inference", p.Labels["team"])
		assert.Equal(t, w.sched, p.Spec.SchedulerName)
		assert.Equal(t, "1h30m0s", p.Annotations[kube.AnnotationRuntimeEstimate])
		require.NotNil(t, p.Spec.ActiveDeadlineSeconds)
		assert.Equal(t, int64(7200), *p.Spec.ActiveDeadlineSeconds)
		c := p.Spec.Containers[0]
		assert.Equal(t, "registry.example/infer:1", c.Image)
		assert.Equal(t, []string{"serve", "--port=8080"}, c.Command)
		q := c.Resources.Limits[kube.ResourceGPU]
		assert.Equal(t, int64(4), q.Value())
		assert.Contains(t, c.Env, corev1.EnvVar{Name: kube.EnvJobID, Value: "infer-1"})
		assert.Contains(t, c.Env, corev1.EnvVar{Name: kube.EnvQueue, Value: "inference"})
		assert.Empty(t, p.Spec.NodeName)
	}
	time.Sleep(time.Second) // syncs see the pending pods
	assert.Zero(t, submitted(), "launched pods are not a new job")

	// The bind path binds them; their end is the job's end.
	require.NoError(t, b.BindMember(ctx, j.ID, engine.Member{Node: node, GPUs: []int{0, 1, 2, 3}}))
	require.NoError(t, b.BindMember(ctx, j.ID, engine.Member{Node: node, GPUs: []int{4, 5, 6, 7}}))
	for _, p := range l.Items {
		w.waitBound(10*time.Second, p.Name)
		assert.Equal(t, node, w.nodeOf(p.Name))
		w.setPhase(p.Name, corev1.PodRunning)
	}
	time.Sleep(500 * time.Millisecond)
	assert.Empty(t, kinds(j.ID), "running: no event")
	for _, p := range l.Items {
		w.setPhase(p.Name, corev1.PodSucceeded)
	}
	eventually(t, 10*time.Second, "the launched job's end", func() bool { return len(kinds(j.ID)) > 0 })
	assert.Equal(t, []engine.EventKind{engine.EventJobFinished}, kinds(j.ID), "its pods ran to Succeeded: finished")

	// Withdraw: pods deleted, no event, not bindable.
	wj := job("infer-2", 1, 8)
	require.NoError(t, b.LaunchJob(ctx, wj))
	wpods := b.LaunchedPods(wj.ID)
	require.Len(t, wpods, 1)
	require.NoError(t, b.WithdrawJob(ctx, wj.ID))
	require.NoError(t, b.WithdrawJob(ctx, wj.ID), "a second withdraw is a no-op")
	assert.Empty(t, b.LaunchedPods(wj.ID))
	eventually(t, 10*time.Second, "the withdrawn pod to be gone", func() bool {
		_, err := cs.CoreV1().Pods(w.ns).Get(ctx, "berth-infer-2-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	require.ErrorIs(t, b.BindMember(ctx, wj.ID, engine.Member{Node: node, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}), backends.ErrRefused)
	time.Sleep(500 * time.Millisecond)
	assert.Empty(t, kinds(wj.ID), "a withdrawn job has no events")
	assert.Zero(t, submitted())
	// Launched again after the withdraw: new pods.
	require.NoError(t, b.LaunchJob(ctx, wj))
	assert.Len(t, b.LaunchedPods(wj.ID), 1)
	require.NoError(t, b.WithdrawJob(ctx, wj.ID))
}

// startAlone starts a kube.Backend on client c without a Runner, as a
// test driving its Actuator methods by hand does: Cluster and Running are
// read once, and a goroutine calls Next until the test ends, handing each
// batch of events to seen (nil: dropped), so that the informers' changes
// reach the backend's books.
func startAlone(t *testing.T, c kubernetes.Interface, cfg kube.Config, seen func([]engine.Event)) (*kube.Backend, context.Context) {
	t.Helper()
	b, err := kube.New(c, dyn, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, b.Start(ctx))
	t.Cleanup(b.Close)
	_, err = b.Cluster(ctx)
	require.NoError(t, err)
	_, err = b.Running(ctx)
	require.NoError(t, err)
	go func() {
		for ctx.Err() == nil {
			got, err := b.Next(ctx, time.Now().Add(100*time.Millisecond))
			if err != nil {
				return
			}
			if seen != nil {
				seen(got)
			}
		}
	}()
	return b, ctx
}
