package fgd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Ways a run places its pods (Config.Via).
const (
	// ViaPlacer places each pod with a gang.Placer on the run's snapshot.
	ViaPlacer = "placer"
	// ViaEngine submits each pod to an engine.Engine configured with the
	// policy's scorer (engine.Config.Scorer) and runs one cycle per
	// arrival.
	ViaEngine = "engine"
)

// engineQueue is the one queue of an engine run.
const engineQueue = "openb"

// engineEpoch is the engine clock of the first arrival; arrival i comes i
// seconds later (time only orders the events here).
var engineEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// runEngine replays one (policy, seed) run through the engine, as an
// embedding program would: the engine is configured with the policy's
// scorer by name (gang.ScorerSpec, plain data), each pod is submitted as
// a one-member job and one cycle runs; a bind is applied (Advance), a pod
// left pending is cancelled (the experiment drops what does not fit on
// arrival), and so is a pod the engine refuses on arrival because it can
// never fit (engine.ErrNeverFits: no node of its GPU models has its CPU,
// say), which the placer simply fails. Pods never finish.
//
// The run's node ranks are the engine's tie-break through the node order:
// the cluster is built with the nodes in rank order, so "the lower node
// ID" of the engine is "the lower rank" of the procedure. The scores do
// not depend on node IDs, so the deterministic policies make the same
// choices as through gang.Placer. Random draws from a stream of its own
// (ScorerSpec.Seed = the seed), not the experiment's, so its numbers are
// another sample of the same distribution. Clustering is refused by the
// engine (it needs bind reports). Curve.Frag is not computed.
func runEngine(ctx context.Context, p *prepared, policy string, seed int64, tune float64) (Curve, error) {
	rng := rand.New(rand.NewSource(seed))
	order, rank := arrivals(rng, p, tune)
	spec := p.spec
	spec.Nodes = make([]topo.NodeSpec, len(p.spec.Nodes))
	for j, r := range rank {
		spec.Nodes[r] = p.spec.Nodes[j]
	}
	sc := p.scorerSpec(policy)
	sc.Seed = seed
	e, err := engine.New(engine.Config{
		Cluster: spec,
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: engineQueue}}},
		Start:   engineEpoch,
		MIG:     engine.MIGConfig{Disabled: true},
		Scorer:  sc,
		// The run reads no View: each cycle books in place instead of
		// copying the pages it writes (engine.Config.BareViews).
		BareViews: true,
	})
	if err != nil {
		return Curve{}, fmt.Errorf("%w: %s: %w", ErrConfig, policy, err)
	}
	modelOf := make(map[string]string, len(spec.Nodes))
	for _, n := range spec.Nodes {
		modelOf[n.Name] = n.GPUModel
	}
	capacity := int64(p.cluster.NumGPUs()) * gang.FullMilli
	div := float64(capacity) / 100
	values := make([]float64, len(order))
	bins := make([]int, len(order))
	var arrived, allocated int64
	cv := Curve{Policy: policy, Seed: seed, Pods: len(order), FirstFail: len(order)}
	// The run's jobs and IDs in two arrays instead of small objects per
	// pod (the engine keeps each job until the run ends: pods never
	// finish). A job's one group is its pod's in p.groups, shared by
	// every arrival of the pod and every run: the engine does not write
	// requests (it clones one to change it).
	jobs := make([]queue.Job, len(order))
	ids := jobIDs(len(order))
	for i, pi := range order {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return Curve{}, err
			}
		}
		pd := &p.pods[pi]
		at := engineEpoch.Add(time.Duration(i) * time.Second)
		id := ids[i]
		j := &jobs[i]
		*j = queue.Job{ID: id, Queue: engineQueue, Submit: at, Request: gang.Request{Groups: p.groups[pi : pi+1 : pi+1]}}
		if err := e.Step(engine.Submitted(at, j)); errors.Is(err, engine.ErrNeverFits) {
			// No node of the pod's models could ever hold it (its CPU,
			// say): the engine refuses it on arrival, the placer fails
			// it; either way it is dropped.
			cv.FirstFail = min(cv.FirstFail, i)
			arrived += pd.demand
			values[i] = round2(float64(allocated) / div)
			bins[i] = int(math.RoundToEven(float64(arrived) / div))
			continue
		} else if err != nil {
			return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: %w", policy, seed, i, err)
		}
		rd := e.Ready()
		placed := false
		for _, b := range rd.Binds {
			if b.Job != id || len(rd.Binds) != 1 {
				return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: the engine bound %d jobs (%s first)", policy, seed, i, len(rd.Binds), b.Job)
			}
			placed = true
			if pd.group.GPUModel == "" && len(pd.group.GPUModels) == 0 {
				continue // any model: no member's node to look up
			}
			for _, m := range b.Members {
				if !modelAllowed(&pd.group, modelOf[m.Node]) {
					cv.ModelViolations++
				}
			}
		}
		if len(rd.Rejected) > 0 {
			return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: rejected: %v", policy, seed, i, rd.Rejected[0])
		}
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: %w", policy, seed, i, err)
		}
		if placed {
			cv.Placed++
			allocated += pd.demand
		} else if err := e.Step(engine.Cancelled(at, id)); err != nil {
			return Curve{}, fmt.Errorf("fgd: %s seed %d pod %d: cancel: %w", policy, seed, i, err)
		} else {
			cv.FirstFail = min(cv.FirstFail, i)
		}
		arrived += pd.demand
		values[i] = round2(float64(allocated) / div)
		bins[i] = int(math.RoundToEven(float64(arrived) / div))
	}
	cv.ArrivedPct = float64(arrived) / div
	cv.Columns = binColumns(values, bins, int(math.Round(tune*100)))
	return cv, nil
}

// jobIDs returns strconv.Itoa(i) for i in 0..n-1, substrings of one
// string.
func jobIDs(n int) []string {
	var buf []byte
	end := make([]int, n)
	for i := range n {
		buf = strconv.AppendInt(buf, int64(i), 10)
		end[i] = len(buf)
	}
	all := string(buf)
	ids := make([]string, n)
	for i := range n {
		start := 0
		if i > 0 {
			start = end[i-1]
		}
		ids[i] = all[start:end[i]]
	}
	return ids
}
