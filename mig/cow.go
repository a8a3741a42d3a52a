package mig

import "slices"

// Copy-on-write storage for a Pool's per-GPU states and share records.
//
// A scheduler clones its pool once per what-if (every cycle's plan, every
// estimate) and then books a few grants on the copy. A flat copy costs the
// whole pool (32 bytes a GPU, plus every share record) for each of those
// few writes: on a large shared cluster it was most of a cycle. Here the
// values live in fixed pages; a clone copies only the page table, and a
// page is copied on its first write by a pool that does not own it.
//
// Ownership is (pool, generation): a page belongs to the pool that wrote
// it, at that pool's generation then. Clone moves the source to a new
// generation (atomically: readers that only hold a PoolReader may clone
// the same pool at once), so after a clone neither side owns a shared
// page and each copies before it writes.

const (
	pageBits = 6 // 64 values a page: 2 KiB of GPU states
	pageLen  = 1 << pageBits
	pageMask = pageLen - 1
)

type pageOwner struct {
	p   *Pool
	gen uint64
}

// paged is a growable array of T in copy-on-write pages.
type paged[T any] struct {
	pages  []*[pageLen]T
	owners []pageOwner // owners[i]: who may write pages[i] in place
	n      int
}

func (a *paged[T]) len() int { return a.n }

// at returns value i for reading only.
func (a *paged[T]) at(i int) *T { return &a.pages[i>>pageBits][i&pageMask] }

// w returns value i for writing by p, copying its page first unless p
// owns it at p's current generation.
func (a *paged[T]) w(p *Pool, i int) *T {
	k := i >> pageBits
	own := pageOwner{p, p.gen.Load()}
	if a.owners[k] != own {
		cp := new([pageLen]T)
		*cp = *a.pages[k]
		a.pages[k], a.owners[k] = cp, own
	}
	return &a.pages[k][i&pageMask]
}

// push appends v (written by p) and returns its index.
func (a *paged[T]) push(p *Pool, v T) int {
	i := a.n
	if i&pageMask == 0 && i>>pageBits == len(a.pages) {
		a.pages = append(a.pages, new([pageLen]T))
		a.owners = append(a.owners, pageOwner{p, p.gen.Load()})
	}
	a.n++
	*a.w(p, i) = v
	return i
}

// clone shares every page with a; neither side owns them afterwards (the
// caller moves a's owner to a new generation).
func (a *paged[T]) clone() paged[T] {
	return paged[T]{pages: slices.Clone(a.pages), owners: make([]pageOwner, len(a.owners)), n: a.n}
}
