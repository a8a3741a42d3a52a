package sim_test

import (
	"context"
	"testing"

	"github.com/berthsched/berth/backends/backendtest"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
)

// The simulator passes the fault suite (backends/backendtest).
func TestFaultSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: not in -short")
	}
	backendtest.Run(t, func(t *testing.T, s backendtest.Setup) backendtest.Backend {
		b, err := sim.New(sim.Config{Cluster: s.Cluster, Start: s.Start})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// The simulator passes the kill -9 scenario: the Runner's process is
// killed at random points and restarted (backendtest.RunKill).
func TestKillRestart(t *testing.T) {
	backendtest.RunKill(t, func(t *testing.T, s backendtest.Setup) backendtest.Backend {
		b, err := sim.New(sim.Config{Cluster: s.Cluster, Start: s.Start})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// gangSim is the simulator as a GangBinder: a gang is bound as one unit
// (every member or none), as SLURM and Kubernetes backends do.
type gangSim struct{ *sim.Sim }

func (g gangSim) BindGang(ctx context.Context, job string, ms []engine.Member) error {
	for i, m := range ms {
		if err := g.BindMember(ctx, job, m); err != nil {
			for _, b := range ms[:i] {
				_ = g.UnbindMember(context.WithoutCancel(ctx), job, b) // all or nothing
			}
			return err
		}
	}
	return nil
}

// The fault suite through BindGang: the path of backends that bind a gang
// as one unit (faults are injected per gang).
func TestFaultSuiteGangBinder(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: not in -short")
	}
	backendtest.Run(t, func(t *testing.T, s backendtest.Setup) backendtest.Backend {
		b, err := sim.New(sim.Config{Cluster: s.Cluster, Start: s.Start})
		if err != nil {
			t.Fatal(err)
		}
		return gangSim{b}
	})
}
