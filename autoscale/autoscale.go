// Package autoscale plans node autoscaling for GPU gangs: from the jobs
// that cannot start for want of capacity, a scale-up of whole node shapes
// per pool, all or nothing per gang and landing in the topology domain a
// gang requires; and a scale-down of nodes idle longer than a delay,
// never one that holds a reservation. It is pure like the engine: the
// time comes in as an argument, there is no goroutine, no randomness and
// no I/O. Backends apply a Plan (sim boots nodes after a delay, kube
// through ProvisioningRequests, SLURM through its power saving) and
// report what came of it as node events; docs/autoscaling.md.
package autoscale

import (
	"errors"
	"time"

	"github.com/berthsched/berth/gang"
)

// ErrInvalid: a bad Config, Pool, Node or Demand (wrapped, with what is wrong).
var ErrInvalid = errors.New("autoscale: invalid input")

// Policy is how demand becomes a scale-up.
type Policy string

const (
	// GangAware (the default) scales up for a gang only if every member
	// of it gets a node in one plan, in the domain it requires: a 32-node
	// gang gets 32 nodes or none.
	GangAware Policy = "gang-aware"
	// PodByPod is the baseline that scales for each member on its own, as
	// cluster-autoscaler does for plain pods: members are packed onto new
	// nodes until a pool's Max, whether or not the whole gang fits, and
	// with no regard to the domain the gang requires.
	PodByPod Policy = "pod-by-pod"
)

// Config is the autoscaler's configuration.
type Config struct {
	Pools  []Pool
	Policy Policy // "" is GangAware
	// ScaleDownDelay: a node idle this long (and not reserved, not
	// booting, above its pool's Min) is scaled down; default 10 minutes.
	ScaleDownDelay time.Duration
}

// Pool is a group of nodes of one shape that can grow and shrink.
type Pool struct {
	Name string
	// Shape of every node of the pool.
	GPUModel    string
	GPUsPerNode int
	// Labels are node labels every node of the pool carries (or will,
	// once up), as far as the pool declares them: a group whose node
	// selector (gang.Group.Selector) names one of these keys with another
	// value is not served by the pool. Keys not here are not checked
	// (nil: the pool serves any selector). A federation's pools declare
	// their pool label (backends/federation.LabelPool) so that a job
	// pinned to one pool is not planned on another's nodes.
	Labels map[string]string
	// Min and Max bound the pool's nodes (booting ones count).
	Min, Max int
	// CostPerNodeHour is what a node costs while it is up or booting
	// (any unit: the same for every pool).
	CostPerNodeHour float64
	// Domains are where new nodes of the pool may land (e.g. racks), with
	// how many more nodes each can take; empty: one domain with room up
	// to Max, with no name (a gang that requires a level is then served
	// only if DomainLevel is empty: every new node is one domain).
	DomainLevel string // the topology level Domains name (e.g. "rack")
	Domains     []Domain
	// BackoffUntil: a provisioning failure of the pool was reported; no
	// scale-up before this time.
	BackoffUntil time.Time
}

// Domain is a topology domain of a pool (e.g. a rack) and how many more
// nodes it can take.
type Domain struct {
	Name string
	Room int
}

// Node is a node of a pool as the autoscaler needs to know it.
type Node struct {
	Name   string
	Pool   string
	Domain string // its domain at the pool's DomainLevel
	// FreeGPUs: allocatable GPUs free now (all of them while booting).
	FreeGPUs int
	// Booting: asked for and not up yet (its capacity is on the way).
	Booting bool
	// IdleSince: when its last job ended (zero: busy, or booting).
	IdleSince time.Time
	// Reserved: a reservation (backfill or preemption) holds GPUs of it.
	Reserved bool
}

// Demand is a job that cannot start for want of capacity, in the order
// the scheduler would start them.
type Demand struct {
	Job     string
	Request gang.Request
}

// ScaleUp asks for Nodes new nodes of Pool in Domain ("" : anywhere in
// the pool), for the gangs Jobs.
type ScaleUp struct {
	Pool   string
	Domain string
	Nodes  int
	Jobs   []string
}

// Unserved is a demand the plan does not scale for, and why (no pool
// has its model, larger than a pool's Max or a domain's room, backoff).
type Unserved struct {
	Job    string
	Reason string
}

// Plan is one round of autoscaling.
type Plan struct {
	Up       []ScaleUp
	Down     []string // node names
	Unserved []Unserved
}
