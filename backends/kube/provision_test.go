package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// The tests play cluster-autoscaler: they read the ProvisioningRequests
// berth creates, set their conditions, and create the nodes.

const rackLabel = "berth.dev/rack"

func (w *world) provConfig() kube.Config {
	cfg := w.config()
	cfg.Provisioning = kube.ProvisioningConfig{
		Pools:       map[string]map[string]string{"gpu": {"pool": w.pool}},
		DomainLabel: rackLabel,
		Parameters:  map[string]string{"ValidUntilSeconds": "600"},
	}
	return cfg
}

func (w *world) provRequests() []unstructured.Unstructured {
	w.t.Helper()
	l, err := dyn.Resource(kube.ProvisioningRequestResource).Namespace(w.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(w.t, err)
	return l.Items
}

func (w *world) podTemplates() []corev1.PodTemplate {
	w.t.Helper()
	l, err := cs.CoreV1().PodTemplates(w.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(w.t, err)
	return l.Items
}

// setProvCondition plays cluster-autoscaler: condition typ of request
// name becomes True (with reason).
func (w *world) setProvCondition(name, typ, reason string) {
	w.t.Helper()
	ctx := context.Background()
	r := dyn.Resource(kube.ProvisioningRequestResource).Namespace(w.ns)
	u, err := r.Get(ctx, name, metav1.GetOptions{})
	require.NoError(w.t, err)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conds = append(conds, map[string]any{
		"type": typ, "status": "True", "reason": reason, "message": "played by the test",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	})
	require.NoError(w.t, unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"))
	_, err = r.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	require.NoError(w.t, err)
}

// gang creates a coscheduling gang of n pods of gpus GPUs each that must
// share a rack, and returns its pod names and berth job ID.
func (w *world) gang(name string, n int, gpus int64) ([]string, string) {
	w.podGroup(name, int64(n))
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("%s-%d", name, i))
		w.pod(names[i], gpus, inGroup(name), annotate(kube.KueueRequiredTopology, rackLabel))
	}
	return names, w.ns + "/group/" + name
}

// scaleUp calls ScaleUp as the Runner would, once the backend has
// submitted the gang (before, the job is unknown to it).
func scaleUp(t *testing.T, b *kube.Backend, up autoscale.ScaleUp) {
	t.Helper()
	var last error
	eventually(t, 30*time.Second, "ScaleUp to accept the gang", func() bool {
		last = b.ScaleUp(context.Background(), up)
		if last != nil && !errors.Is(last, kube.ErrInvalidProvision) {
			t.Fatalf("ScaleUp: %v", last)
		}
		return last == nil
	})
}

func provState(t *testing.T, b *kube.Backend) backends.ProvisionState {
	t.Helper()
	st, err := b.Provisioning(context.Background())
	require.NoError(t, err)
	return st
}

func booting(st backends.ProvisionState) []autoscale.Node {
	var out []autoscale.Node
	for _, n := range st.Nodes {
		if n.Booting {
			out = append(out, n)
		}
	}
	return out
}

// (a) A gang that does not fit: berth asks a ProvisioningRequest with the
// gang's members as pod templates (the pool and the rack as required node
// selectors); the autoscaler accepts it, provisions, nodes join; the gang
// binds onto them; the request and its templates are cleaned up.
func TestProvisionGangScaleUp(t *testing.T) {
	w := newWorld(t)
	old := w.node("old", 8, withLabels(rackLabel, "r0"))
	r := w.start(w.provConfig(), engine.Config{})
	names, job := w.gang("train", 4, 8)
	up := autoscale.ScaleUp{Pool: "gpu", Domain: "r1", Nodes: 4, Jobs: []string{job}}
	scaleUp(t, r.b, up)

	reqs := w.provRequests()
	require.Len(t, reqs, 1)
	req := reqs[0]
	class, _, _ := unstructured.NestedString(req.Object, "spec", "provisioningClassName")
	require.Equal(t, kube.ProvisioningClassAtomic, class)
	params, _, _ := unstructured.NestedStringMap(req.Object, "spec", "parameters")
	require.Equal(t, map[string]string{"ValidUntilSeconds": "600"}, params)
	sets, _, _ := unstructured.NestedSlice(req.Object, "spec", "podSets")
	require.Len(t, sets, 1, "one member shape")
	set := sets[0].(map[string]any)
	require.EqualValues(t, 4, set["count"])
	tmplName, _, _ := unstructured.NestedString(set, "podTemplateRef", "name")
	tmpl, err := cs.CoreV1().PodTemplates(w.ns).Get(context.Background(), tmplName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"pool": w.pool, rackLabel: "r1"}, tmpl.Template.Spec.NodeSelector)
	gpus := tmpl.Template.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
	require.EqualValues(t, 8, gpus.Value())
	require.Equal(t, w.sched, req.GetLabels()[kube.LabelProvisionedBy])
	require.Equal(t, "gpu", req.GetLabels()[kube.LabelProvisionPool])

	// The same gangs again: no second request.
	require.NoError(t, r.b.ScaleUp(context.Background(), up))
	require.Len(t, w.provRequests(), 1)

	// Requested capacity that has not joined is reported booting.
	st := provState(t, r.b)
	require.Len(t, booting(st), 4)
	for _, n := range booting(st) {
		require.Equal(t, "gpu", n.Pool)
		require.Equal(t, "r1", n.Domain)
	}
	require.Contains(t, st.Nodes, autoscale.Node{Name: old, Pool: "gpu", Domain: "r0"})
	require.Empty(t, st.Failed)
	for _, n := range names {
		require.Empty(t, w.nodeOf(n), "%s bound before capacity came", n)
	}

	// The autoscaler accepts, provisions, and the nodes join.
	w.setProvCondition(req.GetName(), "Accepted", "Accepted")
	w.setProvCondition(req.GetName(), "Provisioned", "Provisioned")
	fresh := map[string]bool{}
	for i := range 2 {
		fresh[w.node(fmt.Sprintf("new%d", i), 8, withLabels(rackLabel, "r1"))] = true
	}
	require.Len(t, booting(provState(t, r.b)), 2, "two of four joined")
	for i := 2; i < 4; i++ {
		fresh[w.node(fmt.Sprintf("new%d", i), 8, withLabels(rackLabel, "r1"))] = true
	}
	w.waitBound(30*time.Second, names...)
	for _, n := range names {
		require.True(t, fresh[w.nodeOf(n)], "%s on %s, not a new node", n, w.nodeOf(n))
	}
	eventually(t, 30*time.Second, "the request and its templates deleted", func() bool {
		return len(w.provRequests()) == 0 && len(w.podTemplates()) == 0
	})
	st = provState(t, r.b)
	require.Empty(t, booting(st))
	require.Len(t, st.Nodes, 5)
	require.Empty(t, st.Failed)
	// berth, not cluster-autoscaler, decides which idle node of a pool goes.
	eventually(t, 30*time.Second, "pool nodes marked scale-down-disabled", func() bool {
		for n := range fresh {
			nd, err := cs.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
			require.NoError(t, err)
			if nd.Annotations[kube.AnnotationScaleDownDisabled] != "true" {
				return false
			}
		}
		return true
	})
}

// (b) A request the autoscaler fails is reported once by Provisioning and
// deleted with its templates; the gang stays pending, and a new ScaleUp
// for it makes a new request.
func TestProvisionFailed(t *testing.T) {
	w := newWorld(t)
	r := w.start(w.provConfig(), engine.Config{})
	names, job := w.gang("train", 2, 8)
	up := autoscale.ScaleUp{Pool: "gpu", Domain: "r1", Nodes: 2, Jobs: []string{job}}
	scaleUp(t, r.b, up)
	reqs := w.provRequests()
	require.Len(t, reqs, 1)
	w.setProvCondition(reqs[0].GetName(), "Accepted", "Accepted")
	w.setProvCondition(reqs[0].GetName(), "Failed", "OutOfCapacity")

	var failed []backends.ProvisionFailure
	eventually(t, 30*time.Second, "the failure reported", func() bool {
		failed = append(failed, provState(t, r.b).Failed...)
		return len(failed) > 0
	})
	require.Len(t, failed, 1)
	f := failed[0]
	require.Equal(t, "gpu", f.Pool)
	require.Equal(t, "r1", f.Domain)
	require.Equal(t, 2, f.Nodes)
	require.Contains(t, f.Reason, "OutOfCapacity")
	require.Contains(t, f.Reason, job)
	require.False(t, f.At.IsZero())
	eventually(t, 30*time.Second, "the failed request and its templates deleted", func() bool {
		return len(w.provRequests()) == 0 && len(w.podTemplates()) == 0
	})
	st := provState(t, r.b)
	require.Empty(t, st.Failed, "a failure is reported once")
	require.Empty(t, booting(st))
	for _, n := range names {
		require.Empty(t, w.nodeOf(n))
	}

	// The plan asks again: a new request.
	scaleUp(t, r.b, up)
	reqs2 := w.provRequests()
	require.Len(t, reqs2, 1)
	require.NotEqual(t, reqs[0].GetName(), reqs2[0].GetName())
	require.Len(t, booting(provState(t, r.b)), 2)
}

// (c) A restarted backend finds its request: ScaleUp for the same gang
// makes no second one, the request stays while the gang waits, and the
// new backend binds the gang and cleans the request up.
func TestProvisionRestart(t *testing.T) {
	w := newWorld(t)
	first := w.start(w.provConfig(), engine.Config{})
	names, job := w.gang("train", 2, 8)
	up := autoscale.ScaleUp{Pool: "gpu", Nodes: 2, Jobs: []string{job}}
	scaleUp(t, first.b, up)
	require.Len(t, w.provRequests(), 1)
	first.stop()

	second := w.start(w.provConfig(), engine.Config{})
	scaleUp(t, second.b, up)
	reqs := w.provRequests()
	require.Len(t, reqs, 1, "a restarted backend made a second request")
	st := provState(t, second.b) // reconciles: the waiting gang keeps its request
	require.Len(t, booting(st), 2)
	require.Len(t, w.provRequests(), 1)

	w.setProvCondition(reqs[0].GetName(), "Provisioned", "Provisioned")
	w.node("new0", 8, withLabels(rackLabel, "r1"))
	w.node("new1", 8, withLabels(rackLabel, "r1"))
	w.waitBound(30*time.Second, names...)
	eventually(t, 30*time.Second, "the request cleaned up by the new backend", func() bool {
		return len(w.provRequests()) == 0 && len(w.podTemplates()) == 0
	})
}

// (d) ScaleDown cordons an idle node of a pool and hands it to
// cluster-autoscaler (scale-down-disabled removed); a busy node and a
// node of no pool are refused.
func TestProvisionScaleDown(t *testing.T) {
	w := newWorld(t)
	idle := w.node("idle", 8)
	busy := w.node("busy", 8)
	other := w.node("other", 8)
	patch := []byte(`{"metadata":{"labels":{"pool":"elsewhere-` + w.pool + `"}}}`)
	_, err := cs.CoreV1().Nodes().Patch(context.Background(), other, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	r := w.start(w.provConfig(), engine.Config{})
	w.pod("job", 8)
	w.waitBound(30*time.Second, "job")
	if w.nodeOf("job") == idle {
		idle, busy = busy, idle
	}
	ctx := context.Background()
	eventually(t, 30*time.Second, "the pool's nodes marked scale-down-disabled", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, idle, metav1.GetOptions{})
		require.NoError(t, err)
		return n.Annotations[kube.AnnotationScaleDownDisabled] == "true"
	})

	require.ErrorIs(t, r.b.ScaleDown(ctx, busy), kube.ErrNodeBusy)
	require.ErrorIs(t, r.b.ScaleDown(ctx, other), kube.ErrInvalidProvision)
	require.ErrorIs(t, r.b.ScaleDown(ctx, "no-such-node-"+w.pool), kube.ErrInvalidProvision)
	require.NoError(t, r.b.ScaleDown(ctx, idle))
	n, err := cs.CoreV1().Nodes().Get(ctx, idle, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, n.Spec.Unschedulable)
	require.NotContains(t, n.Annotations, kube.AnnotationScaleDownDisabled)
	require.NotEmpty(t, n.Annotations[kube.AnnotationScaleDown])
	eventually(t, 30*time.Second, "berth to see the node cordoned", func() bool {
		st, ok := r.b.NodeState(idle)
		return ok && st == topo.Cordoned
	})
	// berth does not mark it back for cluster-autoscaler.
	provState(t, r.b)
	n, err = cs.CoreV1().Nodes().Get(ctx, idle, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, n.Annotations, kube.AnnotationScaleDownDisabled)
	b, err := cs.CoreV1().Nodes().Get(ctx, busy, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, b.Spec.Unschedulable)

	// The autoscaler removes it: berth sees it gone, and it leaves the pool.
	require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, idle, metav1.DeleteOptions{}))
	// The pool reads the informer's cache, NodeState the nodes the
	// backend last synced: both see the delete, not necessarily at once.
	eventually(t, 30*time.Second, "the node gone from the pool and from berth's nodes", func() bool {
		inPool := slices.ContainsFunc(provState(t, r.b).Nodes, func(n autoscale.Node) bool { return n.Name == idle })
		_, known := r.b.NodeState(idle)
		return !inPool && !known
	})
}

// ScaleUp refuses what it cannot ask, with typed errors.
func TestProvisionScaleUpInvalid(t *testing.T) {
	w := newWorld(t)
	r := w.start(w.provConfig(), engine.Config{})
	_, job := w.gang("g", 1, 8)
	ctx := context.Background()
	for _, up := range []autoscale.ScaleUp{
		{Pool: "nope", Nodes: 1, Jobs: []string{job}},
		{Pool: "gpu", Nodes: 0, Jobs: []string{job}},
		{Pool: "gpu", Nodes: 1},
		{Pool: "gpu", Nodes: 1, Jobs: []string{"no/such/job"}},
		{Pool: "gpu", Domain: "not a label value!", Nodes: 1, Jobs: []string{job}},
	} {
		err := r.b.ScaleUp(ctx, up)
		require.ErrorIs(t, err, kube.ErrInvalidProvision, "%+v", up)
		require.ErrorIs(t, err, autoscale.ErrInvalid)
	}
	require.Empty(t, w.provRequests())

	// Without Provisioning the backend refuses every call.
	w2 := newWorld(t)
	plain := w2.start(w2.config(), engine.Config{})
	require.ErrorIs(t, plain.b.ScaleUp(ctx, autoscale.ScaleUp{Pool: "gpu", Nodes: 1, Jobs: []string{job}}), kube.ErrInvalidProvision)
	require.ErrorIs(t, plain.b.ScaleDown(ctx, "x"), kube.ErrInvalidProvision)
	_, err := plain.b.Provisioning(ctx)
	require.ErrorIs(t, err, kube.ErrInvalidProvision)
}

// Bad Provisioning configs are refused with ErrInvalidConfig.
func TestProvisionConfigInvalid(t *testing.T) {
	for name, p := range map[string]kube.ProvisioningConfig{
		"fields without pools": {DomainLabel: rackLabel},
		"empty selector":       {Pools: map[string]map[string]string{"gpu": {}}},
		"bad pool name":        {Pools: map[string]map[string]string{"a b": {"k": "v"}}},
		"bad label key":        {Pools: map[string]map[string]string{"gpu": {"a b": "v"}}},
		"bad label value":      {Pools: map[string]map[string]string{"gpu": {"k": "a b"}}},
		"bad domain label":     {Pools: map[string]map[string]string{"gpu": {"k": "v"}}, DomainLabel: "a b"},
		"bad namespace":        {Pools: map[string]map[string]string{"gpu": {"k": "v"}}, Namespace: "A_B"},
		"bad class":            {Pools: map[string]map[string]string{"gpu": {"k": "v"}}, ClassName: "Not A Class"},
	} {
		cfg := kube.Config{Provisioning: p}
		require.ErrorIs(t, cfg.Validate(), kube.ErrInvalidConfig, name)
	}
	ok := kube.Config{Provisioning: kube.ProvisioningConfig{Pools: map[string]map[string]string{"gpu": {"k": "v"}}, DomainLabel: rackLabel}}
	require.NoError(t, ok.Validate())
	_, err := kube.New(fake.NewClientset(), nil, ok)
	require.ErrorIs(t, err, kube.ErrInvalidConfig, "Provisioning without a dynamic client")
}

// examples/kube-scheduler/rbac-provisioning.yaml grants exactly
// kube.ProvisioningAccess.
func TestRBACProvisioning(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "kube-scheduler", "rbac-provisioning.yaml"))
	require.NoError(t, err)
	var role rbacv1.ClusterRole
	doc, _, _ := strings.Cut(string(raw), "\n---\n")
	require.NoError(t, yaml.Unmarshal([]byte(doc), &role))
	require.Equal(t, "ClusterRole", role.Kind)
	var want []string
	for _, a := range kube.ProvisioningAccess() {
		want = append(want, a.String())
	}
	slices.Sort(want)
	require.Equal(t, want, roleAccess(&role))
}
