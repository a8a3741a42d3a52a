package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
)

// candidate is one scheduler process under leader election.
type candidate struct {
	cancel context.CancelFunc
	done   chan error
	led    chan *kube.Backend
}

func (w *world) campaign(rc *rest.Config, id, lease string, cfg kube.Config) *candidate {
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{cancel: cancel, done: make(chan error, 1), led: make(chan *kube.Backend, 1)}
	go func() {
		c.done <- kube.Run(ctx, rc, kube.RunConfig{
			Backend: cfg,
			Election: kube.Election{Namespace: w.ns, Name: lease, Identity: id,
				LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond},
			Started: func(b *kube.Backend, _ *backends.Runner) { c.led <- b },
		})
	}()
	w.t.Cleanup(c.stop)
	return c
}

func (c *candidate) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
		c.cancel = nil
	}
}

// podsByNode lists the live bound pods of the world per node, and checks
// that no node holds more GPUs than it has.
func (w *world) checkBooks(capacity int) (bound int, uids map[string]string) {
	w.t.Helper()
	l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(w.t, err)
	used := map[string]int64{}
	uids = map[string]string{}
	for _, p := range l.Items {
		uids[p.Name] = string(p.UID)
		if p.Spec.NodeName == "" {
			continue
		}
		bound++
		q := p.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
		used[p.Spec.NodeName] += q.Value()
	}
	for n, u := range used {
		require.LessOrEqual(w.t, u, int64(capacity), "node %s books %d GPUs", n, u)
	}
	return bound, uids
}

// Leader failover and restart lose nothing: the first leader binds some
// pods and stops; the second takes the Lease, adopts what is bound and
// binds the rest (a gang included); a restarted third changes nothing.
// Every pod is bound once (same UID, nothing deleted), and no node holds
// more GPUs than it has.
func TestLeaderFailoverAndRestart(t *testing.T) {
	w := newWorld(t)
	for i := range 4 {
		w.node(fmt.Sprint("n", i), 8)
	}
	a := w.campaign(restCfg, "a", "berth", w.config())
	b := w.campaign(restCfg, "b", "berth", w.config())
	var first *candidate
	select {
	case <-a.led:
		first = a
	case <-b.led:
		first = b
	case <-time.After(30 * time.Second):
		t.Fatal("no leader")
	}
	second := a
	if first == a {
		second = b
	}
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprint("p", i))
		w.pod(names[i], 1)
	}
	w.waitBound(30*time.Second, names...)
	_, before := w.checkBooks(8)
	first.stop()
	for i := range 4 {
		w.pod(fmt.Sprint("g", i), 4, inKueueGroup("g", 4))
	}
	select {
	case <-second.led:
	case <-time.After(30 * time.Second):
		t.Fatal("no failover")
	}
	w.waitBound(30*time.Second, "g0", "g1", "g2", "g3")
	bound, after := w.checkBooks(8)
	require.Equal(t, 16, bound)
	for n, uid := range before {
		require.Equal(t, uid, after[n], "pod %s was replaced", n)
	}
	second.stop()
	c := w.campaign(restCfg, "c", "berth", w.config())
	select {
	case <-c.led:
	case <-time.After(30 * time.Second):
		t.Fatal("restart did not lead")
	}
	w.pod("late", 1)
	w.waitBound(30*time.Second, "late")
	bound, final := w.checkBooks(8)
	require.Equal(t, 17, bound)
	for n, uid := range after {
		require.Equal(t, uid, final[n], "pod %s was replaced", n)
	}
}

// loadRole reads the ClusterRole from examples/kube-scheduler/rbac.yaml.
func loadRole(t *testing.T) *rbacv1.ClusterRole {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "kube-scheduler", "rbac.yaml"))
	require.NoError(t, err)
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		if meta.Kind == "ClusterRole" {
			var r rbacv1.ClusterRole
			require.NoError(t, yaml.Unmarshal([]byte(doc), &r))
			return &r
		}
	}
	t.Fatal("no ClusterRole in rbac.yaml")
	return nil
}

func roleAccess(r *rbacv1.ClusterRole) []string {
	var out []string
	for _, rule := range r.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					base, sub, _ := strings.Cut(res, "/")
					out = append(out, kube.Access{Group: g, Resource: base, Subresource: sub, Verb: v}.String())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// The shipped ClusterRole grants exactly kube.RequiredAccess; the
// scheduler runs under it (binds a pod, writes a condition, holds the
// Lease); without any one of its verbs CheckAccess names the verb, and
// without pods/binding the scheduler refuses to start.
func TestRBACLeastPrivilege(t *testing.T) {
	w := newWorld(t)
	role := loadRole(t)
	var want []string
	for _, a := range kube.RequiredAccess() {
		want = append(want, a.String())
	}
	slices.Sort(want)
	require.Equal(t, want, roleAccess(role), "rbac.yaml and kube.RequiredAccess differ")

	user, err := testEnv.AddUser(envtest.User{Name: "berth-" + w.pool}, nil)
	require.NoError(t, err)
	ucfg := user.Config()
	ucfg.QPS, ucfg.Burst = 200, 400
	ucs := kubernetes.NewForConfigOrDie(ucfg)
	ctx := context.Background()
	require.ErrorIs(t, kube.CheckAccess(ctx, ucs), kube.ErrForbidden, "a user without the role passes the check")

	role = role.DeepCopy()
	role.Name = "berth-scheduler-" + w.pool
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "berth-" + w.pool}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the role to apply", func() bool { return kube.CheckAccess(ctx, ucs) == nil })

	// The scheduler under the role.
	w.node("n0", 8)
	c := w.campaign(ucfg, "rbac", "berth", w.config())
	select {
	case <-c.led:
	case <-time.After(30 * time.Second):
		t.Fatal("no leader under the role")
	}
	w.pod("fits", 8)
	w.pod("waits", 8, annotate(kube.AnnotationRuntimeEstimate, "1h"))
	w.waitBound(30*time.Second, "fits")
	eventually(t, 30*time.Second, "a condition on the waiting pod", func() bool {
		cnd, ok := condition(w.get("waits"))
		return ok && cnd.Status == corev1.ConditionFalse && cnd.Reason != ""
	})
	c.stop()

	// Each verb taken away in turn is noticed.
	for i := range role.Rules {
		for k := range role.Rules[i].Verbs {
			cut := role.DeepCopy()
			verb := cut.Rules[i].Verbs[k]
			cut.Rules[i].Verbs = slices.Delete(slices.Clone(cut.Rules[i].Verbs), k, k+1)
			if len(cut.Rules[i].Verbs) == 0 {
				cut.Rules = slices.Delete(cut.Rules, i, i+1)
			}
			missing := roleAccess(&rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{{APIGroups: role.Rules[i].APIGroups, Resources: role.Rules[i].Resources, Verbs: []string{verb}}}})
			updateRole(t, cut)
			eventually(t, 30*time.Second, "CheckAccess to name "+strings.Join(missing, ", "), func() bool {
				err := kube.CheckAccess(ctx, ucs)
				if err == nil {
					return false
				}
				for _, m := range missing {
					if !strings.Contains(err.Error(), m) {
						return false
					}
				}
				return true
			})
			if strings.Join(role.Rules[i].Resources, ",") == "pods/binding" {
				err := kube.Run(ctx, ucfg, kube.RunConfig{Backend: w.config(),
					Election: kube.Election{Namespace: w.ns, Name: "cut", Identity: "cut", LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}})
				require.ErrorIs(t, err, kube.ErrForbidden)
			}
		}
	}
	updateRole(t, role)
}

func updateRole(t *testing.T, r *rbacv1.ClusterRole) {
	cur, err := cs.RbacV1().ClusterRoles().Get(context.Background(), r.Name, metav1.GetOptions{})
	require.NoError(t, err)
	cur.Rules = r.Rules
	_, err = cs.RbacV1().ClusterRoles().Update(context.Background(), cur, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// createPods creates n single-GPU pods from 16 goroutines.
func (w *world) createPods(tb testing.TB, prefix string, n int, opts ...podOpt) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for k := range 16 {
		wg.Go(func() {
			for i := k; i < n; i += 16 {
				_, err := cs.CoreV1().Pods(w.ns).Create(context.Background(), w.podSpec(fmt.Sprintf("%s%04d", prefix, i), 1, opts...), metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(tb, err)
	}
}

// countingBackend counts successful binds per job.
type countingBackend struct {
	*kube.Backend
	mu    sync.Mutex
	binds map[string]int
}

func (c *countingBackend) BindMember(ctx context.Context, job string, m engine.Member) error {
	err := c.Backend.BindMember(ctx, job, m)
	if err == nil {
		c.mu.Lock()
		c.binds[job]++
		c.mu.Unlock()
	}
	return err
}

// startCounting runs a Runner over a counting wrapper of a new backend.
func (w *world) startCounting(tb testing.TB) *countingBackend {
	var cb *countingBackend
	w.startScheduler(tb, cs, func(b *kube.Backend) backends.Backend {
		cb = &countingBackend{Backend: b, binds: map[string]int{}}
		return cb
	})
	return cb
}

// startScheduler runs a backend on client and a Runner (over wrap's
// wrapper of the backend, when wrap is not nil) until tb ends.
func (w *world) startScheduler(tb testing.TB, client kubernetes.Interface, wrap func(*kube.Backend) backends.Backend) {
	b, err := kube.New(client, dyn, w.config())
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(tb, b.Start(ctx))
	rc := b.RunnerConfig(engine.Config{})
	if wrap != nil {
		rc.Backend = wrap(b)
	}
	runner, err := backends.NewRunner(rc)
	require.NoError(tb, err)
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("runner: %v", err)
		}
		b.Close()
	})
}

func (w *world) boundCount(tb testing.TB) int {
	l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(tb, err)
	n := 0
	for _, p := range l.Items {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// 1,000 single-GPU pods created at once on 125 nodes of 8 GPUs all bind,
// each exactly once, and no node holds more than 8.
func Test1000Pods(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	w := newWorld(t)
	for i := range 125 {
		w.node(fmt.Sprintf("n%03d", i), 8)
	}
	cb := w.startCounting(t)
	w.createPods(t, "p", 1000)
	eventually(t, 3*time.Minute, "1000 pods bound", func() bool { return w.boundCount(t) == 1000 })
	bound, _ := w.checkBooks(8)
	require.Equal(t, 1000, bound)
	cb.mu.Lock()
	defer cb.mu.Unlock()
	require.Len(t, cb.binds, 1000)
	for job, n := range cb.binds {
		require.Equal(t, 1, n, "job %s bound %d times", job, n)
	}
}

// A new leader keeps the order of the pending work: submit times come from
// the pods' creation, not from when the leader first saw them. "z-old" is
// created a second before "a-new" (creationTimestamp has whole seconds);
// both wait behind a running pod; the leader fails over and the running
// pod ends: z-old binds first, though a-new sorts first by name (before,
// a new leader gave every pending pod Submit = now, and ties go by ID).
func TestFailoverKeepsSubmitOrder(t *testing.T) {
	w := newWorld(t)
	w.node("n0", 8)
	a := w.campaign(restCfg, "a", "berth", w.config())
	b := w.campaign(restCfg, "b", "berth", w.config())
	var first, second *candidate
	select {
	case <-a.led:
		first, second = a, b
	case <-b.led:
		first, second = b, a
	case <-time.After(30 * time.Second):
		t.Fatal("no leader")
	}
	w.pod("blocker", 8)
	w.waitBound(30*time.Second, "blocker")
	w.setPhase("blocker", corev1.PodRunning)
	old := w.pod("z-old", 8)
	eventually(t, 5*time.Second, "a creation in a later second", func() bool {
		return time.Now().Truncate(time.Second).After(old.CreationTimestamp.Time)
	})
	young := w.pod("a-new", 8)
	require.True(t, young.CreationTimestamp.After(old.CreationTimestamp.Time))
	for _, n := range []string{"z-old", "a-new"} {
		eventually(t, 30*time.Second, n+" waiting with a reason", func() bool {
			c, ok := condition(w.get(n))
			return ok && c.Status == corev1.ConditionFalse && c.Reason != ""
		})
	}
	first.stop()
	select {
	case <-second.led:
	case <-time.After(30 * time.Second):
		t.Fatal("no failover")
	}
	w.setPhase("blocker", corev1.PodSucceeded)
	w.waitBound(30*time.Second, "z-old")
	time.Sleep(time.Second)
	require.Empty(t, w.nodeOf("a-new"), "the younger pod was bound")
}
