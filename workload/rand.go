package workload

import (
	"math"
	"math/bits"
)

// SplitMix64 is the generator of docs/standard-work.md: a local, explicitly seeded
// SplitMix64 (never global randomness), so the same seed gives the same
// workload on every platform and Go version.
type SplitMix64 struct{ state uint64 }

// NewSplitMix64 returns a generator whose state starts at seed.
func NewSplitMix64(seed uint64) *SplitMix64 { return &SplitMix64{state: seed} }

// Next returns the next 64-bit output.
func (s *SplitMix64) Next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Draw maps one output to [0, n) as the high 64 bits of x*n (no rejection).
func (s *SplitMix64) Draw(n uint64) uint64 {
	hi, _ := bits.Mul64(s.Next(), n)
	return hi
}

// float returns a uniform value in [0, 1) with 53 random bits.
func (s *SplitMix64) float() float64 { return float64(s.Next()>>11) * 0x1p-53 }

// exp returns an exponential variate with mean 1.
func (s *SplitMix64) exp() float64 { return -math.Log(1 - s.float()) }

// Stream numbers: each random quantity has its own stream, so changing one
// knob (say the estimate factor) leaves every other draw unchanged.
const (
	streamSize = iota + 1
	streamRuntime
	streamArrival
	streamQueue
	streamEstimate
	streamDiurnal // Diurnal's draws; its noise uses streams above it
)

// newStream derives an independent stream k from seed: the starting state
// is one SplitMix64 output of seed mixed with k, so streams start at
// unrelated points of the sequence instead of overlapping.
func newStream(seed uint64, k uint64) *SplitMix64 {
	m := SplitMix64{state: seed ^ (k * 0xd1b54a32d192ed03)}
	return &SplitMix64{state: m.Next()}
}
