package kube_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"
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
