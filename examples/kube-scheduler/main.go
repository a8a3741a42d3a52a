// Command kube-scheduler runs berth as a secondary Kubernetes scheduler:
// it schedules the pods whose spec.schedulerName is "berth" (gangs from the
// coscheduling pod-group label or Kueue's pod-group annotations), with
// leader election on a Lease. See README.md and docs/backends/kube.md.
//
//	bash hack/kube-up.sh                           # a local API server (from the repository root)
//	go run . -kubeconfig /tmp/berth-kube/kubeconfig
//	go run . -kubeconfig ~/.kube/config          # out of cluster
//	kubectl apply -f rbac.yaml -f deployment.yaml  # in cluster
//	kubectl apply -f gang.yaml                     # a sample gang
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (empty: in-cluster config)")
	name := flag.String("scheduler-name", kube.DefaultSchedulerName, "spec.schedulerName of the pods to schedule")
	ns := flag.String("lease-namespace", "berth-system", "namespace of the leader election Lease")
	lease := flag.String("lease-name", "berth-scheduler", "name of the leader election Lease")
	id := flag.String("id", os.Getenv("POD_NAME"), "identity in the election (empty: host name)")
	preempt := flag.Bool("preempt", true, "let higher-priority gangs preempt lower ones (Eviction API)")
	qps := flag.Float64("kube-api-qps", kube.DefaultQPS, "API requests per second (client-side limit; negative: none)")
	burst := flag.Int("kube-api-burst", kube.DefaultBurst, "API request burst (client-side limit)")
	leaseDur := flag.Duration("lease-duration", 15*time.Second, "how long a dead leader holds the Lease (failover takes up to this plus -retry-period)")
	renew := flag.Duration("renew-deadline", 10*time.Second, "a leader that cannot renew within this steps down")
	retry := flag.Duration("retry-period", 2*time.Second, "how often candidates try for the Lease and the leader renews it")
	draDriver := flag.String("dra-driver", "", "DRA driver whose GPUs berth allocates through ResourceClaims, e.g. gpu.nvidia.com (empty: DRA off; grant kube.DRAAccess too)")
	draIsland := flag.String("dra-island-attribute", "", "device attribute (int) naming a GPU's NVLink island (empty: none)")
	flag.Parse()

	rc, err := config(*kubeconfig)
	if err != nil {
		log.Fatalf("kube-scheduler: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = kube.Run(ctx, rc, kube.RunConfig{
		Backend: kube.Config{SchedulerName: *name, Logf: log.Printf,
			DRA: kube.DRAConfig{Driver: *draDriver, IslandAttribute: *draIsland}},
		Engine: engine.Config{Preemption: engine.PreemptionConfig{Priority: *preempt}},
		Election: kube.Election{Namespace: *ns, Name: *lease, Identity: *id,
			LeaseDuration: *leaseDur, RenewDeadline: *renew, RetryPeriod: *retry},
		QPS:   float32(*qps),
		Burst: *burst,
		Started: func(*kube.Backend, *backends.Runner) {
			log.Printf("kube-scheduler: leading as %q at %v", *id, time.Now().Format(time.RFC3339))
		},
	})
	switch {
	case errors.Is(err, context.Canceled):
	case err != nil:
		log.Fatalf("kube-scheduler: %v", err)
	}
}

func config(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}
