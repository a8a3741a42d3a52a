// Command hybrid runs one berth over a SLURM cluster and a Kubernetes
// cluster that share their GPU nodes (the same host names in both):
// training jobs submitted to SLURM's berth partition run in SLURM,
// inference pods with spec.schedulerName "berth" in Kubernetes, and idle
// nodes move between the two every 15 minutes by demand, drained in one
// system before they are uncordoned in the other. See
// docs/backends/federation.md.
//
//	go run . -config site.json
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
	"os"
	"os/signal"
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
	"github.com/berthsched/berth/queue"
)

// site is the configuration file.
type site struct {
	Training struct {
		Name       string   `json:"name"`
		Quota      float64  `json:"quota"`
		SlurmConf  string   `json:"slurm_conf"`
		Partitions []string `json:"partitions"`
	} `json:"training_pool"`
	Inference struct {
		Name          string            `json:"name"`
		Quota         float64           `json:"quota"`
		Kubeconfig    string            `json:"kubeconfig"`
		SchedulerName string            `json:"scheduler_name"`
		NodeSelector  map[string]string `json:"node_selector"`
	} `json:"inference_pool"`
	Rebalance struct {
		Interval        duration `json:"interval"`
		MaxMoves        int      `json:"max_moves"`
		HysteresisNodes float64  `json:"hysteresis_nodes"`
		MinShare        float64  `json:"min_share"`
		Cooldown        duration `json:"cooldown"`
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
	StateFile    string   `json:"state_file"`
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
	flag.Parse()
	s, err := load(*path)
	if err != nil {
		log.Fatalf("hybrid: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fcfg := federation.Config{
		Rebalance: federation.RebalanceConfig{
			Interval: time.Duration(s.Rebalance.Interval), MaxMoves: s.Rebalance.MaxMoves,
			Hysteresis: s.Rebalance.HysteresisNodes, MinShare: s.Rebalance.MinShare,
			Cooldown: time.Duration(s.Rebalance.Cooldown),
		},
		DrainTimeout:     time.Duration(s.DrainTimeout),
		PollInterval:     time.Duration(s.PollInterval),
		PreemptOnReclaim: s.PreemptOnReclaim,
		PoolQueues:       s.PoolQueues,
		Logger:           logger,
	}
	if *check {
		fmt.Printf("pools: %s (quota %.2f, SLURM partitions %v), %s (quota %.2f, scheduler %q)\n",
			s.Training.Name, s.Training.Quota, s.Training.Partitions, s.Inference.Name, s.Inference.Quota, s.Inference.SchedulerName)
		fmt.Printf("rebalance: %+v, drain timeout %v, preempt on reclaim %v, pool queues %v\n",
			fcfg.Rebalance.WithDefaults(), fcfg.DrainTimeout, fcfg.PreemptOnReclaim, fcfg.PoolQueues)
		return
	}

	parts := map[string]slurm.Partition{}
	for _, p := range s.Training.Partitions {
		parts[p] = slurm.Partition{}
	}
	sb, err := slurm.New(slurm.Config{Partitions: parts, Env: []string{"SLURM_CONF=" + s.Training.SlurmConf}})
	if err != nil {
		log.Fatalf("hybrid: slurm: %v", err)
	}
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
	kb, err := kube.New(cs, dyn, kube.Config{SchedulerName: s.Inference.SchedulerName, NodeSelector: s.Inference.NodeSelector, Logf: log.Printf})
	if err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := kb.Start(ctx); err != nil {
		log.Fatalf("hybrid: kubernetes: %v", err)
	}
	defer kb.Close()

	fcfg.Pools = []federation.Pool{
		{Name: s.Training.Name, Backend: sb, Quota: s.Training.Quota},
		{Name: s.Inference.Name, Backend: kb, Quota: s.Inference.Quota},
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
	r, err = backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:   queues,
			Policy:   queue.StrictPriority(),
			Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY},
			MIG:      engine.MIGConfig{Disabled: true},
			Site:     engine.SiteConfig{Partitions: fed.Partitions()},
		},
		Backend: fed,
		// Pending pods show berth's reason; refused submissions say why.
		Observe:      fed.Observe,
		OnStepError:  fed.OnStepError,
		Store:        backends.FileStore{Path: s.StateFile},
		TickInterval: 30 * time.Second,
		Logger:       logger,
	})
	if err != nil {
		log.Fatalf("hybrid: %v", err)
	}
	go func() {
		if err := fed.RunRebalancer(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Printf("hybrid: rebalancer: %v", err)
		}
	}()
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatalf("hybrid: %v", err)
	}
}

func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}
