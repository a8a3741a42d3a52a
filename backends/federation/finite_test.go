package federation_test

import (
	"testing"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/internal/floattest"
)

// Every float of federation.Config (pool quotas, the rebalancer's
// Hysteresis and MinShare, the autoscaling pools' costs) refuses NaN and infinities (found by
// reflection). NaN Hysteresis and MinShare used to pass: "<= 0 means the
// default" is false for NaN.
func TestConfigFloatsMustBeFinite(t *testing.T) {
	sl, ku := newFake(t, "slurm", 4), newFake(t, "kube", 4)
	floattest.Check(t, func() federation.Config {
		return federation.Config{
			Pools:     []federation.Pool{{Name: "slurm", Backend: sl, Quota: 0.5}, {Name: "kube", Backend: ku, Quota: 0.5}},
			Clock:     sl.Sim,
			Rebalance: federation.RebalanceConfig{Hysteresis: 1, MinShare: 0.5},
			Autoscale: &autoscale.Config{Pools: []autoscale.Pool{{Name: "kube/gpu", GPUsPerNode: 8, Max: 2, CostPerNodeHour: 1}}},
		}
	}, func(c federation.Config) error {
		_, err := federation.New(c)
		return err
	})
}
