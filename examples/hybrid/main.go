// Command hybrid runs one berth over a SLURM cluster and a Kubernetes
// cluster that share their GPU nodes (the same host names in both):
// training jobs submitted to SLURM's berth partition run in SLURM,
// inference pods with spec.schedulerName "berth" in Kubernetes, and idle
// nodes move between the two every 15 minutes by demand, drained in one
// system before they are uncordoned in the other. See
// docs/backends/federation.md.
//
//	go run . -config site.json [-jobs jobs.json] [-until-done]
//
// Without a Kubernetes cluster (no inference_pool name), it runs over
// SLURM alone; on the test cluster of hack/slurm-up.sh:
//
//	bash hack/slurm-up.sh && source /tmp/berth-slurm/env
//	cd examples/hybrid && go run . -config site-local.json -jobs jobs-local.json -until-done
//
// jobs.json lists jobs submitted to the federation itself, each naming
// the pools that may take it ("*": any): when the engine places one, it
// is launched in that system, as a held sbatch job (with the batch script
// training_pool.scripts registers for its name) or as pods from
// inference_pool.launch, and then bound on the nodes berth chose.
//
// Each such job's output (stdout and stderr) goes to a file in log_dir
// (default /tmp/berth-hybrid-logs; on a real site, a directory shared by
// the nodes): <name>-<SLURM job ID>.log for a SLURM job (its name in the
// jobs file, else berth-<ID>), written by SLURM as it runs; <pod>.log for
// each pod, copied from Kubernetes when the job ends. The path is printed
// when the job starts, and when it ends how it ended: a job that failed
// with its state, exit status and the log's last lines. -until-done exits
// once every job of the file has ended, with status 1 if one failed.
//
// site.json is the configuration a site writes: the two pools with their
// quotas (60/40 by default), the rebalancer's interval and bounds, and
// how long a reclaimed busy node may drain before the move is rolled back.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// site is the configuration file.
type site struct {
	Training struct {
		Name       string   `json:"name"`
		Quota      float64  `json:"quota"`
		SlurmConf  string   `json:"slurm_conf"`
		Partitions []string `json:"partitions"`
		// Scripts: batch scripts (file paths) of jobs submitted to the
		// federation that run here, by job name; others sleep for their
		// runtime estimate.
		Scripts map[string]string `json:"scripts"`
	} `json:"training_pool"`
	Inference struct {
		Name          string            `json:"name"`
		Quota         float64           `json:"quota"`
		Kubeconfig    string            `json:"kubeconfig"`
		SchedulerName string            `json:"scheduler_name"`
		NodeSelector  map[string]string `json:"node_selector"`
		// Launch: the pod template of jobs submitted to the federation
		// that run here.
		Launch struct {
			Namespace string            `json:"namespace"`
			Image     string            `json:"image"`
			Command   []string          `json:"command"`
			Labels    map[string]string `json:"labels"`
		} `json:"launch"`
	} `json:"inference_pool"`
	Rebalance struct {
		Interval        duration `json:"interval"`
		MaxMoves        int      `json:"max_moves"`
		HysteresisNodes float64  `json:"hysteresis_nodes"`
		MinShare        float64  `json:"min_share"`
		Cooldown        duration `json:"cooldown"`
		// EarlyInterval: how often a short pool is checked for between
		// rounds (federation.RebalanceConfig.EarlyInterval).
		EarlyInterval duration `json:"early_interval"`
	} `json:"rebalance"`
	// PreemptOnReclaim: a pool reclaiming a busy node (under its quota)
	// requeues the SLURM jobs on it instead of waiting for them to end.
	PreemptOnReclaim bool `json:"preempt_on_reclaim"`
	// PoolQueues: the engine's queue tree is the pools' quotas (one queue
	// per pool under one cohort) and every job is charged to its pool's
	// queue; false: one queue "default" for all.
	PoolQueues   bool     `json:"pool_queues"`
	DrainTimeout duration `json:"drain_timeout"`
	PollInterval duration `json:"poll_interval"`
	// StateFile: where the engine's state is kept across restarts; ""
	// keeps none.
	StateFile string `json:"state_file"`
	// LogDir: the output of jobs submitted to the federation, one file
	// per job (see the package comment); default /tmp/berth-hybrid-logs.
	LogDir string `json:"log_dir"`
}

type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// fedJob is a job submitted to the federation itself (-jobs): the pools
// that may take it ("*" for any), one group of whole GPUs.
type fedJob struct {
	ID              string   `json:"id"`
	Name            string   `json:"name"`
	Queue           string   `json:"queue"`
	Pools           []string `json:"pools"`
	Members         int      `json:"members"`
	GPUsPerMember   int      `json:"gpus_per_member"`
	RuntimeEstimate duration `json:"runtime_estimate"`
}

func loadJobs(path string) ([]fedJob, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var js []fedJob
	if err := json.Unmarshal(b, &js); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, j := range js {
		if j.ID == "" || len(j.Pools) == 0 || j.Members < 1 || j.GPUsPerMember < 1 {
			return nil, fmt.Errorf("%s: job %q: id, pools, members and gpus_per_member are required", path, j.ID)
		}
	}
	return js, nil
}

func (j fedJob) job(now time.Time, poolQueues bool) *queue.Job {
	q := j.Queue
	if q == "" && !poolQueues {
		q = "default"
	}
	return &queue.Job{ID: j.ID, Name: j.Name, Queue: q, Submit: now, RuntimeEstimate: time.Duration(j.RuntimeEstimate),
		Request: gang.Request{Groups: []gang.Group{{Members: j.Members, GPUsPerMember: j.GPUsPerMember}}}}
}

func load(path string) (site, error) {
	var s site
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func main() {
	path := flag.String("config", "site.json", "site configuration (JSON)")
	check := flag.Bool("check", false, "read the configuration and print the federation's settings, then exit")
	jobsPath := flag.String("jobs", "", "jobs to submit to the federation at start (JSON list; see jobs.json)")
	untilDone := flag.Bool("until-done", false, "exit once every job of -jobs has ended (status 1 if one failed)")
	flag.Parse()
	s, err := load(*path)
	if err != nil {
		log.Fatalf("hybrid: %v", err)
	}
	jobs, err := loadJobs(*jobsPath)
	if err != nil {
		log.Fatalf("hybrid: %v", err)
	}
	scripts := map[string]string{}
	for name, file := range s.Training.Scripts {
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(*path), file) // beside site.json
		}
		b, err := os.ReadFile(file)
		if err != nil {
			log.Fatalf("hybrid: training_pool.scripts[%q]: %v", name, err)
		}
		scripts[name] = string(b)
	}
	if s.LogDir == "" {
		s.LogDir = "/tmp/berth-hybrid-logs"
	}
	if s.Training.SlurmConf == "" {
		s.Training.SlurmConf = os.Getenv("SLURM_CONF")
	}
	launch := kube.LaunchConfig{Namespace: s.Inference.Launch.Namespace, Image: s.Inference.Launch.Image,
		Command: s.Inference.Launch.Command, Labels: s.Inference.Launch.Labels}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fcfg := federation.Config{
		Rebalance: federation.RebalanceConfig{
			Interval: time.Duration(s.Rebalance.Interval), MaxMoves: s.Rebalance.MaxMoves,
			Hysteresis: s.Rebalance.HysteresisNodes, MinShare: s.Rebalance.MinShare,
			Cooldown: time.Duration(s.Rebalance.Cooldown), EarlyInterval: time.Duration(s.Rebalance.EarlyInterval),
		},
		DrainTimeout:     time.Duration(s.DrainTimeout),
		PollInterval:     time.Duration(s.PollInterval),
		PreemptOnReclaim: s.PreemptOnReclaim,
		PoolQueues:       s.PoolQueues,
		Logger:           logger,
	}
	if *check {
		fmt.Printf("pools: %s (quota %.2f, SLURM partitions %v)", s.Training.Name, s.Training.Quota, s.Training.Partitions)
		if s.Inference.Name != "" {
			fmt.Printf(", %s (quota %.2f, scheduler %q)", s.Inference.Name, s.Inference.Quota, s.Inference.SchedulerName)
		}
		fmt.Println()
		fmt.Printf("rebalance: %+v, drain timeout %v, preempt on reclaim %v, pool queues %v\n",
			fcfg.Rebalance.WithDefaults(), fcfg.DrainTimeout, fcfg.PreemptOnReclaim, fcfg.PoolQueues)
		fmt.Printf("launch: SLURM scripts %v", slices.Sorted(maps.Keys(scripts)))
		if s.Inference.Name != "" {
			fmt.Printf("; Kubernetes pods in %q from image %q, command %q", launch.Namespace, launch.Image, launch.Command)
		}
		fmt.Println()
		fmt.Printf("job logs: %s\n", s.LogDir)
		for _, j := range jobs {
			fmt.Printf("job %s: pools %v, %d x %d GPUs\n", j.ID, j.Pools, j.Members, j.GPUsPerMember)
		}
		return
	}

	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		log.Fatalf("hybrid: log_dir: %v", err)
	}
	logs := newJobLogs(s.LogDir, jobs)
	parts := map[string]slurm.Partition{}
	for _, p := range s.Training.Partitions {
		parts[p] = slurm.Partition{}
	}
	sb, err := slurm.New(slurm.Config{Partitions: parts, Env: []string{"SLURM_CONF=" + s.Training.SlurmConf}, Scripts: scripts,
		LaunchOutput: filepath.Join(s.LogDir, slurmOutput), LaunchDir: s.LogDir})
	if err != nil {
		log.Fatalf("hybrid: slurm: %v", err)
	}
	logs.slurm, logs.slurmConf = sb, s.Training.SlurmConf
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fcfg.Pools = []federation.Pool{{Name: s.Training.Name, Backend: sb, Quota: s.Training.Quota}}
	if s.Inference.Name != "" {
		kb, cs := startKube(ctx, s, launch)
		defer kb.Close()
		logs.kube, logs.cs = kb, cs
		fcfg.Pools = append(fcfg.Pools, federation.Pool{Name: s.Inference.Name, Backend: kb, Quota: s.Inference.Quota})
	}
	// Reserved starts are known to the engine only: the rebalancer reads
	// them from the Runner's View.
	var fed *federation.Federation
	var r *backends.Runner
	fcfg.Demand = func() map[string]federation.PoolDemand {
		return fed.ReservedDemand(r.View(), time.Now(), fcfg.Rebalance.WithDefaults().Interval)
	}
	fed, err = federation.New(fcfg)
	if err != nil {
		log.Fatalf("hybrid: %v", err)
	}
	queues := queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "default"}}}
	if s.PoolQueues {
		// The pools' quotas as the queue tree: read the inventory once
		// (the Runner reads it again) to know the GPUs. The tree is fixed
		// for this run; node moves change it at the next start.
		if _, err := fed.Cluster(ctx); err != nil {
			log.Fatalf("hybrid: %v", err)
		}
		if queues, err = fed.QuotaTree(federation.QuotaTreeOptions{}); err != nil {
			log.Fatalf("hybrid: %v", err)
		}
	}
	var store backends.StateStore
	if s.StateFile != "" {
		store = backends.FileStore{Path: s.StateFile}
	}
	r, err = backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:   queues,
			Policy:   queue.StrictPriority(),
			Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
			MIG:      engine.MIGConfig{Disabled: true},
			Site:     engine.SiteConfig{Partitions: fed.Partitions()},
		},
		Backend: followed{Federation: fed, logs: logs, ctx: ctx},
		// Pending pods show berth's reason; refused submissions say why.
		Observe:      fed.Observe,
		OnStepError:  fed.OnStepError,
		Store:        store,
		TickInterval: 30 * time.Second,
		Logger:       logger,
	})
	if err != nil {
		log.Fatalf("hybrid: %v", err)
	}
	// Jobs submitted to the federation: the engine places each in one of
	// its pools, and the bind launches it there (an sbatch job, or pods).
	for _, j := range jobs {
		if err := fed.Submit(j.job(time.Now(), s.PoolQueues), j.Pools...); err != nil {
			log.Fatalf("hybrid: submit %s: %v", j.ID, err)
		}
	}
	go func() {
		if err := fed.RunRebalancer(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Printf("hybrid: rebalancer: %v", err)
		}
	}()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *untilDone {
		go func() {
			select {
			case <-logs.done:
				log.Printf("hybrid: every job of %s has ended", *jobsPath)
				cancel()
			case <-runCtx.Done():
			}
		}()
	}
	if err := r.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatalf("hybrid: %v", err)
	}
	logs.wg.Wait()
	if len(logs.failed) > 0 {
		log.Printf("hybrid: failed: %v (their logs are in %s)", logs.failed, s.LogDir)
		stop()
		os.Exit(1)
	}
}

// startKube starts the Kubernetes backend of the inference pool.
func startKube(ctx context.Context, s site, launch kube.LaunchConfig) (*kube.Backend, kubernetes.Interface) {
	rc, err := restConfig(s.Inference.Kubeconfig)
	if err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	kb, err := kube.New(cs, dyn, kube.Config{SchedulerName: s.Inference.SchedulerName, NodeSelector: s.Inference.NodeSelector,
		Launch: launch, Logf: log.Printf})
	if err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	if err := kb.Start(ctx); err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	return kb, cs
}

func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}
