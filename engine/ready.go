package engine

import (
	"fmt"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
)

// Member is where one member of a job runs: a node and device indices on
// it. GPUs are node-local (0 .. GPUs of the node - 1), ascending, so they
// stay valid when the cluster is rebuilt with more nodes.
type Member struct {
	Group     int
	Node      string
	GPUs      []int
	CPUMilli  int64
	MemoryMiB int64
	// Fractional: the member (of a group with GPUMilli or MIGProfile) holds
	// a part of its one GPU, GPUs[0]: the MIG instance Instance, or, when
	// Share.ID is set, the share Share (time-slicing or MPS; Share.GPU is
	// node-local like GPUs). Created: the instance did not exist and the
	// backend must create it before starting the member. Share IDs are the
	// engine's own and may change when the cluster is rebuilt.
	Fractional bool
	Instance   mig.Instance
	Created    bool
	Share      mig.Share
}

// Bind tells the backend to start a job on exactly these members.
type Bind struct {
	Job     string
	Members []Member
	// Backfill: the job was placed ahead of an earlier job holding a
	// reservation (it ends before the reservation starts, or stays off its
	// GPUs).
	Backfill bool
	// Queue and Submit are the job's (for observers: its wait is the
	// Ready's At minus Submit).
	Queue  string
	Submit time.Time
	// Partition the job runs in (SiteConfig.Partitions); empty: none.
	Partition string
	// Run identifies this run of the job (a job requeued and bound again
	// gets a new one): the events that report the bind's outcome
	// asynchronously (BindApplied, BindFailed, BindUnknown) carry it, so
	// that a late answer about an earlier run changes nothing.
	Run uint64
}

// PreemptCause says why a job is preempted.
type PreemptCause uint8

const (
	// PreemptPriority: for a job of higher priority.
	PreemptPriority PreemptCause = iota + 1
	// PreemptReclaim: the victim's queue borrows quota that the
	// preemptor's queue takes back.
	PreemptReclaim
)

func (c PreemptCause) String() string {
	switch c {
	case PreemptPriority:
		return "priority"
	case PreemptReclaim:
		return "reclaim"
	}
	return fmt.Sprintf("PreemptCause(%d)", uint8(c))
}

// Preemption tells the backend to stop a job. Its GPUs count as free at
// Deadline (or when the job reports finished, if sooner); the job is then
// requeued. They are reserved for For (no other job takes them).
type Preemption struct {
	Victim string
	For    string
	Cause  PreemptCause
	// Deadline is the end of the victim's grace period.
	Deadline time.Time
	// CostGPUSeconds is the work lost: GPUs x seconds since the victim's
	// last checkpoint (or start).
	CostGPUSeconds float64
	// Run is the victim's run: the preemption outcomes (PreemptApplied,
	// PreemptFailed, PreemptUnknown) carry it.
	Run uint64
}

// Resize grows or shrinks a running elastic job (its first group). Add
// members are to be started, Remove members stopped; Members is the new
// member count of the group. A shrink takes effect at once (its GPUs are
// free in the same Ready); a grow can be refused in Advance.
type Resize struct {
	Job     string
	Members int
	Add     []Member
	Remove  []Member
	// Run is the job's run: ResizeFailed carries it.
	Run uint64
}

// Reservation holds an exact GPU set for a blocked job from Start on.
type Reservation struct {
	Job   string
	Start time.Time
	// GPUs are cluster GPU indices (see Engine.Cluster). Read-only.
	GPUs *roaring.Bitmap
	// Preemption: the GPUs are those of preempted jobs in their grace
	// period, held for Job (no-thrash), rather than a backfill reservation.
	Preemption bool
}

// MIGReconfiguration is a planned change of the MIG layout of one GPU (in
// MIG mode): destroy the idle instances Destroy, then create Create, so
// that the GPU's layout goes From -> To. Instances in use are in both and
// are not touched. The engine plans it for blocked fractional / MIG jobs
// (see Config.MIG) and applies it to its own books when Advance does not
// refuse it; the jobs it serves are placed by the next cycle.
type MIGReconfiguration struct {
	Node string
	GPU  int // node-local
	// Profiles are the profile names of To, by start (for logs).
	Profiles []string
	From, To mig.Layout
	Destroy  []mig.Instance
	Create   []mig.Instance
	// NeedsReset: the change switches MIG mode on a model that needs a GPU
	// reset (never set today: MIG nodes are fixed by their NodeSpec).
	NeedsReset bool
	// Seq is the Seq of the Ready that planned it: the outcome events of
	// an asynchronous change (EventMIGApplied, EventMIGFailed,
	// EventMIGUnknown) carry it in Event.Run, so that a late answer about
	// an earlier change of the GPU changes nothing.
	Seq uint64
}

// ReasonCode classifies why a job is pending.
type ReasonCode uint8

// Reason codes.
const (
	// ReasonNone: not evaluated this cycle (e.g. just requeued).
	ReasonNone ReasonCode = iota
	// ReasonQuota: its queue cannot get the quota now (Quota says which
	// resource, how much it needs and how much is available).
	ReasonQuota
	// ReasonCapacity: no valid placement on the free GPUs (Place says
	// why, in numbers).
	ReasonCapacity
	// ReasonReserved: it holds a reservation and waits for its start.
	ReasonReserved
	// ReasonReservedGPUs: it would fit now, but only on GPUs reserved for
	// an earlier job that it would delay.
	ReasonReservedGPUs
	// ReasonPreempting: jobs were preempted for it; it waits for their
	// grace periods to end.
	ReasonPreempting
	// ReasonBindRefused: the backend refused its last bind; it waits for
	// Config.BindRetryBackoff (growing up to Config.BindRetryMax with each
	// consecutive refusal; Engine.BindRetryAt says until when).
	ReasonBindRefused
	// ReasonUnsupported: the request uses a feature placement does not
	// support yet (fractional or MIG members in multi-group gangs or in
	// elastic jobs).
	ReasonUnsupported
	// ReasonInvalid: the request does not fit this cluster at all (e.g. an
	// unknown topology level).
	ReasonInvalid
	// ReasonBlocked: strict order without backfill: an earlier job is
	// blocked, so this one waits behind it.
	ReasonBlocked
	// ReasonReconfiguring: a fractional / MIG job blocked by capacity that
	// this Ready's MIG reconfiguration serves; it is placed once Advance
	// confirms the reconfiguration (Place says why it does not fit now);
	// or one whose placement is on a GPU whose reconfiguration's outcome
	// is unknown (EventMIGUnknown): it is placed once the outcome is
	// known.
	ReasonReconfiguring
	// ReasonLimit: starting it would pass a per-user or per-account limit
	// (SiteConfig.Limits); Ready.Holds names it.
	ReasonLimit
	// ReasonDependency: a dependency is not met yet (Ready.Holds names
	// them).
	ReasonDependency
	// ReasonDependencyNeverMet: a dependency can never be met and the
	// policy holds the job (HoldNeverMet).
	ReasonDependencyNeverMet
	// ReasonArrayThrottled: its array runs as many tasks as its throttle
	// allows.
	ReasonArrayThrottled
	// ReasonBinding: it is bound and its GPUs are booked (assumed, see
	// Outcome.AssumeBinds), and the backend has not answered yet. It is
	// listed in View.Pending, not View.Running, until BindApplied.
	ReasonBinding
	// ReasonBindingUnknown: its bind call timed out (BindUnknown): the
	// backend may or may not run it. Its GPUs stay booked until the
	// backend's own state says (BindApplied or BindFailed).
	ReasonBindingUnknown
	// ReasonHeld: its binds failed Config.MaxBindTries times in a row; it
	// is not placed again until released (Released). Ready.Holds gives
	// the last error.
	ReasonHeld
)

func (c ReasonCode) String() string {
	switch c {
	case ReasonNone:
		return "none"
	case ReasonQuota:
		return "quota"
	case ReasonCapacity:
		return "capacity"
	case ReasonReserved:
		return "reserved"
	case ReasonReservedGPUs:
		return "reserved-gpus"
	case ReasonPreempting:
		return "preempting"
	case ReasonBindRefused:
		return "bind-refused"
	case ReasonUnsupported:
		return "unsupported"
	case ReasonInvalid:
		return "invalid"
	case ReasonBlocked:
		return "blocked"
	case ReasonReconfiguring:
		return "reconfiguring"
	case ReasonLimit:
		return "limit"
	case ReasonDependency:
		return "dependency"
	case ReasonDependencyNeverMet:
		return "dependency-never-met"
	case ReasonArrayThrottled:
		return "array-throttled"
	case ReasonBinding:
		return "binding"
	case ReasonBindingUnknown:
		return "binding-unknown"
	case ReasonHeld:
		return "held"
	}
	return fmt.Sprintf("ReasonCode(%d)", uint8(c))
}

// PendingStatus explains one pending job.
type PendingStatus struct {
	Job    string
	Queue  string
	Reason ReasonCode
	plan   NoEstimate // why the walk gave it no start (estimate.go); in Reason's padding
	// Place is the placement reason (ReasonCapacity; for
	// ReasonReservedGPUs, why it does not fit off the reserved GPUs).
	// For jobs of the same shape the numbers are those of the first such
	// job of the cycle.
	Place gang.Reason
	// Quota is the quota answer (ReasonQuota).
	Quota queue.Fit
	// Start is the estimated start time; zero when the timeline gives none
	// (only jobs holding a reservation or waiting for preempted GPUs have
	// one; View.Estimates says why the others have none).
	Start time.Time
	// Note is what a layer between the engine and the systems adds to the
	// reason (backends/federation: when the next rebalance may bring
	// nodes); String appends it. The engine leaves it empty.
	Note string

	js *job // the job (its request and estimates are read, never written)
}

func (s PendingStatus) String() string {
	var why string
	switch s.Reason {
	case ReasonQuota:
		why = fmt.Sprintf("quota: %s needs %s, available %s", s.Quota.Resource,
			quotaAmount(s.Quota.Resource, s.Quota.Need), quotaAmount(s.Quota.Resource, s.Quota.Available))
	case ReasonCapacity:
		why = fmt.Sprintf("%v: %v", s.Reason, s.Place)
	case ReasonReservedGPUs:
		why = "reserved-gpus: it fits now only on GPUs reserved for an earlier job, which it would delay"
	default:
		why = s.Reason.String()
	}
	if s.Note != "" {
		why += "; " + s.Note
	}
	return why
}

// JobFailure is a job ended by the engine (a failed node, under
// FailOnFailure).
type JobFailure struct {
	Job  string
	Node string
	// Reason: why the engine ended a job no node failure ended (a
	// dependency that can never be met).
	Reason string `json:",omitempty"`
}

// Rejection is a submission the engine could not accept.
type Rejection struct {
	Job string
	Err error
}

// Ready is the output of one cycle. Slices are owned by the caller, except
// Pending, which is shared with the published View and must not be
// modified.
type Ready struct {
	// Seq numbers the cycles; Advance must be given the latest Ready.
	Seq uint64
	// At is the engine's clock when the cycle ran.
	At time.Time
	// Preemptions come first: a backend stops victims before it binds.
	Preemptions []Preemption
	// Resizes of elastic jobs (shrinks free GPUs that Binds may use).
	Resizes []Resize
	Binds   []Bind
	// Reservations held this cycle (backfill and preemption), by start
	// time, then job.
	Reservations []Reservation
	// MIG reconfigurations for blocked fractional / MIG jobs, by node and
	// GPU; never nil. A backend applies them (destroying idle instances
	// only) and reports refusals in Outcome.RefusedMIG, or, applying them
	// asynchronously, their outcomes as events (Outcome.AssumeMIG).
	MIG []MIGReconfiguration
	// Pending explains every pending job, in the policy's order. It is
	// read-only: it is shared with the View, and a later cycle that
	// resumes this one's walk shares its elements too.
	Pending []PendingStatus
	// Unwalked counts the pending jobs not in Pending: those after the
	// walk's cut and those a skip passed (a walk that skips lists the
	// jobs it reached, in the policy's order, with the jobs passed left
	// out; docs/scale.md "Cycle cost over a long run"). Never with
	// Config.EagerPending; Engine.PendingStatuses and Engine.PendingAll
	// compute their statuses on demand (PendingAll in the policy's order,
	// the passed jobs where the full walk lists them); zero when the walk
	// reached every job.
	Unwalked int
	// Requeued lists running jobs put back to pending this cycle or by
	// the events since the last one (preempted victims, failed nodes).
	Requeued []string
	// Failed lists jobs ended by node failures (FailOnFailure) and by
	// dependencies that can never be met (CancelNeverMet).
	Failed []JobFailure
	// Holds says, for each pending job a site rule holds (ReasonLimit,
	// ReasonDependency, ReasonDependencyNeverMet, ReasonArrayThrottled),
	// what it waits on ("MaxJobsPerUser: user alice runs 2 of 2 jobs"),
	// and for each job whose binds failed (ReasonBindRefused with the
	// error an event gave, ReasonHeld) the tries and the last error;
	// nil when none is (kept out of PendingStatus so that engines without
	// site rules pay nothing for it).
	Holds map[string]string
	// Rejected lists submissions that could not be accepted.
	Rejected []Rejection
	// Stops lists service replicas removed (scaled down or deleted) by
	// the events since the last cycle, in event order; their GPUs are
	// already free (see Stop), and Binds may use them: a backend stops
	// them first, like preemption victims.
	Stops []Stop
}

// Empty reports whether the Ready asks nothing of the backend.
func (rd *Ready) Empty() bool {
	return len(rd.Preemptions) == 0 && len(rd.Resizes) == 0 && len(rd.Binds) == 0 && len(rd.MIG) == 0 && len(rd.Stops) == 0
}

// Outcome tells Advance which decisions the backend refused. A refused
// bind undoes the whole gang: the job returns to pending with
// ReasonBindRefused. A refused preemption leaves the victim running (and
// protected for its minimum runtime); the GPUs held for its preemptor are
// given up. A refused resize undoes a grow; shrinks cannot be refused. A
// refused MIG reconfiguration (matched by Node and GPU) is dropped and the
// engine plans none for Config.MIG.RetryBackoff; the others are applied to
// the engine's books.
//
// AssumeBinds is for a caller that applies binds asynchronously: the binds
// not refused are assumed, not confirmed (their GPUs stay booked and the
// jobs are listed pending with ReasonBinding) until an event reports each
// one's outcome: BindApplied, BindFailed or BindUnknown. The rest of the
// Outcome means what it means without it.
//
// AssumePreemptions is the same for preemptions: those not refused are
// assumed: the victims stay in their grace period with their GPUs booked,
// and are not requeued at their deadlines, until an event reports each
// one's outcome: PreemptApplied (the backend took it: requeued at the
// deadline), PreemptFailed (the victim runs on) or PreemptUnknown (the
// call timed out: still booked until one of the other two).
//
// AssumeMIG is the same for MIG reconfigurations: those not refused are
// booked (the engine's layout is the new one, and the next cycle may
// place jobs on its instances: a caller issues those binds only after the
// change succeeded) but the GPU stays reconfiguring (no other change is
// planned on it) until an event reports the outcome: EventMIGApplied,
// EventMIGFailed (the old layout is booked again, the binds that depended
// on the change are withdrawn, and the MIG backoff starts) or
// EventMIGUnknown (the call timed out: reconfiguring until one of the
// other two). See Engine.MIGChange.
type Outcome struct {
	AssumeBinds        bool
	AssumePreemptions  bool
	AssumeMIG          bool
	RefusedBinds       []string
	RefusedPreemptions []string
	RefusedResizes     []string
	RefusedMIG         []MIGReconfiguration
}
