package federation

import (
	"context"
	"errors"
)

// NodeLender is the optional interface a member backend implements so
// that the federation can hand one of its nodes to another system and take
// it back. backends/slurm implements it with scontrol (State=DRAIN /
// State=RESUME), backends/kube by cordoning and uncordoning the Node.
// Node names are the member's own (not the federation's "pool/node").
// Methods are called from the federation's rebalancing goroutine, and
// may be called while the Runner calls the Actuator.
type NodeLender interface {
	// LendNode makes node unschedulable in this system: nothing new
	// starts on it; what runs there keeps running (SLURM drain, Kubernetes
	// cordon). It is idempotent.
	LendNode(ctx context.Context, node string) error
	// ReclaimNode makes node schedulable again in this system (SLURM
	// resume, Kubernetes uncordon). It is idempotent.
	ReclaimNode(ctx context.Context, node string) error
	// NodeStatus reports whether node is schedulable in this system and
	// whether anything still runs on it.
	NodeStatus(ctx context.Context, node string) (NodeStatus, error)
}

// Requeuer is the optional interface a member backend implements so that
// a reclaim can empty a busy node (Config.PreemptOnReclaim):
// backends/slurm implements it with scontrol requeue.
type Requeuer interface {
	// RequeueJob stops the running job (the member's own job ID) and puts
	// it back in its queue in this system, as an administrator's requeue
	// does: the member's event stream then reports it finished and
	// submitted again, so the engine places it anew.
	RequeueJob(ctx context.Context, job string) error
}

// NodeStatus is a node as one member system sees it.
type NodeStatus struct {
	// Schedulable: the system may start new work on the node (not
	// drained, cordoned or down).
	Schedulable bool
	// Busy: work of this system still runs on the node.
	Busy bool
}

// Errors of the federation; match with errors.Is.
var (
	// ErrInvalidConfig: a Config field is invalid (no pools, a duplicate
	// or empty pool name, a bad quota).
	ErrInvalidConfig = errors.New("federation: invalid config")
	// ErrNoLender: a node shared by two pools belongs to a member that
	// does not implement NodeLender, so ownership cannot be enforced.
	ErrNoLender = errors.New("federation: member cannot lend nodes")
	// ErrMove: a node move failed; the error says at which step and
	// whether it was rolled back.
	ErrMove = errors.New("federation: node move failed")
	// ErrDrainTimeout: a lent node was still busy after DrainTimeout; the
	// move was rolled back.
	ErrDrainTimeout = errors.New("federation: drain timed out")
	// ErrUnknownNode: a node name that no pool knows, or that is not in
	// "pool/node" form.
	ErrUnknownNode = errors.New("federation: unknown node")
	// ErrUnknownJob: Cancel of a job the federation was not given with
	// Submit (or that has ended).
	ErrUnknownJob = errors.New("federation: unknown job")
)
