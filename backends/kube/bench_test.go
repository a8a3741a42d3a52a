package kube_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berthsched/berth/backends/kube"
)

// Pods bound per second: 1,000 single-GPU pods are pending on 125 nodes
// of 8 GPUs when the scheduler starts; the clock runs until the last is
// bound (informer sync, 1,000 Binding calls, the engine's cycles).
func BenchmarkBind1000Pods(b *testing.B) {
	needAPI(b)
	var last time.Duration
	for b.Loop() {
		b.StopTimer()
		w := newWorld(b)
		for i := range 125 {
			w.node(fmt.Sprintf("n%03d", i), 8)
		}
		w.createPods(b, "p", 1000)
		b.StartTimer()
		t0 := time.Now()
		w.startCounting(b)
		eventually(b, 3*time.Minute, "1000 pods bound", func() bool { return w.boundCount(b) == 1000 })
		last = time.Since(t0)
	}
	b.ReportMetric(1000/last.Seconds(), "pods-bound/s")
}

// Time from the creation of a 32-pod gang's last member to the whole gang
// bound, with the scheduler running and the other 31 members pending.
func BenchmarkGang32LastMemberToBound(b *testing.B) {
	needAPI(b)
	var total time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		w := newWorld(b)
		for i := range 4 {
			w.node(fmt.Sprint("n", i), 8)
		}
		w.startCounting(b)
		for i := range 31 {
			w.pod(fmt.Sprintf("g%02d", i), 1, inKueueGroup("g", 32))
		}
		time.Sleep(500 * time.Millisecond) // the 31 are seen, waiting for the gang
		b.StartTimer()
		t0 := time.Now()
		w.pod("g31", 1, inKueueGroup("g", 32))
		eventually(b, time.Minute, "gang bound", func() bool { return w.boundCount(b) == 32 })
		total += time.Since(t0)
		n++
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/gang")
}

// Memory of the scheduler holding 1,000 pods (512 bound, 488 pending) and
// 64 nodes: the Go heap in use after a GC with the scheduler running,
// minus the heap before it started (this test process's own share taken
// out). The informer caches every pod of the API server: run it alone
// (-bench Memory) for the 1,000-pod figure.
func BenchmarkMemory1000Pods64Nodes(b *testing.B) {
	needAPI(b)
	var heap float64
	for b.Loop() {
		b.StopTimer()
		w := newWorld(b)
		for i := range 64 {
			w.node(fmt.Sprintf("n%02d", i), 8)
		}
		w.createPods(b, "p", 1000)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		w.startCounting(b)
		eventually(b, 3*time.Minute, "512 pods bound", func() bool { return w.boundCount(b) == 512 })
		time.Sleep(2 * time.Second) // statuses of the 488 pending pods written
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / (1 << 20)
	}
	b.ReportMetric(heap, "heap-MiB")
}

// schedulerClient is a clientset with a scheduler's client-side rate
// limit (kube.ClientConfig's defaults, as kube.Run uses), not the tests'
// generous one: what binds cost in production.
func schedulerClient(tb testing.TB) kubernetes.Interface {
	c, err := kubernetes.NewForConfig(kube.ClientConfig(restCfg, 0, 0))
	require.NoError(tb, err)
	return c
}

// watchBound watches the world's pods and returns a channel that gets
// the time at which n of them were bound. A watch, not a poll: listing
// every 50 ms would load the API server the benchmark measures. The API
// server may end a watch at any time (it did, after 119 of 1,000 binds,
// with 64 binds in flight): the pods are then listed once and watched
// again from the list's resource version, so no bind is missed.
func (w *world) watchBound(tb testing.TB, n int) <-chan time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	wi, err := cs.CoreV1().Pods(w.ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(tb, err)
	out := make(chan time.Time, 1)
	go func() {
		bound := map[string]bool{}
		see := func(p *corev1.Pod) bool {
			if p.Spec.NodeName != "" && !bound[p.Name] {
				bound[p.Name] = true
				if len(bound) == n {
					out <- time.Now()
					return true
				}
			}
			return false
		}
		for ctx.Err() == nil {
			for ev := range wi.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && see(p) {
					wi.Stop()
					return
				}
			}
			wi.Stop()
			l, err := cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				if wi, err = cs.CoreV1().Pods(w.ns).Watch(ctx, metav1.ListOptions{}); err != nil {
					return // ctx done, or the API server gone: waitTime fails
				}
				continue
			}
			for i := range l.Items {
				if see(&l.Items[i]) {
					return
				}
			}
			if wi, err = cs.CoreV1().Pods(w.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion}); err != nil {
				return
			}
		}
	}()
	return out
}

func waitTime(tb testing.TB, ch <-chan time.Time, d time.Duration, what string) time.Time {
	tb.Helper()
	select {
	case t := <-ch:
		return t
	case <-time.After(d):
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
	return time.Time{}
}

// Pods bound per second for 100 gangs of 10 single-GPU pods (Kueue's
// pod-group annotations), pending when the scheduler starts, on 125
// nodes x 8 GPUs: from the scheduler's start (informer sync included)
// to the last pod bound, through a client with the scheduler's default
// rate limit.
func BenchmarkBindGangs(b *testing.B) {
	b.Run("gangs=100x10", func(b *testing.B) {
		needAPI(b)
		var took time.Duration
		for b.Loop() {
			b.StopTimer()
			w := newWorld(b)
			w.dropPods(b)
			for i := range 125 {
				w.node(fmt.Sprintf("n%03d", i), 8)
			}
			for g := range 100 {
				w.createPods(b, fmt.Sprintf("g%03d-", g), 10, inKueueGroup(fmt.Sprintf("g%03d", g), 10))
			}
			done := w.watchBound(b, 1000)
			client := schedulerClient(b)
			b.StartTimer()
			t0 := time.Now()
			w.startScheduler(b, client, nil)
			took = waitTime(b, done, 3*time.Minute, "1000 pods bound").Sub(t0)
		}
		b.ReportMetric(1000/took.Seconds(), "pods/s")
	})
}

// Submit to all bound for one gang of 256 single-GPU pods on 32 nodes x 8
// GPUs, the scheduler running: s/gang from the first pod's create to the
// last pod bound (the pods are created from 16 goroutines, as a
// controller would), and last-created-to-bound-s from the gang's last
// pod created (berth's own share).
func BenchmarkGangSubmitToBound(b *testing.B) {
	b.Run("gang=256x1", func(b *testing.B) {
		needAPI(b)
		var total, tail time.Duration
		n := 0
		for b.Loop() {
			b.StopTimer()
			w := newWorld(b)
			w.dropPods(b)
			for i := range 32 {
				w.node(fmt.Sprintf("n%02d", i), 8)
			}
			w.startScheduler(b, schedulerClient(b), nil)
			done := w.watchBound(b, 256)
			time.Sleep(200 * time.Millisecond) // the scheduler idle
			b.StartTimer()
			t0 := time.Now()
			w.createPods(b, "g-", 256, inKueueGroup("g", 256))
			t1 := time.Now()
			end := waitTime(b, done, 3*time.Minute, "256 pods bound")
			total += end.Sub(t0)
			tail += end.Sub(t1)
			n++
		}
		b.ReportMetric(total.Seconds()/float64(n), "s/gang")
		b.ReportMetric(tail.Seconds()/float64(n), "last-created-to-bound-s")
	})
}

// dropPods deletes the world's pods when tb ends, so that later runs
// (-count) do not hold them in their informers' caches.
func (w *world) dropPods(tb testing.TB) {
	tb.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(w.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
}
