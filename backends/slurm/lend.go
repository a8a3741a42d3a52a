package slurm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/topo"
)

// LendReason is the Reason berth gives SLURM for a node it drains to
// lend it to another system (backends/federation).
const LendReason = "berth-federation"

// LendNode drains node in SLURM (scontrol update State=DRAIN): nothing new
// starts there, what runs keeps running. It implements
// federation.NodeLender.
func (b *Backend) LendNode(ctx context.Context, node string) error {
	if err := checkNode(node); err != nil {
		return err
	}
	_, err := b.cli.run(ctx, "scontrol", "update", "NodeName="+node, "State=DRAIN", "Reason="+LendReason)
	return err
}

// ReclaimNode resumes a drained node (scontrol update State=RESUME). A
// node that is not drained is left alone (SLURM refuses to resume it),
// so ReclaimNode is idempotent; a down node stays down.
func (b *Backend) ReclaimNode(ctx context.Context, node string) error {
	if err := checkNode(node); err != nil {
		return err
	}
	rec, err := b.nodeRec(ctx, node)
	if err != nil {
		return err
	}
	if nodeState(rec) != topo.Draining {
		return nil
	}
	_, err = b.cli.run(ctx, "scontrol", "update", "NodeName="+node, "State=RESUME")
	if err == nil {
		b.noteResumed(node, time.Now())
	}
	return err
}

// RequeueJob requeues a running job of berth's (scontrol requeue), as an
// administrator would: the event stream then reports it finished and
// submitted again, and hands it back to its managed partition. It
// implements federation.Requeuer (Config.PreemptOnReclaim). A job that is
// not running under berth is refused (backends.ErrRefused).
func (b *Backend) RequeueJob(ctx context.Context, job string) error {
	b.mu.Lock()
	sid := b.slurmIDLocked(job)
	t := b.jobs[job]
	running := t != nil && t.state == inRunning
	b.mu.Unlock()
	if !running {
		return fmt.Errorf("%w: job %s is not running under berth", backends.ErrRefused, job)
	}
	if err := checkJobID(sid); err != nil {
		return fmt.Errorf("%w: %w", backends.ErrRefused, err)
	}
	if _, err := b.cli.run(ctx, "scontrol", "requeue", sid); err != nil {
		return refusal(err)
	}
	return nil
}

// ResumeGrace is how long after berth resumed a node (ReclaimNode) a
// NOT_RESPONDING report of it is taken for a node still coming back
// (draining: nothing new starts there, its jobs are kept) rather than for
// a lost one (down: its jobs requeued). slurmctld can flag a node that
// was drained for a while NOT_RESPONDING for a few seconds after a
// resume, until slurmd's next registration.
const ResumeGrace = 30 * time.Second

func (b *Backend) noteResumed(node string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.resumed == nil {
		b.resumed = map[string]time.Time{}
	}
	b.resumed[node] = at
}

// nodeStateAt is nodeState with ResumeGrace: a node berth resumed less
// than ResumeGrace before now that SLURM reports only NOT_RESPONDING (its
// base state neither down nor failed) is draining, not down. b.mu held.
func (b *Backend) nodeStateAt(r nodeRec, now time.Time) topo.NodeState {
	st := nodeState(r)
	if st != topo.Down {
		return st
	}
	at, ok := b.resumed[r.Name]
	if !ok {
		return st
	}
	if now.Sub(at) >= ResumeGrace {
		delete(b.resumed, r.Name)
		return st
	}
	base := strings.ToLower(r.State)
	if strings.HasPrefix(base, "down") || strings.HasPrefix(base, "fail") || base == "unknown" {
		return st
	}
	return topo.Draining
}

// NodeStatus reads node from sinfo: schedulable when neither drained nor
// down, busy while jobs are allocated on it (allocated, mixed or
// completing).
func (b *Backend) NodeStatus(ctx context.Context, node string) (federation.NodeStatus, error) {
	if err := checkNode(node); err != nil {
		return federation.NodeStatus{}, err
	}
	rec, err := b.nodeRec(ctx, node)
	if err != nil {
		return federation.NodeStatus{}, err
	}
	b.mu.Lock()
	st := b.nodeStateAt(rec, time.Now())
	b.mu.Unlock()
	return federation.NodeStatus{Schedulable: st == topo.Ready, Busy: nodeBusy(rec)}, nil
}

func (b *Backend) nodeRec(ctx context.Context, node string) (nodeRec, error) {
	out, err := b.cli.run(ctx, "sinfo", "--json")
	if err != nil {
		return nodeRec{}, err
	}
	nodes, err := parseSinfo(out)
	if err != nil {
		return nodeRec{}, err
	}
	for _, n := range nodes {
		if n.Name == node {
			return n, nil
		}
	}
	return nodeRec{}, fmt.Errorf("%w: no node %q in sinfo", ErrBadArgument, node)
}

// nodeBusy: SLURM has jobs on the node (its base state, or a COMPLETING
// flag while a job's epilog runs).
func nodeBusy(r nodeRec) bool {
	st := strings.ToLower(r.State)
	flags := strings.ToUpper(strings.Join(r.StateFlags, ","))
	return strings.HasPrefix(st, "alloc") || strings.HasPrefix(st, "mix") || strings.HasPrefix(st, "completing") ||
		strings.Contains(flags, "COMPLETING")
}

var (
	_ federation.NodeLender = (*Backend)(nil)
	_ federation.Requeuer   = (*Backend)(nil)
)
