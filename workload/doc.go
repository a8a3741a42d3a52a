// Package workload reads the job traces that berth replays and generates
// the seeded synthetic workload that `berth replay` runs by default.
//
// # What
//
// A workload is a slice of Job: plain records (submit offset, actual
// runtime, runtime estimate, GPUs, fractional GPU share, CPU, memory,
// allowed models, user/queue, source line) that the replay converts into
// engine jobs. Loaders:
//
//   - ReadSWF / OpenSWF: the Standard Workload Format of the Parallel
//     Workloads Archive, plain or gzip (the NASA iPSC/860 log).
//   - ReadITP / OpenITP: the ITP GPU job CSV published with ElasticFlow
//     (ITP cluster04).
//   - ReadOpenbPods / OpenOpenbPods and ReadOpenbNodes / OpenOpenbNodes:
//     the pod and node lists of the Alibaba "openb" trace of the FGD paper
//     (fractional gpu_milli clamped as in docs/fgd.md).
//   - Synthetic: jobs whose sizes and runtimes follow ITP cluster04, Poisson
//     arrivals at a target offered load, skewed queues and seeded estimate
//     inflation. InflateEstimates applies the same inflation to a trace.
//
// Malformed input gives a *ParseError (file, line, field and a wrapped
// sentinel such as ErrSyntax), never a panic; every parser is fuzzed. Jobs
// that parse but cannot be replayed (runtime 0, no processors) are listed
// in Trace.Dropped with the reason, so counts stay auditable against the
// trace's documentation.
//
// The traces live outside the repository (docs/traces.md: sources,
// licences, checksums, hack/get-traces.sh); TracesDir finds the
// directory, overridable with $BERTH_TRACES. They are read in place and
// never copied into the repository.
//
// # Concurrency
//
// Functions hold no shared state: calls may run concurrently on distinct
// readers. A returned Trace, []Job or []Node belongs to the caller, except
// that Job.GPUModels slices are shared between jobs of one load and must
// be treated as read-only.
//
// # Determinism
//
// Synthetic and InflateEstimates draw from local SplitMix64 streams (the
// generator of docs/standard-work.md) seeded only by the config: the same
// seed gives the same jobs. There is no global randomness and no clock.
//
// # Usage
//
//	path, err := workload.TracePath(workload.ITPCluster04)
//	if err != nil { ... }
//	tr, err := workload.OpenITP(path)
//	if err != nil { ... }          // *ParseError with file:line
//	workload.InflateEstimates(tr.Jobs, 42, 2) // estimates = runtime x U[1, 2]
//
//	cfg := workload.DefaultSynthetic() // 2,000 jobs, 512 GPUs, load 0.9
//	cfg.Seed = 7
//	jobs, err := workload.Synthetic(cfg)
package workload
