package fgd

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
)

// sliverShare is the commonest share of the openb trace (1,078 pods): a
// GPU holding one keeps 190 milli that only shares of at most 190 fit.
const sliverShare = 810

// sliverRun is what TestSliverBound counts in one run at 130% arrived.
type sliverRun struct {
	placed     int   // 810-shares placed (P)
	small      int64 // milli of the shares <= 190 that arrived
	beside     int64 // free milli left on GPUs holding an 810-share
	elsewhere  int64 // free milli on the other GPUs
	allocated  int64
	capacity   int64
	boundPoint float64 // 100 - (190 P - small) / capacity x 100
}

// countSlivers replays one run as runOne does (same draws, same placer)
// and counts where the free capacity is left at the end.
func countSlivers(t *testing.T, p *prepared, policy string, seed int64) sliverRun {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	order, rank := arrivals(rng, p, 1.3)
	scorer, err := newScorer(policy, rng, p)
	require.NoError(t, err)
	snap := p.cluster.NewSnapshot()
	placer := gang.Placer{Scorer: scorer, Ties: rank}
	holds := map[uint32]bool{} // GPUs holding an 810-share
	var r sliverRun
	var res gang.Result
	for _, pi := range order {
		pd := &p.pods[pi]
		req := pd.request()
		_ = rng.Intn(100)
		require.NoError(t, placer.PlaceInto(&res, snap, &req))
		u := pd.group.GPUMilli
		if u > 0 && u <= gang.FullMilli-sliverShare {
			r.small += int64(u)
		}
		if !res.Found {
			_ = rng.Int31n(int32(p.cluster.NumNodes()))
			continue
		}
		if u == sliverShare {
			r.placed++
			holds[res.MemberGPUs(0)[0]] = true
		}
		require.NoError(t, res.Apply(snap))
		r.allocated += pd.demand
	}
	r.capacity = int64(p.cluster.NumGPUs()) * gang.FullMilli
	var buf []int16
	for id := range topo.NodeID(p.cluster.NumNodes()) {
		first, _ := p.cluster.NodeGPUs(id)
		for k, f := range gang.NodeGPUMilli(snap, id, buf[:0]) {
			if holds[first+uint32(k)] {
				r.beside += int64(f)
			} else {
				r.elsewhere += int64(f)
			}
		}
	}
	r.boundPoint = 100 - 100*float64(int64(gang.FullMilli-sliverShare)*int64(r.placed)-r.small)/float64(r.capacity)
	return r
}

// TestSliverBound counts, for berth's policy on seeds 42..51 at 130%
// arrived, the 810-shares placed (P) and where the free capacity is left,
// and checks the counting bound of docs/fgd.md: the GPUs holding an
// 810-share keep at least 190 P milli minus every share <= 190 that
// arrived, so the allocation is at most 100 - (190 P - small) / capacity.
// `go test ./replay/fgd -run TestSliverBound -v` prints the table.
func TestSliverBound(t *testing.T) {
	tr, _ := loadForTest(t)
	p, err := prepare(tr, (&Config{}).defaults().Popularity)
	require.NoError(t, err)
	seeds := publishedSeeds
	if testing.Short() || raceEnabled {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		r := countSlivers(t, p, gang.ScorerBerth, seed)
		alloc := 100 * float64(r.allocated) / float64(r.capacity)
		t.Logf("berth seed %d: P %d, shares <= 190 %d milli; free beside 810s %d, elsewhere %d; allocated %.2f%%, bound %.2f%%",
			seed, r.placed, r.small, r.beside, r.elsewhere, alloc, r.boundPoint)
		assert.Equal(t, r.capacity-r.allocated, r.beside+r.elsewhere, "seed %d: the free milli add up", seed)
		assert.GreaterOrEqual(t, r.beside, int64(gang.FullMilli-sliverShare)*int64(r.placed)-r.small, "seed %d", seed)
		assert.LessOrEqual(t, alloc, r.boundPoint, "seed %d", seed)
	}
}
