// Package sim is berth's in-memory backend: a simulated GPU cluster on a
// virtual clock, for unit tests, trace replays and benchmarks.
//
// A Sim implements backends.Backend (Inventory, Actuator, Events) and
// backends.Clock, so a backends.Runner drives the engine against it
// exactly as against a real cluster:
//
//   - Submit schedules a job's submission at its Submit time; once its
//     first member is bound it runs for the given runtime (the trace's
//     duration) and is then reported finished.
//   - Next moves the virtual clock to the next instant with events (or to
//     the Runner's wake-up) and returns that instant's events: finishes
//     (by job ID), node failures and recoveries, then submissions (in
//     submission order).
//   - BindMember checks what it is told: a GPU already held, an unknown
//     GPU, node or job, or a down node is refused (backends.ErrRefused);
//     impossible binds are also kept as Violations, so tests can assert
//     that the engine never double-books.
//   - Preempt stops a job at once without reporting it finished (the
//     engine requeues it); it reruns from the start.
//   - FailNode and RecoverNode inject node failures; RefuseBinds and
//     FailBinds inject refused and transient bind failures, keyed by job
//     and node so that they do not depend on call order.
//
// Outcomes gives every job's submit, start, end, GPUs and lost runs;
// State the occupancy (busy GPUs, free GPUs per node) at the current
// instant.
//
// # Concurrency and determinism
//
// Every method is safe for concurrent use (one mutex). Decisions take no
// virtual time and Sleep returns at once. Events of one instant are
// delivered in a fixed order, so the same workload and engine config give
// the same outcomes whatever the order of the Runner's parallel binds.
package sim
