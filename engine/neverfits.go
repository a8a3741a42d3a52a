package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// ErrNeverFits is wrapped by *NeverFitsError: a job that no placement
// could hold even on the whole cluster, every node up and idle. It is
// rejected at submission instead of waiting forever (and, without
// backfill, blocking every job behind it).
var ErrNeverFits = errors.New("engine: job can never fit the cluster")

// NeverFitsError names the limit a job exceeds. The check is a necessary
// condition: a job it passes may still never fit (a placement too
// fragmented by other constraints is reported by the cycle instead), but
// a job it rejects cannot fit. It counts every node of the cluster as
// configured, whatever its state (a down node may come back); jobs of an
// empty cluster are not checked (nodes may be added later), nor
// fractional and MIG members.
type NeverFitsError struct {
	Job   string
	Group int // index of the group at fault; -1 for the whole request
	// Limit is what is exceeded: "GPUs" (the cluster's total), "GPUs per
	// node", "model", "CPU per node", "memory per node" or "level" (the
	// Required level's largest domain). Selectors are not checked: node
	// labels change at run time.
	Limit string
	Need  int64
	Have  int64
	Msg   string
}

func (e *NeverFitsError) Error() string {
	where := ""
	if e.Group >= 0 {
		where = fmt.Sprintf(" group %d", e.Group)
	}
	return fmt.Sprintf("%v: job %q%s: %s: %s", ErrNeverFits, e.Job, where, e.Limit, e.Msg)
}

func (e *NeverFitsError) Unwrap() error { return ErrNeverFits }

// neverFits checks r (the request as first placed: elastic jobs at their
// minimum) against every node of the spec.
func (e *Engine) neverFits(j *queue.Job, r *gang.Request) error {
	nodes := e.spec.Nodes
	if len(nodes) == 0 {
		return nil
	}
	lvl := -1
	if r.Required != "" {
		for i, l := range e.spec.Levels {
			if l == r.Required {
				lvl = i
			}
		}
	}
	whole := func(n *topo.NodeSpec) bool { return !n.MIG && n.Sharing.Mode == mig.Exclusive }
	total, need := 0, 0
	for i := range nodes {
		if whole(&nodes[i]) {
			total += nodes[i].GPUs
		}
	}
	for gi := range r.Groups {
		g := &r.Groups[gi]
		if g.GPUsPerMember <= 0 || g.GPUMilli > 0 || g.MIGProfile != "" || g.Members <= 0 {
			continue
		}
		need += g.Members * g.GPUsPerMember
		bad := func(limit string, need, have int64, format string, args ...any) error {
			return &NeverFitsError{Job: j.ID, Group: gi, Limit: limit, Need: need, Have: have, Msg: fmt.Sprintf(format, args...)}
		}
		// Filter the nodes one constraint at a time, to name the first
		// that leaves none.
		var maxGPUs, maxCPU, maxMem int64
		modelSeen := false
		var perDomain map[string]int
		if lvl >= 0 {
			perDomain = map[string]int{}
		}
		best, inCluster := 0, 0
		for i := range nodes {
			n := &nodes[i]
			if !whole(n) {
				continue
			}
			if !modelIn(g, n.GPUModel) {
				continue
			}
			modelSeen = true
			maxGPUs = max(maxGPUs, int64(n.GPUs))
			if n.GPUs < g.GPUsPerMember {
				continue
			}
			if n.CPUMilli > 0 {
				maxCPU = max(maxCPU, n.CPUMilli)
			}
			if n.MemoryMiB > 0 {
				maxMem = max(maxMem, n.MemoryMiB)
			}
			if (n.CPUMilli > 0 && g.CPUMilli > n.CPUMilli) || (n.MemoryMiB > 0 && g.MemoryMiB > n.MemoryMiB) {
				continue
			}
			fit := n.GPUs / g.GPUsPerMember
			if n.CPUMilli > 0 && g.CPUMilli > 0 {
				fit = min(fit, int(n.CPUMilli/g.CPUMilli))
			}
			if n.MemoryMiB > 0 && g.MemoryMiB > 0 {
				fit = min(fit, int(n.MemoryMiB/g.MemoryMiB))
			}
			if lvl < 0 {
				// One domain, the cluster: no map (every submission of
				// a new shape comes here).
				inCluster += fit
				best = inCluster
				continue
			}
			key := ""
			if lvl < len(n.Domains) {
				key = strings.Join(n.Domains[:lvl+1], "\x00")
			}
			perDomain[key] += fit
			best = max(best, perDomain[key])
		}
		switch {
		case !modelSeen && len(g.GPUModels) > 1:
			return bad("model", 0, 0, "no node has whole GPUs of a model in %v (not in MIG mode or shared)", g.GPUModels)
		case !modelSeen && len(g.Models()) > 0:
			return bad("model", 0, 0, "no node has whole GPUs of model %q (not in MIG mode or shared)", g.Models()[0])
		case !modelSeen:
			return bad("GPUs per node", int64(g.GPUsPerMember), 0, "no node has whole GPUs (every GPU is in MIG mode or shared)")
		case maxGPUs < int64(g.GPUsPerMember):
			return bad("GPUs per node", int64(g.GPUsPerMember), maxGPUs, "a member needs %d GPUs on one node, the largest node has %d", g.GPUsPerMember, maxGPUs)
		case best == 0 && g.CPUMilli > 0 && maxCPU > 0 && g.CPUMilli > maxCPU:
			return bad("CPU per node", g.CPUMilli, maxCPU, "a member needs %d milli-CPU, the largest node has %d", g.CPUMilli, maxCPU)
		case best == 0 && g.MemoryMiB > 0 && maxMem > 0 && g.MemoryMiB > maxMem:
			return bad("memory per node", g.MemoryMiB, maxMem, "a member needs %d MiB, the largest node has %d", g.MemoryMiB, maxMem)
		case best < g.Members && lvl >= 0:
			return bad("level", int64(g.Members), int64(best), "%d members must share one %q domain, the largest holds %d", g.Members, r.Required, best)
		case best < g.Members && lvl < 0:
			return bad("GPUs", int64(g.Members), int64(best), "%d members of %d GPUs; the cluster's nodes hold at most %d such members", g.Members, g.GPUsPerMember, best)
		}
	}
	if need > total {
		return &NeverFitsError{Job: j.ID, Group: -1, Limit: "GPUs", Need: int64(need), Have: int64(total),
			Msg: fmt.Sprintf("needs %d whole GPUs, the cluster has %d", need, total)}
	}
	return nil
}

// checkFits is neverFits on the request as first placed (elastic jobs at
// their minimum). Requests the queue would refuse pass, for the queue's
// own error.
func (e *Engine) checkFits(j *queue.Job) error {
	if j == nil || len(j.Request.Groups) == 0 {
		return nil
	}
	r := j.Request
	if !j.Elastic.IsZero() && j.Elastic.MinMembers > 0 {
		r.Groups = append([]gang.Group(nil), r.Groups...)
		r.Groups[0].Members = j.Elastic.MinMembers
	}
	return e.neverFitsCached(j, &r)
}

// modelIn reports whether group g accepts a node of GPU model m (any model
// of its set, case aside, as the spec's names are compared here).
func modelIn(g *gang.Group, m string) bool {
	ms := g.Models()
	if len(ms) == 0 {
		return true
	}
	for _, x := range ms {
		if strings.EqualFold(x, m) {
			return true
		}
	}
	return false
}
