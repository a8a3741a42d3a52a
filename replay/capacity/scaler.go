package capacity

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/replay/hybrid"
)

// defaultScaler is the training pool's planner until autoscale.Decide is
// merged: FitScaler.
func defaultScaler(policy autoscale.Policy) hybrid.TrainingScaler { return FitScaler(policy) }

// FitScaler is a small planner of autoscale.Decide's shape for one pool
// of whole nodes without domains: the demand, in order, is fitted first
// onto the free GPUs of the pool's nodes (booting ones count as free) and
// of the nodes planned before it, member by member, first fit; what does
// not fit asks for new nodes. GangAware asks for a gang's nodes only if
// all of them fit under the pool's Max (else the gang is unserved and the
// next one is tried); PodByPod asks for nodes member by member until Max,
// whatever becomes of the rest of the gang. Nodes idle for the scale-down
// delay, not reserved and not given a member of the demand this round
// are scaled down.
func FitScaler(policy autoscale.Policy) hybrid.TrainingScaler {
	return func(now time.Time, cfg autoscale.Config, nodes []autoscale.Node, demand []autoscale.Demand) (autoscale.Plan, error) {
		var plan autoscale.Plan
		if len(cfg.Pools) != 1 {
			return plan, fmt.Errorf("%w: want one pool, got %d", autoscale.ErrInvalid, len(cfg.Pools))
		}
		pool := cfg.Pools[0]
		per := pool.GPUsPerNode
		if per < 1 {
			return plan, fmt.Errorf("%w: pool %q has %d GPUs per node", autoscale.ErrInvalid, pool.Name, per)
		}
		delay := cfg.ScaleDownDelay
		if delay == 0 {
			delay = 10 * time.Minute
		}
		free := make([]int, len(nodes))
		for i, n := range nodes {
			free[i] = n.FreeGPUs
		}
		wanted := make([]bool, len(nodes)) // a member was fitted on it
		room := pool.Max - len(nodes)
		var added []int // free GPUs of the nodes asked for
		var up autoscale.ScaleUp
		for _, d := range demand {
			var members []int
			for _, g := range d.Request.Groups {
				for range g.Members {
					members = append(members, g.GPUsPerMember)
				}
			}
			// Fit onto a copy; commit per the policy.
			f := append([]int(nil), free...)
			a := append([]int(nil), added...)
			var onNodes []int
			fresh := 0
			served := true
			for _, m := range members {
				if m > per {
					served = false
					break
				}
				if k := firstFit(f, m); k >= 0 {
					f[k] -= m
					onNodes = append(onNodes, k)
					continue
				}
				if k := firstFit(a, m); k >= 0 {
					a[k] -= m
					continue
				}
				if policy == autoscale.PodByPod && fresh >= room-len(added) {
					served = false
					break
				}
				a = append(a, per-m)
				fresh++
			}
			if policy != autoscale.PodByPod && (!served || len(a) > room) {
				plan.Unserved = append(plan.Unserved, autoscale.Unserved{Job: d.Job, Reason: "pool at its max"})
				continue
			}
			// Pod by pod keeps what it placed, served or not.
			free, added = f, a
			for _, k := range onNodes {
				wanted[k] = true
			}
			if fresh > 0 {
				up.Jobs = append(up.Jobs, d.Job)
			}
			if !served {
				plan.Unserved = append(plan.Unserved, autoscale.Unserved{Job: d.Job, Reason: "pool at its max"})
			}
		}
		if len(added) > 0 {
			up.Pool, up.Nodes = pool.Name, len(added)
			plan.Up = append(plan.Up, up)
		}
		kept := len(nodes) + len(added)
		for i, n := range nodes {
			if kept <= pool.Min {
				break
			}
			if n.Booting || n.Reserved || wanted[i] || n.IdleSince.IsZero() || n.FreeGPUs < per || now.Before(n.IdleSince.Add(delay)) {
				continue
			}
			plan.Down = append(plan.Down, n.Name)
			kept--
		}
		return plan, nil
	}
}

func firstFit(free []int, m int) int {
	for k, f := range free {
		if f >= m {
			return k
		}
	}
	return -1
}
