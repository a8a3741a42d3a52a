// Package engine is berth's deterministic scheduler: it decides which GPU
// jobs run, where and when, one cycle at a time, from the events it is
// given.
//
// Like etcd's raft.RawNode, an Engine is a state machine. Events go in
// through Step (job submitted, finished, cancelled, checkpointed, adopted;
// node added, changed, failed; clock tick), each carrying its time; Ready
// runs a cycle when anything changed and returns the decisions; Advance
// tells the engine which of them the backend refused. The engine starts no
// goroutine, reads no clock, uses no randomness and does no I/O: the same
// events give the same decisions, so production and simulation run the
// same code.
//
// # The cycle
//
// Each cycle runs these steps (Engine.cycle, in order):
//
//  1. Drain the lock-free intake into the pending set; victims whose grace
//     period ended go back to pending.
//  2. Update fair share (decayed usage).
//  3. Order the pending jobs by the configured queue.Policy (DRS, Fair
//     Tree, strict priority, multifactor). Preemptors whose held GPUs are
//     now free bind first.
//  4. Place what fits: the job's queue must have the quota (within its
//     nominal quota or by borrowing), and gang.Place must find a valid
//     placement for the whole gang.
//  5. Reserve: the first blocked job (EASY) or every blocked job up to
//     Depth and within Window (conservative) gets a reservation: the exact
//     GPU set it will use at a future time. It comes from the timeline of
//     running jobs' expected ends (estimate, else limit): at each end time
//     the GPUs of the jobs ending by then are released on a copy-on-write
//     clone of the cluster state and gang.Place answers for the job's
//     topology constraint. A reservation keeps its GPUs from cycle to
//     cycle while they stay valid; it moves earlier when jobs end early,
//     later when they overrun.
//     A reservation is planned only where its job could start then:
//     later reservations plan on a job ending at its estimate (else its
//     limit), as the timeline does for running jobs, but a job goes into a
//     hole before an earlier reservation on the same GPUs only if it ends
//     by its runtime limit before that reservation starts (a job without
//     a limit never does), the rule step 6 applies when it starts. A job
//     that was blocked by quota (and so got no reservation while jobs
//     behind it got theirs) does not take those back once it has the
//     quota: it is placed and planned around them, and in EASY mode the
//     one reservation stays with its holder until it starts.
//  6. Backfill: a later job runs now only if it ends (by its limit) before
//     every reservation whose GPUs it would use. Elastic jobs then grow
//     into free GPUs that no reservation holds.
//  7. Preempt, for the first blocked jobs: shrink elastic jobs to their
//     minimum if that makes room; else choose, per domain of the job's
//     required level, the cheapest set of whole victim gangs (cost: GPUs x
//     seconds since the victim's last checkpoint) whose release gives a
//     valid placement, and add back the victims not needed after all.
//     Victims: lower priority (PreemptPriority), or jobs of queues that
//     borrow while the preemptor's queue is within its own quota
//     (PreemptReclaim); only Preemptible jobs, never within their
//     MinRuntime of starting or of their last preemption; a bounded number
//     per cycle. Victims keep their GPUs for their GracePeriod; the
//     preemptor's placement is held for it meanwhile, so no other job
//     takes the freed GPUs (no thrash).
//  8. Reconfigure MIG: when fractional / MIG jobs are blocked by capacity,
//     mig.Pool.Plan proposes new layouts for the idle instances of ready
//     MIG GPUs against their demand; the plan is emitted when the blocked
//     jobs it serves have waited more GPU-seconds than it costs
//     (MIGConfig), and applied to the engine's books when Advance
//     confirms it (a refused plan starts a backoff); under
//     Outcome.AssumeMIG the GPU is reconfiguring until the change's
//     outcome event (EventMIGApplied, EventMIGFailed, EventMIGUnknown).
//  9. Publish: Ready carries binds, preemptions, resizes, reservations,
//     MIG reconfigurations, and for every pending job a reason code and,
//     where the timeline gives one, an estimated start; a View is
//     published for observers.
//
// A cycle that follows one that changed nothing (no bind, preemption,
// resize or MIG plan), when only submissions and ticks came in between
// and the policy still orders the earlier walk's jobs first, resumes that
// walk: their statuses are kept and only the new jobs are considered.
// Its decisions are those of a full cycle (the fuzz target compares both);
// preemption, elastic jobs, fractional submissions, a Window or a
// reservation or expected end coming due turn it off.
//
// A refused bind (Advance) undoes the whole gang; the job returns to
// pending with ReasonBindRefused and waits Config.BindRetryBackoff. Jobs on
// a failed node are requeued, or failed under FailOnFailure, as whole
// gangs. Adding a node or changing labels rebuilds the cluster model and
// re-books running jobs by node name and GPU offset.
//
// # Fractional and MIG members
//
// A single-group job whose members ask for a fraction of a GPU
// (gang.Group.GPUMilli) or a MIG profile (MIGProfile) is placed by
// gang.Place on GPUs in MIG mode, time-sliced or MPS GPUs, or (with
// topo.Spec.ShareFreeGPUs) free plain GPUs that become shared. Each member
// holds a MIG instance or a share of one GPU, booked in the snapshot's
// mig.Pool; the Bind reports it per member (Member.Instance with Created
// when the backend must create the instance first, or Member.Share).
// Finishing, cancelling, preempting, a failed node or a refused bind give
// the grants back (an instance created for a refused bind is taken out of
// the books again); a rebuilt cluster keeps every GPU's layout and every
// grant. The queue is charged queue.Job.Demand (GPU thousandths, or MIG
// instances by profile). Preemption counts a fractional victim's cost by
// its share of the GPU. Limits: such jobs get no backfill reservation
// (they wait with ReasonCapacity and no estimate); they never put a share
// on a GPU reserved for an earlier job or claimed by a preemptor; a
// preemptor with fractional members binds once its victims are gone (no
// other job takes a share of its GPUs meanwhile); victims free MIG
// instances of the shapes they are, so a MIG preemptor whose profile would
// need a re-layout of the freed instances finds no victims (the planner
// serves it once capacity is idle); fractional members in
// multi-group or elastic jobs wait with ReasonUnsupported. An adopted job
// names its fractional members' MIG instances (claimed as they are) or
// GPUs (a share of the job's size is taken there).
//
// # Concurrency
//
// An Engine is owned by one goroutine: Step, Ready and Advance must not be
// called concurrently. Two things are safe from any goroutine: submitting
// through Intake().Submit (lock-free; the next cycle drains it), and View,
// which returns the immutable snapshot published by the latest cycle
// (through an atomic pointer; its running jobs are a copy-on-write btree
// clone).
//
// # Usage
//
//	e, err := engine.New(engine.Config{Cluster: spec, Queues: tree, Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}})
//	_ = e.Step(engine.Submitted(now, job))
//	rd := e.Ready()
//	// apply rd.Preemptions, rd.Resizes, rd.Binds; note what failed
//	_ = e.Advance(rd, engine.Outcome{RefusedBinds: refused})
//
// The engine/enginetest package drives an Engine from scenario files; its
// testdata reads as a catalogue of the behaviours above.
package engine
