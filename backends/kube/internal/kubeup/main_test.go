package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The quick start's control plane serves what examples/kube-scheduler
// needs, through the kubeconfig it writes: the PodGroup CRD, the Lease
// namespace and GPU nodes without taints. Skips without
// KUBEBUILDER_ASSETS; fails under BERTH_REQUIRE_INTEGRATION=1.
func TestStartServesTheExample(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("BERTH_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("BERTH_REQUIRE_INTEGRATION=1 but KUBEBUILDER_ASSETS is not set")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS=$(bash hack/kube-assets.sh)")
	}
	dir := t.TempDir()
	ctx := context.Background()
	env, err := Start(ctx, Options{Dir: dir, CRDs: filepath.Join("..", "..", "testdata", "crds"), Racks: 2, Nodes: 2, GPUs: 8})
	require.NoError(t, err)
	defer func() { require.NoError(t, env.Stop()) }()

	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(rc)
	_, err = cs.CoreV1().Namespaces().Get(ctx, "berth-system", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 4)
	for _, n := range nodes.Items {
		require.Empty(t, n.Spec.Taints, n.Name)
		q := n.Status.Allocatable["nvidia.com/gpu"]
		require.Equal(t, int64(8), q.Value(), n.Name)
	}
	groups, err := cs.Discovery().ServerResourcesForGroupVersion("scheduling.x-k8s.io/v1alpha1")
	require.NoError(t, err)
	names := []string{}
	for _, r := range groups.APIResources {
		names = append(names, r.Name)
	}
	require.Contains(t, names, "podgroups")
}
