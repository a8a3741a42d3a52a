package hybrid

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// nodePower is a node's power state under autoscaling (always on
// without).
type nodePower uint8

const (
	powerOn nodePower = iota
	powerBooting
	powerOff
)

// nodesFor is the nodes of per GPUs that gpus GPUs need.
func nodesFor(gpus, per int) int { return (max(gpus, 0) + per - 1) / per }

// autoscaler is one minute's autoscaling round over the run's state
// (slices shared with Run, changed in place).
type autoscaler struct {
	cfg        Config
	variant    string
	trainNodes int
	t          time.Time
	owner      []string
	power      []nodePower
	bootAt     []time.Time
	idleSince  []time.Time
	reserved   []bool
	used       []int
	draining   []string
	lastMove   []time.Time
	names      []string
	row        *Row
	step       func(engine.Event) error
	// spareInfer: inference nodes up and not needed (filled by inference,
	// lent to training by a federated scale-up), in the order to lend.
	spareInfer []int
}

// mayBoot reports whether pool may boot off node i: its own share of the
// nodes without federation, any node with it.
func (a *autoscaler) mayBoot(i int, pool string) bool {
	if a.power[i] != powerOff {
		return false
	}
	if a.variant == Federated {
		return true
	}
	return (i < a.trainNodes) == (pool == poolTrain)
}

// boot asks for up to k nodes for pool; it returns how many it got.
func (a *autoscaler) boot(pool string, k int) int {
	got := 0
	for i := range a.power {
		if got == k {
			break
		}
		if !a.mayBoot(i, pool) {
			continue
		}
		a.owner[i], a.power[i], a.bootAt[i], a.idleSince[i] = pool, powerBooting, a.t.Add(a.cfg.Autoscale.BootDelay), time.Time{}
		a.row.ScaleUps++
		got++
	}
	return got
}

// off turns node i off.
func (a *autoscaler) off(i int) error {
	wasOn := a.power[i] == powerOn
	a.power[i], a.idleSince[i] = powerOff, time.Time{}
	a.row.ScaleDowns++
	if wasOn && a.owner[i] == poolTrain {
		return a.step(engine.NodeChanged(a.t, a.names[i], topo.Cordoned, nil))
	}
	return nil
}

// move hands node i (up, idle) to pool at once.
func (a *autoscaler) move(i int, pool string) error {
	a.owner[i], a.lastMove[i], a.idleSince[i] = pool, a.t, a.t
	a.row.NodeMoves++
	st := topo.Cordoned
	if pool == poolTrain {
		st = topo.Ready
	}
	return a.step(engine.NodeChanged(a.t, a.names[i], st, nil))
}

// idleTraining reports whether training node i is up, empty, not
// reserved and not draining.
func (a *autoscaler) idleTraining(i int) bool {
	return a.owner[i] == poolTrain && a.power[i] == powerOn && a.used[i] == 0 && !a.reserved[i] && a.draining[i] == ""
}

// inference sizes the inference pool for the replicas wanted now.
func (a *autoscaler) inference(wanted, running int) error {
	per := a.cfg.GPUsPerNode
	target := int(math.Ceil(float64(wanted) * (1 + a.cfg.Autoscale.InferenceHeadroom)))
	if a.variant == Colocated {
		for i := range a.owner {
			if a.owner[i] == poolTrain && a.power[i] == powerOn {
				target -= per - a.used[i]
			}
		}
	}
	need := nodesFor(target, per)
	// Replicas are packed onto the pool's nodes up, in order: the first
	// ones are busy; the rest beyond need are spare.
	busy := nodesFor(running, per)
	keep := max(need, busy)
	have, k := 0, 0
	a.spareInfer = a.spareInfer[:0]
	for i := range a.owner {
		if a.owner[i] != poolInfer || a.power[i] == powerOff {
			continue
		}
		have++
		if a.power[i] != powerOn {
			continue
		}
		if k < keep {
			a.idleSince[i] = time.Time{}
		} else {
			if a.idleSince[i].IsZero() {
				a.idleSince[i] = a.t
			}
			a.spareInfer = append(a.spareInfer, i)
		}
		k++
	}
	if have < need {
		k := need - have
		if a.variant == Federated {
			// Borrow idle training nodes first.
			for i := range a.owner {
				if k == 0 {
					break
				}
				if a.idleTraining(i) {
					if err := a.move(i, poolInfer); err != nil {
						return err
					}
					a.idleSince[i] = time.Time{}
					k--
				}
			}
		}
		a.boot(poolInfer, k)
		return nil
	}
	// Spare nodes idle for the delay are turned off; the others stay
	// lendable.
	kept := a.spareInfer[:0]
	for _, i := range a.spareInfer {
		if !a.t.Before(a.idleSince[i].Add(a.cfg.Autoscale.ScaleDownDelay)) {
			if err := a.off(i); err != nil {
				return err
			}
			continue
		}
		kept = append(kept, i)
	}
	a.spareInfer = kept
	return nil
}

// training asks the training scaler for a plan and applies it.
func (a *autoscaler) training(pending map[string]*tjob) error {
	per := a.cfg.GPUsPerNode
	var nodes []autoscale.Node
	room := 0
	for i := range a.owner {
		if a.power[i] == powerOff {
			if a.mayBoot(i, poolTrain) {
				room++
			}
			continue
		}
		if a.owner[i] != poolTrain {
			continue
		}
		if a.draining[i] != "" {
			continue // leaving the pool
		}
		n := autoscale.Node{Name: a.names[i], Pool: poolTrain, FreeGPUs: per - a.used[i], Booting: a.power[i] == powerBooting, Reserved: a.reserved[i]}
		if n.Booting {
			n.FreeGPUs = per
		} else if a.used[i] == 0 {
			if a.idleSince[i].IsZero() {
				a.idleSince[i] = a.t
			}
			n.IdleSince = a.idleSince[i]
		} else {
			a.idleSince[i] = time.Time{}
		}
		nodes = append(nodes, n)
	}
	if a.variant == Federated {
		room += len(a.spareInfer)
	}
	jobs := make([]*tjob, 0, len(pending))
	for _, j := range pending {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(x, y *tjob) int {
		if c := cmp.Compare(x.w.Submit, y.w.Submit); c != 0 {
			return c
		}
		return cmp.Compare(x.w.ID, y.w.ID)
	})
	demand := make([]autoscale.Demand, len(jobs))
	for k, j := range jobs {
		demand[k] = autoscale.Demand{Job: j.w.ID, Request: request(j.gpus, per)}
	}
	as := a.cfg.Autoscale
	pool := autoscale.Pool{Name: poolTrain, GPUModel: "H100", GPUsPerNode: per, Max: len(nodes) + room, CostPerNodeHour: float64(per)}
	plan, err := as.Training(a.t, autoscale.Config{Pools: []autoscale.Pool{pool}, Policy: as.Policy, ScaleDownDelay: as.ScaleDownDelay}, nodes, demand)
	if err != nil {
		return fmt.Errorf("hybrid: %s: training autoscaler: %w", a.variant, err)
	}
	idx := map[string]int{}
	for i, n := range a.names {
		idx[n] = i
	}
	for _, name := range plan.Down {
		i, ok := idx[name]
		if !ok || a.owner[i] != poolTrain || a.power[i] == powerOff || a.draining[i] != "" || a.used[i] > 0 || a.reserved[i] {
			return fmt.Errorf("hybrid: %s: training autoscaler scales down %q, not an idle training node", a.variant, name)
		}
		if err := a.off(i); err != nil {
			return err
		}
	}
	for _, up := range plan.Up {
		if up.Pool != poolTrain || up.Nodes < 0 {
			return fmt.Errorf("hybrid: %s: training autoscaler scales up %d nodes of pool %q", a.variant, up.Nodes, up.Pool)
		}
		k := up.Nodes
		// Federated: borrow the inference pool's spare nodes first, the
		// last of its order first.
		for k > 0 && a.variant == Federated && len(a.spareInfer) > 0 {
			i := a.spareInfer[len(a.spareInfer)-1]
			a.spareInfer = a.spareInfer[:len(a.spareInfer)-1]
			if err := a.move(i, poolTrain); err != nil {
				return err
			}
			k--
		}
		a.boot(poolTrain, k)
	}
	return nil
}
