package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzFlagValues feeds arbitrary strings to the flag value parsers: each
// either succeeds with a value in range or fails with a usage error, and
// never panics.
func FuzzFlagValues(f *testing.F) {
	for _, s := range []string{"42", "42-51", "1,3,5-7", "synthetic:10", "swf:/x.swf.gz", "inflated:2.5", "exact", "-", "9-", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if seeds, err := parseSeeds(s); err != nil {
			require.ErrorIs(t, err, errUsage)
		} else {
			require.NotEmpty(t, seeds)
			require.LessOrEqual(t, len(seeds), 1000)
			seen := map[int64]bool{}
			for _, v := range seeds {
				require.GreaterOrEqual(t, v, int64(0))
				require.False(t, seen[v], "repeated seed")
				seen[v] = true
			}
		}
		if tr, err := parseTrace(s); err != nil {
			require.ErrorIs(t, err, errUsage)
		} else {
			require.Contains(t, []string{"synthetic", "swf", "itp", "openb"}, tr.kind)
			require.NotEmpty(t, tr.name())
			require.GreaterOrEqual(t, tr.jobs, 0)
		}
		if f, err := parseEstimates(s); err != nil {
			require.ErrorIs(t, err, errUsage)
		} else {
			require.True(t, f == 0 || (f >= 1 && f <= 1000), "factor %v", f)
		}
		if ps, err := parsePolicies(s, []string{"fifo", "easy"}); err == nil {
			require.NotEmpty(t, ps)
		} else {
			require.ErrorIs(t, err, errUsage)
		}
	})
}
