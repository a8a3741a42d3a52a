// Package backends connects berth's deterministic engine to clusters: the
// small interfaces a backend implements, and the Runner that drives an
// engine against one.
//
// # Interfaces
//
// A backend is read through Inventory (the nodes and topology, and the
// jobs already running), written through Actuator (bind one member of a
// gang, unbind it, preempt a job, change a MIG layout) and watched through
// Events (job and node changes, stamped with the backend's clock). Every
// method takes a context first. Errors wrapping ErrRefused are final
// refusals; any other Actuator error is taken as transient and retried.
// backends/sim is the in-memory backend on a virtual clock; Feed turns
// watchers that push changes from their own goroutines into an Events
// stream on the wall clock, for real backends.
//
// # Runner
//
// Runner.Run builds the engine from the inventory (or restores it from
// RunnerConfig.Store, a FileStore by default, which it saves on an
// interval and at shutdown), reconciles it with the backend (adopting the
// running jobs; with a PendingReporter, submitting its pending ones), and
// loops:
//
//	evs := backend.Next(ctx, wake)   // events, or a wake-up (tick)
//	engine.Step(ev) for each
//	rd := engine.Ready()             // only when something changed
//	apply rd: preemptions, resizes, binds (every member of every gang in
//	          parallel, at most Parallelism calls in flight, each retried
//	          with exponential backoff), then MIG changes (the same rules),
//	          all on goroutines, assumed (their outcomes come back as
//	          events: BindApplied, PreemptFailed, MIGApplied, ...)
//	engine.Advance(rd, outcome)      // AssumeBinds, AssumePreemptions,
//	                                 // AssumeMIG
//
// A backend whose gangs are one unit (a SLURM job) implements GangBinder:
// the Runner then binds each gang with one BindGang call, all or nothing.
//
// Wake-ups come from Engine.NextWake (grace periods, bind back-offs,
// overruns of estimates, reservations coming due, the MIG back-off),
// from preemption deadlines and retries after refusals, an immediate
// cycle after applied MIG changes (it places the jobs they serve), and an
// optional periodic tick. Every backend call but Next is bounded by
// RunnerConfig.CallTimeout; a job whose binds keep failing is retried
// with a growing backoff (engine.Config.BindRetryMax). See
// docs/reliability.md. Run returns nil when the event stream ends
// (ErrClosed) and ctx.Err() when ctx is cancelled, after the cycle being
// applied was finished or rolled back and advanced.
//
// One bad event never stops Run: an event the engine rejects (a
// submission naming an unknown queue, a job that can never fit, a finish
// for an unknown job) is logged and skipped unless OnStepError says
// otherwise. RunnerConfig.Logger receives decisions, refusals and retries
// with job IDs as attributes; backends/promcollector turns the Observe
// hook into Prometheus metrics (docs/backends/observability.md).
//
// RunnerConfig.Recorder receives a JobRecord for every step of every
// job's life (submission, pending reason, start, preemption, requeue,
// resize, end) with its nodes, GPUs and exact GPU usage; a backend that
// implements AttributeReporter adds GPU UUIDs, driver and image. Package
// accounting stores them (docs/accounting.md).
//
// # Concurrency
//
// The Runner is the only place in berth with goroutines and a clock: Run
// owns the engine and runs on the caller's goroutine; it starts goroutines
// only to call the Actuator in parallel (errgroup with a limit), and waits
// for them before it advances. Actuator implementations must therefore be
// safe for concurrent use; Inventory and Events are called from Run's
// goroutine only. Runner.View may be called from any goroutine. The clock
// is injected (Clock): RealClock in production, a simulator's virtual
// clock in replays, so that replays stay deterministic.
//
// # Usage
//
//	s, _ := sim.New(sim.Config{Cluster: spec, Start: t0})
//	_ = s.Submit(job, 2*time.Hour)
//	r, err := backends.NewRunner(backends.RunnerConfig{
//		Engine:  engine.Config{Policy: queue.StrictPriority(), Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}},
//		Backend: s,
//		Clock:   s,
//	})
//	err = r.Run(ctx) // nil once every job has run
package backends
