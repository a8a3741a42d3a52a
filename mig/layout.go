package mig

import (
	"fmt"
	"iter"
	"math/bits"
	"strconv"
	"strings"
)

// Instance is one GPU instance: a profile placed at a start memory slice.
// It occupies memory slices [Start, Start+Profile.MemorySlices()).
type Instance struct {
	Profile Profile
	Start   uint8
}

// Mask is the instance's memory slices as a bitset (bit i = slice i).
func (in Instance) Mask() uint8 {
	n := in.Profile.MemorySlices()
	if n == 0 || int(in.Start)+n > 8 {
		return 0
	}
	return uint8((1<<n - 1) << in.Start)
}

// String is "profile@start", e.g. "3g.40gb@4".
func (in Instance) String() string {
	return in.Profile.Name() + "@" + strconv.Itoa(int(in.Start))
}

// Layout is the set of GPU instances placed on one GPU: a fixed-width bitset
// of its memory slices (8, or 4 on A30) plus the placements that fill them.
// A Layout is an 8-byte value: copy it, compare it with ==, use it as a map
// key. Every Layout built through this package (EmptyLayout, Place, Remove,
// Alloc, Model.Layouts, ParseLayout) is valid: instances only at listed
// placements, pairwise disjoint memory slices, no profile above its
// maxCount. The zero Layout belongs to NoModel and holds nothing.
type Layout struct {
	pl    uint32 // bit k: placement k of the model's tables is present
	used  uint8  // memory slices taken
	model Model
}

// EmptyLayout is the layout of model m with no instances.
func EmptyLayout(m Model) Layout { return Layout{model: m} }

// Model is the GPU model whose geometry the layout follows.
func (l Layout) Model() Model { return l.model }

// Used is the bitset of memory slices held by instances.
func (l Layout) Used() uint8 { return l.used }

// Free is the bitset of memory slices held by no instance.
func (l Layout) Free() uint8 {
	t := l.model.tables()
	if t == nil {
		return 0
	}
	return t.fullMask &^ l.used
}

// Len is the number of instances.
func (l Layout) Len() int { return bits.OnesCount32(l.pl) }

// IsEmpty reports a layout with no instances.
func (l Layout) IsEmpty() bool { return l.pl == 0 }

// All yields the instances in ascending start order.
func (l Layout) All() iter.Seq[Instance] {
	return func(yield func(Instance) bool) {
		t := l.model.tables()
		if t == nil {
			return
		}
		for _, k := range l.byStart(t) {
			pl := t.placements[k]
			if !yield(Instance{Profile: Profile{model: l.model, idx: pl.prof}, Start: pl.start}) {
				return
			}
		}
	}
}

// byStart returns the placement indices of l ordered by start (it reads
// only l.pl).
func (l Layout) byStart(t *tables) []int {
	var out []int
	for pl := l.pl; pl != 0; pl &= pl - 1 {
		k := bits.TrailingZeros32(pl)
		i := len(out)
		out = append(out, k)
		for ; i > 0 && t.placements[out[i-1]].start > t.placements[k].start; i-- {
			out[i] = out[i-1]
		}
		out[i] = k
	}
	return out
}

// fromPl builds the layout of model m holding placements pl.
func fromPl(m Model, pl uint32) Layout {
	l := Layout{pl: pl, model: m}
	if t := m.tables(); t != nil {
		for b := pl; b != 0; b &= b - 1 {
			l.used |= t.placements[bits.TrailingZeros32(b)].mask
		}
	}
	return l
}

// Instances returns the instances in ascending start order (a fresh slice).
func (l Layout) Instances() []Instance {
	var out []Instance
	for in := range l.All() {
		out = append(out, in)
	}
	return out
}

// Counts returns the number of instances of each profile, indexed by
// Profile.Index (length Model().NumProfiles()): the layout's multiset.
func (l Layout) Counts() []int {
	t := l.model.tables()
	if t == nil {
		return nil
	}
	c := t.countsOf(l.pl)
	out := make([]int, l.model.NumProfiles())
	for i := range out {
		out[i] = int(c[i])
	}
	return out
}

// Count is the number of instances of profile p.
func (l Layout) Count(p Profile) int {
	t := l.model.tables()
	if t == nil || p.model != l.model || !p.Valid() {
		return 0
	}
	return bits.OnesCount32(l.pl & t.profMask[p.idx])
}

// Has reports whether the layout holds exactly this instance.
func (l Layout) Has(in Instance) bool {
	k := l.plIndex(in)
	return k >= 0 && l.pl&(1<<k) != 0
}

// At returns the instance that starts at memory slice start, if any.
func (l Layout) At(start int) (Instance, bool) {
	for in := range l.All() {
		if int(in.Start) == start {
			return in, true
		}
	}
	return Instance{}, false
}

func (l Layout) plIndex(in Instance) int {
	t := l.model.tables()
	if t == nil || in.Profile.model != l.model || !in.Profile.Valid() || in.Start >= 8 {
		return -1
	}
	return int(t.plIndex[in.Profile.idx][in.Start])
}

// CanPlace reports why in cannot be added (a *PlacementError wrapping
// ErrModelMismatch, ErrBadPlacement, ErrOverlap or ErrMaxCount), or nil.
func (l Layout) CanPlace(in Instance) error {
	if !l.model.Valid() || in.Profile.model != l.model || !in.Profile.Valid() {
		return &PlacementError{Instance: in, Err: ErrModelMismatch}
	}
	k := l.plIndex(in)
	if k < 0 {
		return &PlacementError{Instance: in, Err: ErrBadPlacement}
	}
	t := l.model.tables()
	if l.used&t.placements[k].mask != 0 {
		return &PlacementError{Instance: in, Err: ErrOverlap}
	}
	if l.Count(in.Profile) >= in.Profile.MaxCount() {
		return &PlacementError{Instance: in, Err: ErrMaxCount}
	}
	return nil
}

// Place returns l with in added, or l unchanged and the reason it cannot be.
func (l Layout) Place(in Instance) (Layout, error) {
	if err := l.CanPlace(in); err != nil {
		return l, err
	}
	k := l.plIndex(in)
	t := l.model.tables()
	return Layout{pl: l.pl | 1<<k, used: l.used | t.placements[k].mask, model: l.model}, nil
}

// Remove returns l without in, or l unchanged and a *PlacementError wrapping
// ErrNoInstance.
func (l Layout) Remove(in Instance) (Layout, error) {
	if !l.Has(in) {
		return l, &PlacementError{Instance: in, Err: ErrNoInstance}
	}
	k := l.plIndex(in)
	t := l.model.tables()
	return Layout{pl: l.pl &^ (1 << k), used: l.used &^ t.placements[k].mask, model: l.model}, nil
}

// BestStart chooses where a new instance of p goes: among the free listed
// placements (respecting maxCount), the one whose remaining free memory
// slices can still hold the largest instance (most compute slices), then
// the one that leaves the most valid layouts on them, then the lowest
// start. So small instances do not block large ones: a 1g goes to slice 6
// of an empty 8-slice GPU, where 4g@0 stays possible. ok is false when p
// cannot be placed.
func (l Layout) BestStart(p Profile) (start int, ok bool) {
	t := l.model.tables()
	if t == nil || p.model != l.model || !p.Valid() {
		return 0, false
	}
	if l.Count(p) >= p.MaxCount() {
		return 0, false
	}
	best, bestScore := -1, uint64(0)
	for pm := t.profMask[p.idx]; pm != 0; pm &= pm - 1 {
		pl := t.placements[bits.TrailingZeros32(pm)]
		if l.used&pl.mask != 0 {
			continue
		}
		f := t.fullMask &^ (l.used | pl.mask)
		score := uint64(t.largest[f])<<32 | uint64(t.completions[f])
		if best < 0 || score > bestScore {
			best, bestScore = int(pl.start), score
		}
	}
	return best, best >= 0
}

// Alloc places one instance of p at BestStart. It returns the new layout and
// the instance, or l unchanged and an error wrapping ErrNoFit.
func (l Layout) Alloc(p Profile) (Layout, Instance, error) {
	if p.model != l.model || !p.Valid() {
		return l, Instance{}, &PlacementError{Instance: Instance{Profile: p}, Err: ErrModelMismatch}
	}
	s, ok := l.BestStart(p)
	if !ok {
		return l, Instance{}, fmt.Errorf("%w: no free placement for %v in %v", ErrNoFit, p, l)
	}
	in := Instance{Profile: p, Start: uint8(s)}
	nl, err := l.Place(in)
	return nl, in, err
}

// Validate re-derives every validity rule from the instances: listed
// placements, disjoint memory slices, maxCount, and that the slice bitset
// matches the instances. Layouts built by this package always pass; the
// check exists for tests, fuzzing and data read from outside.
func (l Layout) Validate() error {
	if l.model == NoModel && l.pl == 0 && l.used == 0 {
		return nil
	}
	t := l.model.tables()
	if t == nil {
		return fmt.Errorf("%w: layout of %v", ErrUnknownModel, l.model)
	}
	if l.pl>>len(t.placements) != 0 {
		return fmt.Errorf("%w: placement bits beyond the model's %d", ErrBadPlacement, len(t.placements))
	}
	var used uint8
	var counts [maxProfiles]int
	for pl := l.pl; pl != 0; pl &= pl - 1 {
		p := t.placements[bits.TrailingZeros32(pl)]
		in := Instance{Profile: Profile{model: l.model, idx: p.prof}, Start: p.start}
		if used&p.mask != 0 {
			return &PlacementError{Instance: in, Err: ErrOverlap}
		}
		used |= p.mask
		counts[p.prof]++
		if counts[p.prof] > int(l.model.data().profiles[p.prof].maxCount) {
			return &PlacementError{Instance: in, Err: ErrMaxCount}
		}
	}
	if used != l.used {
		return fmt.Errorf("mig: layout slice bitset %08b does not match instances %08b", l.used, used)
	}
	return nil
}

// String lists the instances in start order: "H100-80GB[3g.40gb@0 1g.10gb@6]".
func (l Layout) String() string {
	var b strings.Builder
	b.WriteString(l.model.String())
	b.WriteByte('[')
	first := true
	for in := range l.All() {
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(in.String())
	}
	b.WriteByte(']')
	return b.String()
}

// ParseLayout reads instances of model m written as "profile@start" or
// "profile" (placed at BestStart, in the order given), separated by spaces
// or commas, e.g. "3g.40gb@0 2g.20gb 1g". Short names ("1g") resolve as in
// Model.Profile.
func ParseLayout(m Model, s string) (Layout, error) {
	if !m.Valid() {
		return Layout{}, fmt.Errorf("%w: %v", ErrUnknownModel, m)
	}
	l := EmptyLayout(m)
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		name, at, hasAt := strings.Cut(f, "@")
		p, err := m.Profile(name)
		if err != nil {
			return Layout{}, err
		}
		if !hasAt {
			if l, _, err = l.Alloc(p); err != nil {
				return Layout{}, err
			}
			continue
		}
		st, err := strconv.Atoi(at)
		if err != nil || st < 0 || st > 7 {
			return Layout{}, fmt.Errorf("%w: bad start in %q", ErrBadPlacement, f)
		}
		if l, err = l.Place(Instance{Profile: p, Start: uint8(st)}); err != nil {
			return Layout{}, err
		}
	}
	return l, nil
}

// Layouts returns every valid layout of the model, the empty one first, in
// a fixed order (a fresh slice). An 8-memory-slice GPU has 2,319 of them
// (127 distinct non-empty profile multisets); A30 has 84.
func (m Model) Layouts() []Layout {
	t := m.tables()
	if t == nil {
		return nil
	}
	return append([]Layout(nil), t.layouts...)
}

// LayoutWith returns a valid layout holding exactly the given profiles (a
// multiset), the first in Layouts order, or an error wrapping ErrNoFit.
func (m Model) LayoutWith(profiles ...Profile) (Layout, error) {
	t := m.tables()
	if t == nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrUnknownModel, m)
	}
	var want [maxProfiles]uint8
	for _, p := range profiles {
		if p.model != m || !p.Valid() {
			return Layout{}, &PlacementError{Instance: Instance{Profile: p}, Err: ErrModelMismatch}
		}
		want[p.idx]++
	}
	for i, c := range t.counts {
		if c == want {
			return t.layouts[i], nil
		}
	}
	return Layout{}, fmt.Errorf("%w: no valid layout of %v holds %v", ErrNoFit, m, profiles)
}
