package mig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustModel(t testing.TB, name string) Model {
	t.Helper()
	m, err := LookupModel(name)
	require.NoError(t, err)
	return m
}

func TestLayoutEnumeration(t *testing.T) {
	for _, tc := range []struct {
		model             string
		placed, multisets int
	}{
		{"A100-40GB", 2319, 127},
		{"A100-80GB", 2319, 127},
		{"H100-80GB", 2319, 127},
		{"H200-141GB", 2319, 127},
		{"B200-180GB", 2319, 127},
		{"A30-24GB", 84, 21},
	} {
		m := mustModel(t, tc.model)
		ls := m.Layouts()
		assert.Len(t, ls, tc.placed, tc.model)
		assert.True(t, ls[0].IsEmpty(), "the empty layout comes first")
		distinct := map[Layout]bool{}
		multisets := map[string]bool{}
		for _, l := range ls {
			require.NoError(t, l.Validate(), l)
			distinct[l] = true
			if !l.IsEmpty() {
				multisets[fmt.Sprint(l.Counts())] = true
			}
		}
		assert.Len(t, distinct, tc.placed, "no layout twice")
		assert.Len(t, multisets, tc.multisets, tc.model)
	}
}

// TestLayoutEnumerationBruteForce checks the enumeration against every
// subset of placements filtered by the validity rules, written naively.
func TestLayoutEnumerationBruteForce(t *testing.T) {
	for _, name := range []string{"A30-24GB", "H100-80GB"} {
		m := mustModel(t, name)
		type pl struct {
			p     Profile
			start int
		}
		var all []pl
		for _, p := range m.Profiles() {
			for _, s := range p.Starts() {
				all = append(all, pl{p, s})
			}
		}
		want := 0
		var rec func(k int, chosen []pl)
		rec = func(k int, chosen []pl) {
			if k == len(all) {
				want++
				return
			}
			rec(k+1, chosen)
			cand := all[k]
			for _, c := range chosen {
				a0, a1 := c.start, c.start+c.p.MemorySlices()
				b0, b1 := cand.start, cand.start+cand.p.MemorySlices()
				if a0 < b1 && b0 < a1 {
					return
				}
			}
			n := 0
			for _, c := range chosen {
				if c.p == cand.p {
					n++
				}
			}
			if n >= cand.p.MaxCount() {
				return
			}
			rec(k+1, append(chosen, cand))
		}
		rec(0, nil)
		assert.Equal(t, want, len(m.Layouts()), name)
	}
}

// parseExampleItem reads one entry of the JSON examples: "3g", "3g@4",
// "1g x7", "1g(2mem) x4", "1g+me", "3g (note)".
func parseExampleItem(t *testing.T, m Model, s string) (profs []Profile, starts []int) {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, " ("); i >= 0 {
		s = s[:i]
	}
	n := 1
	if f := strings.Fields(s); len(f) == 2 && strings.HasPrefix(f[1], "x") {
		var err error
		n, err = strconv.Atoi(f[1][1:])
		require.NoError(t, err, s)
		s = f[0]
	}
	start := -1
	if name, at, ok := strings.Cut(s, "@"); ok {
		var err error
		start, err = strconv.Atoi(at)
		require.NoError(t, err, s)
		s = name
	}
	var p Profile
	if name, ok := strings.CutSuffix(s, "(2mem)"); ok {
		for _, q := range m.Profiles() {
			if fmt.Sprintf("%dg", q.ComputeSlices()) == name && q.MemorySlices() == 2 && !q.MediaExtensions() {
				p = q
			}
		}
		require.True(t, p.Valid(), s)
	} else {
		var err error
		p, err = m.Profile(s)
		require.NoError(t, err, s)
	}
	for range n {
		profs = append(profs, p)
		starts = append(starts, start)
	}
	return profs, starts
}

// exampleValid: some valid layout holds exactly these instances, at the
// given starts where one is given.
func exampleValid(m Model, profs []Profile, starts []int) bool {
	for _, l := range m.Layouts() {
		ins := l.Instances()
		if len(ins) != len(profs) {
			continue
		}
		used := make([]bool, len(ins))
		ok := true
		// Pinned items first, then free ones.
		order := make([]int, len(profs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return starts[b] - starts[a] })
		for _, i := range order {
			found := false
			for j, in := range ins {
				if !used[j] && in.Profile == profs[i] && (starts[i] < 0 || int(in.Start) == starts[i]) {
					used[j], found = true, true
					break
				}
			}
			if !found {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestJSONExamples(t *testing.T) {
	g := loadGeometryJSON(t)
	require.NotEmpty(t, g.Examples["valid_8slice"])
	require.NotEmpty(t, g.Examples["invalid_8slice"])
	for _, m := range Models() {
		if m.MemorySlices() != 8 {
			continue
		}
		for kind, want := range map[string]bool{"valid_8slice": true, "invalid_8slice": false} {
			for _, ex := range g.Examples[kind] {
				var profs []Profile
				var starts []int
				for _, item := range ex {
					p, s := parseExampleItem(t, m, item)
					profs, starts = append(profs, p...), append(starts, s...)
				}
				assert.Equal(t, want, exampleValid(m, profs, starts), "%v: %s %v", m, kind, ex)
				// LayoutWith agrees where no start is pinned.
				if !slices.ContainsFunc(starts, func(s int) bool { return s >= 0 }) {
					_, err := m.LayoutWith(profs...)
					assert.Equal(t, want, err == nil, "%v: LayoutWith %v", m, ex)
				}
			}
		}
	}
}

func TestLayoutRules(t *testing.T) {
	m := mustModel(t, "A100-40GB")
	p := func(n string) Profile {
		q, err := m.Profile(n)
		require.NoError(t, err)
		return q
	}
	l := EmptyLayout(m)
	l, err := l.Place(Instance{p("3g"), 4})
	require.NoError(t, err)
	_, err = l.Place(Instance{p("1g"), 6})
	assert.ErrorIs(t, err, ErrOverlap)
	_, err = l.Place(Instance{p("3g"), 2})
	assert.ErrorIs(t, err, ErrBadPlacement)
	_, err = l.Place(Instance{p("1g"), 7}) // 1g.5gb is never at slice 7
	assert.ErrorIs(t, err, ErrBadPlacement)
	_, err = l.Place(Instance{mustProfile(t, "H100-80GB", "1g"), 0})
	assert.ErrorIs(t, err, ErrModelMismatch)
	l, err = l.Place(Instance{p("1g+me"), 0})
	require.NoError(t, err)
	_, err = l.Place(Instance{p("1g+me"), 1})
	assert.ErrorIs(t, err, ErrMaxCount)
	var pe *PlacementError
	assert.ErrorAs(t, err, &pe)
	assert.Equal(t, "A100-40GB[1g.5gb+me@0 3g.20gb@4]", l.String())
	assert.Equal(t, uint8(0b11110001), l.Used())
	assert.Equal(t, uint8(0b00001110), l.Free())
	l2, err := l.Remove(Instance{p("3g"), 4})
	require.NoError(t, err)
	_, err = l2.Remove(Instance{p("3g"), 4})
	assert.ErrorIs(t, err, ErrNoInstance)
	assert.Equal(t, 1, l2.Len())

	pl, err := ParseLayout(m, "1g.5gb+me@0 3g.20gb@4")
	require.NoError(t, err)
	assert.Equal(t, l, pl)
	_, err = ParseLayout(m, "4g 4g")
	assert.ErrorIs(t, err, ErrNoFit)
	_, err = ParseLayout(m, "3g@x")
	assert.ErrorIs(t, err, ErrBadPlacement)
}

func mustProfile(t testing.TB, model, name string) Profile {
	t.Helper()
	p, err := mustModel(t, model).Profile(name)
	require.NoError(t, err)
	return p
}

func TestBestStart(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	// A 1g on an empty GPU stays off slices 0-3, so 4g@0 stays possible.
	one, in, err := EmptyLayout(m).Alloc(mustProfile(t, "H100-80GB", "1g"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, int(in.Start), 4)
	_, err = one.Place(Instance{mustProfile(t, "H100-80GB", "4g"), 0})
	assert.NoError(t, err)
	// Seven 1g fill the GPU; the eighth does not fit.
	l := EmptyLayout(m)
	for range 7 {
		var err error
		l, _, err = l.Alloc(mustProfile(t, "H100-80GB", "1g"))
		require.NoError(t, err)
	}
	_, _, err = l.Alloc(mustProfile(t, "H100-80GB", "1g"))
	assert.ErrorIs(t, err, ErrNoFit)
	// 4g + 3g: after a 3g, BestStart keeps 4g possible.
	l, in, err = EmptyLayout(m).Alloc(mustProfile(t, "H100-80GB", "3g"))
	require.NoError(t, err)
	assert.Equal(t, uint8(4), in.Start)
	_, _, err = l.Alloc(mustProfile(t, "H100-80GB", "4g"))
	assert.NoError(t, err)
}
