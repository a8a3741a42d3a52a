// Package sim is berth's in-memory backend: a simulated GPU cluster on a
// virtual clock, for unit tests, trace replays and benchmarks.
//
// A Sim implements backends.Backend (Inventory, Actuator, Events) and
// backends.Clock, so a backends.Runner drives the engine against it
// exactly as against a real cluster:
//
//   - Submit schedules a job's submission at its Submit time; once its
//     first member is bound it runs for the given runtime (the trace's
//     duration) and is then reported finished. Stream gives it jobs to
//     submit as their time comes instead (a replay of millions of jobs
//     holds none before it arrives); a finished job keeps only its
//     outcome, and binding it again is refused.
//   - Next moves the virtual clock to the next instant with events (or to
//     the Runner's wake-up) and returns that instant's events: finishes
//     (by job ID), node failures and recoveries, then submissions (in
//     submission order).
//   - BindMember checks what it is told: a GPU already held, an unknown
//     GPU, node or job, or a down node is refused (backends.ErrRefused);
//     impossible binds are also kept as Violations, so tests can assert
//     that the engine never double-books.
//   - Fractional members (engine.Member.Fractional) are booked for real.
//     A node in MIG mode keeps a mig.Layout per GPU (from its MIGLayout);
//     a member holds one instance of it, created first when the member
//     says Created (and destroyed again when such a member is unbound: a
//     rolled-back bind). Shared GPUs (time-slicing, MPS, or any free GPU
//     with topo.Spec.ShareFreeGPUs) hold shares by ID and milli, at most
//     1000 milli per GPU, and are never handed out whole meanwhile. An
//     instance bound twice, one that does not exist or cannot be created,
//     a share on a GPU that is not shared or over 1000 milli are
//     violations.
//   - ApplyMIG carries out a MIG change on the GPU's layout: refused when
//     its From is not the layout (stale) or the node is down; refused and
//     a violation when it destroys an instance in use or its Destroy /
//     Create do not lead from From to To. Instances released by finished
//     jobs stay, idle, as on a real GPU. MIGLayout (backends.MIGReporter)
//     reports a GPU's layout: the Runner's truth after a change timed out.
//   - Preempt stops a job at once without reporting it finished (the
//     engine requeues it); it reruns from the start.
//   - FailNode and RecoverNode inject node failures; RefuseBinds and
//     FailBinds inject refused and transient bind failures, keyed by job
//     and node so that they do not depend on call order; RefuseMIG and
//     FailMIG the same for MIG changes, keyed by node and GPU.
//
// Outcomes gives every job's submit, start, end, GPUs (whole) and GPU
// milli held, and lost runs; State the occupancy (busy GPUs and milli,
// shares, idle GPUs per node) at the current instant; Stats the MIG and
// share counters (changes applied and refused, instances created and
// destroyed, fractional binds, the most shares at once); Layout a MIG
// GPU's layout.
//
// # Concurrency and determinism
//
// Every method is safe for concurrent use (one mutex). Decisions take no
// virtual time and Sleep returns at once. Events of one instant are
// delivered in a fixed order, so the same workload and engine config give
// the same outcomes whatever the order of the Runner's parallel binds.
//
// # After a timeout
//
// A call to the simulator never outlasts the Runner's CallTimeout by
// itself (only a wrapper that hangs does, as the fault suite's). The
// simulator is a backends.RunningReporter: RunningNow lists the bound
// members, so after a bind timed out the Runner learns at once whether it
// came through (adopted) or not (fenced, failed), and finds ghosts.
package sim
