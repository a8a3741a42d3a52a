// Package fgd runs the FGD experiment (docs/fgd.md) on berth's own
// placement code: the openb cluster (1,213 nodes, 6,212 GPUs) receives the
// 8,152 openb pods,
// shuffled per seed and topped up with random clones until the arrived GPU
// demand reaches 130% of the cluster; pods arrive one at a time, are
// placed once or dropped, and never leave. After every pod the allocated
// and arrived GPU milli are sampled; the samples are binned by arrived
// percentage (0..130) into the published allocation curves.
//
// The procedure follows the paper's artifact exactly: one math/rand v1
// stream per seed (rand.New(rand.NewSource(seed))) drawn in the artifact's
// order (one Int, the Shuffle, the tune-up Intn calls, ten discarded
// Int63, the node-rank Perm, then per pod an Intn(100), Random's draws and
// an Int31n on failure); Python's half-to-even rounding and numpy's
// pairwise means in the binning. With it, DotProd, GpuClustering,
// GpuPacking, BestFit and FGD reproduce the published per-seed curves
// (6,549 of 6,550 values identical, the other off by 0.01 from summation
// order), and Random, whose original is not bit-reproducible, lands within
// 0.1 point of the published mean.
//
// The policies are gang scorers (gang.Scorer: gang.Random, gang.DotProd,
// gang.GpuClustering, gang.GpuPacking, gang.BestFit, gang.FGD and berth's
// own gang.Berth). Each pod is a one-member gang placed by a gang.Placer
// with the policy's scorer and the run's node ranks as ties
// (gang.Placer.Ties), and booked on the run's topo.Snapshot. With
// Config.Via = ViaEngine (`berth replay --experiment fgd --via engine`)
// each pod is instead submitted to an engine.Engine configured with the
// scorer by name (engine.Config.Scorer), one cycle per arrival; the
// deterministic policies then give the same numbers, which is what an
// embedding program gets.
//
// # Concurrency
//
// Runs executes (policy, seed) runs in parallel, bounded by
// Config.Parallelism (errgroup); each run owns its snapshot (or engine),
// scorer and random stream and shares only the immutable cluster and pod
// list.
// The functions hold no global state and may be called concurrently.
//
// # Usage
//
//	tr, err := fgd.LoadDefaultTrace() // $BERTH_TRACES or ../shared/traces
//	rows, err := fgd.Run(ctx, fgd.Config{
//		Trace:    tr,
//		Policies: []string{"random", "bestfit", "fgd", "berth"},
//		Seeds:    []int64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51},
//	})
//	json.NewEncoder(os.Stdout).Encode(rows)
//	// [{"policy":"random","alloc_pct_at_100":86.39,"alloc_pct_at_130":87.56,...}, ...]
package fgd
