// Package score holds node-scoring placement policies for single-member
// requests that may ask for a fraction of a GPU, and the small accounting
// State they read: the policies of the FGD paper ("Beware of
// Fragmentation", USENIX ATC'23) specified in docs/fgd.md, and berth's
// own fragmentation-aware policy.
//
// # What is here
//
//   - Request: k GPUs of u thousandths each, CPU, memory, allowed models.
//   - State: berth's real accounting underneath (whole GPUs and host CPU /
//     memory in a topo.Snapshot, the inside of shared GPUs in a mig.Pool;
//     a GPU holding any share is booked in topo, released when its last
//     share leaves), with flat per-node mirrors (free CPU, free memory,
//     f_{n,g}, F_n, pod counts) that make a score an array read. Bind and
//     Unbind book and release; Check proves the mirrors agree.
//   - Policy: Score (with PreScore and NormalizeScore folded in) and
//     ShareGPU (the Reserve-time GPU choice of a share).
//   - Scheduler: the cycle of docs/fgd.md (Scheduling one pod): filter, fail / take the
//     only node / score, highest score with ties to a per-run node rank,
//     GPU choice, bind.
//   - Policies: Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD
//     (docs/fgd.md, integer arithmetic and truncations as specified,
//     reproducing the published per-seed curves) and Berth (see its doc).
//   - Target, NewTarget: the typical workload FGD and Berth measure
//     fragmentation against.
//
// # Concurrency
//
// Nothing here starts goroutines, reads the clock or uses global
// randomness; Random draws only from the *rand.Rand it is given. A State,
// a Scheduler and a Policy value belong to one goroutine; FGD and Berth
// cache per-node results keyed by State.Version and are bound to the
// State they last scored. Distinct States over one immutable topo.Cluster
// may run in parallel (the FGD experiment does).
//
// # Usage
//
//	spec.ShareFreeGPUs = true // fractional pods share plain GPUs
//	c, _ := topo.New(spec)
//	st, _ := score.NewState(c, score.Options{MaxPods: 1001})
//	sc := &score.Scheduler{State: st, Policy: score.NewFGD(score.NewTarget(reqs, 0.95))}
//	d, binding, err := sc.Schedule(score.Request{GPUs: 1, Milli: 500, CPUMilli: 4000})
//	// d.Placed, d.Placement.Node, d.Placement.GPUs; later st.Unbind(binding)
package score
