package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berthsched/berth/engine"
)

// Retry configures the retries of transient Actuator errors: Attempts
// calls in all, waiting Initial, 2 x Initial, ... (at most Max) between
// them on the Runner's Clock.
type Retry struct {
	Attempts int           // zero: 3
	Initial  time.Duration // zero: 100 ms
	Max      time.Duration // zero: 5 s
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Engine configures the engine the Runner builds. Its Cluster is
	// replaced by the backend's Inventory; a zero Start becomes
	// Clock.Now().
	Engine engine.Config
	// Backend is the cluster driven. Required.
	Backend Backend
	// Clock is the Runner's time (backoff, ticks). Nil: RealClock.
	Clock Clock
	// Parallelism bounds the Actuator calls in flight. Zero: 16.
	Parallelism int
	Retry       Retry
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
	// with what was decided and what the backend refused.
	Observe func(c Cycle)
}

// Cycle is one scheduling cycle as the Runner applied it.
type Cycle struct {
	// Ready is the engine's output. Read-only.
	Ready engine.Ready
	// Outcome is what was reported to Advance.
	Outcome engine.Outcome
	// Errors are failures that no refusal could report: a rollback unbind
	// that failed after its retries, a shrink that failed. (A MIG change
	// that failed finally is in Outcome.RefusedMIG.)
	// The backend may then disagree with the engine.
	Errors []error
	// View is the engine's view after the cycle.
	View *engine.View
	// Duration is the time the cycle took on the Runner's Clock: the
	// engine's Ready, the Actuator calls and Advance.
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
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, clock: cfg.Clock, log: log}, nil
}

// View returns the engine's latest published view, or nil before Run has
// built the engine. Safe from any goroutine.
func (r *Runner) View() *engine.View {
	if e := r.eng.Load(); e != nil {
		return e.View()
	}
	return nil
}

// Run reads the backend's inventory, builds the engine, adopts the running
// jobs, then loops: wait for events (or a wake-up), step them, run a cycle
// if anything changed, apply it, advance. It returns nil when the event
// stream ends (ErrClosed), ctx.Err() when ctx is cancelled (a cycle being
// applied is finished or rolled back first, and advanced), and otherwise
// the first error that stops it: inventory, engine (ErrEngine) or events.
// Run may be called once.
func (r *Runner) Run(ctx context.Context) error {
	if r.ran.Swap(true) {
		return fmt.Errorf("%w: Run called twice", ErrInvalidConfig)
	}
	be := r.cfg.Backend
	spec, err := be.Cluster(ctx)
	if err != nil {
		return fmt.Errorf("backends: inventory: %w", err)
	}
	running, err := be.Running(ctx)
	if err != nil {
		return fmt.Errorf("backends: inventory: %w", err)
	}
	ecfg := r.cfg.Engine
	ecfg.Cluster = spec
	if ecfg.Start.IsZero() {
		ecfg.Start = r.clock.Now()
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrEngine, err)
	}
	r.eng.Store(eng)
	for _, rj := range running {
		at := rj.Start
		if at.Before(eng.Now()) {
			at = eng.Now()
		}
		if err := r.step(eng, engine.Adopted(at, rj.Job, rj.Members)); err != nil {
			return err
		}
	}
	lastTick := eng.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wake := r.nextWake(eng.Now(), lastTick)
		if w, ok := eng.NextWake(); ok && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
		evs, err := be.Next(ctx, wake)
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
			now := r.clock.Now()
			if now.Before(eng.Now()) {
				now = eng.Now()
			}
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
	}
}

func (r *Runner) step(eng *engine.Engine, ev engine.Event) error {
	err := eng.Step(ev)
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

// cycle runs one cycle, applies it and advances the engine. A cancelled
// ctx stops new Actuator calls; what was applied is kept or rolled back,
// and the engine advanced, before ctx.Err() comes back.
func (r *Runner) cycle(ctx context.Context, eng *engine.Engine) error {
	began := r.clock.Now()
	rd := eng.Ready()
	out, errs := r.apply(ctx, &rd)
	if err := eng.Advance(rd, out); err != nil {
		return fmt.Errorf("%w: advance: %w", ErrEngine, err)
	}
	took := r.clock.Now().Sub(began)
	r.logCycle(ctx, &rd, &out, errs)
	now := eng.Now()
	for _, p := range rd.Preemptions {
		if !slices.Contains(out.RefusedPreemptions, p.Victim) {
			r.addWake(p.Deadline)
		}
	}
	if len(out.RefusedBinds)+len(out.RefusedPreemptions)+len(out.RefusedResizes) > 0 {
		// Refusals make the engine dirty; retry them later, not at once.
		r.addWake(now.Add(max(r.cfg.Engine.BindRetryBackoff, r.cfg.Retry.Initial)))
	}
	if len(out.RefusedMIG) > 0 {
		// The engine plans no change for its MIG backoff; look again then.
		r.addWake(now.Add(migRetryBackoff(r.cfg.Engine.MIG.RetryBackoff)))
	}
	if len(out.RefusedMIG) < len(rd.MIG) {
		// Applied changes serve blocked jobs, which the next cycle places:
		// run it now rather than at the next event.
		r.addWake(now)
	}
	if r.cfg.Observe != nil {
		r.cfg.Observe(Cycle{Ready: rd, Outcome: out, Errors: errs, View: eng.View(), Duration: took})
	}
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

// apply carries out rd: preemptions first (victims stop before GPUs are
// reused), then resizes, binds and MIG changes. It returns the refusals
// for Advance and the errors no refusal can report.
func (r *Runner) apply(ctx context.Context, rd *engine.Ready) (engine.Outcome, []error) {
	var out engine.Outcome
	var errs []error
	act := r.cfg.Backend

	// Preemptions.
	perr := make([]error, len(rd.Preemptions))
	r.each(ctx, len(rd.Preemptions), func(ctx context.Context, i int) {
		perr[i] = r.retry(ctx, func(ctx context.Context) error { return act.Preempt(ctx, rd.Preemptions[i]) })
	})
	for i, err := range perr {
		if err != nil {
			out.RefusedPreemptions = append(out.RefusedPreemptions, rd.Preemptions[i].Victim)
		}
	}

	// Resizes: shrinks cannot be refused; a grow is a gang of its own.
	for _, rs := range rd.Resizes {
		for _, m := range rs.Remove {
			if err := r.retry(ctx, func(ctx context.Context) error { return act.UnbindMember(ctx, rs.Job, m) }); err != nil {
				errs = append(errs, fmt.Errorf("backends: shrink of %q on %s: %w", rs.Job, m.Node, err))
			}
		}
	}
	grows := make([]gangBind, 0, len(rd.Resizes))
	for _, rs := range rd.Resizes {
		if len(rs.Add) > 0 {
			grows = append(grows, gangBind{job: rs.Job, members: rs.Add})
		}
	}
	for _, job := range r.bindGangs(ctx, grows, &errs) {
		out.RefusedResizes = append(out.RefusedResizes, job)
	}

	// Binds.
	binds := make([]gangBind, len(rd.Binds))
	for i, b := range rd.Binds {
		binds[i] = gangBind{job: b.Job, members: b.Members}
	}
	out.RefusedBinds = r.bindGangs(ctx, binds, &errs)

	// MIG: after the binds, whose created instances the changes' From
	// layouts already hold. A change that fails finally (refused, or
	// transient past its retries) is reported refused: the engine keeps
	// its old layout and backs off.
	merr := make([]error, len(rd.MIG))
	r.each(ctx, len(rd.MIG), func(ctx context.Context, i int) {
		merr[i] = r.retry(ctx, func(ctx context.Context) error { return act.ApplyMIG(ctx, rd.MIG[i]) })
	})
	for i, err := range merr {
		if err != nil {
			out.RefusedMIG = append(out.RefusedMIG, rd.MIG[i])
		}
	}
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
		return r.bindWhole(ctx, gb, gangs)
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
		if failed[t.g] && res[i] == nil {
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
// leaves nothing bound on failure, so there is nothing to roll back.
func (r *Runner) bindWhole(ctx context.Context, gb GangBinder, gangs []gangBind) []string {
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
	}
	return refused
}

// each calls f(ctx, i) for i in [0, n), at most Parallelism at a time.
func (r *Runner) each(ctx context.Context, n int, f func(ctx context.Context, i int)) {
	if n == 1 || r.cfg.Parallelism == 1 {
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

// retry calls f until it succeeds, fails with ErrRefused, ctx is done, or
// the attempts run out, backing off on the clock in between.
func (r *Runner) retry(ctx context.Context, f func(ctx context.Context) error) error {
	wait := r.cfg.Retry.Initial
	var err error
	for attempt := 1; ; attempt++ {
		if err = ctx.Err(); err != nil {
			return err
		}
		if err = f(ctx); err == nil || errors.Is(err, ErrRefused) || attempt >= r.cfg.Retry.Attempts {
			return err
		}
		r.log.Warn("actuator call failed, retrying", "attempt", attempt, "wait", wait, "err", err)
		if serr := r.clock.Sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (gave up: %w)", err, serr)
		}
		wait = min(2*wait, r.cfg.Retry.Max)
	}
}
