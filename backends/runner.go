package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Retry configures the retries of transient Actuator errors: Attempts
// calls in all, waiting Initial, 2 x Initial, ... (at most Max) between
// them on the Runner's Clock.
type Retry struct {
	Attempts int           // zero: 3
	Initial  time.Duration // zero: 100 ms
	Max      time.Duration // zero: 5 s
}

// DefaultBindRetryMax is the cap of the engine's bind retry backoff that
// a Runner sets when RunnerConfig.Engine.BindRetryMax is zero.
const DefaultBindRetryMax = 10 * time.Minute

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Engine configures the engine the Runner builds. Its Cluster is
	// replaced by the backend's Inventory; a zero Start becomes
	// Clock.Now(); a zero BindRetryBackoff becomes Retry.Initial and a
	// zero BindRetryMax DefaultBindRetryMax (a job whose binds keep
	// failing is tried less and less often).
	Engine engine.Config
	// Backend is the cluster driven. Required.
	Backend Backend
	// Clock is the Runner's time (backoff, ticks). Nil: RealClock.
	Clock Clock
	// Parallelism bounds the Actuator calls in flight. Zero: 16.
	Parallelism int
	// Inline makes every Actuator call on the Runner's own goroutine, one
	// at a time and without CallTimeout's bound: no goroutine, context or
	// timer per call. Only for a Backend whose calls return at once and
	// never block, and whose Sleep does not wait (the simulator on a
	// virtual clock: replay.Run sets it); with any other, a hung call
	// stops the Runner. Parallelism and CallTimeout are then unused.
	Inline bool
	// RecycleEvents hands the slice of each answer of the Backend's
	// events back to its next call, once those events were stepped, when
	// the Backend implements EventsInto (on a virtual clock; the simulator
	// does): a replay then allocates no slice of events per batch. Set it
	// only when the Backend's NextInto is its Next: a wrapper that embeds
	// the simulator and overrides Next would be bypassed (replay.Run sets
	// it, the simulator being its Backend itself).
	RecycleEvents bool
	Retry         Retry
	// TickInterval, when positive, wakes the engine at least this often.
	// Zero: the Runner wakes only for events and when the engine asks
	// (Engine.NextWake: grace periods, bind retries, overruns,
	// reservations, the MIG back-off).
	TickInterval time.Duration
	// OnStepError decides what an event the engine rejects does: a nil
	// return skips the event, an error stops Run with it. Nil: the event
	// is logged (Logger, level Warn) and skipped, so one bad event (a
	// submission naming an unknown queue, a finish for an unknown job)
	// never stops Run.
	OnStepError func(ev engine.Event, err error) error
	// Logger, if set, receives what the Runner does, with the job ID as
	// the attribute "job": rejected events and submissions, refusals and
	// retries at Warn; failures no refusal reports at Error; preemptions
	// and MIG changes at Info; binds and resizes at Debug. Nil: no logs.
	Logger *slog.Logger
	// Observe, if set, is called after every cycle, on Run's goroutine,
	// with what was decided, what the backend refused, and the outcomes of
	// earlier binds that came back since the cycle before. Its
	// Cycle.Ready.Pending and Cycle.View list every pending job's status:
	// after a cycle whose walk stopped early (the engine's default, see
	// engine.Config.EagerPending) the Runner computes the statuses of the
	// jobs after the cut (engine.Engine.PendingAll) for Observe, the
	// Recorder's waits and autoscaling, unless ObserveWalkedOnly.
	Observe func(c Cycle)
	// ObserveWalkedOnly spares that computation for an Observe that reads
	// no pending statuses (a replay's progress): Cycle.Ready.Pending then
	// lists the jobs the walk reached, Cycle.Ready.Unwalked counts the
	// others. A Recorder or autoscaling still gets every status.
	ObserveWalkedOnly bool
	// CallTimeout bounds every call to the backend except Events.Next
	// (which waits for events by design): each Actuator attempt, and the
	// Inventory calls (not the Store's, which are local). A call still
	// running then is abandoned (its context is cancelled and the Runner
	// stops waiting for it; its goroutine is left to return on its own)
	// without more attempts. A bind that timed out is unknown, not failed:
	// the job stays booked (engine.ReasonBindingUnknown) until the
	// abandoned call returns or the backend's Running list says whether it
	// runs (see ReconcileInterval). Binds, preemptions, replica stops,
	// resizes and MIG changes run on goroutines, so a hung call delays only
	// its own job (a preemption that timed out is unknown too: the victim
	// stays booked until the backend's answer), or, for a MIG change, the
	// binds that wait for its GPU: the change is unknown, and its GPU
	// reconfiguring, until the abandoned call returns or the backend's
	// layout (MIGReporter) says, and given up after ReconcileInterval
	// (see docs/reliability.md). Zero: 30 s.
	CallTimeout time.Duration
	// MaxBindTries: a job whose binds failed this many times in a row is
	// held (engine.ReasonHeld, with the last error) until released
	// (engine.Released). It sets Engine.MaxBindTries when that is zero.
	// Zero: 5.
	MaxBindTries int
	// ReconcileInterval: how often the Runner reads the backend's running
	// jobs (Inventory.Running) while a bind is unknown, to learn whether
	// it runs, and, on a real clock, anyway, to find jobs running that the
	// engine does not run there (a bind that came through after it was
	// given up), which it stops. Zero: one minute.
	ReconcileInterval time.Duration
	// Store, if set, keeps the engine's state for a restart without loss:
	// Run restores the engine from it (engine.Restore) when it holds a
	// state, else starts a new engine with its journal on; it saves every
	// SaveInterval (on Clock) and when Run returns. Use FileStore for a
	// file written atomically. Either way Run then reconciles the engine
	// with the backend's inventory (see Reconciled): jobs the engine runs
	// that the backend no longer runs are finished (or requeued, when the
	// backend reports them pending: PendingReporter), jobs the backend
	// runs that the engine does not are adopted, and, with a
	// PendingReporter, pending jobs are submitted or dropped to match.
	// The engine config must be the same as when the state was saved.
	Store StateStore
	// SaveInterval: how often the state is saved while Run runs. Zero:
	// one minute.
	SaveInterval time.Duration
	// CompactAfter: a save compacts the journal first (engine.Compact:
	// a snapshot of the live state replaces the records) once it holds
	// at least this many records since the last snapshot, so that the
	// state and a restore are bounded by the live jobs, not the history.
	// Engines Compact refuses (ErrNotCompactable) keep their whole
	// journal. Zero: DefaultCompactAfter; negative: never.
	CompactAfter int
	// Recorder, if set, receives a JobRecord for every step of every
	// job's life (submission, pending reason, start, preemption, requeue,
	// end), for accounting and audit (see package accounting). Nil: none.
	Recorder Recorder
	// Autoscale, if set, turns on node autoscaling (docs/autoscaling.md):
	// every AutoscaleInterval the Runner plans with autoscale.Decide over
	// the backend's pools (Provisioner.Provisioning) and the pending jobs
	// that wait for capacity (engine.ReasonCapacity, and ReasonReserved:
	// a job holding a reservation waits for GPUs too), and applies the
	// plan through the backend, which must be a Provisioner (else
	// NewRunner fails with ErrNotProvisioner). A domain's Room is the
	// pool's nodes the domain holds in all (the Runner plans with what
	// its nodes up and booting leave). The pools' BackoffUntil is the
	// Runner's to set: a failed provisioning (a ScaleUp that failed, or
	// a ProvisionFailure reported) backs its pool off AutoscaleBackoff,
	// doubling with each failure in a row up to AutoscaleBackoffMax, until
	// a node of the pool is seen up. A node is idle from the first round
	// that sees it ready with nothing on it. Runner.AutoscaleStats counts
	// what was done. Nil: no node autoscaling.
	Autoscale *autoscale.Config
	// AutoscaleInterval is the time between autoscaling rounds on the
	// Runner's Clock. Zero: DefaultAutoscaleInterval (one minute).
	AutoscaleInterval time.Duration
}

// Cycle is one scheduling cycle as the Runner applied it.
type Cycle struct {
	// Ready is the engine's output. Read-only.
	Ready engine.Ready
	// Outcome is what was reported to Advance. Binds are assumed
	// (Outcome.AssumeBinds): their outcomes come later, in Binds.
	Outcome engine.Outcome
	// Binds are the bind outcomes stepped into the engine since the cycle
	// before this one, in the order stepped: on a real clock those of
	// earlier cycles that came back; on a virtual clock this cycle's own
	// as well (its binds are waited for, see docs/reliability.md).
	Binds []BindResult
	// Acts are the outcomes of the other asynchronous decisions
	// (preemptions, replica stops, shrinks, grows) that came back since
	// the cycle before this one, in the order stepped (on a virtual
	// clock this cycle's own as well). A preemption the backend refused
	// is here, not in Outcome.RefusedPreemptions (the Runner assumes
	// them, Outcome.AssumePreemptions); so is a grow that failed.
	Acts []ActResult
	// Errors are failures that no refusal could report: a replica stop the
	// backend cannot make (no ReplicaStopper), an interval save that
	// failed. (A MIG change that failed is in MIG; a stop or shrink that
	// failed is in Acts, its GPUs fenced.)
	Errors []error
	// MIG are the outcomes of the MIG changes (applied asynchronously,
	// Outcome.AssumeMIG) that came back since the cycle before this one,
	// in the order stepped (on a virtual clock this cycle's own as well).
	// A change the backend refused is here, not in Outcome.RefusedMIG.
	MIG []MIGResult
	// View is the engine's view after the cycle.
	View *engine.View
	// Duration is the time the cycle took on the Runner's Clock: the
	// engine's Ready, issuing its decisions (their Actuator calls run on
	// goroutines) and Advance.
	Duration time.Duration
}

// Runner drives an engine against a backend. It is the only part of berth
// with goroutines and a clock: it feeds the backend's events into
// Engine.Step, runs cycles with Engine.Ready, applies their decisions
// with bounded parallelism and reports refusals through Engine.Advance.
//
// A Runner runs once: call Run from one goroutine. View may be called from
// any goroutine.
type Runner struct {
	cfg   RunnerConfig
	clock Clock
	log   *slog.Logger
	eng   atomic.Pointer[engine.Engine]
	wakes []time.Time // sorted
	ran   atomic.Bool

	rec      Reconciled
	jobRecs  *recorder // nil without RunnerConfig.Recorder
	lastSave time.Time
	saveErrs []error // interval saves that failed, for the next Cycle
	as       *async  // binds in flight and their outcomes (binder.go)
	// placed: the members of the jobs this Runner bound or adopted, for
	// the GPUs a replica stop frees (Ready.Stops does not name them).
	placed map[string][]engine.Member
	// leftover: events the pump took from the backend when Run stopped,
	// stepped before the save.
	leftMu   sync.Mutex
	leftover []engine.Event
	// evBuf: the slice of the last EventsInto answer, handed back to the
	// next call once its events were stepped (virtual clock only).
	evBuf []engine.Event
	auto  *autoState // node autoscaling (autoscale.go); nil: off
}

// NewRunner checks cfg and returns a Runner. Errors wrap ErrInvalidConfig.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case cfg.Backend == nil:
		return nil, bad("Backend is required")
	case cfg.Parallelism < 0:
		return nil, bad("Parallelism must not be negative, got %d", cfg.Parallelism)
	case cfg.Retry.Attempts < 0 || cfg.Retry.Initial < 0 || cfg.Retry.Max < 0:
		return nil, bad("Retry fields must not be negative, got %+v", cfg.Retry)
	case cfg.TickInterval < 0:
		return nil, bad("TickInterval must not be negative, got %v", cfg.TickInterval)
	case cfg.CallTimeout < 0:
		return nil, bad("CallTimeout must not be negative, got %v", cfg.CallTimeout)
	case cfg.SaveInterval < 0:
		return nil, bad("SaveInterval must not be negative, got %v", cfg.SaveInterval)
	case cfg.MaxBindTries < 0:
		return nil, bad("MaxBindTries must not be negative, got %d", cfg.MaxBindTries)
	case cfg.ReconcileInterval < 0:
		return nil, bad("ReconcileInterval must not be negative, got %v", cfg.ReconcileInterval)
	case cfg.Engine.CycleViewsOnly && cfg.Autoscale != nil:
		// Autoscaling reads the View's pending jobs between cycles.
		return nil, bad("Engine.CycleViewsOnly and Autoscale exclude each other")
	}
	if cfg.MaxBindTries == 0 {
		cfg.MaxBindTries = 5
	}
	if cfg.Engine.MaxBindTries == 0 {
		cfg.Engine.MaxBindTries = cfg.MaxBindTries
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = time.Minute
	}
	if cfg.CompactAfter == 0 {
		cfg.CompactAfter = DefaultCompactAfter
	}
	if cfg.SaveInterval == 0 {
		cfg.SaveInterval = time.Minute
	}
	// The engine's config is checked now, not when Run builds the engine;
	// its Cluster comes from the backend's inventory then (checked there).
	ecfg := cfg.Engine
	ecfg.Cluster = topo.Spec{}
	if err := ecfg.Validate(); err != nil {
		return nil, bad("Engine: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 16
	}
	if cfg.Retry.Attempts == 0 {
		cfg.Retry.Attempts = 3
	}
	if cfg.Retry.Initial == 0 {
		cfg.Retry.Initial = 100 * time.Millisecond
	}
	if cfg.Retry.Max == 0 {
		cfg.Retry.Max = 5 * time.Second
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	// A bind refused again and again waits longer each time (the engine's
	// backoff doubles up to BindRetryMax), so that one failing job does
	// not make a cycle every Retry.Initial forever.
	if cfg.Engine.BindRetryBackoff == 0 {
		cfg.Engine.BindRetryBackoff = cfg.Retry.Initial
	}
	if cfg.Engine.BindRetryMax == 0 {
		cfg.Engine.BindRetryMax = max(cfg.Engine.BindRetryBackoff, DefaultBindRetryMax)
	}
	if cfg.Retry.Initial > cfg.Retry.Max {
		return nil, bad("Retry.Initial (%v) must not exceed Retry.Max (%v, the default when zero)", cfg.Retry.Initial, cfg.Retry.Max)
	}
	auto, err := newAutoState(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, real := cfg.Clock.(wallClock)
	return &Runner{cfg: cfg, clock: cfg.Clock, log: log, jobRecs: newRecorder(cfg.Recorder, cfg.Backend),
		as: newAsync(cfg.Parallelism, !real), auto: auto, placed: map[string][]engine.Member{}}, nil
}

// View returns the engine's latest published view, or nil before Run has
// built the engine. Safe from any goroutine.
func (r *Runner) View() *engine.View {
	if e := r.eng.Load(); e != nil {
		return e.View()
	}
	return nil
}

// Run reads the backend's inventory, builds the engine (restored from
// RunnerConfig.Store when it holds a state), reconciles it with the
// backend (adopting the running jobs; see RunnerConfig.Store), then loops: wait for events (or a wake-up), step them, run a cycle
// if anything changed, apply it, advance. It returns nil when the event
// stream ends (ErrClosed), ctx.Err() when ctx is cancelled (a cycle being
// applied is finished or rolled back first, and advanced), and otherwise
// the first error that stops it: inventory, engine (ErrEngine) or events.
// A saved state that does not match the backend's inventory (no cluster,
// other levels or nodes, a node the engine rejects) is a
// StateMismatchError (ErrStateMismatch), returned before any cycle; the
// store is not written then.
// With a Store, the state is saved when Run returns (a failed save is
// joined to the error returned). Run may be called once.
func (r *Runner) Run(ctx context.Context) (err error) {
	if r.ran.Swap(true) {
		return fmt.Errorf("%w: Run called twice", ErrInvalidConfig)
	}
	be := r.cfg.Backend
	var spec topo.Spec
	if err := r.call(ctx, func(ctx context.Context) (err error) { spec, err = be.Cluster(ctx); return err }); err != nil {
		return fmt.Errorf("backends: inventory: %w", err)
	}
	var running []RunningJob
	if err := r.call(ctx, func(ctx context.Context) (err error) { running, err = be.Running(ctx); return err }); err != nil {
		return fmt.Errorf("backends: inventory: %w", err)
	}
	ecfg := r.cfg.Engine
	if ecfg.Start.IsZero() {
		ecfg.Start = r.clock.Now()
	}
	eng, err := r.build(ctx, ecfg, spec, running)
	if err != nil {
		return err
	}
	if err := r.settleRestored(eng, running); err != nil {
		return err
	}
	if err := r.settleRestoredMIG(eng); err != nil {
		return err
	}
	for _, rj := range running {
		r.placed[rj.Job.ID] = rj.Members
	}
	r.lastSave = r.clock.Now()
	r.as.lastPoll = r.clock.Now()
	defer func() {
		// Binds in flight end (each call within CallTimeout; those not
		// begun are withdrawn) and are stepped, so that the state saved
		// knows them; then save, whatever stopped the loop.
		r.waitIdle(context.Background(), 0)
		for _, ev := range r.takeLeftover() {
			if ev.Time.Before(eng.Now()) {
				ev.Time = eng.Now()
			}
			if serr := r.step(eng, ev); serr != nil {
				err = errors.Join(err, serr)
				break
			}
		}
		if _, serr := r.settle(context.WithoutCancel(ctx), eng); serr != nil {
			err = errors.Join(err, serr)
		}
		eng.Publish()
		if serr := r.save(context.WithoutCancel(ctx), eng); serr != nil {
			err = errors.Join(err, fmt.Errorf("backends: saving state: %w", serr))
		}
	}()
	lastTick := eng.Now()
	// The restore and the reconciliation may leave pending jobs that can
	// run now (from the saved state or the backend's Pending, on GPUs of
	// jobs that ended while no Runner ran): a cycle now, not at the
	// backend's first event, which a backend with nothing new to say
	// never sends. An engine with no pending job waits for events as
	// before.
	if pend, _ := eng.JobIDs(); len(pend) > 0 && eng.HasReady() {
		if err := r.cycle(ctx, eng); err != nil {
			return err
		}
		r.maybeSave(ctx, eng)
	}
	var evCh <-chan pumped
	if !r.as.virtual {
		pctx, stop := context.WithCancel(ctx)
		pumped := make(chan struct{})
		evCh = r.pump(pctx, pumped)
		defer func() {
			// Runs before the save above: the events the pump took from
			// the backend and could not hand over are stepped there, not
			// lost (a submission the backend reports once).
			stop()
			t := time.NewTimer(r.cfg.CallTimeout)
			defer t.Stop()
			select {
			case <-pumped:
			case <-t.C: // a Next that ignores its context
			}
		}()
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Outcomes of binds (and polls) that came back: a cycle after
		// them. (Only after them or events: a cycle whose refusals leave
		// the engine dirty is not run again at once.)
		got, err := r.settle(ctx, eng)
		if err != nil {
			return err
		}
		r.maybePoll(ctx, eng)
		r.maybeAutoscale(ctx, eng)
		if got && eng.HasReady() {
			if err := r.cycle(ctx, eng); err != nil {
				return err
			}
			r.maybeSave(ctx, eng)
			continue
		}
		wake := r.nextWake(eng.Now(), lastTick)
		if w, ok := eng.NextWake(); ok && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
		if w := r.pollWake(); !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
		if w := r.autoWake(); !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
		var evs []engine.Event
		if r.as.virtual {
			// On a virtual clock the binds in flight come back before the
			// clock moves (see async).
			if r.as.busy(true) {
				r.waitIdle(ctx, r.cfg.CallTimeout)
				if r.as.has() {
					continue
				}
			} else if r.auto != nil && r.auto.busy && r.as.has() {
				continue // an autoscaling round came back already
			}
			if bi, ok := be.(EventsInto); ok && r.cfg.RecycleEvents {
				// The previous answer's events were stepped: its slice is
				// reused (cleared, so that it keeps no job alive).
				clear(r.evBuf)
				evs, err = bi.NextInto(ctx, wake, r.evBuf[:0])
				r.evBuf = evs
			} else {
				evs, err = be.Next(ctx, wake)
			}
		} else {
			var more bool
			if evs, err, more = r.wait(ctx, evCh, wake); more {
				continue // results came: settle them
			}
		}
		switch {
		case errors.Is(err, ErrClosed):
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("backends: events: %w", err)
		}
		for _, ev := range evs {
			// A backend's clock may lag the engine's by a little (events
			// stamped before the last tick): they happen now.
			if ev.Time.Before(eng.Now()) {
				ev.Time = eng.Now()
			}
			if err := r.step(eng, ev); err != nil {
				return err
			}
		}
		if len(evs) == 0 {
			now := r.stepTime(eng)
			if err := r.step(eng, engine.Tick(now)); err != nil {
				return err
			}
			lastTick = now
		}
		r.dropWakes(eng.Now())
		if !eng.HasReady() {
			continue
		}
		if err := r.cycle(ctx, eng); err != nil {
			return err
		}
		r.maybeSave(ctx, eng)
	}
}

// pumped is one answer of Events.Next.
type pumped struct {
	evs []engine.Event
	err error
}

// pump calls Events.Next on a goroutine (a real clock: the loop waits on
// its answers, the binds' results and its own timer at once) until ctx is
// done or Next fails. Next is asked for no wake-up: the loop keeps time.
func (r *Runner) pump(ctx context.Context, done chan<- struct{}) <-chan pumped {
	ch := make(chan pumped)
	go func() {
		defer close(done)
		for {
			evs, err := r.cfg.Backend.Next(ctx, time.Time{})
			select {
			case ch <- pumped{evs, err}:
			case <-ctx.Done():
				// Taken from the backend, not handed over: Run steps them
				// before it saves (takeLeftover).
				r.leftMu.Lock()
				r.leftover = append(r.leftover, evs...)
				r.leftMu.Unlock()
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// takeLeftover returns the events the pump took from the backend after
// the loop stopped.
func (r *Runner) takeLeftover() []engine.Event {
	r.leftMu.Lock()
	defer r.leftMu.Unlock()
	evs := r.leftover
	r.leftover = nil
	return evs
}

// wait waits for the backend's events, the wake-up (evs empty: a tick),
// or results (more true), on a real clock.
func (r *Runner) wait(ctx context.Context, evCh <-chan pumped, wake time.Time) (evs []engine.Event, err error, more bool) {
	var tc <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(max(0, wake.Sub(r.clock.Now())))
		defer t.Stop()
		tc = t.C
	}
	select {
	case p := <-evCh:
		return p.evs, p.err, false
	case <-tc:
		return []engine.Event{}, nil, false
	case <-r.as.note:
		return nil, nil, true
	case <-ctx.Done():
		return nil, ctx.Err(), false
	}
}

// maybePoll starts a read of the backend's running jobs when one is due:
// at once after a late call came through for a bind already settled,
// every ReconcileInterval while a bind is unknown, and, on a real clock,
// every ReconcileInterval anyway (on a virtual one, when due at a moment
// the loop runs: a periodic wake-up would keep a simulation going for
// ever).
func (r *Runner) maybePoll(ctx context.Context, eng *engine.Engine) {
	a := r.as
	if a.polling {
		return
	}
	due := !r.clock.Now().Before(a.lastPoll.Add(r.cfg.ReconcileInterval))
	if a.pollSoon && a.noPoll {
		a.pollSoon = false // nothing to look at
	}
	if a.pollSoon || due && (len(a.unknown) > 0 || a.actsUnknown() || len(a.issued) > 0 && !a.noPoll) {
		r.pollOp(ctx, r.clock.Now())
	}
}

// pollWake is when the next poll is due, if the loop must wake for it.
func (r *Runner) pollWake() time.Time {
	a := r.as
	if a.polling || len(a.unknown) == 0 && !a.actsUnknown() && (a.virtual || a.noPoll || len(a.issued) == 0) {
		return time.Time{}
	}
	return a.lastPoll.Add(r.cfg.ReconcileInterval)
}

func (r *Runner) step(eng *engine.Engine, ev engine.Event) error {
	err := eng.Step(ev)
	switch {
	case ev.JobID != "":
		r.withdrawStale(eng, ev.JobID)
	case ev.Job == nil: // a node's change may requeue jobs being bound
		for job := range r.as.inflight {
			r.withdrawStale(eng, job)
		}
	}
	switch ev.Kind {
	case engine.EventJobFinished, engine.EventJobCancelled:
		delete(r.placed, ev.JobID)
	case engine.EventDevicesReported:
		if err == nil {
			r.placed[ev.JobID] = ev.Members
		}
	}
	if r.jobRecs != nil {
		r.jobRecs.event(ev, err)
	}
	if err == nil {
		return nil
	}
	if r.cfg.OnStepError != nil {
		return r.cfg.OnStepError(ev, err)
	}
	id := ev.JobID
	if ev.Job != nil {
		id = ev.Job.ID
	}
	r.log.Warn("event rejected, skipped", "event", ev.Kind.String(), "job", id, "node", ev.NodeName+ev.Node.Name, "err", err)
	return nil
}

// cycle runs one cycle, applies it and advances the engine. Every decision
// is issued on a goroutine and assumed (Outcome.AssumeBinds,
// AssumePreemptions, AssumeMIG): the outcomes are stepped as events when
// they come back. A cancelled ctx stops new Actuator calls; what was
// applied is kept or rolled back, and the engine advanced, before
// ctx.Err() comes back.
func (r *Runner) cycle(ctx context.Context, eng *engine.Engine) error {
	began := r.clock.Now()
	rd := eng.Ready()
	out, errs := r.apply(ctx, &rd)
	errs, r.saveErrs = append(errs, r.saveErrs...), nil
	ops := len(rd.Binds)+len(rd.Preemptions)+len(rd.Resizes)+len(rd.Stops)+len(rd.MIG) > 0
	if r.as.virtual && ops {
		// On a virtual clock the cycle's ops come back before anything
		// else happens (see async): their outcomes are stepped right after
		// the Advance, so a simulation decides as a synchronous one did.
		r.waitIdle(ctx, r.cfg.CallTimeout)
	}
	if err := eng.Advance(rd, out); err != nil {
		return fmt.Errorf("%w: advance: %w", ErrEngine, err)
	}
	if rd.Unwalked > 0 && (r.jobRecs != nil || r.auto != nil || r.cfg.Observe != nil && !r.cfg.ObserveWalkedOnly) {
		// The walk stopped early: its readers get every status, computed
		// now (before settle steps bind outcomes, after which they could
		// not be the cycle's). PendingAll publishes the View again with them.
		if all, ok := eng.PendingAll(); ok {
			rd.Pending, rd.Unwalked = all, 0
		}
	}
	if r.jobRecs != nil {
		r.jobRecs.cycle(&rd, &out)
	}
	if r.as.virtual && ops {
		if _, err := r.settle(ctx, eng); err != nil {
			return err
		}
	}
	r.noteDemand(&rd)
	took := r.clock.Now().Sub(began)
	r.logCycle(ctx, &rd, &out, errs)
	now := eng.Now()
	for _, p := range rd.Preemptions {
		r.addWake(p.Deadline)
	}
	if len(out.RefusedPreemptions)+len(out.RefusedResizes) > 0 {
		// Refusals make the engine dirty; retry them later, not at once.
		r.addWake(now.Add(max(r.cfg.Engine.BindRetryBackoff, r.cfg.Retry.Initial)))
	}
	if t, ok := eng.BindRetryAt(); ok {
		// The earliest end of a job's bind backoff (it grows with each
		// refusal): the job is placed again then.
		r.addWake(t)
	}
	if len(rd.MIG) > 0 {
		// The changes (assumed: booked) serve blocked jobs, which the next
		// cycle places (their binds run after the changes): run it now
		// rather than at the next event. A change that fails wakes the
		// loop at the end of the MIG backoff (migFailed).
		r.addWake(now)
	}
	if r.cfg.Observe != nil {
		r.cfg.Observe(Cycle{Ready: rd, Outcome: out, Binds: r.as.stepped, Acts: r.as.acts, MIG: r.as.migs, Errors: errs, View: eng.View(), Duration: took})
	}
	r.as.stepped, r.as.acts, r.as.migs = nil, nil, nil
	return ctx.Err()
}

// migRetryBackoff is engine.MIGConfig.RetryBackoff with its default.
func migRetryBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Minute
	}
	return d
}

func (r *Runner) addWake(t time.Time) {
	i, found := slices.BinarySearchFunc(r.wakes, t, func(a, b time.Time) int { return a.Compare(b) })
	if !found {
		r.wakes = slices.Insert(r.wakes, i, t)
	}
}

// dropWakes forgets the wake-ups at or before now.
func (r *Runner) dropWakes(now time.Time) {
	i := 0
	for i < len(r.wakes) && !r.wakes[i].After(now) {
		i++
	}
	r.wakes = r.wakes[i:]
}

// nextWake is the earliest wake-up: a grace period's end, a bind retry, or
// the periodic tick. Zero: none.
func (r *Runner) nextWake(now, lastTick time.Time) time.Time {
	var w time.Time
	if len(r.wakes) > 0 {
		w = r.wakes[0]
	}
	if r.cfg.TickInterval > 0 {
		if t := lastTick.Add(r.cfg.TickInterval); w.IsZero() || t.Before(w) {
			w = t
		}
	}
	if !w.IsZero() && w.Before(now) {
		w = now
	}
	return w
}

// ---------------------------------------------------------------- applying

// apply carries out rd: replica stops, preemptions and resizes, then
// binds, then MIG changes, all issued on goroutines (actops.go, binder.go,
// migops.go): the loop waits for none of them, their outcomes come back
// as events. Ops on the same job or GPU run in that order (goOp's keys):
// a bind on the GPUs of a stopped replica or a shrink runs after it; a
// MIG change runs after the binds of rd on its GPU (whose created
// instances its From already holds), and the binds of later cycles on
// that GPU after it. It returns the refusals for Advance (none: every
// decision is assumed) and the errors no refusal can report.
func (r *Runner) apply(ctx context.Context, rd *engine.Ready) (engine.Outcome, []error) {
	out := engine.Outcome{AssumeBinds: true, AssumePreemptions: true, AssumeMIG: true}
	var errs []error
	r.issueActs(ctx, rd, &errs)
	// Binds, on goroutines: their outcomes come back as events.
	r.issueBinds(ctx, rd)
	// MIG changes, on goroutines, after the binds on their GPUs.
	r.issueMIG(ctx, rd)
	return out, errs
}

type gangBind struct {
	job     string
	members []engine.Member
}

// bindGangs binds every member of every gang in parallel; a gang with a
// member that failed is rolled back (its bound members unbound) and its
// job returned, in input order.
func (r *Runner) bindGangs(ctx context.Context, gangs []gangBind, errs *[]error) []string {
	if gb, ok := r.cfg.Backend.(GangBinder); ok {
		return r.bindWhole(ctx, gb, gangs, errs)
	}
	type task struct{ g, m int }
	var tasks []task
	for g, gb := range gangs {
		for m := range gb.members {
			tasks = append(tasks, task{g, m})
		}
	}
	if len(tasks) == 0 {
		return nil
	}
	act := r.cfg.Backend
	res := make([]error, len(tasks))
	r.each(ctx, len(tasks), func(ctx context.Context, i int) {
		t := tasks[i]
		res[i] = r.retry(ctx, func(ctx context.Context) error {
			return act.BindMember(ctx, gangs[t.g].job, gangs[t.g].members[t.m])
		})
	})
	failed := make([]bool, len(gangs))
	for i, err := range res {
		if err != nil {
			failed[tasks[i].g] = true
		}
	}
	// Roll back the bound members of failed gangs, even when ctx is done:
	// a half-bound gang must not be left behind.
	var undo []task
	for i, t := range tasks {
		// A member that timed out may be bound (or become so): unbind it
		// too (unbinding a member that is not bound returns nil).
		if failed[t.g] && (res[i] == nil || errors.Is(res[i], ErrCallTimeout)) {
			undo = append(undo, t)
		}
	}
	rctx := context.WithoutCancel(ctx)
	uerr := make([]error, len(undo))
	r.each(rctx, len(undo), func(ctx context.Context, i int) {
		t := undo[i]
		uerr[i] = r.retry(ctx, func(ctx context.Context) error {
			return act.UnbindMember(ctx, gangs[t.g].job, gangs[t.g].members[t.m])
		})
	})
	for i, err := range uerr {
		if err != nil {
			t := undo[i]
			*errs = append(*errs, fmt.Errorf("backends: rollback of %q on %s: %w", gangs[t.g].job, gangs[t.g].members[t.m].Node, err))
		}
	}
	var refused []string
	for g, f := range failed {
		if f {
			refused = append(refused, gangs[g].job)
		}
	}
	return refused
}

// bindWhole binds each gang with one BindGang call, in parallel; a gang
// whose call failed (after retries) is returned, in input order. BindGang
// leaves nothing bound on failure, so there is nothing to roll back,
// except after a call that timed out (it may still bind): its members are
// unbound.
func (r *Runner) bindWhole(ctx context.Context, gb GangBinder, gangs []gangBind, errs *[]error) []string {
	res := make([]error, len(gangs))
	r.each(ctx, len(gangs), func(ctx context.Context, i int) {
		res[i] = r.retry(ctx, func(ctx context.Context) error {
			return gb.BindGang(ctx, gangs[i].job, gangs[i].members)
		})
	})
	var refused []string
	for i, err := range res {
		if err != nil {
			refused = append(refused, gangs[i].job)
		}
		if errors.Is(err, ErrCallTimeout) {
			// A timed-out BindGang may have bound the gang after all:
			// unbind its members (a no-op for those not bound).
			for _, m := range gangs[i].members {
				if uerr := r.retry(context.WithoutCancel(ctx), func(ctx context.Context) error {
					return r.cfg.Backend.UnbindMember(ctx, gangs[i].job, m)
				}); uerr != nil {
					*errs = append(*errs, fmt.Errorf("backends: rollback of timed-out %q on %s: %w", gangs[i].job, m.Node, uerr))
				}
			}
		}
	}
	return refused
}

// each calls f(ctx, i) for i in [0, n), at most Parallelism at a time.
func (r *Runner) each(ctx context.Context, n int, f func(ctx context.Context, i int)) {
	if n == 1 || r.cfg.Parallelism == 1 || r.cfg.Inline {
		for i := range n {
			f(ctx, i)
		}
		return
	}
	var g errgroup.Group
	g.SetLimit(r.cfg.Parallelism)
	for i := range n {
		g.Go(func() error {
			f(ctx, i)
			return nil
		})
	}
	_ = g.Wait() // the closures report through their own slots
}

// call runs f with CallTimeout (a wall-clock bound: backend calls take
// real time, whatever the Runner's Clock), holding one of Parallelism
// slots. A call that has not returned by then is abandoned: its context is
// cancelled, its slot freed, and call returns ErrCallTimeout without
// waiting for it, so a backend that ignores its context cannot hold the
// Runner. When ctx is cancelled, call still waits for f (which sees the
// cancellation) up to the same bound, so that what a call did is known.
func (r *Runner) call(ctx context.Context, f func(ctx context.Context) error) error {
	return r.callLate(ctx, f, nil)
}

// callLate is call; late, if set, is called with f's error when a call
// that was abandoned returns after all.
func (r *Runner) callLate(ctx context.Context, f func(ctx context.Context) error, late func(error)) error {
	if r.cfg.Inline {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", errNotBegun, err)
		}
		return cutShort(ctx, f(ctx))
	}
	slots := r.as.slots
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errNotBegun, ctx.Err())
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	done := make(chan error, 1)
	go func() { done <- f(cctx) }()
	t := time.NewTimer(r.cfg.CallTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		cancel()
		<-slots
		return cutShort(ctx, err)
	case <-t.C:
	}
	select {
	case err := <-done: // it came as the timer fired
		cancel()
		<-slots
		return cutShort(ctx, err)
	default:
	}
	cancel()
	<-slots
	if late != nil {
		r.as.mu.Lock()
		r.as.abandoned++
		r.as.abandonedTotal++
		r.as.mu.Unlock()
		go func() { late(<-done) }()
	}
	return fmt.Errorf("%w after %v", ErrCallTimeout, r.cfg.CallTimeout)
}

// errNotBegun: a call was not made (ctx was done first). Nothing of it
// was applied.
var errNotBegun = errors.New("backends: call not begun")

// errOutcomeUnknown: a call may or may not have been applied, and its
// answer does not say: it was cut short by ctx (the Runner stopping: a
// backend may have applied it before it saw the cancellation), or an
// attempt that failed with a transient error was followed by a refusal
// (the first attempt may have been applied, and the refusal says only
// that the retry could not be: a SLURM job started by the first is not
// pending any more). A bind with such an answer is unknown, like one
// that timed out: the backend's own state decides.
var errOutcomeUnknown = errors.New("backends: call outcome unknown")

// cutShort marks the error of a call that ran while ctx was cancelled as
// errOutcomeUnknown (a refusal still says nothing was applied).
func cutShort(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrRefused) {
		return err
	}
	return fmt.Errorf("%w: cut short by %w: %w", errOutcomeUnknown, context.Cause(ctx), err)
}

// retry calls f until it succeeds, fails with ErrRefused, ctx is done, or
// the attempts run out, backing off on the clock in between.
func (r *Runner) retry(ctx context.Context, f func(ctx context.Context) error) error {
	return r.retryLate(ctx, f, nil)
}

// retryLate is retry with callLate's late. An answer that follows an
// attempt failed with a transient error (which may have been applied) is
// errOutcomeUnknown when it says nothing of that attempt: a refusal, or
// ctx done before the next attempt.
func (r *Runner) retryLate(ctx context.Context, f func(ctx context.Context) error, late func(error)) error {
	wait := r.cfg.Retry.Initial
	var prev error // the last attempt's transient error
	unknown := func(err error) error {
		return fmt.Errorf("%w: %w, after an attempt that may have been applied: %w", errOutcomeUnknown, err, prev)
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if prev != nil {
				return unknown(err)
			}
			return fmt.Errorf("%w: %w", errNotBegun, err)
		}
		// A call that timed out is not retried: a backend that hangs once
		// likely hangs again, and the call may still come through (a bind
		// is unknown then; the Runner learns the truth from the backend).
		err := r.callLate(ctx, f, late)
		switch {
		case err == nil, errors.Is(err, ErrCallTimeout), errors.Is(err, errOutcomeUnknown):
			return err
		case errors.Is(err, ErrRefused), errors.Is(err, errNotBegun):
			if prev != nil {
				return unknown(err)
			}
			return err
		case attempt >= r.cfg.Retry.Attempts:
			return err
		}
		prev = err
		r.log.Warn("actuator call failed, retrying", "attempt", attempt, "wait", wait, "err", err)
		if serr := r.clock.Sleep(ctx, wait); serr != nil {
			return unknown(serr)
		}
		wait = min(2*wait, r.cfg.Retry.Max)
	}
}
