package benchmarks

import (
	"fmt"
	"sync"
	"testing"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/topo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type standardCase struct {
	shape ClusterShape
	fill  Fill
	gang  string
}

func standardCases() []standardCase {
	var out []standardCase
	for _, sh := range []ClusterShape{B2K(), B12K()} {
		for _, f := range []Fill{Random60, Skewed60} {
			for _, g := range []string{"A", "B", "C"} {
				out = append(out, standardCase{sh, f, g})
			}
		}
	}
	for _, f := range []Fill{Random60, Skewed60} {
		out = append(out, standardCase{NVL72x128(), f, "N"})
	}
	return out
}

func (sc standardCase) name() string {
	return fmt.Sprintf("cluster=%s/fill=%s/gang=%s", sc.shape.Name, sc.fill, sc.gang)
}

var filled sync.Map // "shape/fill" -> *topo.Snapshot

// filledSnapshot returns the standard fill of a shape, built once per
// process; callers must Clone it before writing.
func filledSnapshot(tb testing.TB, sh ClusterShape, f Fill) *topo.Snapshot {
	k := sh.Name + "/" + string(f)
	if v, ok := filled.Load(k); ok {
		return v.(*topo.Snapshot)
	}
	c, err := sh.Build()
	require.NoError(tb, err)
	s := c.NewSnapshot()
	_, err = ApplyFill(s, sh, f)
	require.NoError(tb, err)
	filled.Store(k, s)
	return s
}

// TestStandardGangs checks found / spread against the bound for every
// standard gang on every standard cluster and fill.
func TestStandardGangs(t *testing.T) {
	for _, sc := range standardCases() {
		t.Run(sc.name(), func(t *testing.T) {
			s := filledSnapshot(t, sc.shape, sc.fill).Clone()
			req, err := Gang(sc.gang)
			require.NoError(t, err)
			res, err := gang.Place(s, &req)
			require.NoError(t, err)
			bound := Bound(s, req)
			if bound == 0 {
				assert.False(t, res.Found)
				assert.Equal(t, gang.NoCapacity, res.Reason.Code)
				t.Logf("no: %v", res.Reason)
				return
			}
			require.True(t, res.Found, "bound %d but not found: %v", bound, res.Reason)
			rl, _ := s.Cluster().Level(sc.shape.PreferredName)
			assert.Equal(t, bound, res.Spread[rl], "spread equals the best possible")
			assert.Equal(t, BoundBlocks(s, req), res.Spread[1], "the fewest blocks those racks can be in")
			if req.Required != "" {
				bl, _ := s.Cluster().Level(req.Required)
				assert.Equal(t, 1, res.Spread[bl])
			}
			assert.Len(t, res.Members, req.Groups[0].Members)
			require.NoError(t, res.Apply(s))
			require.NoError(t, s.Verify())
			require.NoError(t, res.Undo(s))
			t.Logf("%s spread %v bound %d bound-blocks %d nodes %d", sc.name(), res.Spread, bound, BoundBlocks(s, req), res.Nodes)
		})
	}
}

// TestRandom60GangAIsAnExplainedNo pins the reason in numbers.
func TestRandom60GangAIsAnExplainedNo(t *testing.T) {
	s := filledSnapshot(t, B2K(), Random60)
	req, _ := Gang("A")
	res, err := gang.Place(s, &req)
	require.NoError(t, err)
	require.False(t, res.Found)
	assert.Equal(t, gang.NoCapacity, res.Reason.Code)
	assert.Equal(t, "block", res.Reason.Level)
	assert.Equal(t, 32, res.Reason.Need)
	best := 0
	c := s.Cluster()
	for b := range c.NumDomains(1) {
		best = max(best, s.DomainWholeNodes(1, b))
	}
	assert.Equal(t, best, res.Reason.Fit)
	assert.Less(t, res.Reason.Fit, 32)
	t.Log(res.Reason)
}
