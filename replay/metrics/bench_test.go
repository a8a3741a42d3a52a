package metrics

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func benchOutcomes(n int) []Outcome {
	r := rand.New(rand.NewPCG(42, 0))
	jobs := make([]Outcome, n)
	for i := range jobs {
		sub := time.Duration(r.IntN(5_000_000)) * time.Second
		start := sub + time.Duration(r.IntN(100_000))*time.Second
		jobs[i] = Outcome{ID: fmt.Sprint(i), Submit: sub, Start: start, End: start + time.Duration(600+r.IntN(100_000))*time.Second,
			GPUMilli: 1000 * int64(1<<r.IntN(7)), Started: true, Finished: true}
	}
	return jobs
}

// BenchmarkCompute computes the yardsticks of an ITP-sized replay.
func BenchmarkCompute(b *testing.B) {
	in := Input{ClusterGPUs: 512, Jobs: benchOutcomes(15802)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compute(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeries samples an ITP-sized replay hourly (about 1,400 buckets).
func BenchmarkSeries(b *testing.B) {
	in := Input{ClusterGPUs: 512, Jobs: benchOutcomes(15802)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Series(in, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
