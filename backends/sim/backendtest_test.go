package sim_test

import (
	"testing"

	"github.com/berthsched/berth/backends/backendtest"
	"github.com/berthsched/berth/backends/sim"
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
