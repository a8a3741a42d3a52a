package benchmarks

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/internal/cputime"
	"github.com/berthsched/berth/queue"
)

// cycleLongCycles is BenchmarkCycleLong's run length.
const cycleLongCycles = 1000

// BenchmarkCycleLong runs 1,000 consecutive engine cycles (Step, Ready,
// Advance) on B12K with 100,000 pending jobs across 200 queues, DRS fair
// share and EASY backfill, set up as BenchmarkCycle's
// cluster=B12K/pending=100000 (the random60 fill as running jobs). Before
// each cycle the clock moves one second, the running job expected to end
// first finishes (and any other whose expected end has come), and one new
// job of the pending jobs' distribution arrives: a steady rate of ends and
// arrivals, with the cluster full and the backlog near the 88,000 left
// after the first cycle (untimed) binds what fits into the 40% free.
// Each cycle is timed on its own.
//
// It reports the mean cost of the cycles around cycle 10 (cycles 6-15),
// 100 (96-105), 300 (296-305) and 1,000 (991-1,000), as cycle10-ms,
// cycle100-ms, cycle300-ms and cycle1000-ms; ratio is cycle1000-ms over
// cycle10-ms (flat in run length: about 1), walked10 and walked1000 the
// mean pending jobs the same cycles' walks reached, and ms/cycle the mean
// over all 1,000. The times are wall times; cycleN-cpu-ms and cpu-ratio
// are the same from the process's CPU time (garbage collection
// included), which a machine shared with other work inflates less.
// BERTH_FULL_WALK=1 runs it without engine.Config.LazyPending, as
// BenchmarkCycle.
//
//	go test ./benchmarks -run '^$' -bench 'BenchmarkCycleLong' -benchtime 1x
func BenchmarkCycleLong(b *testing.B) {
	b.Run("cluster=B12K/pending=100000", func(b *testing.B) {
		cycleLongBench(b, B12K(), engineBenchOpts{pending: 100000, queues: 200, lazy: os.Getenv("BERTH_FULL_WALK") == ""})
	})
}

func cycleLongBench(b *testing.B, sh ClusterShape, o engineBenchOpts) {
	took := make([]time.Duration, cycleLongCycles)
	cpu := make([]time.Duration, cycleLongCycles)
	walked := make([]int, cycleLongCycles)
	runs := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		e, _, jobs := engineBenchSetup(b, sh, o)
		ends, track := cycleLongEnds(jobs)
		// The first cycle binds what fits into the 40% left free.
		rd := e.Ready()
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			b.Fatal(err)
		}
		track(rd)
		now := e.Now()
		arrivals := cycleLongArrivals(o.queues)
		b.StartTimer()
		for c := range cycleLongCycles {
			now = now.Add(time.Second)
			start, start0 := time.Now(), cputime.Process()
			for first := true; len(*ends) > 0 && (first || !(*ends)[0].at.After(now)); first = false {
				if err := e.Step(engine.Finished(now, (*ends)[0].id)); err != nil {
					b.Fatal(err)
				}
				*ends = (*ends)[1:]
			}
			j := arrivals(now)
			if err := e.Intake().Submit(j); err != nil {
				b.Fatal(err)
			}
			rd := e.Ready()
			if err := e.Advance(rd, engine.Outcome{}); err != nil {
				b.Fatal(err)
			}
			took[c] += time.Since(start)
			cpu[c] += cputime.Process() - start0
			walked[c] += len(rd.Pending)
			b.StopTimer()
			jobs[j.ID] = j
			track(rd)
			b.StartTimer()
		}
		runs++
	}
	// at returns the means over the ten cycles around cycle c (1-based:
	// c-4..c+5, the last ten for the last cycle) of the wall time, the
	// CPU time and the jobs walked.
	at := func(c int) (ms, cpums, walk float64) {
		lo, hi := max(0, c-5), min(cycleLongCycles, c+5)
		if c == cycleLongCycles {
			lo = c - 10
		}
		for i := lo; i < hi; i++ {
			ms += float64(took[i]) / 1e6
			cpums += float64(cpu[i]) / 1e6
			walk += float64(walked[i])
		}
		n := float64((hi - lo) * runs)
		return ms / n, cpums / n, walk / n
	}
	c10, p10, w10 := at(10)
	c100, p100, _ := at(100)
	c300, p300, _ := at(300)
	c1000, p1000, w1000 := at(1000)
	var all time.Duration
	for _, d := range took {
		all += d
	}
	b.ReportMetric(c10, "cycle10-ms")
	b.ReportMetric(c100, "cycle100-ms")
	b.ReportMetric(c300, "cycle300-ms")
	b.ReportMetric(c1000, "cycle1000-ms")
	b.ReportMetric(c1000/c10, "ratio")
	b.ReportMetric(p10, "cycle10-cpu-ms")
	b.ReportMetric(p100, "cycle100-cpu-ms")
	b.ReportMetric(p300, "cycle300-cpu-ms")
	b.ReportMetric(p1000, "cycle1000-cpu-ms")
	b.ReportMetric(p1000/p10, "cpu-ratio")
	b.ReportMetric(w10, "walked10")
	b.ReportMetric(w1000, "walked1000")
	b.ReportMetric(float64(all)/1e6/float64(cycleLongCycles*runs), "ms/cycle")
}

// cycleLongEnds returns the expected ends of the running jobs of
// engineBenchSetup's jobs, first first, and a function that adds those
// of a cycle's binds.
func cycleLongEnds(jobs map[string]*queue.Job) (*[]engineBenchEnd, func(engine.Ready)) {
	var ends []engineBenchEnd
	for id, j := range jobs {
		if strings.HasPrefix(id, "run-") {
			ends = append(ends, engineBenchEnd{j.Submit.Add(j.RuntimeEstimate), id})
		}
	}
	sortEnds(ends)
	track := func(rd engine.Ready) {
		for _, bd := range rd.Binds {
			j := jobs[bd.Job]
			at := rd.At.Add(j.RuntimeEstimate)
			i := sort.Search(len(ends), func(i int) bool {
				if c := ends[i].at.Compare(at); c != 0 {
					return c > 0
				}
				return ends[i].id > bd.Job
			})
			ends = slices.Insert(ends, i, engineBenchEnd{at, bd.Job})
		}
	}
	return &ends, track
}

// cycleLongArrivals returns the arrivals of BenchmarkCycleLong: jobs of
// engineBenchSetup's pending distribution (1-256 GPUs, 10 min to a day),
// from their own seeded stream, submitted when they arrive.
func cycleLongArrivals(queues int) func(now time.Time) *queue.Job {
	rng := NewSplitMix64(4343)
	i := 0
	return func(now time.Time) *queue.Job {
		size := 1 << rng.Draw(9)
		perMember := min(size, 8)
		req := gang.Request{Groups: []gang.Group{{Members: size / perMember, GPUsPerMember: perMember}}, Preferred: "rack"}
		if size >= 64 {
			req.Required = "block"
		}
		est := time.Duration(10+rng.Draw(24*60-10)) * time.Minute
		limit := est + time.Duration(rng.Draw(uint64(est/time.Minute)+1))*time.Minute
		j := &queue.Job{
			ID: fmt.Sprintf("new-%06d", i), Queue: engineBenchQueue(int(rng.Draw(uint64(queues)))),
			Priority: int32(rng.Draw(4)), Submit: now, Request: req, RuntimeEstimate: est, RuntimeLimit: limit,
		}
		i++
		return j
	}
}
