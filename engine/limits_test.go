package engine_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/internal/floattest"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// The reproduction: a scorer weight of +Inf passed engine.New and
// turned scores into NaN.
func TestInfiniteScorerWeightIsRefused(t *testing.T) {
	c := baseConfig()
	c.Scorer = gang.ScorerSpec{Name: gang.ScorerFGD, Target: []gang.Shape{{GPUs: 1, Milli: 1000, Weight: math.Inf(1)}}}
	_, err := engine.New(c)
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	require.ErrorIs(t, err, gang.ErrBadScorer)
	assert.Contains(t, err.Error(), "Weight must be a finite non-negative number, got +Inf")
}

// Every float field of engine.Config refuses NaN and infinities, found by
// reflection (the policy is an interface: its weights are checked by
// queue.Multifactor, below).
func TestConfigFloatsMustBeFinite(t *testing.T) {
	base := func() engine.Config {
		c := baseConfig()
		c.Queues = queue.TreeSpec{
			Cohorts:  []queue.CohortSpec{{Name: "c", Weight: 1}},
			Queues:   []queue.QueueSpec{{Name: "q", Cohort: "c", Weight: 1}},
			Accounts: []queue.AccountSpec{{Name: "a", Parent: "q", Shares: 1}},
		}
		c.Scorer = gang.ScorerSpec{Name: gang.ScorerFGD, Target: []gang.Shape{{GPUs: 1, Milli: 1000, Weight: 1}}}
		c.MIG.WaitFactor = 1
		return c
	}
	floattest.Check(t, base, func(c engine.Config) error {
		_, err := engine.New(c)
		if err != nil && !errors.Is(err, engine.ErrInvalidConfig) {
			t.Errorf("want ErrInvalidConfig, got %v", err)
		}
		return err
	})
	floattest.Check(t, func() queue.Weights {
		return queue.Weights{Age: 1, Size: 1, FairShare: 1, QueueWeight: 1, Priority: 1}
	}, func(w queue.Weights) error {
		_, err := queue.Multifactor(w)
		return err
	})
}

// The limits engine.Config shares with the config file, checked before
// anything is allocated.
func TestConfigLimits(t *testing.T) {
	c := baseConfig()
	c.IntakeCapacity = queue.MaxIntakeCapacity + 1
	_, err := engine.New(c)
	require.ErrorIs(t, err, engine.ErrInvalidConfig)

	c = baseConfig()
	c.Cluster.Nodes = make([]topo.NodeSpec, topo.MaxNodes+1)
	_, err = engine.New(c)
	require.ErrorIs(t, err, topo.ErrSpecLimit)

	c = baseConfig()
	c.Cluster.Levels = make([]string, topo.MaxLevels+1)
	_, err = engine.New(c)
	require.ErrorIs(t, err, topo.ErrSpecLimit)

	c = baseConfig()
	c.Queues.Queues = make([]queue.QueueSpec, queue.MaxTreeNodes+1)
	_, err = engine.New(c)
	require.ErrorIs(t, err, queue.ErrTreeLimit)

	c = baseConfig()
	c.Scorer = gang.ScorerSpec{Name: gang.ScorerFGD, Target: make([]gang.Shape, gang.MaxTargetShapes+1)}
	_, err = engine.New(c)
	require.ErrorIs(t, err, gang.ErrBadScorer)
}
