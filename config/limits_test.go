package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/config"
	"github.com/berthsched/berth/internal/floattest"
)

const small = "cluster:\n  nodes:\n    - {name: n, gpus: 8}\nqueues:\n  halfLife: 0s\n  queues:\n    - {name: q}\nengine: {}\n"

// readBounded reads data, failing the test if the answer takes more than a
// minute: a hang detector, not a timing.
func readBounded(t *testing.T, data string) (*config.File, error) {
	t.Helper()
	type result struct {
		f   *config.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := config.Read([]byte(data))
		if err == nil {
			_, err = f.Build()
		}
		ch <- result{f, err}
	}()
	select {
	case r := <-ch:
		return r.f, r.err
	case <-time.After(time.Minute):
		t.Fatalf("no answer within a minute for %.200q", data)
		return nil, nil
	}
}

// requireLimit checks that err is a limit error on field with the given
// value and limit.
func requireLimit(t *testing.T, err error, field string, value, limit int64) {
	t.Helper()
	require.ErrorIs(t, err, config.ErrLimit)
	require.ErrorIs(t, err, config.ErrInvalid)
	var le *config.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, field, le.Field)
	assert.Equal(t, limit, le.Limit)
	if value >= 0 {
		assert.Equal(t, value, le.Value)
	}
}

// The reproduction: a one-line huge count used to expand a
// billion nodes before anything checked it.
func TestHugeNodeCountIsRefused(t *testing.T) {
	_, err := readBounded(t, strings.Replace(small, "{name: n, gpus: 8}", "{name: n, count: 1000000000, gpus: 8}", 1))
	requireLimit(t, err, "cluster.nodes[0].count", 1000000000, config.MaxNodes)
	assert.Contains(t, err.Error(), "line 3")
	// Entries each under the limit, together over it.
	half := fmt.Sprintf("{name: a, count: %d, gpus: 8}\n    - {name: b, count: %d, gpus: 8}", config.MaxNodes/2, config.MaxNodes/2+1)
	_, err = readBounded(t, strings.Replace(small, "{name: n, gpus: 8}", half, 1))
	requireLimit(t, err, "cluster.nodes", config.MaxNodes+1, config.MaxNodes)
	// At the limit: accepted.
	full := fmt.Sprintf("{name: a, count: %d, gpus: 8}", config.MaxNodes)
	_, err = readBounded(t, strings.Replace(small, "{name: n, gpus: 8}", full, 1))
	require.NoError(t, err)
}

func TestLimits(t *testing.T) {
	node := "{name: n, gpus: 8}"
	long := strings.Repeat("x", config.MaxStringLen+1)
	many := func(n int, f func(i int) string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f(i))
		}
		return b.String()
	}
	for _, c := range []struct {
		name, old, new string
		field          string
		value, limit   int64
	}{
		{"gpus", node, "{name: n, gpus: 65}", "cluster.nodes[0].gpus", 65, config.MaxGPUsPerNode},
		{"levels", "cluster:\n", "cluster:\n  levels: [" + many(config.MaxLevels+1, func(i int) string { return fmt.Sprint("l", i) }) + "]\n", "cluster.levels", config.MaxLevels + 1, config.MaxLevels},
		{"labels", node, "{name: n, gpus: 8, labels: {" + many(config.MaxLabels+1, func(i int) string { return fmt.Sprintf("k%d: v", i) }) + "}}", "cluster.nodes[0].labels", config.MaxLabels + 1, config.MaxLabels},
		{"name length", node, "{name: " + long + ", gpus: 8}", "cluster.nodes[0].name", config.MaxStringLen + 1, config.MaxStringLen},
		{"label length", node, "{name: n, gpus: 8, labels: {a: " + long + "}}", "cluster.nodes[0].labels.a", config.MaxStringLen + 1, config.MaxStringLen},
		{"queue name length", "{name: q}", "{name: " + long + "}", "queues.queues[0].name", config.MaxStringLen + 1, config.MaxStringLen},
		{"intake", "engine: {}", "engine: {intakeCapacity: 1073741824}", "engine.intakeCapacity", 1 << 30, config.MaxIntakeCapacity},
		{"replicas", node, "{name: n, gpus: 8, sharing: {mode: time-slicing, replicas: 1000000}}", "cluster.nodes[0].sharing.replicas", 1000000, config.MaxSharingReplicas},
		{"partitions", "engine: {}", "engine: {}\nsite:\n  partitions: [" + many(config.MaxPartitions+1, func(i int) string { return fmt.Sprintf("{name: p%d}", i) }) + "]", "site.partitions", config.MaxPartitions + 1, config.MaxPartitions},
		{"quota resources", "{name: q}", "{name: q, quota: {" + many(config.MaxResources+1, func(i int) string {
			return fmt.Sprintf("mig/p%d: {nominal: 1, borrowingLimit: 0, lendingLimit: 0}", i)
		}) + "}}", "queues.queues[0].quota", config.MaxResources + 1, config.MaxResources},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Contains(t, small, c.old)
			_, err := readBounded(t, strings.Replace(small, c.old, c.new, 1))
			requireLimit(t, err, c.field, c.value, c.limit)
		})
	}
	t.Run("queues", func(t *testing.T) {
		q := "    - {name: q}\n"
		var b strings.Builder
		for i := range config.MaxQueueEntries + 1 {
			fmt.Fprintf(&b, "    - {name: q%d}\n", i)
		}
		_, err := readBounded(t, strings.Replace(small, q, b.String(), 1))
		requireLimit(t, err, "queues", config.MaxQueueEntries+1, config.MaxQueueEntries)
	})
	t.Run("cohort depth", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("  cohorts:\n    - {name: c0}\n")
		for i := 1; i <= config.MaxQueueDepth+1; i++ {
			fmt.Fprintf(&b, "    - {name: c%d, parent: c%d}\n", i, i-1)
		}
		b.WriteString("  queues:\n")
		_, err := readBounded(t, strings.Replace(small, "  queues:\n", b.String(), 1))
		require.ErrorIs(t, err, config.ErrInvalid)
		assert.Contains(t, err.Error(), fmt.Sprintf("more than %d cohorts above it", config.MaxQueueDepth))
	})
	t.Run("file size", func(t *testing.T) {
		_, err := readBounded(t, small+"#"+strings.Repeat("x", config.MaxFileSize))
		requireLimit(t, err, "(file)", -1, config.MaxFileSize)
	})
}

// A YAML alias bomb is refused before it is expanded.
func TestAliasBombIsRefused(t *testing.T) {
	_, err := readBounded(t, aliasBomb()+small[len("cluster:\n"):])
	requireLimit(t, err, "(file).nodes", -1, config.MaxYAMLNodes)
	// A few aliases are fine.
	f, err := readBounded(t, "cluster:\n  levels: &l [a]\n  nodes:\n    - {name: n, gpus: 8, domains: *l}\n"+small[strings.Index(small, "queues:"):])
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, f.Cluster.Nodes[0].Domains)
}

func TestDeepNestingIsRefused(t *testing.T) {
	deep := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	_, err := readBounded(t, strings.Replace(small, "engine: {}", "engine: {policy: {name: "+deep+"}}", 1))
	requireLimit(t, err, "(file).nesting", config.MaxYAMLDepth+1, config.MaxYAMLDepth)
}

// Every float field of the file refuses NaN, +Inf and -Inf with
// ErrNotFinite, naming the field (found by reflection: a float field added
// to File without a check fails here).
func TestFloatsMustBeFinite(t *testing.T) {
	base := func() config.File {
		f, err := config.Read([]byte(`
cluster:
  nodes: [{name: n, gpus: 8}]
queues:
  halfLife: 0s
  cohorts: [{name: c, weight: 1}]
  queues: [{name: q, cohort: c, weight: 2}]
  accounts: [{name: a, parent: q, shares: 1}]
engine:
  policy: {name: multifactor, weights: {age: 1, size: 1, fairShare: 1, queueWeight: 1, priority: 1}}
  mig: {waitFactor: 1}
  scorer: {name: fgd, target: [{gpus: 1, weight: 1}]}
`))
		require.NoError(t, err)
		return *f
	}
	floattest.Check(t, base, func(f config.File) error {
		err := f.Validate()
		if err != nil && !errors.Is(err, config.ErrNotFinite) {
			t.Errorf("want ErrNotFinite, got %v", err)
		}
		return err
	})
	// Through the YAML too, with the line.
	_, err := config.Read([]byte(strings.Replace(small, "engine: {}", "engine: {mig: {waitFactor: .inf}}", 1)))
	require.ErrorIs(t, err, config.ErrNotFinite)
	assert.Contains(t, err.Error(), "line 8: engine.mig.waitFactor")
}
