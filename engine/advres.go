package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/berthsched/berth/topo"
)

// AdvanceReservation is a named window on a set of GPUs (SLURM's
// scontrol create reservation): from Start to End (or Start+Duration), on
// the whole GPUs of Nodes, or on GPUs GPUs taken in Domain (the whole
// cluster when Domain is zero). Jobs of Accounts may use the GPUs at any
// time; any other job is placed on them only if it ends (by its
// RuntimeLimit) before Start; a job without a limit never is while the
// window is ahead. A Maintenance reservation names Nodes: they are drained
// for its window (no job runs into it unless its account is listed).
// Reservations are set (created or changed) and deleted by events
// (ReservationSet, ReservationDeleted) and kept after their end until
// deleted (they then hold nothing).
type AdvanceReservation struct {
	Name     string
	Start    time.Time
	End      time.Time
	Duration time.Duration
	Nodes    []string
	GPUs     int
	Domain   DomainRef
	// Accounts may run inside the reservation.
	Accounts    []string
	Maintenance bool
}

// ReservationSet returns an event that creates the advance reservation
// r.Name, or replaces it (its GPUs are chosen again).
func ReservationSet(at time.Time, r AdvanceReservation) Event {
	return Event{Kind: EventReservationSet, Time: at, Reservation: &r}
}

// ReservationDeleted returns an event that deletes the advance
// reservation name.
func ReservationDeleted(at time.Time, name string) Event {
	return Event{Kind: EventReservationDeleted, Time: at, Reservation: &AdvanceReservation{Name: name}}
}

// gpuRef is one GPU by node name and index on the node (stable across
// cluster rebuilds).
type gpuRef struct {
	node string
	idx  int
}

type advRes struct {
	spec       AdvanceReservation
	start, end time.Time
	refs       []gpuRef
	// ids resolves refs on cluster c (ascending).
	c   *topo.Cluster
	ids []uint32
}

func (e *Engine) setReservation(r *AdvanceReservation) error {
	if r == nil || r.Name == "" {
		return fmt.Errorf("%w: reservation without a name", ErrInvalidEvent)
	}
	end := r.End
	if end.IsZero() {
		end = r.Start.Add(r.Duration)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: reservation %q: %s", ErrInvalidEvent, r.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case r.Start.IsZero():
		return bad("no Start")
	case !end.After(r.Start):
		return bad("ends (%v) before it starts (%v)", end, r.Start)
	case (len(r.Nodes) > 0) == (r.GPUs > 0):
		return bad("give either Nodes or a GPU count")
	case r.GPUs < 0:
		return bad("negative GPU count")
	case r.Maintenance && len(r.Nodes) == 0:
		return bad("a maintenance reservation names Nodes")
	}
	e.siteInit()
	st := e.site
	var refs []gpuRef
	if len(r.Nodes) > 0 {
		for _, n := range r.Nodes {
			id, ok := e.cluster.NodeByName(n)
			if !ok {
				return fmt.Errorf("%w: reservation %q: %q", ErrUnknownNode, r.Name, n)
			}
			_, k := e.cluster.NodeGPUs(id)
			for i := 0; i < k; i++ {
				refs = append(refs, gpuRef{n, i})
			}
		}
	} else {
		// GPUs in the domain, node by node in name order, keeping off the
		// GPUs of other reservations whose windows overlap this one.
		taken := map[gpuRef]bool{}
		for name, o := range st.adv {
			if name != r.Name && o.start.Before(end) && r.Start.Before(o.end) {
				for _, g := range o.refs {
					taken[g] = true
				}
			}
		}
		lvl := -1
		if r.Domain.Level != "" {
			lvl = slices.Index(e.spec.Levels, r.Domain.Level)
			if lvl < 0 {
				return bad("unknown level %q", r.Domain.Level)
			}
		}
		nodes := slices.Clone(e.spec.Nodes)
		slices.SortFunc(nodes, func(a, b topo.NodeSpec) int {
			if a.Name < b.Name {
				return -1
			}
			return 1
		})
		for _, n := range nodes {
			if len(refs) == r.GPUs {
				break
			}
			if lvl >= 0 && (lvl >= len(n.Domains) || n.Domains[lvl] != r.Domain.Name) {
				continue
			}
			if n.MIG || n.Sharing.Mode != 0 {
				continue // whole GPUs only
			}
			for i := 0; i < n.GPUs && len(refs) < r.GPUs; i++ {
				if g := (gpuRef{n.Name, i}); !taken[g] {
					refs = append(refs, g)
				}
			}
		}
		if len(refs) < r.GPUs {
			return bad("only %d of %d GPUs are free of other reservations in the domain", len(refs), r.GPUs)
		}
	}
	spec := *r
	spec.Nodes = slices.Clone(r.Nodes)
	spec.Accounts = slices.Clone(r.Accounts)
	if st.adv == nil {
		st.adv = map[string]*advRes{}
	}
	st.adv[r.Name] = &advRes{spec: spec, start: r.Start, end: end, refs: refs}
	return nil
}

func (e *Engine) deleteReservation(r *AdvanceReservation) error {
	if r == nil || e.site == nil || e.site.adv[r.Name] == nil {
		name := ""
		if r != nil {
			name = r.Name
		}
		return fmt.Errorf("%w: no reservation %q", ErrInvalidEvent, name)
	}
	delete(e.site.adv, r.Name)
	return nil
}

// gpus resolves the reservation's GPUs on cluster c (nodes removed since
// drop out).
func (a *advRes) gpus(c *topo.Cluster) []uint32 {
	if a.c == c {
		return a.ids
	}
	a.c, a.ids = c, a.ids[:0]
	for _, g := range a.refs {
		id, ok := c.NodeByName(g.node)
		if !ok {
			continue
		}
		first, n := c.NodeGPUs(id)
		if g.idx < n {
			a.ids = append(a.ids, first+uint32(g.idx))
		}
	}
	slices.Sort(a.ids)
	return a.ids
}

// advBlocks reports whether reservation a keeps js, starting at t, off
// its GPUs.
func advBlocks(a *advRes, js *job, t time.Time) bool {
	if !a.end.After(t) || slices.Contains(a.spec.Accounts, js.j.AccountName()) {
		return false
	}
	l := js.j.RuntimeLimit
	return overlaps(t, l, l > 0, a.start, a.end.Sub(a.start), true)
}

// advApplies reports whether an advance reservation keeps js, starting at
// t, off some GPUs.
func (e *Engine) advApplies(js *job, t time.Time) bool {
	if e.site == nil || len(e.site.adv) == 0 {
		return false
	}
	for _, a := range e.site.adv {
		if advBlocks(a, js, t) {
			return true
		}
	}
	return false
}

// advSnap returns s, or a clone of it with the free GPUs of the advance
// reservations that keep js (starting at t) off booked.
func (e *Engine) advSnap(s *topo.Snapshot, js *job, t time.Time) *topo.Snapshot {
	if js == nil || !e.advApplies(js, t) {
		return s
	}
	w := s.Clone()
	for _, name := range sortedKeys(e.site.adv) {
		if a := e.site.adv[name]; advBlocks(a, js, t) {
			bookFree(w, a.gpus(s.Cluster()))
		}
	}
	return w
}

// advEnds are the ends of the advance reservations after now: times a
// blocked job's reservation may start at.
func (e *Engine) advEnds(now time.Time, out []time.Time) []time.Time {
	if e.site == nil {
		return out
	}
	for _, a := range e.site.adv {
		if a.end.After(now) {
			out = append(out, a.end)
		}
	}
	return out
}

// AdvanceReservations returns the advance reservations, by name, each with
// its GPUs as node name and node-local indexes.
func (e *Engine) AdvanceReservations() []AdvanceReservationStatus {
	if e.site == nil {
		return nil
	}
	var out []AdvanceReservationStatus
	for _, name := range sortedKeys(e.site.adv) {
		a := e.site.adv[name]
		s := AdvanceReservationStatus{Name: name, Start: a.start, End: a.end, Maintenance: a.spec.Maintenance}
		for _, g := range a.refs {
			s.GPUs = append(s.GPUs, SavedGPU{Node: g.node, GPU: g.idx})
		}
		out = append(out, s)
	}
	return out
}

// AdvanceReservationStatus is an advance reservation as the engine holds
// it.
type AdvanceReservationStatus struct {
	Name        string
	Start, End  time.Time
	GPUs        []SavedGPU
	Maintenance bool
}

func cloneAdv(r *AdvanceReservation) *AdvanceReservation {
	if r == nil {
		return nil
	}
	c := *r
	c.Nodes = slices.Clone(r.Nodes)
	c.Accounts = slices.Clone(r.Accounts)
	return &c
}

// advProtect adds to set the GPUs of the advance reservations that keep p
// off (starting now): preemption and shrinking on p's behalf keep them
// held where they free them.
func (e *Engine) advProtect(p *job, set map[uint32]bool) {
	if !e.advApplies(p, e.cyc.now) {
		return
	}
	for _, a := range e.site.adv {
		if advBlocks(a, p, e.cyc.now) {
			for _, g := range a.gpus(e.cluster) {
				set[g] = true
			}
		}
	}
}

// advHeldGPUs is the set of GPUs the advance reservations keep js
// (starting now) off; nil when none does.
func (e *Engine) advHeldGPUs(js *job) map[uint32]bool {
	if !e.advApplies(js, e.cyc.now) {
		return nil
	}
	set := map[uint32]bool{}
	e.advProtect(js, set)
	return set
}
