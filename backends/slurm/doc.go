// Package slurm is berth's backend for a SLURM cluster (22.05 and later):
// berth decides where and when the jobs of some partitions run, users keep
// sbatch, squeue, scancel and accounting.
//
// It drives SLURM through its command-line tools, never through a shell:
// squeue in a fixed text format that no user text can forge (the fields
// users write read once per job, checked, with squeue --json as the
// fallback; see read.go) and sinfo --json to read jobs and nodes, scontrol
// -d show job for the GPU indices of a started job, scontrol show topology
// for the topology/tree switches, and scontrol update / requeuehold /
// release and scancel to act. Every command has a timeout and gets only validated job IDs,
// node and partition names. slurmrestd (v0.0.38) is not used: it needs a JWT
// setup and a daemon of its own, and it refuses required_nodes, the one field
// berth must set.
//
// # How berth keeps SLURM from starting its jobs
//
// The managed partitions (Config.Partitions) are State=DOWN in slurm.conf:
// SLURM accepts and queues their jobs but never allocates them. To start a
// job, the backend moves it, in one scontrol update, into Config.RunPartition
// (a hidden, UP partition over the same nodes) with ExcNodeList set to
// every other node of it (one RPC; NodeList, which makes scontrol load the
// job first, for a job with a node list of its own): the job asks exactly
// as many nodes as berth chose, so SLURM starts it there, on those nodes
// only, picking the GPU indices inside each node itself. The backend reads them back (gres_detail)
// and reports them with engine.DevicesReported, so the engine books exactly
// the GPUs SLURM gave.
//
// # Mapping
//
// A pending job of a managed partition becomes a queue.Job: its account is
// its queue (Config.AccountQueues may rename), its partition gives its
// priority and preemption policy (Partition), --time its limit, -N nodes x
// --gres=gpu[:type]:K one gang of N members with K GPUs each,
// --constraint its allowed GPU models ("a100|h100" per node, "[a100|h100]"
// one for the job: names that are GRES types of the nodes) or its node
// selector (features joined with &; other forms are held), a
// "berth:required=LEVEL,preferred=LEVEL" token in --comment its topology
// request, and every task of a job array is a job "ARRAYID_TASK" with its
// ArrayIndex. The topology/tree switch levels become berth's levels
// (Config.Levels names them, leaf first: rack, block, ...). A gang is one
// SLURM job, so the backend implements backends.GangBinder.
//
// Preemption signals the job (SIGTERM), then at the end of the grace period
// requeues and holds it, moves it back to its managed partition and releases
// it (or cancels it, Partition.Cancel); a poll that saw it requeued moves
// it back only with no bind in flight and only if it was not bound since
// the poll read squeue (the engine may have bound it again). A job berth
// has pending that SLURM started by itself, on no bind of berth's (a
// requeue of SLURM's own left in RunPartition past its BeginTime), is
// requeued held and moved back: berth places it again. Restarting berth
// rebuilds everything from SLURM: running jobs are adopted with their GPU
// indices, jobs moved but not yet started are moved back and placed again.
//
// # Services
//
// Services (engine.Service) run with replicas as SLURM jobs: SetService,
// ScaleService and DeleteService feed the engine, BindGang creates a
// replica's job with sbatch on berth's nodes, StopReplica cancels it, and
// Running reports running replica jobs for adoption (see service.go and
// docs/serving.md, section Backends).
//
// # What users see
//
// ShowReasons writes berth's reason for a waiting job into its AdminComment
// (scontrol show job); a job berth can never run is held (a user hold) with
// the reason, and read again once its user releases it (reasons.go).
//
// See docs/backends/slurm.md for the slurm.conf lines a site needs and what is
// not supported.
//
// # Node autoscaling
//
// The backend is a backends.Provisioner over SLURM's power saving
// (power.go): Config.PowerPools name the nodes berth may power up and down
// (a hostlist or a feature; domains from the topology's switches). Pools
// gives the autoscaler its pools with the room left (powered-down nodes
// per domain), ScaleUp powers up that many nodes of a domain in one
// scontrol update State=POWER_UP (refused, nothing powered, when fewer are
// powered down there), ScaleDown powers an idle node down
// (POWER_DOWN_ASAP), and Provisioning lists the pools' nodes up or booting
// and, once each, the resumes SLURM gave up on (ResumeTimeout). A node
// that is powered down or powering up or down is Down in the engine; it
// comes in as a NodeChanged Ready event once SLURM has it up. See
// docs/backends/slurm.md, "Node autoscaling (power saving)".
//
// # After a timeout
//
// A bind is one scontrol update (BindGang); a timed-out one may have
// moved the job, and SLURM may start it. The backend is a
// backends.RunningReporter: RunningNow lists the jobs running in
// RunPartition from one squeue, acting on nothing (Running, which moves
// back jobs bound but not started, is for start-up only). The Runner
// polls it while a bind is unknown, adopting a bind that came through and
// stopping and failing one that did not, and finds ghosts (a bind that
// came through after it was given up) to stop. UnbindMember, the Runner's
// stop of a bind whose call failed without a refusal, waits for a bind of
// the job in flight, moves the job back to its managed partition if it
// still waits in RunPartition, and answers an error that is no refusal if
// that bind started it meanwhile: the Runner then adopts it. A job the engine holds after
// MaxBindTries failed binds is released with engine.Released (the backend
// does not turn an scontrol release into one yet). See
// docs/reliability.md.
package slurm
