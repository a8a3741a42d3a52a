package kube

import (
	"context"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// RunningNow lists the gangs that have pods bound now, with the members
// they are bound on: the truth the Runner reads after a bind of unknown
// outcome (its call timed out or was cut short), and to find ghosts (see
// backends.RunningReporter). It acts on nothing.
//
// A pod counts as bound when berth's own bind of it succeeded (its Binding
// was accepted: the informer may not show it yet) or when the informer's
// cache shows it on a node (a bind that committed after its call gave up,
// or another scheduler's), and it has not ended or been deleted by berth.
// Members come from berth's record of the bind, else from the pod: its node
// and the GPUs of its AnnotationGPUs (whole GPUs; a pod without the
// annotation is listed with its node and GPU count only). Service replicas
// are not listed.
func (b *Backend) RunningNow(ctx context.Context) ([]backends.RunningJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b.podList == nil {
		return nil, ErrNotStarted
	}
	type podAt struct {
		ref    podRef
		member engine.Member
		booked bool // berth's record of the bind
	}
	b.mu.Lock()
	ids := make([]string, 0, len(b.jobs))
	pods := map[string][]podAt{}
	for id, j := range b.jobs {
		if j.foreign || isReplicaID(id) && b.svc != nil && b.svc.reps[id] != nil {
			continue
		}
		var ps []podAt
		for i, pr := range j.pods {
			if b.deleted[pr.uid] {
				continue
			}
			m, ok := j.bound[i]
			ps = append(ps, podAt{ref: pr, member: m, booked: ok})
		}
		if len(ps) > 0 {
			ids = append(ids, id)
			pods[id] = ps
		}
	}
	b.mu.Unlock()
	slices.Sort(ids)

	var out []backends.RunningJob
	for _, id := range ids {
		var members []engine.Member
		for _, pa := range pods[id] {
			p, err := b.podList.Pods(pa.ref.ns).Get(pa.ref.name)
			switch {
			case apierrors.IsNotFound(err):
				if pa.booked {
					members = append(members, pa.member) // bound, not in the cache yet
				}
				continue
			case err != nil:
				return nil, err
			case p.UID != pa.ref.uid || !podLive(p) || p.DeletionTimestamp != nil:
				continue // another pod of that name, ended, or going
			case pa.booked:
				members = append(members, pa.member)
			case p.Spec.NodeName != "":
				m := engine.Member{Group: pa.ref.group, Node: p.Spec.NodeName}
				if gpus, ok := parseGPUs(p.Annotations[AnnotationGPUs]); ok && len(gpus) == pa.ref.d.gpus {
					m.GPUs = gpus
				} else {
					m.GPUs = make([]int, pa.ref.d.gpus) // the count, indices unknown
				}
				members = append(members, m)
			}
		}
		if len(members) > 0 {
			out = append(out, backends.RunningJob{Job: &queue.Job{ID: id}, Members: members})
		}
	}
	return out, nil
}

// parseGPUs reads a whole-GPU AnnotationGPUs value ("0,3"); a fractional
// one ("2/0") or anything else is not.
func parseGPUs(s string) ([]int, bool) {
	if s == "" || strings.Contains(s, "/") {
		return nil, false
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || g < 0 {
			return nil, false
		}
		out = append(out, g)
	}
	return out, true
}
