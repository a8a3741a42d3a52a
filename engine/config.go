package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// BackfillMode selects how blocked jobs hold future GPUs.
type BackfillMode uint8

const (
	// BackfillNone: jobs run strictly in order; the first job that does not
	// fit blocks every later one (no reservation, no backfill).
	BackfillNone BackfillMode = iota
	// BackfillEASY: the first blocked job gets a reservation (an exact GPU
	// set at a future time); later jobs run now if they end before it
	// starts or stay off its GPUs.
	BackfillEASY
	// BackfillConservative: every blocked job up to Depth (and starting
	// within Window) gets a reservation, and later jobs may delay none of
	// them.
	BackfillConservative
)

func (m BackfillMode) String() string {
	switch m {
	case BackfillNone:
		return "none"
	case BackfillEASY:
		return "easy"
	case BackfillConservative:
		return "conservative"
	}
	return fmt.Sprintf("BackfillMode(%d)", uint8(m))
}

// BackfillConfig configures reservations and backfill.
type BackfillConfig struct {
	Mode BackfillMode
	// Depth is the most reservations per cycle in conservative mode
	// (EASY: always 1). Zero: 16.
	Depth int
	// Window bounds how far ahead a reservation may start; a job that
	// cannot start within it gets no reservation and no estimate. Zero:
	// no bound.
	Window time.Duration
	// MaxProbes bounds the what-if placements tried per reservation (the
	// timeline's end times are tried in order, each a placement on a
	// copy-on-write clone). Zero: 64.
	MaxProbes int
}

// PreemptionConfig configures preemption. Only jobs marked Preemptible are
// ever preempted.
type PreemptionConfig struct {
	// Priority lets a blocked job preempt running jobs of lower priority.
	Priority bool
	// Reclaim lets a blocked job whose queue is within its nominal quota
	// preempt jobs of queues that borrow beyond theirs (any priority).
	Reclaim bool
	// MaxVictimsPerCycle bounds the preemptions of one cycle. Zero: 16.
	MaxVictimsPerCycle int
	// MaxPreemptorsPerCycle bounds how many blocked jobs may look for
	// victims in one cycle (the first ones in order). Zero: 4.
	MaxPreemptorsPerCycle int
}

// NodeFailurePolicy says what becomes of the jobs of a failed node.
type NodeFailurePolicy uint8

const (
	// RequeueOnFailure puts every job with a member on the failed node back
	// to pending, whole.
	RequeueOnFailure NodeFailurePolicy = iota
	// FailOnFailure ends those jobs; Ready.Failed lists them.
	FailOnFailure
)

// MIGConfig configures the planning of MIG reconfiguration (cycle step
// 8). When fractional or MIG jobs are blocked for lack of fitting
// instances, the engine asks mig.Pool.Plan for new layouts of the idle
// capacity of ready MIG GPUs and emits the plan when waiting costs more
// than reconfiguring:
//
//	blocked GPU-seconds >= WaitFactor x Plan.Cost.Time (seconds) x Plan.Cost.GPUs
//
// where blocked GPU-seconds sums, over the blocked jobs the plan would
// serve (in the policy's order, up to Plan.Served), the job's GPU share
// (queue.Job.GPUMilliTotal / 1000) times how long it has waited since its
// submission. A job just submitted has waited nothing, so a plan is worth
// it only once jobs have waited long enough to pay for the disruption.
type MIGConfig struct {
	// Disabled turns planning off: blocked jobs wait for instances to free.
	Disabled bool
	// WaitFactor weighs the plan's cost (see above). Zero: 1.
	WaitFactor float64
	// Costs prices the plan's actions; zero fields take mig.DefaultCosts.
	Costs mig.CostModel
	// MaxGPUs caps the GPUs one plan touches. Zero: 8.
	MaxGPUs int
	// RetryBackoff: after the backend refused a reconfiguration (or it no
	// longer applied), no plan is made for this long. Zero: one minute.
	RetryBackoff time.Duration
}

// Config configures an Engine. Validate checks it; New calls Validate.
//
// The zero value (with a Cluster and Queues) is valid and runs: the DRS
// policy across queues, priority then FIFO within a queue, no aging; no
// backfill (BackfillNone: the first pending job that does not fit blocks
// every later one, and gets no reservation and no estimate); no
// preemption; jobs of a failed node requeued; a refused bind retried next
// cycle; MIG planning on (wait factor 1, default costs, 8 GPUs per plan,
// one minute back-off); placement packing (no Scorer). A job that can
// never fit the cluster is rejected at submission (ErrNeverFits), so it
// cannot block the queue under BackfillNone. Most sites want
// Backfill.Mode set (EASY or conservative): see TestZeroConfig and
// docs/config.md.
type Config struct {
	// Cluster is the initial inventory. It may be empty: nodes can be
	// added later with NodeAdded events.
	Cluster topo.Spec
	// Queues is the quota tree.
	Queues queue.TreeSpec
	// Pending configures the pending set (aging).
	Pending queue.PendingConfig
	// Policy orders pending jobs across queues. The engine owns it: do not
	// share one Policy value between engines. Nil: queue.DRS().
	Policy queue.Policy
	// IntakeCapacity bounds the lock-free intake: 0..queue.MaxIntakeCapacity
	// (its slots are allocated up front). Zero: 4096.
	IntakeCapacity int
	// Start is the engine's clock before the first event.
	Start time.Time

	Backfill   BackfillConfig
	Preemption PreemptionConfig
	// NodeFailure: requeue (default) or fail the jobs of a failed node.
	NodeFailure NodeFailurePolicy
	// BindRetryBackoff is how long a job whose bind the backend refused
	// waits before it is placed again. Zero: it is tried again next cycle.
	BindRetryBackoff time.Duration
	// BindRetryMax, when larger than BindRetryBackoff, makes the wait
	// grow: it doubles with each consecutive refusal of the job's binds,
	// up to BindRetryMax, and starts again from BindRetryBackoff once a
	// bind of the job is applied. Zero: no growth.
	BindRetryMax time.Duration
	// MaxBindTries, when positive, holds a job whose binds failed (were
	// refused, or reported failed by EventBindFailed) this many times in a
	// row: it stays pending with ReasonHeld and its last error until
	// EventReleased. Zero: it is retried for ever (backends.Runner sets 5).
	MaxBindTries int
	// MIG configures MIG reconfiguration planning.
	MIG MIGConfig
	// Scorer selects how placement chooses nodes inside the chosen
	// topology domains, by name (gang.ScorerSpec, gang.NewScorer): e.g.
	// {Name: "berth", Target: gang.NewTarget(groups, 0.95).Shapes} for
	// berth's fragmentation-aware scorer. The zero value keeps gang.Place's
	// packing (members onto the nodes with the fewest free GPUs). Ties go
	// to the lower node ID. The scorer also ranks the what-if placements
	// of reservations and preemption; "random" (seeded by Scorer.Seed)
	// draws on each of them, so its choices depend on how many placements
	// a cycle tries. "clustering" is refused: it counts the kinds of the
	// members bound on each node, and the engine does not report its binds
	// to a scorer.
	Scorer gang.ScorerSpec
	// Site holds partitions, per-user and per-account limits and the
	// dependency policy (see SiteConfig); the zero value: none.
	Site SiteConfig
	// DisableCaches turns off every cache of the cycle: resumed walks, the
	// per-cycle placement memos by job shape, and the submission check's
	// memo by request (see docs/scale.md). Decisions are the same either
	// way (FuzzEngine and the replay tests compare both); it exists to
	// prove that, and to measure what the caches save.
	DisableCaches bool
	// EagerPending turns off the walk that stops (lazy pending statuses,
	// on by default): every cycle then walks and explains every pending
	// job. By default a cycle stops its walk once no later job can start,
	// backfill, get a reservation or be acted on otherwise: no node has
	// as many GPUs free (off the reservations) as the smallest pending
	// member asks, the reservations are made, and none of preemption,
	// fractional or MIG jobs, services or site rules is in use (the full
	// list: docs/scale.md, "A walk that stops"). Under a backlog a cycle
	// then costs what the jobs up to that point cost, not the whole
	// backlog. Under the same conditions, where only the short jobs of
	// some size classes can start, a DRS walk over one level of cohorts
	// skips to the next of them without visiting the jobs before it
	// (docs/scale.md, "Cycle cost over a long run"). Ready.Pending and
	// View.Pending list only the jobs the walk reached, Ready.Unwalked and View.Unwalked count the others, and
	// their statuses are computed on demand, with the answer of a full
	// walk: Engine.PendingStatuses for the jobs asked about (it costs
	// what those jobs cost), Engine.PendingAll for all of them; either
	// publishes the View again with what it computed, so that
	// View.Explain, View.Estimate (and, after PendingAll,
	// View.Explanations and View.Estimates) answer for those jobs too.
	// The Runner (package backends) completes the statuses for its
	// readers: Observe, the audit Recorder, autoscaling. Decisions are the
	// same either way (FuzzEngine compares them, and the full statuses,
	// for every policy).
	EagerPending bool
	// LazyPending is the default and kept for configurations written
	// before it was: true asks for what the zero value gives. Setting
	// both LazyPending and EagerPending is an error.
	LazyPending bool
	// BareViews publishes Views without a copy of the cluster's
	// bookings: View.Explain and View.Explanations then give each job's
	// reason without what they read from the bookings (the room left for
	// its shape, the nodes of its reservation, whether it would fit now),
	// and everything else in a View is as before. In exchange a cycle
	// books on the engine's own snapshot instead of a copy-on-write clone
	// of it: by default each cycle copies every page of state it writes
	// (64 nodes' free GPUs and host resources, a level's counters, 64
	// GPUs' shares), since the last View holds the pages as they were.
	// For programs that read no explanations from Views (replays,
	// simulations: replay.Run, unless its caller observes the cycles, and
	// replay/fgd's engine runs set it). Decisions, Ready and the pending
	// statuses are the same either way (FuzzEngine compares them).
	BareViews bool
	// CycleViewsOnly publishes Views at cycles only: Advance does not
	// publish the View again with the binds it assumes
	// (Outcome.AssumeBinds) running or the jobs refused back to pending,
	// and a backends.Runner does not publish it again when it steps bind
	// outcomes between cycles. The View then shows what the latest cycle
	// decided (its binds as binding) until the next one (or Publish,
	// PendingAll; Advance still calls PendingAll, which publishes, when it
	// has refusals after a walk that stopped early). Decisions are the
	// same. For programs that read of each
	// View only what its cycle decided (a replay's pending sets and
	// reservations: replay.Run sets it when its caller observes no
	// cycle): it spares a View per binding cycle, about a seventh of the
	// bytes a month's replay allocated.
	CycleViewsOnly bool
}

// Validate checks the config: cluster spec, tree spec, limits. Errors wrap
// ErrInvalidConfig (and the topo or queue error where there is one).
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := c.Cluster.Validate(); err != nil {
		return fmt.Errorf("%w: cluster: %w", ErrInvalidConfig, err)
	}
	if _, err := queue.NewTree(c.Queues); err != nil {
		return fmt.Errorf("%w: queues: %w", ErrInvalidConfig, err)
	}
	if c.LazyPending && c.EagerPending {
		return bad("LazyPending and EagerPending both set: lazy pending statuses are the default, EagerPending turns them off")
	}
	if c.Scorer.Name == gang.ScorerClustering {
		return bad("Scorer: %q needs bind reports the engine does not give; use another scorer", c.Scorer.Name)
	}
	if _, err := gang.NewScorer(c.Scorer); err != nil {
		return fmt.Errorf("%w: Scorer: %w", ErrInvalidConfig, err)
	}
	if c.Pending.AgingPeriod < 0 {
		return bad("Pending.AgingPeriod must not be negative, got %v", c.Pending.AgingPeriod)
	}
	switch {
	case c.IntakeCapacity < 0 || c.IntakeCapacity > queue.MaxIntakeCapacity:
		return bad("IntakeCapacity must be in 0..%d, got %d", queue.MaxIntakeCapacity, c.IntakeCapacity)
	case c.Backfill.Mode > BackfillConservative:
		return bad("Backfill.Mode: unknown mode %d", c.Backfill.Mode)
	case c.Backfill.Depth < 0:
		return bad("Backfill.Depth must not be negative, got %d", c.Backfill.Depth)
	case c.Backfill.Window < 0:
		return bad("Backfill.Window must not be negative, got %v", c.Backfill.Window)
	case c.Backfill.MaxProbes < 0:
		return bad("Backfill.MaxProbes must not be negative, got %d", c.Backfill.MaxProbes)
	case c.Preemption.MaxVictimsPerCycle < 0:
		return bad("Preemption.MaxVictimsPerCycle must not be negative, got %d", c.Preemption.MaxVictimsPerCycle)
	case c.Preemption.MaxPreemptorsPerCycle < 0:
		return bad("Preemption.MaxPreemptorsPerCycle must not be negative, got %d", c.Preemption.MaxPreemptorsPerCycle)
	case c.NodeFailure > FailOnFailure:
		return bad("NodeFailure: unknown policy %d", c.NodeFailure)
	case c.BindRetryBackoff < 0:
		return bad("BindRetryBackoff must not be negative, got %v", c.BindRetryBackoff)
	case c.BindRetryMax < 0:
		return bad("BindRetryMax must not be negative, got %v", c.BindRetryMax)
	case c.MaxBindTries < 0:
		return bad("MaxBindTries must not be negative, got %d", c.MaxBindTries)
	case c.MIG.WaitFactor < 0 || math.IsNaN(c.MIG.WaitFactor) || math.IsInf(c.MIG.WaitFactor, 0):
		return bad("MIG.WaitFactor must be a finite non-negative number, got %v", c.MIG.WaitFactor)
	case c.MIG.MaxGPUs < 0:
		return bad("MIG.MaxGPUs must not be negative, got %d", c.MIG.MaxGPUs)
	case c.MIG.RetryBackoff < 0:
		return bad("MIG.RetryBackoff must not be negative, got %v", c.MIG.RetryBackoff)
	case c.MIG.Costs.Create < 0 || c.MIG.Costs.Destroy < 0 || c.MIG.Costs.Reset < 0:
		return bad("MIG.Costs must not be negative, got %+v", c.MIG.Costs)
	}
	return c.Site.Validate()
}

// WithDefaults returns c with every zero value that means "default"
// replaced by that default, as New runs it (policy DRS, intake 4096,
// backfill depth 16, ...). The MIG costs' zero fields are filled by the
// planner (mig.DefaultCosts).
func (c Config) WithDefaults() Config {
	if c.Policy == nil {
		c.Policy = queue.DRS()
	}
	if c.IntakeCapacity == 0 {
		c.IntakeCapacity = 4096
	}
	if c.Backfill.Depth == 0 {
		c.Backfill.Depth = 16
	}
	if c.Backfill.MaxProbes == 0 {
		c.Backfill.MaxProbes = 64
	}
	if c.Preemption.MaxVictimsPerCycle == 0 {
		c.Preemption.MaxVictimsPerCycle = 16
	}
	if c.Preemption.MaxPreemptorsPerCycle == 0 {
		c.Preemption.MaxPreemptorsPerCycle = 4
	}
	if c.MIG.WaitFactor == 0 {
		c.MIG.WaitFactor = 1
	}
	if c.MIG.MaxGPUs == 0 {
		c.MIG.MaxGPUs = 8
	}
	if c.MIG.RetryBackoff == 0 {
		c.MIG.RetryBackoff = time.Minute
	}
	return c
}

// depth is the number of reservations a cycle may hold.
func (c *Config) depth() int {
	switch c.Backfill.Mode {
	case BackfillEASY:
		return 1
	case BackfillConservative:
		return c.Backfill.Depth
	}
	return 0
}
