package engine

import (
	"fmt"
	"maps"
	"slices"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Partitions are carried by node labels: every node of partition P gets
// the label partitionLabel(P)="true" when the cluster is built, and a job
// placed in P has that label in the selector of each of its groups (its
// engine copy of the request: queue.Job is not changed). Every placement
// path (now, reservations, preemption, elastic growth) then stays inside
// the partition, and jobs that name no partition pay nothing.

// checkPartitions resolves the partitions j may run in (indexes into
// site.parts, highest tier first) and checks its access and limits
// against each. A job naming several partitions is refused only when every
// one refuses it (the error names the first); the partitions that refuse
// it are left out.
func (e *Engine) checkPartitions(j *queue.Job) ([]int, error) {
	st := e.site
	names := j.Partitions
	if len(names) == 0 {
		if st.deflt < 0 {
			return nil, nil
		}
		names = []string{st.parts[st.deflt].Name}
	}
	var (
		out   []int
		first error
	)
	for _, n := range names {
		i, ok := st.partIdx[n]
		var err error
		if !ok {
			err = &PartitionError{Job: j.ID, Partition: n, Rule: "unknown", Msg: "no such partition"}
		} else {
			err = admitTo(&st.parts[i], j)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return nil, first
	}
	slices.Sort(out) // parts are sorted by tier
	return out, nil
}

// admitTo checks one partition's access lists and limits.
func admitTo(p *Partition, j *queue.Job) error {
	refuse := func(rule, format string, args ...any) error {
		return &PartitionError{Job: j.ID, Partition: p.Name, Rule: rule, Msg: fmt.Sprintf(format, args...)}
	}
	if len(p.AllowAccounts) > 0 && !slices.Contains(p.AllowAccounts, j.AccountName()) {
		return refuse("access-account", "account %q may not submit", j.AccountName())
	}
	if len(p.AllowQueues) > 0 && !slices.Contains(p.AllowQueues, j.Queue) {
		return refuse("access-queue", "queue %q may not submit", j.Queue)
	}
	if p.MaxGPUsPerJob > 0 {
		if n := j.Request.GPUs(); n > p.MaxGPUsPerJob {
			return refuse("max-gpus-per-job", "asks for %d GPUs, at most %d", n, p.MaxGPUsPerJob)
		}
	}
	if p.MaxRuntime > 0 && j.RuntimeLimit > p.MaxRuntime {
		return refuse("max-runtime", "runtime limit %v is over %v", j.RuntimeLimit, p.MaxRuntime)
	}
	if p.MaxNodes > 0 {
		n := 0
		for _, g := range j.Request.Groups {
			n += g.Members
		}
		if !j.Elastic.IsZero() {
			n += j.Elastic.MaxMembers - j.Request.Groups[0].Members
		}
		if n > p.MaxNodes {
			return refuse("max-nodes", "%d members (one node each at most), at most %d", n, p.MaxNodes)
		}
	}
	return nil
}

// withPartition returns r with the partition's label in each group's
// selector (fresh maps; r is not changed).
func withPartition(r gang.Request, name string) gang.Request {
	r.Groups = slices.Clone(r.Groups)
	for i := range r.Groups {
		sel := maps.Clone(r.Groups[i].Selector)
		if sel == nil {
			sel = map[string]string{}
		}
		sel[partitionLabel(name)] = "true"
		r.Groups[i].Selector = sel
	}
	return r
}

// labelPartitions gives each node of nodes (a copy of the spec being
// built) the labels of its partitions.
func (e *Engine) labelPartitions(spec *topo.Spec) {
	parts := e.cfg.Site.Partitions
	if len(parts) == 0 {
		return
	}
	for i := range spec.Nodes {
		n := &spec.Nodes[i]
		var labels map[string]string
		for pi := range parts {
			if inPartition(spec, n, &parts[pi]) {
				if labels == nil {
					labels = maps.Clone(n.Labels)
					if labels == nil {
						labels = map[string]string{}
					}
				}
				labels[partitionLabel(parts[pi].Name)] = "true"
			}
		}
		if labels != nil {
			n.Labels = labels
		}
	}
}

func inPartition(spec *topo.Spec, n *topo.NodeSpec, p *Partition) bool {
	if slices.Contains(p.Nodes, n.Name) {
		return true
	}
	if len(p.Selector) > 0 {
		all := true
		for k, v := range p.Selector {
			if n.Labels[k] != v {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	for _, d := range p.Domains {
		if l := slices.Index(spec.Levels, d.Level); l >= 0 && l < len(n.Domains) && n.Domains[l] == d.Name {
			return true
		}
	}
	return false
}

// pickPartition chooses, for a job that may run in several partitions,
// the first (by tier) in which it fits now with the first p reservations
// held; when it fits in none, the first. It sets js.req to that
// partition's request.
func (e *Engine) pickPartition(js *job, p int) {
	sj := js.site
	for k := range sj.parts {
		js.req, js.shape = sj.reqs[k], sj.shapes[k]
		if _, _, ok := e.tryPlace(js, p); ok {
			sj.cur = k
			return
		}
		if js.badOf != nil {
			break
		}
	}
	sj.cur = 0
	js.req, js.shape = sj.reqs[0], sj.shapes[0]
}

// partShapeID is the failure memo's shape ID for a request of shape base
// restricted to a partition: the memo's monotony (free GPUs only shrink
// during a walk) holds inside a partition as in the whole cluster. 0 (a
// request the memo does not cover) stays 0.
func (e *Engine) partShapeID(base uint64, part string) uint64 {
	if base == 0 {
		return 0
	}
	key := fmt.Sprintf("%d@%s", base, part)
	id, ok := e.shapes[key]
	if !ok {
		id = uint64(len(e.shapes) + 1)
		e.shapes[key] = id
	}
	return id
}

// reserveIn is reserve for a job that may run in several partitions: the
// earliest reservation over them (on a tie, the higher tier); the job's
// current partition becomes that one. Other jobs: reserve.
func (e *Engine) reserveIn(js *job) (*resv, bool) {
	sj := js.site
	if sj == nil || len(sj.parts) < 2 {
		return e.reserve(js)
	}
	var best *resv
	bestK := 0
	for k := range sj.parts {
		js.req, js.shape = sj.reqs[k], sj.shapes[k]
		if r, ok := e.reserve(js); ok && (best == nil || r.start.Before(best.start)) {
			best, bestK = r, k
		}
	}
	sj.cur = bestK
	js.req, js.shape = sj.reqs[bestK], sj.shapes[bestK]
	return best, best != nil
}
