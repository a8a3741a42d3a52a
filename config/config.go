// Package config is berth's configuration file: the cluster, the queue
// tree and the engine settings in one document, in YAML or JSON (the same
// fields; JSON is read as YAML). It round-trips exactly: Write then Read
// gives an equal File. Limits are written ("unlimited" or an amount),
// never implied by absence; enums, the policy and the scorer are written
// by name; durations as Go writes them ("90s", "1h").
//
// Units: GPU quotas ("gpu", "gpu/<model>") are in GPUs (0.5 is half a
// GPU), "cpu" in cores, "memory" in MiB, "mig/<profile>" in instances; all
// accept up to three decimals where the unit allows fractions.
//
// Read parses and validates; Validate names the field and, when the File
// came from Read, the line. Build turns a valid File into an
// engine.Config. The format is documented in docs/config.md, with
// examples in examples/config/. The core packages do not import this one
// nor any YAML library.
package config

// File is one configuration document.
type File struct {
	// Cluster is the initial inventory. A backend's own inventory replaces
	// it under a backends.Runner.
	Cluster Cluster `json:"cluster" yaml:"cluster"`
	// Queues is the quota tree.
	Queues Queues `json:"queues" yaml:"queues"`
	// Engine holds the engine's settings.
	Engine Engine `json:"engine" yaml:"engine"`
	// Site holds partitions, per-user and per-account limits and the
	// dependency policy (engine.SiteConfig); absent: none.
	Site *Site `json:"site,omitempty" yaml:"site,omitempty"`

	lines *lineIndex // set by Read, for error lines
}

// Cluster declares the nodes (topo.Spec).
type Cluster struct {
	// Levels are the topology levels above the node, coarsest first.
	Levels []string `json:"levels,omitempty" yaml:"levels,omitempty"`
	// GPULevels are levels below the node (e.g. "nvlink").
	GPULevels []string `json:"gpuLevels,omitempty" yaml:"gpuLevels,omitempty"`
	// ShareFreeGPUs: fractional jobs may time-slice any free GPU.
	ShareFreeGPUs bool `json:"shareFreeGPUs,omitempty" yaml:"shareFreeGPUs,omitempty"`
	// Nodes, or groups of identical nodes (Count).
	Nodes []Node `json:"nodes" yaml:"nodes"`
}

// Node declares one node, or Count identical nodes named Name-0,
// Name-1, ... when Count > 0.
type Node struct {
	Name  string `json:"name" yaml:"name"`
	Count int    `json:"count,omitempty" yaml:"count,omitempty"`
	// Domains: one per level of Cluster.Levels.
	Domains      []string `json:"domains,omitempty" yaml:"domains,omitempty"`
	GPUs         int      `json:"gpus" yaml:"gpus"`
	GPUModel     string   `json:"gpuModel,omitempty" yaml:"gpuModel,omitempty"`
	GPUMemoryMiB int64    `json:"gpuMemoryMiB,omitempty" yaml:"gpuMemoryMiB,omitempty"`
	// CPUs in cores (up to 3 decimals); MemoryMiB. Zero: not tracked.
	CPUs      Quantity          `json:"cpus,omitzero" yaml:"cpus,omitempty"`
	MemoryMiB int64             `json:"memoryMiB,omitempty" yaml:"memoryMiB,omitempty"`
	Labels    map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	// State: ready (default when empty), cordoned, draining or down.
	State string `json:"state,omitempty" yaml:"state,omitempty"`
	// MIG puts every GPU in MIG mode; MIGLayout names the instances of
	// each GPU ("3g 2g 1g 1g").
	MIG       bool   `json:"mig,omitempty" yaml:"mig,omitempty"`
	MIGLayout string `json:"migLayout,omitempty" yaml:"migLayout,omitempty"`
	// Sharing shares every GPU: time-slicing or mps.
	Sharing *Sharing `json:"sharing,omitempty" yaml:"sharing,omitempty"`
	// GPUDomains: for each of Cluster.GPULevels, the group of each GPU.
	GPUDomains [][]int `json:"gpuDomains,omitempty" yaml:"gpuDomains,omitempty,flow"`
}

// Sharing is mig.Sharing by name.
type Sharing struct {
	// Mode: exclusive, time-slicing or mps.
	Mode      string `json:"mode" yaml:"mode"`
	Replicas  int    `json:"replicas,omitempty" yaml:"replicas,omitempty"`
	MemoryMiB int    `json:"memoryMiB,omitempty" yaml:"memoryMiB,omitempty"`
}

// Queues declares the quota tree (queue.TreeSpec).
type Queues struct {
	// HalfLife of decayed usage; "0s": usage never decays.
	HalfLife Duration  `json:"halfLife" yaml:"halfLife"`
	Cohorts  []Cohort  `json:"cohorts,omitempty" yaml:"cohorts,omitempty"`
	Queues   []Queue   `json:"queues" yaml:"queues"`
	Accounts []Account `json:"accounts,omitempty" yaml:"accounts,omitempty"`
}

// Quota is the quota of one resource. Both limits must be written: an
// amount or "unlimited". BorrowingLimit 0: no borrowing; LendingLimit 0:
// nothing lent.
type Quota struct {
	Nominal        Quantity `json:"nominal" yaml:"nominal"`
	BorrowingLimit Limit    `json:"borrowingLimit" yaml:"borrowingLimit"`
	LendingLimit   Limit    `json:"lendingLimit" yaml:"lendingLimit"`
}

// Queue is a leaf queue.
type Queue struct {
	Name   string  `json:"name" yaml:"name"`
	Cohort string  `json:"cohort,omitempty" yaml:"cohort,omitempty"`
	Weight float64 `json:"weight,omitempty" yaml:"weight,omitempty"`
	// Quota by resource name: gpu, gpu/<model>, cpu, memory, mig/<profile>.
	Quota map[string]Quota `json:"quota,omitempty" yaml:"quota,omitempty"`
}

// Cohort pools the lendable quota of its children.
type Cohort struct {
	Name   string           `json:"name" yaml:"name"`
	Parent string           `json:"parent,omitempty" yaml:"parent,omitempty"`
	Weight float64          `json:"weight,omitempty" yaml:"weight,omitempty"`
	Quota  map[string]Quota `json:"quota,omitempty" yaml:"quota,omitempty"`
}

// Account is a Fair Tree account beyond the queues and cohorts.
type Account struct {
	Name   string  `json:"name" yaml:"name"`
	Parent string  `json:"parent,omitempty" yaml:"parent,omitempty"`
	Shares float64 `json:"shares,omitempty" yaml:"shares,omitempty"`
}

// Engine holds engine.Config's settings. Zero numbers take the engine's
// defaults; Effective writes them out.
type Engine struct {
	// Policy orders pending jobs across queues.
	Policy Policy `json:"policy" yaml:"policy"`
	// AgingPeriod: a job gains one priority point per period waited.
	AgingPeriod    Duration   `json:"agingPeriod,omitzero" yaml:"agingPeriod,omitempty"`
	IntakeCapacity int        `json:"intakeCapacity,omitempty" yaml:"intakeCapacity,omitempty"`
	Backfill       Backfill   `json:"backfill" yaml:"backfill"`
	Preemption     Preemption `json:"preemption" yaml:"preemption"`
	// NodeFailure: requeue (default) or fail.
	NodeFailure      string   `json:"nodeFailure,omitempty" yaml:"nodeFailure,omitempty"`
	BindRetryBackoff Duration `json:"bindRetryBackoff,omitzero" yaml:"bindRetryBackoff,omitempty"`
	MIG              MIG      `json:"mig" yaml:"mig"`
	Scorer           Scorer   `json:"scorer" yaml:"scorer"`
	// LazyPending: cycles stop their walk once nothing more can start,
	// and the statuses of the jobs after that point are computed when
	// asked (engine.Config.EagerPending off). Unset: true (the default);
	// false walks and explains every pending job every cycle
	// (EagerPending).
	LazyPending *bool `json:"lazyPending,omitempty" yaml:"lazyPending,omitempty"`
}

// Policy names a queue.Policy: drs (default when empty), priority,
// fairtree or multifactor (with Weights).
type Policy struct {
	Name    string   `json:"name,omitempty" yaml:"name,omitempty"`
	Weights *Weights `json:"weights,omitempty" yaml:"weights,omitempty"`
}

// Weights are queue.Weights.
type Weights struct {
	Age         float64  `json:"age,omitempty" yaml:"age,omitempty"`
	MaxAge      Duration `json:"maxAge,omitzero" yaml:"maxAge,omitempty"`
	Size        float64  `json:"size,omitempty" yaml:"size,omitempty"`
	FavorSmall  bool     `json:"favorSmall,omitempty" yaml:"favorSmall,omitempty"`
	FairShare   float64  `json:"fairShare,omitempty" yaml:"fairShare,omitempty"`
	QueueWeight float64  `json:"queueWeight,omitempty" yaml:"queueWeight,omitempty"`
	Priority    float64  `json:"priority,omitempty" yaml:"priority,omitempty"`
}

// Backfill is engine.BackfillConfig; Mode by name: none (default), easy,
// conservative.
type Backfill struct {
	Mode      string   `json:"mode,omitempty" yaml:"mode,omitempty"`
	Depth     int      `json:"depth,omitempty" yaml:"depth,omitempty"`
	Window    Duration `json:"window,omitzero" yaml:"window,omitempty"`
	MaxProbes int      `json:"maxProbes,omitempty" yaml:"maxProbes,omitempty"`
}

// Preemption is engine.PreemptionConfig.
type Preemption struct {
	Priority              bool `json:"priority,omitempty" yaml:"priority,omitempty"`
	Reclaim               bool `json:"reclaim,omitempty" yaml:"reclaim,omitempty"`
	MaxVictimsPerCycle    int  `json:"maxVictimsPerCycle,omitempty" yaml:"maxVictimsPerCycle,omitempty"`
	MaxPreemptorsPerCycle int  `json:"maxPreemptorsPerCycle,omitempty" yaml:"maxPreemptorsPerCycle,omitempty"`
}

// MIG is engine.MIGConfig.
type MIG struct {
	Disabled     bool     `json:"disabled,omitempty" yaml:"disabled,omitempty"`
	WaitFactor   float64  `json:"waitFactor,omitempty" yaml:"waitFactor,omitempty"`
	CreateCost   Duration `json:"createCost,omitzero" yaml:"createCost,omitempty"`
	DestroyCost  Duration `json:"destroyCost,omitzero" yaml:"destroyCost,omitempty"`
	ResetCost    Duration `json:"resetCost,omitzero" yaml:"resetCost,omitempty"`
	MaxGPUs      int      `json:"maxGPUs,omitempty" yaml:"maxGPUs,omitempty"`
	RetryBackoff Duration `json:"retryBackoff,omitzero" yaml:"retryBackoff,omitempty"`
}

// Scorer is gang.ScorerSpec by name: empty (packing), random, dotprod,
// packing, bestfit, fgd, berth, kueue (a Kueue-like baseline). fgd and
// berth need Target.
type Scorer struct {
	Name   string  `json:"name,omitempty" yaml:"name,omitempty"`
	Seed   int64   `json:"seed,omitempty" yaml:"seed,omitempty"`
	Target []Shape `json:"target,omitempty" yaml:"target,omitempty"`
}

// Shape is one shape of a scorer's target workload (gang.Shape).
type Shape struct {
	GPUs      int     `json:"gpus,omitempty" yaml:"gpus,omitempty"`
	Milli     int     `json:"milli,omitempty" yaml:"milli,omitempty"`
	CPUMilli  int64   `json:"cpuMilli,omitempty" yaml:"cpuMilli,omitempty"`
	MemoryMiB int64   `json:"memoryMiB,omitempty" yaml:"memoryMiB,omitempty"`
	Model     string  `json:"model,omitempty" yaml:"model,omitempty"`
	Count     int     `json:"count,omitempty" yaml:"count,omitempty"`
	Weight    float64 `json:"weight" yaml:"weight"`
}

// Equal reports whether two Files hold the same settings (the line index
// of Read is ignored).
func (f *File) Equal(g *File) bool {
	a, b := *f, *g
	a.lines, b.lines = nil, nil
	return deepEqual(a, b)
}
