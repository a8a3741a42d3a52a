package slurm

import (
	"context"
	"fmt"
	"strings"

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
	return err
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
	return federation.NodeStatus{Schedulable: nodeState(rec) == topo.Ready, Busy: nodeBusy(rec)}, nil
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

var _ federation.NodeLender = (*Backend)(nil)
