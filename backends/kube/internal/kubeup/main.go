// Command kubeup runs a local Kubernetes control plane for berth's
// quick start (hack/kube-up.sh): envtest's kube-apiserver and etcd from
// $KUBEBUILDER_ASSETS (hack/kube-assets.sh builds them), with what
// examples/kube-scheduler needs: the coscheduling PodGroup CRD, the
// berth-system namespace for the leader election Lease, and fake GPU
// nodes (no kubelet runs: bound pods stay Pending). It writes an admin
// kubeconfig to <dir>/kubeconfig once everything is ready, and runs until
// SIGINT or SIGTERM.
//
//	go run ./internal/kubeup -dir /tmp/berth-kube
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options are what the control plane is started with.
type Options struct {
	Dir   string // kubeconfig and logs
	CRDs  string // folder of CRD manifests to install
	Racks int    // racks of fake nodes (label berth.dev/rack)
	Nodes int    // nodes per rack
	GPUs  int64  // nvidia.com/gpu per node
}

func main() {
	var o Options
	flag.StringVar(&o.Dir, "dir", "/tmp/berth-kube", "folder for the kubeconfig")
	flag.StringVar(&o.CRDs, "crds", "testdata/crds", "folder of CRD manifests to install")
	flag.IntVar(&o.Racks, "racks", 2, "racks of fake GPU nodes")
	flag.IntVar(&o.Nodes, "nodes", 4, "fake GPU nodes per rack")
	flag.Int64Var(&o.GPUs, "gpus", 8, "nvidia.com/gpu per fake node")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := Start(ctx, o)
	if err != nil {
		log.Fatalf("kubeup: %v", err)
	}
	fmt.Printf("kubeup: API server at %s; kubeconfig %s\n", env.Config.Host, filepath.Join(o.Dir, "kubeconfig"))
	<-ctx.Done()
	if err := env.Stop(); err != nil {
		log.Fatalf("kubeup: stop: %v", err)
	}
}

// Start starts the control plane, installs the CRDs, the namespace and
// the nodes, and writes <Dir>/kubeconfig last (its presence means ready).
// Stop the returned environment when done.
func Start(ctx context.Context, o Options) (*envtest.Environment, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set (export KUBEBUILDER_ASSETS=$(bash hack/kube-assets.sh))")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	kc := filepath.Join(o.Dir, "kubeconfig")
	_ = os.Remove(kc)
	env := &envtest.Environment{CRDDirectoryPaths: []string{o.CRDs}, ErrorIfCRDPathMissing: true}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	fail := func(err error) (*envtest.Environment, error) {
		_ = env.Stop()
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "berth-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail(fmt.Errorf("admin user: %w", err))
	}
	cs, err := kubernetes.NewForConfig(user.Config())
	if err != nil {
		return fail(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "berth-system"}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("namespace berth-system: %w", err))
	}
	for r := range o.Racks {
		for n := range o.Nodes {
			if err := addNode(ctx, cs, fmt.Sprintf("gpu-%c%d", 'a'+r, n), string(rune('a'+r)), o.GPUs); err != nil {
				return fail(err)
			}
		}
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return fail(fmt.Errorf("kubeconfig: %w", err))
	}
	if err := os.WriteFile(kc+".tmp", raw, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(kc+".tmp", kc); err != nil {
		return fail(err)
	}
	return env, nil
}

// addNode creates a Ready node with GPUs, in a rack. The TaintNodesByCondition
// admission plugin taints a new node not-ready, and no node lifecycle
// controller runs here to lift it: the taint is removed by hand.
func addNode(ctx context.Context, cs kubernetes.Interface, name, rack string, gpus int64) error {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"berth.dev/rack": rack, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"nvidia.com/gpu": q, corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": q, corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "fake node of hack/kube-up.sh"}},
		},
	}
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	if len(created.Spec.Taints) > 0 {
		created.Spec.Taints = nil
		if _, err := cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}
