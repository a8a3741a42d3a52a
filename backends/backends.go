package backends

import (
	"context"
	"errors"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Errors of the backend interfaces and the Runner. Backends wrap them with
// details; match them with errors.Is.
var (
	// ErrRefused: the backend will not apply a decision (the node is gone
	// or down, the GPUs are taken, the job is unknown). It is permanent for
	// that decision: the Runner does not retry it and reports it to
	// Advance as refused. Any other error from an Actuator is taken as
	// transient and retried with backoff.
	ErrRefused = errors.New("backends: decision refused")
	// ErrClosed: the event stream has ended (a simulation ran out of
	// events, or the backend shut down). Run returns nil on it.
	ErrClosed = errors.New("backends: event stream closed")
	// ErrInvalidConfig: a RunnerConfig field is invalid.
	ErrInvalidConfig = errors.New("backends: invalid runner config")
	// ErrEngine: the engine rejected an event or an Advance; the wrapped
	// error is the engine's.
	ErrEngine = errors.New("backends: engine error")
	// ErrCallTimeout: a backend call did not return within
	// RunnerConfig.CallTimeout. It is not tried again; its outcome is
	// unknown (a bind or a preemption stays booked until the backend's
	// answer, a stop's GPUs stay fenced), and a MIG change is reported
	// refused.
	ErrCallTimeout = errors.New("backends: backend call timed out")
)

// RunningJob is a job the backend already runs when the Runner starts: it
// is adopted by the engine (engine.Adopted) with its members.
type RunningJob struct {
	Job     *queue.Job
	Members []engine.Member
	Start   time.Time
}

// Inventory reads what the backend has: nodes and the jobs already
// running. It is called once, when Run starts (Running may act on what it
// finds, e.g. give back a job bound but not started: it is not polled).
type Inventory interface {
	// Cluster returns the nodes and topology. The result is owned by the
	// caller.
	Cluster(ctx context.Context) (topo.Spec, error)
	// Running returns the jobs running now. The result is owned by the
	// caller; the jobs must not be modified afterwards.
	Running(ctx context.Context) ([]RunningJob, error)
}

// Actuator applies the engine's decisions. The Runner calls its methods
// from several goroutines at once (bounded by RunnerConfig.Parallelism),
// so implementations must be safe for concurrent use. Arguments are
// read-only. An error wrapping ErrRefused is final for that call; any
// other error is retried with backoff.
type Actuator interface {
	// BindMember starts one member of job on m.Node, on GPUs m.GPUs. A
	// gang is bound member by member; when some members fail the Runner
	// unbinds the others and reports the bind refused.
	BindMember(ctx context.Context, job string, m engine.Member) error
	// UnbindMember stops a member that BindMember started: rollback of a
	// half-bound gang, and the shrink of an elastic job. Unbinding a member
	// that is not bound returns nil.
	UnbindMember(ctx context.Context, job string, m engine.Member) error
	// Preempt stops a running job within p.Deadline. The backend must not
	// report the job finished: the engine requeues it, once Preempt has
	// returned nil (its GPUs stay booked until then, past the deadline if
	// need be), at the deadline. A Preempt called after p.Deadline (it
	// queued behind the job's earlier calls) returns once the job is gone:
	// its GPUs are reused at once.
	Preempt(ctx context.Context, p engine.Preemption) error
	// ApplyMIG reconfigures the MIG layout of one GPU.
	ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error
}

// RunningReporter is an optional Backend method for the truth after a
// timeout: RunningNow lists the jobs the backend runs now, with their
// members, like Inventory.Running but without acting on anything. It is
// called from a goroutine of its own, concurrently with every other
// method, every RunnerConfig.ReconcileInterval while a bind is unknown
// (its call timed out) and, on a real clock, periodically anyway: an
// unknown bind the backend runs on its members is adopted, one it does not
// run is stopped (UnbindMember, a no-op for members not bound) and failed,
// and a job it runs that the engine does not run there (a ghost: a bind
// that came through after it was given up) is stopped. A backend without
// it (or answering errors.ErrUnsupported) learns the truth from the late
// return of the abandoned call only: an unknown bind with no answer within
// ReconcileInterval is stopped and failed, and a ghost made by a call that
// commits later still is not found by the Runner.
type RunningReporter interface {
	RunningNow(ctx context.Context) ([]RunningJob, error)
}

// MIGReporter is an optional Backend method for the truth of a MIG change
// after a timeout: MIGLayout returns the layout GPU gpu (node-local) of
// node has now, read from the GPU, without acting on anything. The Runner
// applies MIG changes on goroutines (see RunnerConfig.CallTimeout); one
// whose call timed out is unknown, and its GPU reconfiguring, until the
// abandoned call returns or MIGLayout says: the change's To (applied), or
// its From with no call of it left in flight (failed); a From read while
// the call has not returned within RunnerConfig.ReconcileInterval gives
// the change up (failed; a call that comes through later is undone with
// the reverse change). A read that fails settles nothing. It is called
// from a goroutine of its own, concurrently with every other method,
// every ReconcileInterval while a change is unknown, and once after a
// restart for the changes the saved state held in flight. A backend
// without it (or answering errors.ErrUnsupported) learns the truth from
// the late return only: an unknown change that no answer settled within
// ReconcileInterval is given up the same way.
type MIGReporter interface {
	MIGLayout(ctx context.Context, node string, gpu int) (mig.Layout, error)
}

// ReplicaStopper is an optional Actuator method for backends that run
// services (engine.Service): StopReplica stops a replica the engine
// removed (engine.Ready.Stops: its service shrank or was deleted). The
// engine no longer tracks it and its GPUs are already free, so the
// backend must not report it finished; a replica that is not running
// (st.Running false, or already gone) is deleted if the backend keeps an
// object for it, else nothing happens (nil). The Runner calls it on a
// goroutine, before any bind on the replica's GPUs (binds may reuse
// them); a stop that fails or times out fences those GPUs until the
// backend no longer runs the replica (docs/reliability.md). A backend
// without it cannot run services: the Runner reports each stop as an
// error.
type ReplicaStopper interface {
	StopReplica(ctx context.Context, st engine.Stop) error
}

// GangBinder is an optional Actuator method for backends where a gang is
// one unit (a SLURM job): the Runner calls BindGang once per gang instead
// of BindMember per member, and never rolls a gang back member by member.
// BindGang binds every member or none: on an error nothing of the gang
// may stay bound. It is also used for the added members of an elastic
// grow (members then holds only the new ones). The same error rules as
// Actuator's apply; it is called from several goroutines at once.
type GangBinder interface {
	BindGang(ctx context.Context, job string, members []engine.Member) error
}

// Events is the stream of job and node changes.
type Events interface {
	// Next blocks until at least one change has happened, the backend's
	// clock reaches wake (a zero wake: no wake-up), or ctx is done. It
	// returns the changes in time order, stamped with the backend's clock;
	// an empty slice with a nil error means wake was reached. The slice is
	// owned by the caller. Errors: ErrClosed when the stream has ended,
	// ctx.Err() when ctx is done. Next is called by one goroutine at a
	// time.
	Next(ctx context.Context, wake time.Time) ([]engine.Event, error)
}

// EventsInto is optional for an Events: NextInto is Next that appends the
// changes to buf[:0] instead of a new slice (a nil buf: a new one). With
// RunnerConfig.RecycleEvents, the Runner on a virtual clock passes back
// the slice of its previous answer once it has stepped those events, so
// a simulator that returns a batch of events per call allocates none
// (sim.Sim implements it).
type EventsInto interface {
	NextInto(ctx context.Context, wake time.Time, buf []engine.Event) ([]engine.Event, error)
}

// Backend is everything the Runner needs of a cluster.
type Backend interface {
	Inventory
	Actuator
	Events
}

// Clock is the Runner's time: a real clock in production (RealClock), the
// simulator's virtual clock in replays.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits d (the backoff between retries) or until ctx is done,
	// returning ctx.Err() then. A virtual clock returns at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock. A Clock is the wall clock when it is
// RealClock or a type that embeds it (a test backend that is also its
// Runner's Clock); any other Clock is virtual: the Runner then waits for
// its binds before the clock moves, so that a simulation is deterministic
// (see docs/reliability.md).
type RealClock struct{}

// wall marks RealClock, and every type that embeds it, as the wall clock.
func (RealClock) wall() {}

// wallClock is a Clock that is the wall clock (see RealClock).
type wallClock interface{ wall() }

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits d on a timer, or until ctx is done.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
