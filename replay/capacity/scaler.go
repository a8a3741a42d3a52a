package capacity

import (
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/replay/hybrid"
)

// DecideScaler is the training pool's planner: autoscale.Decide with the
// policy given (the default Config.Scaler).
func DecideScaler(policy autoscale.Policy) hybrid.TrainingScaler {
	return func(now time.Time, cfg autoscale.Config, nodes []autoscale.Node, demand []autoscale.Demand) (autoscale.Plan, error) {
		cfg.Policy = policy
		return autoscale.Decide(cfg, now, nodes, demand)
	}
}

func defaultScaler(policy autoscale.Policy) hybrid.TrainingScaler { return DecideScaler(policy) }
