// Package berth is an embeddable GPU-job scheduling core: it decides which
// jobs run, where and when on a GPU cluster. The root package only
// documents; the work is in the packages below it.
//
// # Architecture
//
//	topo      the cluster model: dense GPU indices, a topology tree (block >
//	          rack > node, NVLink domains, islands below the node), per-domain
//	          counters and copy-on-write snapshots
//	gang      placement of one job (a gang of members) on a snapshot: all or
//	          nothing, topology-aware, explained when it says no
//	queue     pending work: lock-free intake, quota tree with cohorts and
//	          borrowing, fair share, ordering policies
//	mig       MIG geometry, fractional and shared GPUs, reconfiguration plans
//	engine    the deterministic scheduler: Step / Ready / Advance
//	backends  the interfaces to real clusters, the Runner, and the
//	          backends: sim (in memory), slurm, kube (own module), nvml
//	config    the configuration file (YAML or JSON)
//	workload  trace loaders and generated workloads
//	replay    replays of workloads through the engine, metrics, the FGD
//	          experiment
//	benchmarks the standard work (clusters, fills, gangs) and benchmarks
//
// The core (topo, gang, queue, mig, engine) is pure: no goroutines other
// than the documented intake, no wall clock, no global randomness, no I/O.
// Time is what events carry; ties break on sorted IDs. The same events
// always give the same decisions, so production and simulation share one
// code path.
//
// # Where to start
//
// Build a topo.Cluster from a topo.Spec, take a Snapshot, and place a
// gang.Request with gang.Place. The package examples show each step;
// docs/architecture.md follows one job from intake to bind.
package berth
