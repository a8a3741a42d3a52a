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
// Ownership is a token: a page belongs to the pool whose token it carries.
// Tokens come from a counter that a pool and all its clones share, so no
// two pools of one lineage ever hold the same one; Clone gives the source
// a new token (atomically: readers that only hold a PoolReader may clone
// the same pool at once) and the copy another, so after a clone neither
// side owns a shared page and each copies before it writes. The token
// lives in the page, not in a table beside the page pointers: a clone
// copies one pointer a page and nothing else (a table of owners made and
// cleared per clone was half of the bytes of a cycle's pool clone).

const (
	pageBits = 6 // 64 values a page: 2 KiB of GPU states
	pageLen  = 1 << pageBits
	pageMask = pageLen - 1
)

// page is pageLen values and the token of the pool that may write them
// in place.
type page[T any] struct {
	tok uint64
	v   [pageLen]T
}

// paged is a growable array of T in copy-on-write pages.
type paged[T any] struct {
	pages []*page[T]
	n     int
}

func (a *paged[T]) len() int { return a.n }

// at returns value i for reading only.
func (a *paged[T]) at(i int) *T { return &a.pages[i>>pageBits].v[i&pageMask] }

// w returns value i for writing by p, copying its page first unless p
// owns it (carries p's current token).
func (a *paged[T]) w(p *Pool, i int) *T {
	k := i >> pageBits
	pg := a.pages[k]
	if tok := p.tok.Load(); pg.tok != tok {
		cp := new(page[T])
		*cp = *pg
		cp.tok = tok
		a.pages[k], pg = cp, cp
	}
	return &pg.v[i&pageMask]
}

// push appends v (written by p) and returns its index.
func (a *paged[T]) push(p *Pool, v T) int {
	i := a.n
	if i&pageMask == 0 && i>>pageBits == len(a.pages) {
		a.pages = append(a.pages, &page[T]{tok: p.tok.Load()})
	}
	a.n++
	*a.w(p, i) = v
	return i
}

// clone shares every page with a; neither side owns them afterwards (the
// caller gives a and the copy new tokens).
func (a *paged[T]) clone() paged[T] {
	return paged[T]{pages: slices.Clone(a.pages), n: a.n}
}
