package replay

import (
	"cmp"
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/workload"
	"github.com/stretchr/testify/require"
)

// The five most common pending reasons of the ITP cluster04 replay (its
// first 4,000 jobs on 64 x 8 GPUs in 8 racks, under each default policy,
// exact estimates) are each actionable: the explanation names the
// limiting resource with numbers and says what would let the job start (a
// time, the jobs to wait for, or the runtime limit that starts it now).
// Explanations are computed on every 25th cycle, for every pending job.
func TestReplayPendingReasonsActionable(t *testing.T) {
	jobs := replayTrace(t, workload.KindITP)
	jobs = jobs[:min(len(jobs), 4000)]
	if testing.Short() || replayRace() {
		jobs = jobs[:1000]
	}
	counts := map[string]int{}
	example := map[string]engine.Explanation{}
	for _, p := range DefaultPolicies() {
		n := 0
		_, err := Run(context.Background(), Config{
			Workload: "itp04", Jobs: jobs, Cluster: Cluster{Nodes: 64, GPUsPerNode: 8, Racks: 8}, Policy: p, EstimateFactor: 1,
			AllPending: true, // every pending job's explanation
			Observe: func(c backends.Cycle) {
				if n++; n%25 != 0 {
					return
				}
				for _, x := range c.View.Explanations() {
					counts[x.Kind]++
					if _, ok := example[x.Kind]; !ok {
						example[x.Kind] = x
					}
				}
			},
		})
		require.NoError(t, err)
	}
	kinds := slices.Collect(maps.Keys(counts))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	require.GreaterOrEqual(t, len(kinds), 5, "kinds: %v", counts)
	number := regexp.MustCompile(`\d`)
	for _, k := range kinds[:5] {
		x := example[k]
		t.Logf("%7d  %-32s %s", counts[k], k, x)
		require.Regexp(t, number, x.Limit, "%s: the limit has no numbers: %s", k, x)
		require.True(t, strings.Contains(x.Limit, "GPU") || strings.Contains(x.Limit, "node") ||
			strings.Contains(x.Limit, "quota") || strings.Contains(x.Limit, "behind"),
			"%s: the limit names no resource: %s", k, x)
		require.NotEmpty(t, x.Unblock, "%s: nothing says what would let it start", k)
		require.True(t, number.MatchString(x.Unblock) || strings.Contains(x.Unblock, "backfill") || strings.Contains(x.Unblock, " starts"),
			"%s: the way out has no time, job or limit: %s", k, x)
	}
}
