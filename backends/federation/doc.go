// Package federation is a backend made of member backends, each a named
// pool: one berth engine deciding for a SLURM cluster and a Kubernetes
// cluster (or any backends) at once, with one set of books so that no GPU
// is handed out by both.
//
// # Inventory, routing, events
//
// Federation.Cluster merges the members' clusters under a top topology
// level "pool" (LevelPool). Every node of pool P appears as "P/node",
// labelled berth.io/pool=P and berth.io/host=node. A physical node known
// to two systems (the same host name in both) appears once per pool; only
// its owner's copy is schedulable, the others are cordoned. Jobs coming
// from a member are pinned to its pool by a label selector (a SLURM job
// can only run in SLURM). Binds, unbinds, preemptions and MIG changes are
// routed to the pool of the node (or of the job); a bind on a copy that
// its pool does not own, or on a node being moved, is refused. Next
// merges the members' event streams in time order. The federation is not
// a backends.PendingReporter: on a restart, pending jobs come back through
// the members' event streams.
//
// # Ownership
//
// Each physical node has exactly one owner at any time, enforced in the
// systems themselves through NodeLender, the small optional interface a
// member implements (backends/slurm: scontrol drain / resume;
// backends/kube: cordon / uncordon). MoveNode lends the node in its
// owner's system, waits until it is empty there, then reclaims it in the
// other; a failure at any step is rolled back, and at no point is the node
// schedulable in both. CheckExclusive verifies that invariant against the
// systems.
//
// # Rebalancing
//
// Plan is the pure, deterministic decision of one round: from each pool's
// demand (pending GPU-hours over the interval, reserved starts) and quota
// (default 60% / 40% of the GPUs for two pools), it moves idle nodes to
// the pool with unmet demand, with hysteresis, a bound on moves per round
// and a cooldown per node, and drifts them back toward the quotas when
// demand is met. Federation.Rebalance runs a round; RunRebalancer runs one
// every interval (default 15 minutes), and early, at most every
// EarlyInterval (default 1 minute), when a pool is short: the round would
// lend it an idle node of another pool. A job pending for capacity then
// says when the next rebalance is (Observe). Every move is logged with its
// reason. Federation.Reclaim is the move of a pool taking a node back; with
// Config.PreemptOnReclaim it requeues the jobs on a busy node through the
// owner's Requeuer instead of waiting for them.
//
// # Pools in the queue tree, and jobs for any pool
//
// QuotaTree gives the engine a queue per pool with its quota's share of
// the GPUs (SplitGPUs), under one cohort; Config.PoolQueues charges every
// job to its pool's queue. The tree is fixed for the engine's life: node
// moves change ownership at once and the nominal quotas at the next start.
// Submit takes jobs submitted to the federation itself with the pools that
// may take them (AnyPool for any); the engine picks one through the pools'
// Partitions, and the bind launches the job there (Launcher).
//
// Observe and OnStepError are for the Runner: they hand cycles and refused
// events to members that have their own (backends/kube's pending pod
// conditions). See docs/backends/federation.md.
//
// # After a timeout
//
// A bind is routed to its pool's backend, so a timed-out one means what it
// means there (see each backend's doc). The federation is a
// backends.RunningReporter when every member is one (SLURM, Kubernetes,
// NVML, the simulator): RunningNow lists what every pool runs, so the
// Runner settles an unknown bind from the pool's own state and finds a
// ghost (a bind that came through after it was given up) in any pool. With
// a member that is not, RunningNow answers errors.ErrUnsupported and the
// Runner learns the truth from the abandoned call's answer only, or, with
// none within ReconcileInterval, stops the bind through the pool's
// UnbindMember. TestFaultSuite runs the fault suite (backends/backendtest)
// on a federation of two NVML boxes. See docs/reliability.md.
package federation
