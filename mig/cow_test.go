package mig

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// flatCopy is a clone that owns every page: the pre-copy-on-write Clone,
// the reference the pages are compared with.
func flatCopy(p *Pool) *Pool {
	c := p.Clone()
	for k := range c.gpus.pages {
		c.gpus.w(c, k<<pageBits)
	}
	for k := range c.shares.pages {
		c.shares.w(c, k<<pageBits)
	}
	return c
}

// dump is a pool's whole observable state.
func dump(p *Pool) string {
	var b strings.Builder
	for g := range uint32(p.Len()) {
		info, err := p.GPU(g)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(&b, "%d %+v %v\n", g, info, p.Shares(g))
	}
	return b.String()
}

// twin is a pool that shares pages with others, and a flat reference that
// receives the same operations.
type twin struct {
	p, ref *Pool
	grants []Grant
}

func (tw *twin) step(t *testing.T, rng *rand.Rand) {
	n := uint32(tw.p.Len())
	r := randomRequest(rng)
	switch op := rng.IntN(6); op {
	case 0, 1, 2:
		g := uint32(rng.IntN(int(n)))
		a, errA := tw.p.Allocate(g, r, AllocMode(op%2))
		b, errB := tw.ref.Allocate(g, r, AllocMode(op%2))
		require.Equal(t, errB == nil, errA == nil, "allocate %v on %d: %v vs %v", r, g, errA, errB)
		require.Equal(t, b, a)
		if errA == nil {
			tw.grants = append(tw.grants, a)
		}
	case 3:
		lo := uint32(rng.IntN(int(n)))
		a, errA := tw.p.AllocateInRange(lo, lo+300, r, MayCreate)
		b, errB := tw.ref.AllocateInRange(lo, lo+300, r, MayCreate)
		require.Equal(t, errB == nil, errA == nil)
		require.Equal(t, b, a)
		if errA == nil {
			tw.grants = append(tw.grants, a)
		}
	case 4, 5:
		if len(tw.grants) == 0 {
			return
		}
		i := rng.IntN(len(tw.grants))
		require.NoError(t, tw.p.Release(tw.grants[i]))
		require.NoError(t, tw.ref.Release(tw.grants[i]))
		tw.grants = append(tw.grants[:i], tw.grants[i+1:]...)
	}
}

// TestCloneCopyOnWrite: pools that share pages (clones of clones, writes
// on both sides of every clone) each stay equal to a flat copy that got
// the same operations: no write leaks through a shared page.
func TestCloneCopyOnWrite(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		base := randomPool(t, rng, 3*pageLen+17) // four GPU pages, shares over two or more
		twins := []*twin{{p: base, ref: flatCopy(base)}}
		for range 400 {
			tw := twins[rng.IntN(len(twins))]
			if rng.IntN(20) == 0 {
				c := &twin{p: tw.p.Clone(), ref: flatCopy(tw.ref), grants: append([]Grant(nil), tw.grants...)}
				twins = append(twins, c)
				continue
			}
			tw.step(t, rng)
		}
		for i, tw := range twins {
			require.NoError(t, tw.p.Check(), "seed %d pool %d", seed, i)
			require.Equal(t, dump(tw.ref), dump(tw.p), "seed %d pool %d of %d", seed, i, len(twins))
		}
	}
}

// TestCloneConcurrentReaders: readers that hold only a PoolReader may
// clone the same pool at once and write their clones (run under -race);
// the pool they share stays as it was.
func TestCloneConcurrentReaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := randomPool(t, rng, 2*pageLen)
	want := dump(p)
	ro := p.ReadOnly()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			c := ro.Clone()
			for g := range uint32(c.Len()) {
				_, _ = c.Allocate(g, Request{Milli: 100 + 50*i}, MayCreate)
			}
		})
	}
	wg.Wait()
	require.Equal(t, want, dump(p))
	require.NoError(t, p.Check())
}
