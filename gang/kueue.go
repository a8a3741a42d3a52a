package gang

import (
	"slices"
	"sort"

	"github.com/berthsched/berth/topo"
)

// ScorerKueue names the Kueue-like greedy placement (Kueue), a baseline
// for the replay's price of placement (replay.Config.Placement).
const ScorerKueue = "kueue"

// Kueue is a baseline that places a gang the way Kueue's topology-aware
// scheduling (TAS) assigns a pod set that prefers the finest topology
// level above the node (the rack), greedily, as this package understands
// that algorithm:
//
//  1. If one rack can hold the whole gang, the rack with the least room
//     that still holds it (best fit).
//  2. Otherwise racks are taken by room, the largest first, until what is
//     left fits in one more rack, which is again the tightest that holds
//     the rest.
//  3. Inside each rack, nodes are taken the same way: the most room
//     first, and the last one the tightest that holds the rest.
//
// Room is counted in whole members: free GPUs over GPUs per member (one
// per node for a fractional or MIG member; CPU and memory are not
// counted). Unlike Place there is no look further up (blocks) or down
// (NVLink islands) and no tightest fit over the whole set of racks: a
// rack taken whole is never swapped for a smaller one. On a cluster
// without topology levels the whole cluster is one rack.
//
// Kueue works as a Scorer: give the engine a request with no required or
// preferred level, so that Score sees every node of the cluster, and the
// nodes it ranks first are those the greedy picks, in the order it picks
// them (the placer then takes them in that order); other nodes follow,
// the most room first. Each group of a multi-group gang is scored on its
// own, on the nodes the groups before it left room on (as for every
// Scorer). Kueue keeps scratch buffers; it belongs to one goroutine.
type Kueue struct {
	caps  []int32 // members per node, parallel to nodes
	racks []kueueRack
	pick  []int32 // rack positions in pick order
	npick []int32 // node positions in pick order
	ord   []int32 // scratch of greedyPick
}

type kueueRack struct {
	dom    int   // domain index at the finest level
	lo, hi int32 // positions in nodes
	room   int
}

// Score implements Scorer.
func (k *Kueue) Score(s *topo.Snapshot, g *Group, nodes []topo.NodeID, scores []int64) {
	c := s.Cluster()
	lvl := len(c.Levels()) - 1
	k.caps = k.caps[:0]
	k.racks = k.racks[:0]
	for i, n := range nodes {
		room := int32(1)
		if g.GPUsPerMember > 0 {
			room = max(1, int32(s.NodeAvailable(n)/g.GPUsPerMember))
		}
		k.caps = append(k.caps, room)
		dom := 0
		if lvl >= 0 {
			dom = c.DomainOf(n, lvl)
		}
		// nodes are in ascending ID order, and a domain's IDs are
		// contiguous, so a rack's nodes are one run of positions.
		if r := len(k.racks); r == 0 || k.racks[r-1].dom != dom {
			k.racks = append(k.racks, kueueRack{dom: dom, lo: int32(i)})
		}
		r := &k.racks[len(k.racks)-1]
		r.hi = int32(i) + 1
		r.room += int(room)
	}
	need := g.Members
	rooms := func(i int32) int { return k.racks[i].room }
	k.pick, k.ord = greedyPick(k.pick[:0], k.ord, int32(len(k.racks)), rooms, need)

	k.npick = k.npick[:0]
	left := need
	for _, ri := range k.pick {
		r := k.racks[ri]
		want := min(r.room, left)
		left -= want
		lo, from := r.lo, len(k.npick)
		k.npick, k.ord = greedyPick(k.npick, k.ord, r.hi-r.lo, func(i int32) int { return int(k.caps[lo+i]) }, want)
		for j := from; j < len(k.npick); j++ {
			k.npick[j] += lo // rack-local position to position in nodes
		}
	}
	// Picked nodes first, in pick order; the rest by room.
	top := int64(1) << 40
	for i := range scores {
		scores[i] = int64(k.caps[i])
	}
	for j, i := range k.npick {
		scores[i] = top - int64(j)
	}
}

// greedyPick appends to dst the positions 0..n-1 that Kueue's greedy
// takes to hold need members, given each position's room: the tightest
// single position that holds need if there is one, else the largest room
// first until the rest fits in one position, which is then the tightest
// that holds the rest (ties: the lower position). Positions with no room
// are never taken; if all of them together hold less than need, every
// position with room is appended, the largest first. ord is scratch.
func greedyPick(dst, ord []int32, n int32, room func(int32) int, need int) ([]int32, []int32) {
	ord = ord[:0]
	for i := range n {
		if room(i) > 0 {
			ord = append(ord, i)
		}
	}
	// Largest room first, the lower position first on ties.
	slices.SortFunc(ord, func(a, b int32) int {
		if ra, rb := room(a), room(b); ra != rb {
			return rb - ra
		}
		return int(a - b)
	})
	for i, left := 0, need; left > 0 && i < len(ord); {
		// ord[i:] is what is left, by room descending: the positions
		// holding the rest are a prefix of it, the tightest of them the
		// first of the prefix's last room value.
		k := i + sort.Search(len(ord)-i, func(j int) bool { return room(ord[i+j]) < left })
		if k > i {
			r := room(ord[k-1])
			first := i + sort.Search(k-i, func(j int) bool { return room(ord[i+j]) <= r })
			return append(dst, ord[first]), ord
		}
		dst = append(dst, ord[i])
		left -= room(ord[i])
		i++
	}
	return dst, ord
}
