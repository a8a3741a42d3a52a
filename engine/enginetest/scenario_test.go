package enginetest_test

import (
	"testing"

	"github.com/berthsched/berth/engine/enginetest"
	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs every scenario file in testdata/ (see the package
// documentation for the commands).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		enginetest.Run(t, path)
	})
}
