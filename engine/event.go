package engine

import (
	"fmt"
	"time"

	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// EventKind says what happened.
type EventKind uint8

// Event kinds.
const (
	// EventTick only moves the clock: running jobs may now have overrun
	// their estimates, grace periods may have ended, reservations may be
	// due.
	EventTick EventKind = iota
	// EventJobSubmitted adds Job to the pending set (the same as
	// Intake().Submit, but in event order).
	EventJobSubmitted
	// EventJobFinished: JobID ended (completed, or stopped after a
	// preemption, or hit its limit). Its GPUs are free at once.
	EventJobFinished
	// EventJobCancelled: JobID is withdrawn, pending or running.
	EventJobCancelled
	// EventJobCheckpointed: JobID saved its state; a later preemption
	// loses only the work done since Time.
	EventJobCheckpointed
	// EventJobAdopted: Job is found already running on Members (at
	// start-up, from a backend's inventory). It is booked without a quota
	// check, also on a cordoned or draining node (not on a down one). It
	// started at Started (the backend's start time, for its expected end
	// and minimum runtime); a zero Started, or one after Time, is Time.
	EventJobAdopted
	// EventNodeAdded: Node joins the cluster.
	EventNodeAdded
	// EventNodeChanged: the node named Node.Name now has Node.State and
	// Node.Labels (the rest of Node is ignored).
	EventNodeChanged
	// EventNodeFailed: the node named NodeName is down; its jobs are
	// requeued or failed (Config.NodeFailure) as whole gangs.
	EventNodeFailed
	// EventDevicesReported: the backend reports the GPUs JobID's Members
	// actually hold (see DevicesReported).
	EventDevicesReported
	// EventArraySubmitted adds the Tasks tasks of the job array Job, at
	// most Throttle running at once (see ArraySubmitted).
	EventArraySubmitted
	// EventReservationSet creates or changes the advance reservation
	// Reservation (see ReservationSet).
	EventReservationSet
	// EventReservationDeleted deletes the advance reservation named
	// Reservation.Name.
	EventReservationDeleted
	// EventServiceSet creates the service Service or replaces its spec
	// (see ServiceSet).
	EventServiceSet
	// EventServiceScaled sets the desired replica count Desired of the
	// service named ServiceName.
	EventServiceScaled
	// EventServiceDeleted deletes the service named ServiceName and its
	// replicas.
	EventServiceDeleted
	// EventBindApplied: the backend applied the assumed bind of run Run of
	// JobID (see Outcome.AssumeBinds): the job is confirmed running. An
	// event about another run, or a job the engine no longer has, is
	// ignored (a late answer).
	EventBindApplied
	// EventBindFailed: the backend did not apply the assumed (or unknown)
	// bind of run Run of JobID; Reason says why. The job's GPUs are freed
	// and it waits for the bind backoff, like a refused bind; after
	// Config.MaxBindTries failures in a row it is held (ReasonHeld). An
	// empty Reason withdraws the bind instead (it was never made: its
	// caller stopped first): the job is pending again at once, no try
	// counted. Late answers are ignored as for EventBindApplied.
	EventBindFailed
	// EventBindUnknown: the bind call of run Run of JobID timed out: the
	// backend may apply it yet. The job stays booked
	// (ReasonBindingUnknown) until EventBindApplied or EventBindFailed.
	EventBindUnknown
	// EventReleased: the held job JobID (ReasonHeld) may be placed again,
	// its failure count reset: a person released it, or the backend
	// reports its own hold released. A job that is not held is left as
	// it is.
	EventReleased
	// EventPreemptApplied: the backend took the assumed preemption of run
	// Run of the victim JobID (see Outcome.AssumePreemptions): it stops by
	// its deadline, when the engine requeues it (at once, when the
	// deadline has passed). An event about another run, or a job that is
	// not being preempted, is ignored (a late answer).
	EventPreemptApplied
	// EventPreemptFailed: the backend did not take the assumed (or
	// unknown) preemption of run Run of JobID; Reason says why. The victim
	// is running again (protected for its minimum runtime), the GPUs held
	// for its preemptor are given up, and the preemptor is pending again
	// (Ready.Holds notes the failure until it is placed or preempts
	// again). Like a refusal in Advance, it runs no cycle by itself
	// (Engine.HasReady stays false): the caller steps a Tick after a
	// backoff. Late answers are ignored as for EventPreemptApplied.
	EventPreemptFailed
	// EventPreemptUnknown: the preemption call of run Run of JobID timed
	// out: the backend may stop the victim yet. It keeps its GPUs booked,
	// past its deadline, until EventPreemptApplied or EventPreemptFailed.
	EventPreemptUnknown
	// EventResizeFailed: the backend did not apply the grow of run Run of
	// the elastic job JobID (Ready.Resizes, applied asynchronously): the
	// added Members are taken out of its booking. Reason says why. A grow
	// the job no longer holds (or another run) is ignored.
	EventResizeFailed
	// EventBindDeferred: the assumed bind of run Run of JobID was not
	// made because the backend is not ready for it yet (Reason: its GPUs
	// are still being released by a stop that has not come through). The
	// job's GPUs are freed and it is pending again for
	// Config.BindRetryBackoff (not growing), shown with Reason; no try is
	// counted, so it is never held for it. Late answers are ignored as for
	// EventBindApplied.
	EventBindDeferred
	// EventMIGApplied: the backend made the assumed MIG change of GPU GPU
	// of node NodeName planned by the Ready of Seq Run (see
	// Outcome.AssumeMIG): the GPU is no longer reconfiguring. An event
	// about another change, or a GPU with none in flight, is ignored (a
	// late answer).
	EventMIGApplied
	// EventMIGFailed: the backend did not make the assumed (or unknown)
	// MIG change of GPU GPU of NodeName, Seq Run; Reason says why. The old
	// layout is booked again, the binds not yet confirmed on instances the
	// old layout does not have are withdrawn (pending again, no try
	// counted), and no MIG change is planned for Config.MIG.RetryBackoff.
	// Late answers are ignored as for EventMIGApplied.
	EventMIGFailed
	// EventMIGUnknown: the MIG change call of GPU GPU of NodeName, Seq
	// Run, timed out: the backend may make it yet. The GPU stays
	// reconfiguring until EventMIGApplied or EventMIGFailed.
	EventMIGUnknown
)

func (k EventKind) String() string {
	switch k {
	case EventTick:
		return "tick"
	case EventJobSubmitted:
		return "job-submitted"
	case EventJobFinished:
		return "job-finished"
	case EventJobCancelled:
		return "job-cancelled"
	case EventJobCheckpointed:
		return "job-checkpointed"
	case EventJobAdopted:
		return "job-adopted"
	case EventNodeAdded:
		return "node-added"
	case EventNodeChanged:
		return "node-changed"
	case EventNodeFailed:
		return "node-failed"
	case EventDevicesReported:
		return "devices-reported"
	case EventArraySubmitted:
		return "array-submitted"
	case EventReservationSet:
		return "reservation-set"
	case EventReservationDeleted:
		return "reservation-deleted"
	case EventServiceSet:
		return "service-set"
	case EventServiceScaled:
		return "service-scaled"
	case EventServiceDeleted:
		return "service-deleted"
	case EventBindApplied:
		return "bind-applied"
	case EventBindFailed:
		return "bind-failed"
	case EventBindUnknown:
		return "bind-unknown"
	case EventReleased:
		return "released"
	case EventPreemptApplied:
		return "preempt-applied"
	case EventPreemptFailed:
		return "preempt-failed"
	case EventPreemptUnknown:
		return "preempt-unknown"
	case EventResizeFailed:
		return "resize-failed"
	case EventBindDeferred:
		return "bind-deferred"
	case EventMIGApplied:
		return "mig-applied"
	case EventMIGFailed:
		return "mig-failed"
	case EventMIGUnknown:
		return "mig-unknown"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one input of Step. Every event carries its time; an event
// before the engine's clock is an error. Use the constructors (Tick,
// Submitted, ...) to fill the fields each kind needs.
type Event struct {
	Kind EventKind
	Time time.Time
	// Job: EventJobSubmitted, EventJobAdopted. Ownership passes to the
	// engine: the caller must not modify it afterwards.
	Job *queue.Job
	// JobID: EventJobFinished, EventJobCancelled, EventJobCheckpointed,
	// EventDevicesReported, the bind outcomes, EventReleased.
	JobID string
	// Run: the bind outcomes (EventBindApplied, EventBindFailed,
	// EventBindUnknown): the run the bind was about (Bind.Run).
	Run uint64
	// Reason: EventBindFailed: the backend's error, shown while the job
	// waits or is held.
	Reason string
	// Members: EventJobAdopted, EventDevicesReported: where the job runs.
	Members []Member
	// Started: EventJobAdopted: when the job really started (may be before
	// the engine's clock). Zero: Time.
	Started time.Time
	// Node: EventNodeAdded (the whole spec), EventNodeChanged (Name, State,
	// Labels).
	Node topo.NodeSpec
	// NodeName: EventNodeFailed, the MIG outcomes.
	NodeName string
	// GPU: the MIG outcomes (EventMIGApplied, EventMIGFailed,
	// EventMIGUnknown): the node-local GPU index; Run carries the change's
	// Seq.
	GPU int
	// Failed: EventJobFinished: the job failed (FinishedFailed); false:
	// it succeeded.
	Failed bool
	// Tasks and Throttle: EventArraySubmitted.
	Tasks, Throttle int
	// Reservation: EventReservationSet, EventReservationDeleted (Name).
	Reservation *AdvanceReservation
	// Service: EventServiceSet. Ownership passes to the engine.
	Service *Service
	// ServiceName: EventServiceScaled, EventServiceDeleted.
	ServiceName string
	// Desired: EventServiceScaled.
	Desired int
}

// Tick returns a clock event.
func Tick(at time.Time) Event { return Event{Kind: EventTick, Time: at} }

// Submitted returns a submission event.
func Submitted(at time.Time, j *queue.Job) Event {
	return Event{Kind: EventJobSubmitted, Time: at, Job: j}
}

// Finished returns a job-finished event.
func Finished(at time.Time, id string) Event {
	return Event{Kind: EventJobFinished, Time: at, JobID: id}
}

// Cancelled returns a job-cancelled event.
func Cancelled(at time.Time, id string) Event {
	return Event{Kind: EventJobCancelled, Time: at, JobID: id}
}

// Checkpointed returns a checkpoint event.
func Checkpointed(at time.Time, id string) Event {
	return Event{Kind: EventJobCheckpointed, Time: at, JobID: id}
}

// Adopted returns an event for a job already running on members.
func Adopted(at time.Time, j *queue.Job, members []Member) Event {
	return Event{Kind: EventJobAdopted, Time: at, Job: j, Members: members}
}

// AdoptedSince is Adopted for a job that started at started (the
// backend's start time, before at): its expected end and minimum runtime
// count from then.
func AdoptedSince(at, started time.Time, j *queue.Job, members []Member) Event {
	return Event{Kind: EventJobAdopted, Time: at, Job: j, Members: members, Started: started}
}

// NodeAdded returns a node-added event.
func NodeAdded(at time.Time, n topo.NodeSpec) Event {
	return Event{Kind: EventNodeAdded, Time: at, Node: n}
}

// NodeChanged returns a node-changed event: the node's new state and labels.
func NodeChanged(at time.Time, name string, st topo.NodeState, labels map[string]string) Event {
	return Event{Kind: EventNodeChanged, Time: at, Node: topo.NodeSpec{Name: name, State: st, Labels: labels}}
}

// NodeFailed returns a node-failed event.
func NodeFailed(at time.Time, name string) Event {
	return Event{Kind: EventNodeFailed, Time: at, NodeName: name}
}

// BindApplied returns the event that the assumed bind of run of job id
// was applied (see Outcome.AssumeBinds).
func BindApplied(at time.Time, id string, run uint64) Event {
	return Event{Kind: EventBindApplied, Time: at, JobID: id, Run: run}
}

// BindFailed returns the event that the bind of run of job id failed, for
// reason (empty: withdrawn, see EventBindFailed).
func BindFailed(at time.Time, id string, run uint64, reason string) Event {
	return Event{Kind: EventBindFailed, Time: at, JobID: id, Run: run, Reason: reason}
}

// PreemptApplied returns the event that the assumed preemption of run of
// the victim id was taken by the backend (see Outcome.AssumePreemptions).
func PreemptApplied(at time.Time, id string, run uint64) Event {
	return Event{Kind: EventPreemptApplied, Time: at, JobID: id, Run: run}
}

// PreemptFailed returns the event that the preemption of run of the victim
// id failed, for reason.
func PreemptFailed(at time.Time, id string, run uint64, reason string) Event {
	return Event{Kind: EventPreemptFailed, Time: at, JobID: id, Run: run, Reason: reason}
}

// PreemptUnknown returns the event that the preemption call of run of the
// victim id timed out.
func PreemptUnknown(at time.Time, id string, run uint64) Event {
	return Event{Kind: EventPreemptUnknown, Time: at, JobID: id, Run: run}
}

// ResizeFailed returns the event that the grow of run of the elastic job
// id by added failed, for reason.
func ResizeFailed(at time.Time, id string, run uint64, added []Member, reason string) Event {
	return Event{Kind: EventResizeFailed, Time: at, JobID: id, Run: run, Members: added, Reason: reason}
}

// BindDeferred returns the event that the bind of run of job id was not
// made yet, for reason (see EventBindDeferred).
func BindDeferred(at time.Time, id string, run uint64, reason string) Event {
	return Event{Kind: EventBindDeferred, Time: at, JobID: id, Run: run, Reason: reason}
}

// BindUnknown returns the event that the bind call of run of job id timed
// out, its outcome unknown.
func BindUnknown(at time.Time, id string, run uint64) Event {
	return Event{Kind: EventBindUnknown, Time: at, JobID: id, Run: run}
}

// Released returns the event that releases the held job id.
func Released(at time.Time, id string) Event {
	return Event{Kind: EventReleased, Time: at, JobID: id}
}

// MIGApplied returns the event that the assumed MIG change r was made by
// the backend (see Outcome.AssumeMIG).
func MIGApplied(at time.Time, r MIGReconfiguration) Event {
	return Event{Kind: EventMIGApplied, Time: at, NodeName: r.Node, GPU: r.GPU, Run: r.Seq}
}

// MIGFailed returns the event that the MIG change r failed, for reason.
func MIGFailed(at time.Time, r MIGReconfiguration, reason string) Event {
	return Event{Kind: EventMIGFailed, Time: at, NodeName: r.Node, GPU: r.GPU, Run: r.Seq, Reason: reason}
}

// MIGUnknown returns the event that the call of the MIG change r timed
// out, its outcome unknown.
func MIGUnknown(at time.Time, r MIGReconfiguration) Event {
	return Event{Kind: EventMIGUnknown, Time: at, NodeName: r.Node, GPU: r.GPU, Run: r.Seq}
}
