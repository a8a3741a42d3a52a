package serving_test

import (
	"testing"

	"github.com/berthsched/berth/internal/floattest"
	"github.com/berthsched/berth/serving"
)

// Every float of HPAConfig refuses NaN and infinities (found by
// reflection). -Inf Tolerance used to pass as "negative: none".
func TestHPAConfigFloatsMustBeFinite(t *testing.T) {
	floattest.Check(t, func() serving.HPAConfig {
		return serving.HPAConfig{Max: 4, Tolerance: 0.1, Targets: []serving.Target{{Metric: serving.Utilization, Value: 0.5}}}
	}, func(c serving.HPAConfig) error {
		_, err := serving.NewHPA(c)
		return err
	})
}
