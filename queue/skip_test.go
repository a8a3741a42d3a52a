package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/stretchr/testify/require"
)

// skipWorld is a random tree and pending set, the same for a seed.
func skipWorld(t *testing.T, seed uint64) (*Tree, *Pending, int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	spec := TreeSpec{}
	shape := rng.IntN(4) // 0, 1: one cohort; 2: queues at the root; 3: two levels
	nq := 1 + rng.IntN(5)
	quota := func() map[ResourceName]Quota {
		return map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(int64(rng.IntN(12)))}, CPUMilli: {Nominal: Amount(1000 * rng.IntN(40))}}
	}
	switch shape {
	case 0, 1:
		spec.Cohorts = []CohortSpec{{Name: "org"}}
	case 3:
		spec.Cohorts = []CohortSpec{{Name: "org"}, {Name: "sub", Parent: "org"}}
	}
	for i := range nq {
		q := QueueSpec{Name: fmt.Sprintf("q%d", i), Quota: quota(), Weight: float64(1 + rng.IntN(3))}
		switch shape {
		case 0, 1:
			q.Cohort = "org"
		case 3:
			q.Cohort = []string{"org", "sub"}[rng.IntN(2)]
		}
		spec.Queues = append(spec.Queues, q)
	}
	tr, err := NewTree(spec)
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{})
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := rng.IntN(120)
	for i := range n {
		j := &Job{ID: fmt.Sprintf("j%03d", i), Queue: fmt.Sprintf("q%d", rng.IntN(nq)), Submit: t0.Add(time.Duration(rng.IntN(50)) * time.Second),
			Priority: int32(rng.IntN(3)), RuntimeLimit: time.Duration(rng.IntN(4)) * time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1 + rng.IntN(3), GPUsPerMember: []int{1, 2, 4, 8}[rng.IntN(4)]}}}}
		if rng.IntN(3) == 0 {
			j.Request.Groups[0].CPUMilli = int64(1000 * rng.IntN(30))
		}
		require.NoError(t, p.Add(j))
	}
	// Usage: some jobs run already.
	for i := range rng.IntN(6) {
		j := &Job{ID: fmt.Sprintf("run%d", i), Queue: fmt.Sprintf("q%d", rng.IntN(nq)), Submit: t0,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1 + rng.IntN(8)}}}}
		require.NoError(t, tr.Adopt(j, t0))
	}
	return tr, p, shape
}

// TestDRSSkip: a DRS cursor that skips to the first candidate yields the
// jobs a cursor that visits every job yields, and Skipped lists the jobs
// passed in the visiting cursor's order, with binds (charges) between
// skips and a second walk (Order kept across walks) after the first.
func TestDRSSkip(t *testing.T) {
	skips, declined := testSkip(t, DRS)
	require.Greater(t, skips, 500)
	require.Greater(t, declined, 50)
}

// TestStrictSkip: the same for StrictPriority, which skips whatever the
// tree's shape (its order is the job order alone).
func TestStrictSkip(t *testing.T) {
	skips, declined := testSkip(t, StrictPriority)
	require.Greater(t, skips, 500)
	require.Zero(t, declined)
}

func testSkip(t *testing.T, policy func() Policy) (skips, declined int) {
	strict := policy().Name() == "priority"
	for seed := range uint64(400) {
		trA, pA, shape := skipWorld(t, seed)
		trB, pB, _ := skipWorld(t, seed)
		polA, polB := policy(), policy()
		var prev []*Job // the last skip's candidates, given again at times
		rng := rand.New(rand.NewPCG(seed, 99))
		t0 := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
		for walk := range 3 {
			now := t0.Add(time.Duration(walk) * time.Minute)
			// Jobs added between walks (after a skip's indexes were built).
			for i := range 3 * walk {
				mk := func() *Job {
					return &Job{ID: fmt.Sprintf("w%d-%d", walk, i), Queue: "q0", Submit: now, Priority: int32(i % 3),
						Request: gang.Request{Groups: []gang.Group{{Members: 1 + i%2, GPUsPerMember: 1 + i%4}}}}
				}
				require.NoError(t, pA.Add(mk()))
				require.NoError(t, pB.Add(mk()))
			}
			curA, curB := polA.Order(pA, now), polB.Order(pB, now)
			jA, okA := curA.Next()
			for okA {
				jB, okB := curB.Next()
				require.True(t, okB, "seed %d", seed)
				require.Equal(t, jB.ID, jA.ID, "seed %d", seed)
				switch r := rng.IntN(10); {
				case r < 2: // bind it
					require.NoError(t, trA.Adopt(jA, now))
					require.NoError(t, trB.Adopt(jB, now))
					pA.Remove(jA.ID)
					pB.Remove(jB.ID)
				case r < 6: // skip from it to a few candidates
					var cands []*Job
					var want map[string]bool = map[string]bool{}
					again := rng.IntN(2) == 0 // the last list, when all still pending
					for _, c := range prev {
						if j, ok := pA.Get(c.ID); !ok || j != c || c == jA {
							again = false
						}
					}
					if again && len(prev) > 0 {
						cands = slices.Clone(prev)
						for _, c := range cands {
							want[c.ID] = true
						}
					} else {
						for _, id := range sortedIDs(pA) {
							if id != jA.ID && rng.IntN(12) == 0 {
								j, _ := pA.Get(id)
								cands = append(cands, j)
								want[id] = true
							}
						}
					}
					prev = cands
					// StrictPriority: at times whole classes too (not jA's).
					var classes []AskClass
					if strict && rng.IntN(3) == 0 {
						pA.AskClasses(64, func(c AskClass) bool {
							if !c.Has(jA) && rng.IntN(2) == 0 {
								classes = append(classes, c)
							}
							return true
						})
						for _, id := range sortedIDs(pA) {
							j, _ := pA.Get(id)
							for _, c := range classes {
								if c.Has(j) {
									want[id] = true
								}
							}
						}
					}
					var first *Job
					var passed *Skipped
					var ok bool
					if len(classes) > 0 {
						first, passed, ok = curA.(ClassSkipper).SkipTo(cands, classes)
					} else {
						first, passed, ok = curA.(Skipper).Skip(cands)
					}
					// The visiting cursor: from jB to the first candidate.
					seen := []string{jB.ID}
					var firstB *Job
					for {
						j, more := curB.Next()
						if !more {
							break
						}
						if want[j.ID] {
							firstB = j
							break
						}
						seen = append(seen, j.ID)
					}
					if !ok {
						declined++
						require.False(t, strict, "seed %d: StrictPriority declined", seed)
						require.NotContains(t, []int{0, 1}, shape, "seed %d: one cohort level declined", seed)
						// Nothing changed: A visits too.
						for {
							j, more := curA.Next()
							if !more || want[j.ID] {
								first = nil
								if more {
									first = j
								}
								break
							}
						}
						require.Equal(t, firstB == nil, first == nil, "seed %d", seed)
						if first != nil {
							require.Equal(t, firstB.ID, first.ID, "seed %d", seed)
						}
					} else {
						skips++
						var got []string
						passed.Each(func(j *Job) bool { got = append(got, j.ID); return true })
						require.Equal(t, seen, got, "seed %d walk %d: the jobs passed", seed, walk)
						require.Equal(t, len(seen), passed.Len())
						for _, id := range seen {
							j, _ := pA.Get(id)
							require.True(t, passed.Contains(j))
						}
						for id := range want {
							c, _ := pA.Get(id)
							require.False(t, passed.Contains(c), "seed %d: a candidate passed", seed)
						}
						if firstB == nil {
							require.Nil(t, first, "seed %d", seed)
						} else {
							require.NotNil(t, first, "seed %d: want %s", seed, firstB.ID)
							require.Equal(t, firstB.ID, first.ID, "seed %d", seed)
							j, more := curA.Next()
							require.True(t, more)
							require.Equal(t, first.ID, j.ID, "seed %d: Next after Skip", seed)
						}
					}
					if firstB == nil {
						_, more := curA.Next()
						require.False(t, more, "seed %d", seed)
						jA, okA = nil, false
						continue
					}
					jA = first
					// jB is the candidate both are on; go on from it.
					if rng.IntN(2) == 0 {
						require.NoError(t, trA.Adopt(jA, now))
						require.NoError(t, trB.Adopt(firstB, now))
						pA.Remove(jA.ID)
						pB.Remove(firstB.ID)
					}
				}
				jA, okA = curA.Next()
			}
			_, okB := curB.Next()
			require.False(t, okB, "seed %d", seed)
		}
	}
	t.Logf("%d skips, %d declined", skips, declined)
	return skips, declined
}

func sortedIDs(p *Pending) []string {
	ids := make([]string, 0, len(p.byID))
	for id := range p.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
