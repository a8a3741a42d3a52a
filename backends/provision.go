package backends

import (
	"context"
	"time"

	"github.com/berthsched/berth/autoscale"
)

// Provisioner is a backend that can add and remove nodes: node
// autoscaling (docs/autoscaling.md). The Runner, given
// RunnerConfig.Autoscale, plans with package autoscale from the engine's
// view and the backend's pools, and applies the plan through these calls.
// Nodes asked for come into the engine as the backend's own node events
// (engine.NodeAdded, or NodeChanged to Ready) once the system has them
// up, as any node would; a provisioning that failed is reported by
// Provisioning, and its pool backs off.
type Provisioner interface {
	// ScaleUp asks the system for up.Nodes nodes of up.Pool in up.Domain
	// (all or nothing where the system can say so: a Kubernetes
	// ProvisioningRequest of class best-effort-atomic-scale-up; SLURM
	// powers nodes up one by one). A nil error means asked, not up.
	ScaleUp(ctx context.Context, up autoscale.ScaleUp) error
	// ScaleDown releases an idle node (SLURM POWER_DOWN, a cloud node
	// deleted). The Runner cordons it in the engine first; the backend's
	// node event (removed, or down) follows.
	ScaleDown(ctx context.Context, node string) error
	// Provisioning reports the pools' nodes as the system sees them now:
	// every node of a pool, up or booting (Node.FreeGPUs, IdleSince and
	// Reserved are the Runner's to fill from the engine), and the
	// provisionings that failed since the last call.
	Provisioning(ctx context.Context) (ProvisionState, error)
}

// ProvisionState is a Provisioner's report.
type ProvisionState struct {
	Nodes  []autoscale.Node
	Failed []ProvisionFailure
}

// ProvisionFailure is a scale-up the system could not make (a
// ProvisioningRequest Failed or whose capacity was revoked, a SLURM node
// whose resume timed out).
type ProvisionFailure struct {
	At     time.Time
	Pool   string
	Domain string
	Nodes  int
	Reason string
}
