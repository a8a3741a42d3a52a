// Package replay runs workloads through berth's engine on a simulated
// cluster and measures the outcome: the policy comparison suite behind
// `berth replay` and `berth compare`.
//
// Config names a workload (jobs from the workload package), a cluster
// shape, a policy by name (Policies) and how estimates are derived from
// the true runtimes; Run replays it through engine + backends.Runner +
// backends/sim on a virtual clock and returns a Result with the yardsticks
// of replay/metrics. RunMany runs several configurations in parallel.
//
// Subpackages: metrics (the yardsticks, docs/metrics.md) and fgd (the FGD
// experiment, docs/fgd.md).
package replay
