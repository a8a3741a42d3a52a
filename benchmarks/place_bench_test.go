package benchmarks

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// reportLatency reports p50-ns and p99-ns over the recorded decisions.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*50/100]), "p50-ns")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ns")
}

// BenchmarkPlace times gang.Place for every standard gang on every standard
// cluster after each standard fill. Place does not change the snapshot, so
// every decision sees the same state, as on a fresh copy-on-write snapshot.
func BenchmarkPlace(b *testing.B) {
	for _, sc := range standardCases() {
		b.Run(sc.name(), func(b *testing.B) {
			s := filledSnapshot(b, sc.shape, sc.fill)
			req, err := Gang(sc.gang)
			if err != nil {
				b.Fatal(err)
			}
			rl, _ := s.Cluster().Level(sc.shape.PreferredName)
			res := timePlacements(b, s, &req)
			racks, blocks := 0, 0
			if res.Found {
				racks, blocks = res.Spread[rl], res.Spread[1]
			}
			b.ReportMetric(float64(racks), "racks")
			b.ReportMetric(float64(Bound(s, req)), "bound-racks")
			b.ReportMetric(float64(blocks), "blocks")
			b.ReportMetric(float64(BoundBlocks(s, req)), "bound-blocks")
			b.ReportMetric(b2f(res.Found), "found")
		})
	}
}

// timePlacements places req on s once per iteration, timing each decision,
// and reports allocations and latency percentiles. It returns the last
// result. Decisions go through Placer.PlaceInto, which reuses the previous
// answer's memory (gang.Place itself makes 3 allocations per decision).
func timePlacements(b *testing.B, s *topo.Snapshot, req *gang.Request) gang.Result {
	var p gang.Placer
	var res gang.Result
	var err error
	lat := make([]time.Duration, 0, 10000)
	b.ReportAllocs()
	settleSysmon(func() { _ = p.PlaceInto(&res, s, req) })
	for b.Loop() {
		t0 := time.Now()
		err = p.PlaceInto(&res, s, req)
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, lat)
	return res
}

// settleFor is how long settleSysmon runs its function.
const settleFor = 30 * time.Millisecond

// settleSysmon runs f, untimed, for settleFor, just before a latency
// benchmark's timed loop, so that the p99 of its decisions measures
// them and not the Go runtime's sysmon thread. When sysmon wakes during a
// stop-the-world (the collector's, or runtime.ReadMemStats's, which
// testing.B runs in ResetTimer and StopTimer, so at b.Loop's first call)
// or while no goroutine runs, it sleeps until the world restarts, and
// that wake-up sets it to its fastest: a wake every 20 µs (about every
// 86 µs on the dev VM, with the timer's slack), 50 times, then at
// doubling intervals up to its usual 10 ms, some 15 ms in all. Where no
// CPU is free for it, each wake preempts the timed goroutine (for 10-30
// µs on the 2-core dev VM): 40 to 60 of 3,000 decisions, the whole p99
// (docs/scale.md, "sysmon"). Building the benchmark's cluster allocates,
// so the collector runs just before; f allocates nothing, so after
// settleFor sysmon wakes every 10 ms and b.Loop's short stop-the-world
// almost never meets it awake. The harness's clock starts at b.Loop's
// first call: ns/op does not count the settling.
func settleSysmon(f func()) {
	for t0 := time.Now(); time.Since(t0) < settleFor; {
		f()
	}
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// BenchmarkPlaceScaling places gang B after skewed60 on B2K-shaped clusters
// of 256 to 16,384 nodes: the cost must follow the domains read, not GPUs.
func BenchmarkPlaceScaling(b *testing.B) {
	for nodes := 256; nodes <= 16384; nodes *= 2 {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			sh := Scaling(nodes)
			s := filledSnapshot(b, sh, Skewed60)
			req, _ := Gang("B")
			res := timePlacements(b, s, &req)
			b.ReportMetric(b2f(res.Found), "found")
			b.ReportMetric(float64(s.Cluster().NumDomains(1)+s.Cluster().NumDomains(2)), "domains")
		})
	}
}

// BenchmarkApplyUndo times booking and releasing a placement.
func BenchmarkApplyUndo(b *testing.B) {
	s := filledSnapshot(b, B2K(), Skewed60).Clone()
	req, _ := Gang("B")
	res, err := gang.Place(s, &req)
	if err != nil || !res.Found {
		b.Fatal(err, res.Reason)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := res.Apply(s); err != nil {
			b.Fatal(err)
		}
		if err := res.Undo(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkModelMemory reports the heap bytes per GPU of the cluster model
// plus one snapshot after the standard fill.
func BenchmarkModelMemory(b *testing.B) {
	for _, sh := range []ClusterShape{B2K(), B12K()} {
		b.Run("cluster="+sh.Name, func(b *testing.B) {
			var perGPU float64
			for b.Loop() {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				c, err := sh.Build()
				if err != nil {
					b.Fatal(err)
				}
				s := c.NewSnapshot()
				if _, err := ApplyFill(s, sh, Random60); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				perGPU = float64(m1.HeapAlloc-m0.HeapAlloc) / float64(c.NumGPUs())
				runtime.KeepAlive(s)
			}
			b.ReportMetric(perGPU, "B/GPU")
		})
	}
}

// BenchmarkClone times a copy-on-write snapshot plus one small write.
func BenchmarkClone(b *testing.B) {
	s := filledSnapshot(b, B12K(), Random60)
	var free uint32
	for g := range uint32(s.Cluster().NumGPUs()) {
		if s.IsFree(g) {
			free = g
			break
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		c := s.Clone()
		if err := c.Allocate([]uint32{free}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlaceAfterChange is BenchmarkPlace on B12K after random60 with
// the cluster changing between decisions, as between an engine's cycles:
// before each one a GPU of a random node is booked or released (on a
// clone of the fill), and the decision is timed. memo=on keeps the search
// inside each required domain while its counters are unchanged
// (gang.Placer.Memo, as the engine runs); memo=off searches every domain
// each time.
func BenchmarkPlaceAfterChange(b *testing.B) {
	sh := B12K()
	for _, g := range []string{"A", "B", "C"} {
		for _, memo := range []bool{false, true} {
			b.Run(fmt.Sprintf("cluster=%s/fill=%s/gang=%s/memo=%s", sh.Name, Random60, g, map[bool]string{false: "off", true: "on"}[memo]), func(b *testing.B) {
				s := filledSnapshot(b, sh, Random60).Clone()
				req, err := Gang(g)
				if err != nil {
					b.Fatal(err)
				}
				c := s.Cluster()
				rng := NewSplitMix64(17)
				p := gang.Placer{Memo: memo}
				var res gang.Result
				lat := make([]time.Duration, 0, 10000)
				b.ReportAllocs()
				settleSysmon(func() { _ = p.PlaceInto(&res, s, &req) })
				for b.Loop() {
					id := topo.NodeID(rng.Draw(uint64(c.NumNodes())))
					first, n := c.NodeGPUs(id)
					gpu := []uint32{first + uint32(rng.Draw(uint64(n)))}
					if s.IsFree(gpu[0]) {
						err = s.Allocate(gpu)
					} else {
						err = s.Release(gpu)
					}
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					err = p.PlaceInto(&res, s, &req)
					lat = append(lat, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
				}
				reportLatency(b, lat)
				b.ReportMetric(b2f(res.Found), "found")
			})
		}
	}
}
