package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// The tests run against a real kube-apiserver and etcd started by envtest
// from $KUBEBUILDER_ASSETS (hack/kube-assets.sh builds them). There is no
// kubelet: the tests play it by writing pod phases and finishing deletes.
var (
	testEnv  *envtest.Environment
	restCfg  *rest.Config
	cs       kubernetes.Interface
	dyn      dynamic.Interface
	skipWhy  string
	testSeq  atomic.Int64
	startErr error
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		skipWhy = "KUBEBUILDER_ASSETS is not set: run `export KUBEBUILDER_ASSETS=$(hack/kube-assets.sh)` for the kube-apiserver integration tests"
		if os.Getenv("BERTH_REQUIRE_INTEGRATION") == "1" {
			fmt.Fprintln(os.Stderr, "FAIL: BERTH_REQUIRE_INTEGRATION=1 but "+skipWhy)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		os.Setenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", "120s")
	}
	testEnv = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("testdata", "crds")}, ErrorIfCRDPathMissing: true}
	restCfg, startErr = testEnv.Start()
	if startErr != nil {
		fmt.Fprintln(os.Stderr, "FAIL: envtest did not start:", startErr)
		os.Exit(1)
	}
	restCfg.QPS, restCfg.Burst = 500, 1000
	cs = kubernetes.NewForConfigOrDie(restCfg)
	dyn = dynamic.NewForConfigOrDie(restCfg)
	code := m.Run()
	if err := testEnv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "envtest stop:", err)
	}
	os.Exit(code)
}

func needAPI(tb testing.TB) {
	tb.Helper()
	if skipWhy != "" {
		tb.Skip(skipWhy)
	}
}

// world is one test's slice of the cluster: its own namespace, scheduler
// name and node label, so tests do not see each other's pods and nodes.
type world struct {
	t     testing.TB
	ns    string
	sched string
	pool  string
	nodes []string
}

func newWorld(tb testing.TB) *world {
	needAPI(tb)
	n := testSeq.Add(1)
	w := &world{t: tb, ns: fmt.Sprintf("t%d", n), sched: fmt.Sprintf("berth-t%d", n), pool: fmt.Sprintf("t%d", n)}
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(tb, err)
	tb.Cleanup(func() {
		for _, nd := range w.nodes {
			_ = cs.CoreV1().Nodes().Delete(context.Background(), nd, metav1.DeleteOptions{})
		}
	})
	return w
}

func (w *world) config() kube.Config {
	return kube.Config{SchedulerName: w.sched, NodeSelector: map[string]string{"pool": w.pool}, Logf: w.t.Logf}
}

type nodeOpt func(*corev1.Node)

func withLabels(kv ...string) nodeOpt {
	return func(n *corev1.Node) {
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withResource(name string, n int64) nodeOpt {
	return func(nd *corev1.Node) {
		nd.Status.Capacity[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
		nd.Status.Allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
}

func (w *world) node(name string, gpus int64, opts ...nodeOpt) string {
	w.t.Helper()
	name = w.pool + "-" + name
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": w.pool, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	if gpus > 0 {
		withResource(kube.ResourceGPU, gpus)(n)
	}
	for _, o := range opts {
		o(n)
	}
	created, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	require.NoError(w.t, err)
	w.nodes = append(w.nodes, name)
	if len(created.Spec.Taints) > 0 {
		// The TaintNodesByCondition admission plugin taints a new node
		// not-ready; the node lifecycle controller (absent here) would
		// lift it once the kubelet reports Ready.
		// A scheduler may patch the node meanwhile (berth's autoscaling
		// annotates the nodes of its pools): retry on a conflict.
		for {
			created.Spec.Taints = nil
			_, err = cs.CoreV1().Nodes().Update(context.Background(), created, metav1.UpdateOptions{})
			if !apierrors.IsConflict(err) {
				break
			}
			created, err = cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			require.NoError(w.t, err)
		}
		require.NoError(w.t, err)
	}
	return name
}

type podOpt func(*corev1.Pod)

func inGroup(g string) podOpt {
	return func(p *corev1.Pod) { p.Labels[kube.LabelPodGroup] = g }
}

func inKueueGroup(g string, n int) podOpt {
	return func(p *corev1.Pod) {
		p.Labels[kube.KueuePodGroupName] = g
		p.Annotations[kube.KueuePodGroupTotalCount] = fmt.Sprint(n)
	}
}

func annotate(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func priorityClass(c string) podOpt { return func(p *corev1.Pod) { p.Spec.PriorityClassName = c } }

func boundTo(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func scheduler(s string) podOpt { return func(p *corev1.Pod) { p.Spec.SchedulerName = s } }

func asking(res string, n int64) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}
	}
}

func (w *world) podSpec(name string, gpus int64, opts ...podOpt) *corev1.Pod {
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName:                 w.sched,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "main", Image: "busybox"}},
		},
	}
	if gpus > 0 {
		asking(kube.ResourceGPU, gpus)(p)
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func (w *world) pod(name string, gpus int64, opts ...podOpt) *corev1.Pod {
	w.t.Helper()
	p, err := cs.CoreV1().Pods(w.ns).Create(context.Background(), w.podSpec(name, gpus, opts...), metav1.CreateOptions{})
	require.NoError(w.t, err)
	return p
}

func (w *world) podGroup(name string, minMember int64) {
	w.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": w.ns},
		"spec":     map[string]any{"minMember": minMember},
	}}
	_, err := dyn.Resource(kube.PodGroupResource).Namespace(w.ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

func (w *world) get(name string) *corev1.Pod {
	w.t.Helper()
	p, err := cs.CoreV1().Pods(w.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(w.t, err)
	return p
}

// setPhase plays the kubelet.
func (w *world) setPhase(name string, ph corev1.PodPhase) {
	w.t.Helper()
	p := w.get(name)
	p.Status.Phase = ph
	if ph == corev1.PodRunning {
		now := metav1.Now()
		p.Status.StartTime = &now
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	_, err := cs.CoreV1().Pods(w.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	require.NoError(w.t, err)
}

// finishDeletes plays the kubelet for pods being deleted: they go at once.
func (w *world) finishDeletes() {
	l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(w.t, err)
	zero := int64(0)
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			_ = cs.CoreV1().Pods(w.ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
}

func eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running is a scheduler under test.
type running struct {
	b      *kube.Backend
	runner *backends.Runner
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	cycles []backends.Cycle
}

// start runs a backend and a Runner until the test ends.
func (w *world) start(cfg kube.Config, ecfg engine.Config) *running {
	w.t.Helper()
	b, err := kube.New(cs, dyn, cfg)
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(w.t, b.Start(ctx))
	rc := b.RunnerConfig(ecfg)
	r := &running{b: b, cancel: cancel, done: make(chan error, 1)}
	rc.Observe = func(c backends.Cycle) {
		b.Observe(c)
		if os.Getenv("KUBE_TEST_TRACE") != "" {
			w.t.Logf("%s cycle %d: binds %d pending %v reservations %v requeued %v outcome %+v", time.Now().Format("05.000"), c.Ready.Seq, len(c.Ready.Binds), c.Ready.Pending, c.Ready.Reservations, c.Ready.Requeued, c.Outcome)
		}
		r.mu.Lock()
		r.cycles = append(r.cycles, backends.Cycle{Outcome: c.Outcome, Acts: c.Acts, Binds: c.Binds})
		r.mu.Unlock()
	}
	runner, err := backends.NewRunner(rc)
	require.NoError(w.t, err)
	r.runner = runner
	go func() { r.done <- runner.Run(ctx) }()
	w.t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.b.Close()
	r.cancel = nil
}

func (w *world) nodeOf(name string) string { return w.get(name).Spec.NodeName }

func (w *world) waitBound(timeout time.Duration, names ...string) {
	w.t.Helper()
	for _, n := range names {
		eventually(w.t, timeout, "pod "+n+" bound", func() bool { return w.nodeOf(n) != "" })
	}
}

func condition(p *corev1.Pod) (corev1.PodCondition, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}

// ---------------------------------------------------------------- tests

// A gang of 4 pods x 8 GPUs binds whole onto one rack: rack a has 4 nodes
// but one holds another scheduler's pod, so only rack b fits.
func TestGangBindsOnOneRack(t *testing.T) {
	w := newWorld(t)
	rackOf := map[string]string{}
	for _, rack := range []string{"a", "b"} {
		for i := range 4 {
			n := w.node(fmt.Sprintf("%s%d", rack, i), 8, withLabels("berth.dev/rack", rack))
			rackOf[n] = rack
		}
	}
	w.pod("other", 2, scheduler("default-scheduler"), boundTo(w.pool+"-a0"))
	r := w.start(w.config(), engine.Config{})
	_ = r
	w.podGroup("train", 4)
	var names []string
	for i := range 4 {
		names = append(names, fmt.Sprintf("train-%d", i))
		w.pod(names[i], 8, inGroup("train"), annotate(kube.KueueRequiredTopology, "berth.dev/rack"))
	}
	w.waitBound(30*time.Second, names...)
	seen := map[string]bool{}
	for _, n := range names {
		node := w.nodeOf(n)
		require.Equal(t, "b", rackOf[node], "pod %s on %s", n, node)
		require.False(t, seen[node], "two members on %s", node)
		seen[node] = true
	}
}

// A gang that cannot fit gets a reservation: every pod a reason, an
// estimated start and a nominated node, and an Event; when the running
// gang ends it binds on the nominated nodes.
func TestBlockedGangIsNominatedThenBinds(t *testing.T) {
	w := newWorld(t)
	w.node("n0", 8)
	w.node("n1", 8)
	w.start(w.config(), engine.Config{})
	for i := range 2 {
		w.pod(fmt.Sprintf("first-%d", i), 8, inKueueGroup("first", 2), annotate(kube.AnnotationRuntimeEstimate, "1h"))
	}
	w.waitBound(30*time.Second, "first-0", "first-1")
	w.setPhase("first-0", corev1.PodRunning)
	w.setPhase("first-1", corev1.PodRunning)
	for i := range 2 {
		w.pod(fmt.Sprintf("second-%d", i), 8, inKueueGroup("second", 2))
	}
	nominated := map[string]string{}
	for _, n := range []string{"second-0", "second-1"} {
		last := ""
		eventually(t, 30*time.Second, n+" nominated with a reason", func() bool {
			p := w.get(n)
			c, ok := condition(p)
			if now := fmt.Sprintf("%v %s %s %q", ok, p.Status.NominatedNodeName, c.Reason, c.Message); now != last {
				t.Logf("%s: %s", n, now)
				last = now
			}
			if !ok || c.Status != corev1.ConditionFalse || p.Status.NominatedNodeName == "" {
				return false
			}
			nominated[n] = p.Status.NominatedNodeName
			return c.Reason == "Reserved" && contains(c.Message, "estimated start")
		})
		require.Empty(t, w.nodeOf(n))
	}
	require.NotEqual(t, nominated["second-0"], nominated["second-1"])
	t.Logf("%s waiting for the event", time.Now().Format("05.000"))
	eventually(t, 30*time.Second, "a FailedScheduling event", func() bool {
		l, err := cs.CoreV1().Events(w.ns).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range l.Items {
			if e.Reason == kube.EventReason && e.InvolvedObject.Name == "second-0" {
				return true
			}
		}
		return false
	})
	t.Logf("%s first ends", time.Now().Format("05.000"))
	w.setPhase("first-0", corev1.PodSucceeded)
	w.setPhase("first-1", corev1.PodSucceeded)
	w.waitBound(30*time.Second, "second-0", "second-1")
	for _, n := range []string{"second-0", "second-1"} {
		require.Equal(t, nominated[n], w.nodeOf(n))
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || len(s) >= len(sub) && indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func ensurePriorityClasses(t *testing.T) {
	needAPI(t)
	for name, v := range map[string]int32{"berth-low": 10, "berth-high": 1000} {
		_, err := cs.SchedulingV1().PriorityClasses().Create(context.Background(),
			&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
}

// A higher-priority gang evicts a lower one through the Eviction API; the
// victim's pods terminate (the test plays the kubelet) and the preemptor
// binds. With a PodDisruptionBudget that allows no disruption the
// preemption is refused: the victim keeps running.
func TestPreemptionHonoursPDB(t *testing.T) {
	ensurePriorityClasses(t)
	t.Run("evicts", func(t *testing.T) {
		w := newWorld(t)
		w.node("n0", 8)
		w.start(w.config(), engine.Config{Preemption: engine.PreemptionConfig{Priority: true}})
		w.pod("low", 8, priorityClass("berth-low"))
		w.waitBound(30*time.Second, "low")
		w.setPhase("low", corev1.PodRunning)
		w.pod("high", 8, priorityClass("berth-high"))
		eventually(t, 30*time.Second, "low evicted", func() bool {
			p, err := cs.CoreV1().Pods(w.ns).Get(context.Background(), "low", metav1.GetOptions{})
			return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
		})
		w.finishDeletes()
		w.waitBound(30*time.Second, "high")
	})
	// The preemption is applied when the victim's pod is gone, not when
	// its eviction is issued: while the pod terminates, the preemptor is
	// not bound, and no bind of it is tried (a bind then would be refused
	// by the node's count: the preemptor would back off and a requeued
	// victim could take the GPUs back, the two taking turns).
	t.Run("waits for the victim's pod", func(t *testing.T) {
		w := newWorld(t)
		w.node("n0", 8)
		r := w.start(w.config(), engine.Config{Preemption: engine.PreemptionConfig{Priority: true}})
		w.pod("low", 8, priorityClass("berth-low"))
		w.waitBound(30*time.Second, "low")
		w.setPhase("low", corev1.PodRunning)
		w.pod("high", 8, priorityClass("berth-high"))
		eventually(t, 30*time.Second, "low terminating", func() bool { return w.get("low").DeletionTimestamp != nil })
		acts := func() (preempted bool, binds []backends.BindResult) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, c := range r.cycles {
				for _, a := range c.Acts {
					preempted = preempted || a.Kind == "preempt" && strings.HasSuffix(a.Job, "/low")
				}
				for _, b := range c.Binds {
					if strings.HasSuffix(b.Job, "/high") {
						binds = append(binds, b)
					}
				}
			}
			return preempted, binds
		}
		time.Sleep(2 * time.Second) // the preemption's deadline passes meanwhile: with the bug, high was bound then
		preempted, binds := acts()
		require.False(t, preempted, "the preemption answered while the victim's pod was still terminating")
		require.Empty(t, binds, "a bind of high was tried while the victim's pod was still terminating")
		require.Empty(t, w.nodeOf("high"))
		w.finishDeletes()
		// The engine learns that the victim is gone from the preemption's
		// answer or from the pod's deletion, whichever comes first (the
		// answer may then come in no cycle: nothing is left to decide).
		w.waitBound(30*time.Second, "high")
		_, binds = acts()
		for _, b := range binds {
			require.NoError(t, b.Err, "bind of %s", b.Job)
		}
	})
	t.Run("pdb refuses", func(t *testing.T) {
		w := newWorld(t)
		w.node("n0", 8)
		r := w.start(w.config(), engine.Config{Preemption: engine.PreemptionConfig{Priority: true}})
		one := intstr.FromInt32(1)
		pdb, err := cs.PolicyV1().PodDisruptionBudgets(w.ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "keep"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "keep"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		// No disruption controller runs here: write its status by hand.
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
		_, err = cs.PolicyV1().PodDisruptionBudgets(w.ns).UpdateStatus(context.Background(), pdb, metav1.UpdateOptions{})
		require.NoError(t, err)
		w.pod("low", 8, priorityClass("berth-low"), func(p *corev1.Pod) { p.Labels["app"] = "keep" })
		w.waitBound(30*time.Second, "low")
		w.setPhase("low", corev1.PodRunning)
		w.pod("high", 8, priorityClass("berth-high"))
		eventually(t, 30*time.Second, "a refused preemption", func() bool {
			if c, ok := condition(w.get("high")); ok {
				t.Logf("high: %s %s", c.Reason, c.Message)
			}
			// Preemptions are asynchronous (Outcome.AssumePreemptions):
			// a refusal comes back in Cycle.Acts.
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, c := range r.cycles {
				if len(c.Outcome.RefusedPreemptions) > 0 {
					return true
				}
				for _, a := range c.Acts {
					if a.Kind == "preempt" && a.Err != nil && !a.Unknown {
						return true
					}
				}
			}
			return false
		})
		low := w.get("low")
		require.Nil(t, low.DeletionTimestamp, "the victim was evicted despite its PDB")
		require.Empty(t, w.nodeOf("high"))
	})
}

// failingBackend wraps the backend to break a gang's bind half way.
type failingBackend struct {
	*kube.Backend
	once  sync.Once
	after func(ctx context.Context, m engine.Member)
	binds atomic.Int64
}

func (f *failingBackend) BindMember(ctx context.Context, job string, m engine.Member) error {
	err := f.Backend.BindMember(ctx, job, m)
	if err == nil {
		f.binds.Add(1)
		f.once.Do(func() { f.after(ctx, m) })
	}
	return err
}

// A bind refused mid-gang leaves no member bound: the members already
// bound are deleted (spec.nodeName cannot be unset). "pod deleted": the
// API server refuses the second bind (404). "node deleted": berth refuses
// it once its informer has seen the node go (the API server itself would
// accept a bind to a node that no longer exists).
func TestRefusedBindRollsBackGang(t *testing.T) {
	for _, tc := range []string{"pod deleted", "node deleted"} {
		t.Run(tc, func(t *testing.T) {
			w := newWorld(t)
			nodes := []string{w.node("n0", 8), w.node("n1", 8)}
			b, err := kube.New(cs, dyn, w.config())
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			require.NoError(t, b.Start(ctx))
			defer b.Close()
			fb := &failingBackend{Backend: b}
			// The hook acts as another client would, with the test's context:
			// the bind call's own may be cancelled (its timeout, the Runner
			// withdrawing it) while the hook waits for the informer.
			fb.after = func(_ context.Context, m engine.Member) {
				zero := int64(0)
				if tc == "pod deleted" {
					// The other member's pod goes: the API server refuses its bind.
					for _, n := range []string{"g-0", "g-1"} {
						if p := w.get(n); p.Spec.NodeName == "" {
							require.NoError(t, cs.CoreV1().Pods(w.ns).Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
						}
					}
					return
				}
				other := nodes[0]
				if m.Node == other {
					other = nodes[1]
				}
				require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{}))
				// The API server binds to a node that no longer exists
				// (PodGC removes such pods later); berth refuses once its
				// node informer has seen the deletion.
				eventually(t, 30*time.Second, "the backend to see "+other+" gone", func() bool {
					_, ok := b.NodeState(other)
					return !ok
				})
			}
			rc := b.RunnerConfig(engine.Config{})
			rc.Backend = fb
			rc.Observe = func(c backends.Cycle) {
				b.Observe(c)
				t.Logf("cycle %d: binds %v pending %v outcome %+v errors %v", c.Ready.Seq, c.Ready.Binds, c.Ready.Pending, c.Outcome, c.Errors)
			}
			rc.Parallelism = 1 // members one after the other: the second fails
			runner, err := backends.NewRunner(rc)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- runner.Run(ctx) }()
			defer func() { cancel(); <-done }()
			w.pod("g-0", 8, inKueueGroup("g", 2))
			w.pod("g-1", 8, inKueueGroup("g", 2))
			eventually(t, 30*time.Second, "the first member bound", func() bool { return fb.binds.Load() >= 1 })
			last := ""
			eventually(t, 30*time.Second, "no member left bound", func() bool {
				l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
				require.NoError(t, err)
				state := ""
				for _, p := range l.Items {
					state += fmt.Sprintf("%s@%s(%v) ", p.Name, p.Spec.NodeName, p.DeletionTimestamp != nil)
				}
				if state != last {
					t.Logf("pods: %s", state)
					last = state
				}
				for _, p := range l.Items {
					if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
						return false
					}
				}
				return true
			})
			time.Sleep(500 * time.Millisecond)
			l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			for _, p := range l.Items {
				require.True(t, p.Spec.NodeName == "" || p.DeletionTimestamp != nil, "pod %s left bound to %s", p.Name, p.Spec.NodeName)
			}
		})
	}
}

// MIG pods land on nodes with free instances of their profile; when the
// instances run out the rest wait with a reason.
func TestMIGPods(t *testing.T) {
	w := newWorld(t)
	mig := func(kv ...any) nodeOpt {
		return func(n *corev1.Node) {
			delete(n.Status.Capacity, kube.ResourceGPU)
			delete(n.Status.Allocatable, kube.ResourceGPU)
			n.Labels[kube.LabelGPUProduct] = "NVIDIA-A100-SXM4-80GB"
			n.Labels[kube.LabelGPUCount] = "1"
			for i := 0; i+1 < len(kv); i += 2 {
				withResource(kube.ResourceMIGPrefix+kv[i].(string), kv[i+1].(int64))(n)
			}
		}
	}
	small := w.node("small", 0, mig("1g.10gb", int64(7)))
	big := w.node("big", 0, mig("3g.40gb", int64(2)))
	w.node("whole", 8)
	w.start(w.config(), engine.Config{})
	var smalls []string
	for i := range 8 {
		smalls = append(smalls, fmt.Sprintf("s%d", i))
		w.pod(smalls[i], 0, asking(kube.ResourceMIGPrefix+"1g.10gb", 1))
	}
	w.pod("b0", 0, asking(kube.ResourceMIGPrefix+"3g.40gb", 1))
	w.waitBound(30*time.Second, "b0")
	require.Equal(t, big, w.nodeOf("b0"))
	eventually(t, 30*time.Second, "7 small pods bound, 1 waiting with a reason", func() bool {
		bound, waiting := 0, 0
		for _, n := range smalls {
			p := w.get(n)
			switch c, ok := condition(p); {
			case p.Spec.NodeName != "":
				require.Equal(t, small, p.Spec.NodeName)
				bound++
			case ok && c.Status == corev1.ConditionFalse && c.Reason == "Capacity":
				waiting++
			}
		}
		return bound == 7 && waiting == 1
	})
}

// Nodes that are tainted or cordoned are not counted, and the pods that
// could have used them are told so: the condition and the Event name the
// taint and how many nodes it excludes, not only "at most 0 of 4 members
// fit".
func TestTaintedNodesNamedInReason(t *testing.T) {
	w := newWorld(t)
	taint := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	for _, n := range []string{w.node("n0", 8), w.node("n1", 8), w.node("n2", 8)} {
		nd, err := cs.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		require.NoError(t, err)
		if n == w.pool+"-n2" {
			nd.Spec.Unschedulable = true
		} else {
			nd.Spec.Taints = []corev1.Taint{taint}
		}
		_, err = cs.CoreV1().Nodes().Update(context.Background(), nd, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	w.node("n3", 8)
	w.start(w.config(), engine.Config{})
	for i := range 4 {
		w.pod(fmt.Sprintf("g-%d", i), 8, inKueueGroup("g", 4))
	}
	want := "not counted: 2 nodes tainted node.kubernetes.io/not-ready:NoSchedule, 1 node unschedulable"
	eventually(t, 30*time.Second, "the taint in the reason", func() bool {
		c, ok := condition(w.get("g-0"))
		return ok && c.Reason == "Capacity" && contains(c.Message, want)
	})
	eventually(t, 30*time.Second, "the taint in a FailedScheduling event", func() bool {
		l, err := cs.CoreV1().Events(w.ns).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range l.Items {
			if e.Reason == kube.EventReason && e.InvolvedObject.Name == "g-1" && contains(e.Message, want) {
				return true
			}
		}
		return false
	})
	require.Empty(t, w.nodeOf("g-0"))
}

func TestGangWaitsForItsMembers(t *testing.T) {
	w := newWorld(t)
	w.node("n0", 8)
	w.start(w.config(), engine.Config{})
	w.podGroup("three", 3)
	w.pod("three-0", 1, inGroup("three"))
	w.pod("three-1", 1, inGroup("three"))
	eventually(t, 30*time.Second, "a waiting-for-gang condition", func() bool {
		c, ok := condition(w.get("three-0"))
		return ok && c.Reason == "WaitingForGang"
	})
	require.Empty(t, w.nodeOf("three-0"))
	w.pod("three-2", 1, inGroup("three"))
	w.waitBound(30*time.Second, "three-0", "three-1", "three-2")
}

func TestConfigErrors(t *testing.T) {
	_, err := kube.New(nil, nil, kube.Config{})
	require.ErrorIs(t, err, kube.ErrInvalidConfig)
	c := kube.Config{Levels: []kube.Level{{Name: "rack"}}}
	require.ErrorIs(t, c.Validate(), kube.ErrInvalidConfig)
	c = kube.Config{DefaultQueue: "nope"}
	c.Queues.Queues = append(c.Queues.Queues, queue.QueueSpec{Name: "team"})
	require.ErrorIs(t, c.Validate(), kube.ErrInvalidConfig)
	err = kube.Run(context.Background(), nil, kube.RunConfig{})
	require.ErrorIs(t, err, kube.ErrInvalidConfig)
	require.True(t, errors.Is(fmt.Errorf("x: %w", kube.ErrForbidden), kube.ErrForbidden))
}
