package workload_test

import (
	"testing"

	"github.com/berthsched/berth/internal/floattest"
	"github.com/berthsched/berth/workload"
)

// Every float of the generators' configs refuses NaN and infinities
// (found by reflection). -Inf Noise used to pass as "negative: none".
func TestConfigFloatsMustBeFinite(t *testing.T) {
	floattest.Check(t, func() workload.DiurnalConfig {
		return workload.DiurnalConfig{Services: 2, Peak: 10, Trough: 1, Noise: 0.1}
	}, func(c workload.DiurnalConfig) error {
		_, err := workload.NewDiurnal(c)
		return err
	})
	floattest.Check(t, workload.DefaultSynthetic, workload.SyntheticConfig.Validate)
}
