package kube

import (
	"errors"
	"fmt"
	"time"

	"github.com/berthsched/berth/queue"
)

// Names read from pods and nodes. They follow the conventions Kubernetes
// users already know (the device plugin, GPU feature discovery, the
// coscheduling plugin, Kueue); the berth.dev/ ones are berth's own.
const (
	// DefaultSchedulerName is the spec.schedulerName of the pods berth
	// schedules when Config.SchedulerName is empty.
	DefaultSchedulerName = "berth"
	// ResourceGPU is the device plugin's whole-GPU resource.
	ResourceGPU = "nvidia.com/gpu"
	// ResourceMIGPrefix starts the device plugin's MIG resources (mixed
	// strategy), e.g. nvidia.com/mig-1g.10gb.
	ResourceMIGPrefix = "nvidia.com/mig-"
	// LabelGPUProduct is GPU feature discovery's product label, e.g.
	// NVIDIA-H100-80GB-HBM3.
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelGPUCount is GPU feature discovery's count of physical GPUs; on
	// MIG nodes it says how many GPUs the MIG instances are spread over.
	LabelGPUCount = "nvidia.com/gpu.count"
	// LabelGPUMemory is GPU feature discovery's GPU memory in MiB.
	LabelGPUMemory = "nvidia.com/gpu.memory"
	// LabelPodGroup names the coscheduling PodGroup of a pod; its
	// spec.minMember is the gang size.
	LabelPodGroup = "scheduling.x-k8s.io/pod-group"
	// KueuePodGroupName (label or annotation) and KueuePodGroupTotalCount
	// (annotation) are Kueue's plain-pod group conventions.
	KueuePodGroupName       = "kueue.x-k8s.io/pod-group-name"
	KueuePodGroupTotalCount = "kueue.x-k8s.io/pod-group-total-count"
	// KueueRequiredTopology and KueuePreferredTopology carry a topology
	// level (a node label key of Config.Levels, or a level name). Unlike
	// Kueue, berth honours both on the same pod set: all members inside one
	// domain of the required level, packed into the fewest domains of the
	// preferred one.
	KueueRequiredTopology  = "kueue.x-k8s.io/podset-required-topology"
	KueuePreferredTopology = "kueue.x-k8s.io/podset-preferred-topology"
	// LabelQueue names the berth queue of a pod (else its namespace, when
	// Config.Queues lists it, else Config.DefaultQueue).
	LabelQueue = "berth.dev/queue"
	// AnnotationRuntimeEstimate is the expected runtime (a Go duration,
	// "90m"): it makes estimated starts and backfill possible.
	// spec.activeDeadlineSeconds is the runtime limit.
	AnnotationRuntimeEstimate = "berth.dev/runtime-estimate"
	// AnnotationPreemptible set to "false" protects a pod's job from
	// preemption; berth's pods are preemptible by default, pods of other
	// schedulers never.
	AnnotationPreemptible = "berth.dev/preemptible"
	// AnnotationMinRuntime (a Go duration) protects a job from preemption
	// for that long after it starts.
	AnnotationMinRuntime = "berth.dev/min-runtime"
	// AnnotationGPUs is written by berth on the pods it binds (through the
	// Binding, with the bind): the node-local GPU indices the engine booked
	// for the pod's member ("4,5"; a MIG member: "<gpu>/<instance start>",
	// "3/4"). They are berth's books, not the devices the kubelet gave (see
	// the package documentation): a restarted berth adopts the pod on the
	// same indices, so its saved engine state and the cluster agree.
	AnnotationGPUs = "berth.dev/gpus"
)

// Errors.
var (
	// ErrInvalidConfig: a Config field is invalid.
	ErrInvalidConfig = errors.New("kube: invalid config")
	// ErrForbidden: the scheduler's identity lacks a permission it needs
	// (see CheckAccess).
	ErrForbidden = errors.New("kube: missing permission")
	// ErrNotStarted: an Inventory or Events method was called before
	// Start returned.
	ErrNotStarted = errors.New("kube: backend not started")
	// ErrLostLeadership: Run lost its Lease; the process should exit and
	// restart as a candidate.
	ErrLostLeadership = errors.New("kube: lost leadership")
)

// Level is one topology level, read from a node label.
type Level struct {
	// Name is the level's name in berth (gang.Request.Required), e.g. "rack".
	Name string
	// Label is the node label key holding the node's domain at this level.
	Label string
	// NodeWhenMissing: a node without the label is a domain of its own at
	// this level (right for an NVLink domain); otherwise such nodes share
	// one domain under their parent.
	NodeWhenMissing bool
}

// DefaultLevels are zone > block > rack > nvlink, from the well-known zone
// label, berth's block and rack labels and GPU feature discovery's NVLink
// clique label.
func DefaultLevels() []Level {
	return []Level{
		{Name: "zone", Label: "topology.kubernetes.io/zone"},
		{Name: "block", Label: "berth.dev/block"},
		{Name: "rack", Label: "berth.dev/rack"},
		{Name: "nvlink", Label: "nvidia.com/gpu.clique", NodeWhenMissing: true},
	}
}

// Config configures a Backend.
type Config struct {
	// SchedulerName selects the pods berth schedules. Empty:
	// DefaultSchedulerName.
	SchedulerName string
	// Levels are the topology levels, coarsest first. Nil: DefaultLevels.
	Levels []Level
	// Queues is the engine's queue tree. A pod's queue is its LabelQueue
	// label, else its namespace if that is a leaf queue, else DefaultQueue.
	// Empty: one queue, DefaultQueue, without quota.
	Queues queue.TreeSpec
	// DefaultQueue: empty: "default".
	DefaultQueue string
	// NodeSelector, if set, limits berth to the nodes carrying all of
	// these labels (a GPU pool of its own); other nodes are not berth's.
	NodeSelector map[string]string
	// ResyncPeriod of the informers; zero: none (watches only).
	ResyncPeriod time.Duration
	// StatusWorkers bound the concurrent pod status and nominatedNodeName
	// writes. Zero: 4.
	StatusWorkers int
	// SkipAccessCheck skips CheckAccess in Start.
	SkipAccessCheck bool
	// Launch is the pod template of jobs a federation launches here
	// (LaunchJob).
	Launch LaunchConfig
	// DRA, with a Driver, makes berth allocate the ResourceClaims of its
	// pods (dra.go). Zero: off.
	DRA DRAConfig
	// Provisioning, with pools, makes the backend a backends.Provisioner:
	// node autoscaling through cluster-autoscaler's ProvisioningRequests
	// (provision.go). Zero: off.
	Provisioning ProvisioningConfig
	// Logf, if set, receives what the backend cannot report otherwise
	// (a node it cannot model, a status write that failed).
	Logf func(format string, args ...any)
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.SchedulerName == "" {
		out.SchedulerName = DefaultSchedulerName
	}
	if out.Levels == nil {
		out.Levels = DefaultLevels()
	}
	if out.DefaultQueue == "" {
		out.DefaultQueue = "default"
	}
	if len(out.Queues.Queues) == 0 {
		out.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: out.DefaultQueue}}}
	}
	if out.StatusWorkers == 0 {
		out.StatusWorkers = 4
	}
	if out.Logf == nil {
		out.Logf = func(string, ...any) {}
	}
	return out
}

// Validate checks the config. Errors wrap ErrInvalidConfig.
func (c *Config) Validate() error {
	d := c.withDefaults()
	seen := map[string]bool{}
	for i, l := range d.Levels {
		if l.Name == "" || l.Label == "" {
			return fmt.Errorf("%w: level %d needs a Name and a Label", ErrInvalidConfig, i)
		}
		if seen[l.Name] || seen["label:"+l.Label] {
			return fmt.Errorf("%w: level %q or label %q twice", ErrInvalidConfig, l.Name, l.Label)
		}
		seen[l.Name], seen["label:"+l.Label] = true, true
	}
	if d.StatusWorkers < 0 || d.ResyncPeriod < 0 {
		return fmt.Errorf("%w: negative StatusWorkers or ResyncPeriod", ErrInvalidConfig)
	}
	if err := d.DRA.validate(); err != nil {
		return err
	}
	if err := d.Provisioning.validate(d.SchedulerName); err != nil {
		return err
	}
	found := false
	for _, q := range d.Queues.Queues {
		found = found || q.Name == d.DefaultQueue
	}
	if !found {
		return fmt.Errorf("%w: DefaultQueue %q is not a leaf queue of Queues", ErrInvalidConfig, d.DefaultQueue)
	}
	return nil
}
