// Package nvml is berth's backend for a bare GPU box (one 8-GPU server, no
// SLURM, no Kubernetes), driven through NVIDIA's NVML
// (github.com/NVIDIA/go-nvml; this package and its tests need cgo, the
// core does not).
//
// # What it does
//
//   - Inventory (Open, Cluster, Devices): every GPU's UUID, model, memory,
//     PCI bus id and NUMA node; NVLink islands (GPUs linked directly or
//     through the same NVSwitches) and PCIe switches
//     (GetTopologyCommonAncestor) become GPU levels under the node
//     ("numa", "nvlink", "pcie"; levels that split nothing are left out),
//     so that placement keeps a 4-GPU member inside one island; MIG mode
//     and the GPU instances present are read into berth's mig geometry and
//     adopted as the node's MIG layout.
//   - Health: XID and ECC events through an NVML event set. A critical XID
//     (every XID an application cannot cause, DefaultCriticalXID) or a
//     double-bit ECC error takes the GPU out of service (Quarantine): its
//     jobs are stopped and requeued whole, and a hold job keeps the GPU
//     out of the engine's free set until the operator calls Restore.
//   - MIG: ApplyMIG carries out the engine's plans with
//     CreateGpuInstanceWithPlacement, CreateComputeInstance and Destroy,
//     each step checked first against berth's mig geometry (NVIDIA's
//     mocks accept layouts real GPUs refuse); a failed step is undone so
//     the GPU is back at the plan's From layout, and the plan is refused.
//     ApplyMIG is not idempotent (a change made already is refused as
//     stale): after a call that timed out, the Runner reads the GPU's
//     layout instead (MIGLayout, backends.MIGReporter): To: made; From:
//     not.
//   - Running jobs: BindMember starts the member's command as a local
//     process in its own process group, with CUDA_VISIBLE_DEVICES set to
//     the UUIDs of its GPUs or of its MIG instance; stdout, stderr and a
//     JSON exit record go to files under Config.RunDir; the runtime limit
//     is enforced; Preempt sends SIGTERM, waits until the deadline, then
//     SIGKILLs the process group; every exit is an Exit (Config.OnExit)
//     and a job whose members have all exited is reported finished. Jobs
//     come from the embedding program (Submit) or from a spool directory
//     of JSON files (WatchSpool).
//
// # Failure
//
// When libnvidia-ml.so cannot be loaded, Open returns ErrNoLibrary and
// makes no other NVML call (a call after a failed Init would crash the
// process inside cgo).
//
// # Concurrency
//
// Every exported method is safe for concurrent use. The backend starts
// goroutines: the health watcher (NVML event set), one per running
// process (to reap it), and timers for runtime limits and kill deadlines;
// Close stops them all. Events reach the Runner through Next.
//
// # Usage
//
//	b, err := nvml.Open(ctx, nvml.Config{NVML: nv.New(), RunDir: "/var/lib/berth/runs"})
//	if errors.Is(err, nvml.ErrNoLibrary) { ... no NVIDIA driver here ... }
//	defer b.Close()
//	r, _ := backends.NewRunner(backends.RunnerConfig{
//		Engine:  engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}, {Name: nvml.DefaultHoldQueue}}}},
//		Backend: b,
//	})
//	_ = b.Submit(ctx, job, nvml.Command{Args: []string{"python", "train.py"}})
//	err = r.Run(ctx)
//
// # Not supported
//
// GPU shares (time-slicing, MPS): members asking a fraction of a non-MIG
// GPU are refused. A box whose GPUs differ in model, in MIG mode, or in MIG
// layout (berth's node model has one of each per node). Switching MIG
// mode (NeedsReset plans are refused: the backend never changes MIG mode).
// Adopting processes it did not start (Running reports only the runs this
// Backend started). See docs/backends/nvml.md.
//
// # After a timeout
//
// A bind starts a local process: it is fast, and a timed-out one returns
// soon after. The backend is a backends.RunningReporter (RunningNow is
// Running, which acts on nothing): the Runner learns the truth from the
// late answer or from RunningNow, every ReconcileInterval, adopts a bind
// that came through, and stops one that did not (or that came through
// after it was given up: a ghost) with UnbindMember, which kills the
// member's process group (SIGKILL) and returns once it has exited, so
// that its GPUs are free when the engine places the next job on them. See
// docs/reliability.md.
package nvml
