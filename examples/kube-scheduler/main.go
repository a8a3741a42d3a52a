// Command kube-scheduler runs berth as a secondary Kubernetes scheduler:
// it schedules the pods whose spec.schedulerName is "berth" (gangs from the
// coscheduling pod-group label or Kueue's pod-group annotations), with
// leader election on a Lease. See docs/backends/kube.md.
//
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
	flag.Parse()

	rc, err := config(*kubeconfig)
	if err != nil {
		log.Fatalf("kube-scheduler: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = kube.Run(ctx, rc, kube.RunConfig{
		Backend:  kube.Config{SchedulerName: *name, Logf: log.Printf},
		Engine:   engine.Config{Preemption: engine.PreemptionConfig{Priority: *preempt}},
		Election: kube.Election{Namespace: *ns, Name: *lease, Identity: *id},
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
