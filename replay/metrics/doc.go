// Package metrics computes the replay yardsticks defined in
// docs/metrics.md from per-job outcomes, and time series for plots.
//
// # What
//
// Compute takes an Input (the policy name, the cluster's GPU count, one
// Outcome per job: submit, start, end, GPUs held in milli-GPUs,
// preemptions, finished or not; and optionally the replay window) and
// returns a Result:
//
//   - Utilization: GPU-seconds busy / GPU-seconds available over the
//     window, by default from the first submit to the last end (the
//     makespan end when every job finishes).
//   - AvgWait, P95Wait (nearest rank: the ceil(0.95 n)-th smallest wait),
//     AvgJCT, AvgBSLD (mean of max(1, (wait+run) / max(run, 10 s))): over
//     finished jobs.
//   - Makespan (first submit to last finish) and Preemptions (total).
//   - FragFreeGPUs and LargestPlaceableGang: fragmentation, filled in by the
//     simulator, which alone sees free GPUs against the pending jobs.
//
// Result marshals to a JSON row with the keys policy, utilization,
// avg_wait_s, p95_wait_s, avg_jct_s, avg_bsld, makespan_s, preemptions,
// jobs, finished, frag_free_gpus and largest_placeable_gang (durations in
// float64 seconds); CSVHeader and CSVRecord give the same row as CSV.
//
// Series and Sampler give utilization, running jobs and queue length over
// time as fixed-step time averages; Waits gives the sorted waits of a
// wait-time CDF.
//
// # Concurrency
//
// Compute, Series, Waits and Percentile are pure functions of their
// arguments and safe to call concurrently. A Sampler is single-owner.
//
// # Usage
//
//	res, err := metrics.Compute(metrics.Input{Policy: "easy", ClusterGPUs: 512, Jobs: outcomes})
//	if err != nil { ... }               // wraps ErrInvalid: an impossible outcome
//	json.NewEncoder(os.Stdout).Encode([]metrics.Result{res})
//	samples, err := metrics.Series(metrics.Input{ClusterGPUs: 512, Jobs: outcomes}, time.Hour)
package metrics
