package engine

import "github.com/berthsched/berth/topo"

// tlSnaps keeps, within one cycle, the what-if snapshots that reserve's
// probes read: at[i] is the plan with the GPUs of the timeline's first i
// jobs released (releaseOn). Every reserve call of a walk replays the same
// releases on the same plan until a job is placed, so with a thousand
// blocked jobs under conservative backfill the releases were most of a
// cycle; the snapshots are built once and shared (read-only) instead.
// They hold while the plan (pointer and topo.Snapshot.Version), the
// timeline (Engine.tlGen) and the claimed GPUs (set before the walk) do
// not change; any placement changes the plan, and the next reserve call
// starts again from a new clone. Config.DisableCaches replays the releases
// per call as before (FuzzEngine compares both).
type tlSnaps struct {
	plan  *topo.Snapshot
	ver   uint64
	tlGen uint64
	at    []*topo.Snapshot // by released count; nil: not built
	buf   []uint32
}

// reset forgets the snapshots (a new cycle); cycleState.resetTLS drops
// them first.
func (c *tlSnaps) reset() {
	c.plan = nil
	clear(c.at)
	c.at = c.at[:0]
}

// tlSnapsFor returns the snapshots for a reserve call on the plan and
// timeline as they are, or nil for the first call on them: building a
// snapshot per probe step costs more than releasing in place on one clone
// (EASY backfill makes one or two calls a cycle), so the cache pays only
// from the second call on the same plan (conservative backfill's
// hundreds).
func (e *Engine) tlSnapsFor() *tlSnaps {
	cs := &e.cyc
	c := &cs.tls
	if c.plan != cs.plan || c.ver != cs.plan.Version() || c.tlGen != e.tlGen {
		cs.resetTLS()
		c.plan, c.ver, c.tlGen = cs.plan, cs.plan.Version(), e.tlGen
		return nil
	}
	return c
}

// snapAt returns the plan with the first i timeline jobs released. The
// snapshot is shared: callers clone it before writing.
func (e *Engine) snapAt(c *tlSnaps, i int) *topo.Snapshot {
	if n := e.tl.Len() + 1; len(c.at) < n {
		c.at = append(c.at, make([]*topo.Snapshot, n-len(c.at))...)
	}
	if s := c.at[i]; s != nil {
		return s
	}
	j := i
	for j > 0 && c.at[j] == nil {
		j--
	}
	if c.at[j] == nil { // j == 0
		c.at[0] = c.plan.Clone()
		if i == 0 {
			return c.at[0]
		}
	}
	s := c.at[j].Clone()
	tl := e.timeline(i)
	for k := j; k < i; k++ {
		c.buf = e.releaseOn(s, tl[k].js, c.buf)
	}
	c.at[i] = s
	return s
}
