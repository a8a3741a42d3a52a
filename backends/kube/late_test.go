package kube_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// lateAPI is the test's API server as a slow one looks to a client: each
// pods/binding call goes through bind, which may hold it or commit it and
// answer an error, as an API server that finishes after its client gave
// up does. Everything else is the real client.
type lateAPI struct {
	kubernetes.Interface
	bind func(ctx context.Context, do func(context.Context) error) error
}

func (l lateAPI) CoreV1() corev1client.CoreV1Interface { return lateCore{l.Interface.CoreV1(), l} }

type lateCore struct {
	corev1client.CoreV1Interface
	l lateAPI
}

func (c lateCore) Pods(ns string) corev1client.PodInterface {
	return latePods{c.CoreV1Interface.Pods(ns), c.l}
}

type latePods struct {
	corev1client.PodInterface
	l lateAPI
}

func (p latePods) Bind(ctx context.Context, b *corev1.Binding, opts metav1.CreateOptions) error {
	return p.l.bind(ctx, func(ctx context.Context) error { return p.PodInterface.Bind(ctx, b, opts) })
}

// Undoing a bind whose truth arrives late never leaves a ghost. The fault
// suite's bind-commits-after-timeout scenario hung on Kubernetes (CI, one
// run in a few): the Runner's poll found a timed-out bind not yet applied
// and unbound it while the Binding was still in flight; UnbindMember
// forgot the member and answered nil, the Binding then committed, and the
// pod held its GPUs with no bind of berth's for its member, so every later
// unbind of it was a no-op: the ghost was never stopped, and the job,
// placed again on that node, was refused until it was held.
//
//   - An unbind while the member's Binding is in flight is an error (not
//     ErrRefused): the bind's outcome stays unknown. Once the Binding
//     answers, the pod is bound and RunningNow lists it; the unbind then
//     deletes it.
//   - A Binding that committed while its call answered an error (the
//     client gave up) leaves a pod bound that berth recorded no bind of:
//     RunningNow lists it from the informer, and an unbind of the member
//     it lists deletes it.
func TestUnbindOfALateBindLeavesNoGhost(t *testing.T) {
	w := newWorld(t)
	node := w.node("a", 8)
	hold := make(chan struct{})
	entered := make(chan struct{}, 1) // the held Binding call has begun
	var mode atomic.Value             // "hold": wait for hold, then commit; "commit-then-fail": commit, answer a timeout
	mode.Store("")
	api := lateAPI{Interface: cs, bind: func(ctx context.Context, do func(context.Context) error) error {
		switch mode.Load() {
		case "hold":
			entered <- struct{}{}
			<-hold
			return do(context.WithoutCancel(ctx))
		case "commit-then-fail":
			if err := do(ctx); err != nil {
				return err
			}
			return context.DeadlineExceeded
		}
		return do(ctx)
	}}
	cfg := w.config()
	cfg.Launch = kube.LaunchConfig{Namespace: w.ns, Image: "registry.example/train:1"}
	b, ctx := startAlone(t, api, cfg, nil)
	launch := func(id string) (*queue.Job, string) {
		j := &queue.Job{ID: id, Queue: "training", Submit: time.Now(), RuntimeEstimate: time.Hour, RuntimeLimit: 2 * time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 4}}}}
		require.NoError(t, b.LaunchJob(ctx, j))
		pods := b.LaunchedPods(j.ID)
		require.Len(t, pods, 1)
		_, name, _ := strings.Cut(pods[0], "/") // namespace/name
		return j, name
	}
	runsOn := func(id string) []engine.Member {
		rs, err := b.RunningNow(ctx)
		require.NoError(t, err)
		for _, rj := range rs {
			if rj.Job.ID == id {
				return rj.Members
			}
		}
		return nil
	}
	gone := func(pod string) bool {
		p, err := cs.CoreV1().Pods(w.ns).Get(ctx, pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}
	m := engine.Member{Node: node, GPUs: []int{0, 1, 2, 3}}

	// 1. Unbind while the Binding is in flight.
	j1, pod1 := launch("late-1")
	mode.Store("hold")
	bound := make(chan error, 1)
	go func() { bound <- b.BindMember(context.Background(), j1.ID, m) }()
	select { // BindMember waits in the Binding call
	case <-entered:
	case err := <-bound:
		t.Fatalf("BindMember answered before its Binding call was held: %v", err)
	}
	err := b.UnbindMember(ctx, j1.ID, m)
	require.Error(t, err, "an unbind while the Binding is in flight")
	assert.NotErrorIs(t, err, backends.ErrRefused, "its outcome is unknown, not refused")
	close(hold)
	require.NoError(t, <-bound, "the Binding commits")
	mode.Store("")
	w.waitBound(10*time.Second, pod1)
	assert.Equal(t, []engine.Member{m}, runsOn(j1.ID), "the late bind runs: RunningNow says so")
	require.NoError(t, b.UnbindMember(ctx, j1.ID, m))
	eventually(t, 10*time.Second, "the late-bound pod deleted", func() bool { return gone(pod1) })
	eventually(t, 10*time.Second, "RunningNow no longer lists it", func() bool { return runsOn(j1.ID) == nil })

	// 2. A Binding that committed while its call answered an error.
	j2, pod2 := launch("late-2")
	mode.Store("commit-then-fail")
	err = b.BindMember(ctx, j2.ID, m)
	mode.Store("")
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "the call's error: %v", err)
	w.waitBound(10*time.Second, pod2)
	var listed []engine.Member
	eventually(t, 10*time.Second, "RunningNow lists the pod bound with no record of it", func() bool {
		listed = runsOn(j2.ID)
		return len(listed) == 1
	})
	assert.Equal(t, node, listed[0].Node)
	assert.Equal(t, m.GPUs, listed[0].GPUs, "the GPUs of the Binding's annotation")
	require.NoError(t, b.UnbindMember(ctx, j2.ID, listed[0]), "the Runner stops the ghost by the member RunningNow listed")
	eventually(t, 10*time.Second, "the ghost pod deleted", func() bool { return gone(pod2) })
	eventually(t, 10*time.Second, "RunningNow no longer lists it", func() bool { return runsOn(j2.ID) == nil })
}
