// Package tracetest gives tests the public traces that berth's replay
// numbers depend on, under one rule: when the traces are absent a test is
// skipped with a message that says where to get them, and when
// BERTH_REQUIRE_TRACES=1 (which .ci/run sets) it fails instead.
//
// The traces are read in place from $BERTH_TRACES or ../shared/traces
// beside the repository (see workload.TracesDir); docs/traces.md lists
// their sources and checksums, and hack/get-traces.sh fetches them.
package tracetest

import (
	"os"
	"strings"
	"testing"

	"github.com/berthsched/berth/workload"
)

// RequireEnv names the environment variable that turns a missing trace
// from a skip into a failure.
const RequireEnv = "BERTH_REQUIRE_TRACES"

const getThem = workload.GetTraces

// Required reports whether missing traces fail tests.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// absent skips tb, or fails it when traces are required.
func absent(tb testing.TB, err error) {
	tb.Helper()
	how := "; " + getThem
	if strings.Contains(err.Error(), getThem) {
		how = "" // workload's errors say it already
	}
	if Required() {
		tb.Fatalf("trace required ($%s=1) but not found: %v%s", RequireEnv, err, how)
	}
	tb.Skipf("public traces not found (%v)%s", err, how)
}

// Path returns the path of a shared trace (workload.SWFNASA, ...), or
// skips or fails tb when it is absent.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p, err := workload.TracePath(rel)
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		absent(tb, err)
	}
	return p
}

// Dir returns the traces directory, or skips or fails tb.
func Dir(tb testing.TB) string {
	tb.Helper()
	d, err := workload.TracesDir()
	if err != nil {
		absent(tb, err)
	}
	return d
}

// Open opens the shared trace of kind (workload.KindSWF, KindITP,
// KindOpenb) with workload.Open, or skips or fails tb when it is absent. A
// trace that is present but does not load fails tb.
func Open(tb testing.TB, kind string) *workload.Trace {
	tb.Helper()
	rel := map[string]string{workload.KindSWF: workload.SWFNASA, workload.KindITP: workload.ITPCluster04,
		workload.KindOpenb: workload.OpenbNodes}[kind]
	Path(tb, rel)
	if kind == workload.KindOpenb {
		Path(tb, workload.OpenbPods)
	}
	tr, err := workload.Open(kind, "")
	if err != nil {
		tb.Fatalf("open %s trace: %v", kind, err)
	}
	return tr
}
