package kube_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/backendtest"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// suiteKube is the Kubernetes backend on the envtest API server as the
// fault suite needs it. There is no kubelet and no controller manager, so
// the adapter plays them (kubelet: a bound pod runs, and succeeds once
// every pod of its gang has run for the job's runtime; a pod being deleted
// goes at once. Job controller: a gang whose pods were deleted before they
// succeeded, by a preemption, a rolled-back bind or a lost node, gets new
// pods, so the job comes back pending, as a Job or JobSet would make it).
// Jobs are Kueue-style pod groups (kueue.x-k8s.io/pod-group-name and
// total-count), one pod per member; the suite's names (j000) are the group
// names, and the backend's job IDs (<ns>/group/<name>) are translated both
// ways. Node loss is the node's Ready condition set False with its pods
// evicted (what the node lifecycle controller does after its toleration),
// and Ready again. A violation is what the API server's objects say is
// impossible: on some node the live pods bound there ask more GPUs than it
// has, checked every kubelet tick.
type suiteKube struct {
	*kube.Backend
	backends.RealClock
	w   *world
	cfg kube.Config
	// preempts: the scenario tests preemptions (Setup.Preemptions).
	preempts bool
	kc       kubernetes.Interface // the test's own client (a connection of its own, with a timeout)

	mu     sync.Mutex
	jobs   map[string]*suiteJob
	timers []*time.Timer
	viol   []error
	down   map[string]bool
	traced time.Time
}

type suiteJob struct {
	job     *queue.Job
	runtime time.Duration
	gen     int       // pods of generation gen are the job's live ones
	created bool      // pods of gen exist
	running time.Time // when every pod of gen was running (zero: not yet)
	done    bool
}

// kubeUnit is one scenario minute on the real clock.
const kubeUnit = 40 * time.Millisecond

// Shape: 24 jobs a scenario, one seed, 40ms a scenario minute. Each
// Runner but the last is stopped at its stop time by a timer
// (StopOnTime), mid-cycle or mid-bind, as a berth process dies.
func (s *suiteKube) Shape() backendtest.Shape {
	jobs := 24
	if s.preempts {
		// 24 jobs seldom fill the 64 GPUs: a preemption needs a full
		// cluster when a job of a higher priority arrives.
		jobs = 72
	}
	return backendtest.Shape{Unit: kubeUnit, Jobs: jobs, Seeds: 1, CallTimeout: 3 * time.Second, StopOnTime: true,
		ReconcileInterval: time.Second, // RunningNow: a bind of unknown outcome is looked at within 1 s
		NotApplicable:     backendtest.NotApplicableMIG("ApplyMIG is refused: on Kubernetes the NVIDIA MIG manager owns MIG layouts"),
	}
}

// Reopen makes a new kube.Backend, as a restarted berth process would: it
// lists every node and pod again.
func (s *suiteKube) Reopen() error {
	b, err := kube.New(cs, dyn, s.cfg)
	if err != nil {
		return err
	}
	if err := b.Start(context.Background()); err != nil {
		return err
	}
	s.mu.Lock()
	old := s.Backend
	s.Backend = b
	s.mu.Unlock()
	old.Close()
	return nil
}

func (s *suiteKube) later(at time.Time, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timers = append(s.timers, time.AfterFunc(max(time.Until(at), 0), f))
}

func (s *suiteKube) fail(err error) {
	s.mu.Lock()
	s.viol = append(s.viol, err)
	s.mu.Unlock()
}

func (s *suiteKube) Submit(j *queue.Job, runtime time.Duration) error {
	s.mu.Lock()
	s.jobs[j.ID] = &suiteJob{job: j, runtime: runtime}
	s.mu.Unlock()
	s.later(j.Submit, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.createPods(s.jobs[j.ID])
	})
	return nil
}

// createPods creates the pods of sj's generation (the Job controller).
// Called with s.mu held.
func (s *suiteKube) createPods(sj *suiteJob) {
	j := sj.job
	g := j.Request.Groups[0]
	for m := range g.Members {
		opts := []podOpt{inKueueGroup(j.ID, g.Members),
			func(p *corev1.Pod) { p.Labels[kube.LabelQueue] = j.Queue },
			annotate(kube.AnnotationRuntimeEstimate, j.RuntimeEstimate.String(),
				kube.AnnotationPreemptible, strconv.FormatBool(j.Preemptible))}
		switch j.Priority {
		case 1:
			opts = append(opts, priorityClass("berth-low"))
		case 2:
			opts = append(opts, priorityClass("berth-high"))
		}
		p := s.w.podSpec(fmt.Sprintf("%s-g%d-m%d", j.ID, sj.gen, m), int64(g.GPUsPerMember), opts...)
		limit := int64((j.RuntimeLimit + time.Second - 1) / time.Second)
		p.Spec.ActiveDeadlineSeconds = &limit
		grace := int64(j.GracePeriod / time.Second)
		p.Spec.TerminationGracePeriodSeconds = &grace
		if _, err := s.kc.CoreV1().Pods(s.w.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			s.viol = append(s.viol, fmt.Errorf("create pod %s: %v", p.Name, err))
		}
	}
	sj.created, sj.running = true, time.Time{}
}

// podJob splits a pod name j000-g1-m0 into the job and its generation.
func podJob(name string) (string, int, bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 3 || !strings.HasPrefix(parts[1], "g") {
		return "", 0, false
	}
	gen, err := strconv.Atoi(parts[1][1:])
	return parts[0], gen, err == nil
}

// kubelet plays the kubelet, the node lifecycle controller and the Job
// controller until stop is closed.
func (s *suiteKube) kubelet(stop <-chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			s.kubeletTick()
		}
	}
}

func (s *suiteKube) kubeletTick() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The lock is held from the list on: a gang's pods are created under
	// it, so a tick never sees half a gang being created.
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.kc.CoreV1().Pods(s.w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if os.Getenv("KUBE_SUITE_TRACE") != "" {
			s.w.t.Logf("suite: list pods: %v", err)
		}
		return
	}
	now := time.Now()
	zero := int64(0)
	gone := func(name string) {
		_ = s.kc.CoreV1().Pods(s.w.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	used := map[string]int64{}
	live := map[string][]*corev1.Pod{} // job -> its live pods of the current generation
	running := map[string]int{}        // job -> of those, running
	for i := range l.Items {
		p := &l.Items[i]
		name, gen, ok := podJob(p.Name)
		sj := s.jobs[name]
		if !ok || sj == nil {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.DeletionTimestamp != nil || (p.Spec.NodeName != "" && s.down[p.Spec.NodeName]) || gen != sj.gen {
			// Terminating (evicted, rolled back), on a lost node (evicted
			// by the node lifecycle controller), or of a gang being
			// replaced: gone at once.
			gone(p.Name)
			continue
		}
		live[name] = append(live[name], p)
		if p.Spec.NodeName == "" {
			continue
		}
		used[p.Spec.NodeName] += p.Spec.Containers[0].Resources.Limits.Name(kube.ResourceGPU, "").Value()
		if p.Status.Phase != corev1.PodRunning {
			s.setPhase(p, corev1.PodRunning)
		}
		running[name]++
	}
	for node, n := range used {
		if n > 8 {
			s.viol = append(s.viol, fmt.Errorf("node %s: live pods bound there ask %d GPUs, it has 8", node, n))
		}
	}
	if os.Getenv("KUBE_SUITE_TRACE") != "" && now.Sub(s.traced) > time.Second {
		s.traced = now
		for _, name := range slices.Sorted(maps.Keys(s.jobs)) {
			sj := s.jobs[name]
			if sj.created && !sj.done {
				var names []string
				for _, p := range live[name] {
					names = append(names, p.Name)
				}
				s.w.t.Logf("suite: %s gen %d live %v running %d since %v", name, sj.gen, names, running[name], sj.running)
			}
		}
	}
	for name, sj := range s.jobs {
		if !sj.created || sj.done {
			continue
		}
		members := sj.job.Request.Groups[0].Members
		switch n := len(live[name]); {
		case n == 0:
			// The whole gang is gone before it succeeded: the Job
			// controller makes a new one.
			sj.gen++
			s.createPods(sj)
		case n < members:
			// A member is gone: the gang fails as a whole (a JobSet's
			// failure policy) and its other pods are deleted.
			for _, pod := range live[name] {
				gone(pod.Name)
			}
		case running[name] == members && sj.running.IsZero():
			sj.running = now
		case running[name] == members && !now.Before(sj.running.Add(sj.runtime)):
			// The gang completes as a whole: every member succeeds in
			// this tick. A member evicted meanwhile (its pod gone before
			// its phase was set) fails the gang instead, and the next
			// tick makes a new one.
			done := true
			for _, p := range live[name] {
				if !s.setPhase(p, corev1.PodSucceeded) {
					done = false
				}
			}
			sj.done = done
		}
	}
}

// setPhase sets a pod's phase and says whether it did (false: the pod is
// gone or changed meanwhile).
func (s *suiteKube) setPhase(p *corev1.Pod, ph corev1.PodPhase) bool {
	cp := p.DeepCopy()
	cp.Status.Phase = ph
	if ph == corev1.PodRunning {
		t := metav1.Now()
		cp.Status.StartTime = &t
		cp.Status.Conditions = append(cp.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t})
	}
	_, err := s.kc.CoreV1().Pods(s.w.ns).UpdateStatus(context.Background(), cp, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		s.viol = append(s.viol, fmt.Errorf("pod %s phase %s: %v", p.Name, ph, err))
	}
	return err == nil
}

func (s *suiteKube) setReady(node string, ready bool) {
	ctx := context.Background()
	n, err := s.kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		s.fail(fmt.Errorf("get node %s: %v", node, err))
		return
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	if _, err := s.kc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		s.fail(fmt.Errorf("node %s ready=%v: %v", node, ready, err))
		return
	}
	s.mu.Lock()
	s.down[node] = !ready
	s.mu.Unlock()
}

func (s *suiteKube) FailNode(at time.Time, node string) error {
	s.later(at, func() { s.setReady(node, false) })
	return nil
}

func (s *suiteKube) RecoverNode(at time.Time, node string) error {
	s.later(at, func() { s.setReady(node, true) })
	return nil
}

func (s *suiteKube) Violations() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.viol...)
}

func (s *suiteKube) prefix() string { return s.w.ns + "/group/" }

func (s *suiteKube) name(id string) string { return strings.TrimPrefix(id, s.prefix()) }

func (s *suiteKube) id(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return s.prefix() + name
}

func (s *suiteKube) renamed(j *queue.Job) *queue.Job {
	if j == nil {
		return nil
	}
	cp := *j
	cp.ID = s.name(j.ID)
	return &cp
}

func (s *suiteKube) backend() *kube.Backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Backend
}

func (s *suiteKube) Cluster(ctx context.Context) (topo.Spec, error) { return s.backend().Cluster(ctx) }

func (s *suiteKube) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	evs, err := s.backend().Next(ctx, wake)
	if os.Getenv("KUBE_SUITE_TRACE") != "" {
		for _, ev := range evs {
			if ev.JobID != "" {
				s.w.t.Logf("suite: event %v %s", ev.Kind, ev.JobID)
			}
		}
	}
	for i := range evs {
		evs[i].Job = s.renamed(evs[i].Job)
		if evs[i].JobID != "" {
			evs[i].JobID = s.name(evs[i].JobID)
		}
	}
	return evs, err
}

func (s *suiteKube) Running(ctx context.Context) ([]backends.RunningJob, error) {
	rs, err := s.backend().Running(ctx)
	for i := range rs {
		rs[i].Job = s.renamed(rs[i].Job)
	}
	return rs, err
}

// RunningNow is the backend's, with the suite's names (its Running's).
func (s *suiteKube) RunningNow(ctx context.Context) ([]backends.RunningJob, error) {
	rs, err := s.backend().RunningNow(ctx)
	for i := range rs {
		rs[i].Job = s.renamed(rs[i].Job)
	}
	return rs, err
}

func (s *suiteKube) BindMember(ctx context.Context, job string, m engine.Member) error {
	return s.backend().BindMember(ctx, s.id(job), m)
}

func (s *suiteKube) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	return s.backend().UnbindMember(ctx, s.id(job), m)
}

func (s *suiteKube) Preempt(ctx context.Context, p engine.Preemption) error {
	p.Victim, p.For = s.id(p.Victim), s.id(p.For)
	return s.backend().Preempt(ctx, p)
}

// The Kubernetes backend on the envtest API server passes the fault suite:
// refused, failing and hanging binds, nodes lost mid-gang (NotReady, pods
// evicted, Ready again) and restarts (a new kube.Backend per Runner, as a
// new berth process), 24 jobs a scenario, with the test playing the
// kubelet and the Job controller.
func TestFaultSuite(t *testing.T) {
	needAPI(t)
	ensurePriorityClasses(t)
	sum := backendtest.Run(t, func(t *testing.T, setup backendtest.Setup) backendtest.Backend {
		w := newWorld(t)
		for r := range 2 {
			for n := range 4 {
				w.node(fmt.Sprintf("r%dn%d", r, n), 8, withLabels("berth.dev/rack", fmt.Sprintf("%s-r%d", w.pool, r)))
			}
		}
		cfg := w.config()
		cfg.DefaultQueue = "q"
		cfg.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
		if os.Getenv("BERTH_BACKENDTEST_LOG") == "" {
			cfg.Logf = func(string, ...any) {}
		}
		b, err := kube.New(cs, dyn, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		kcfg := rest.CopyConfig(restCfg)
		kcfg.Timeout = 5 * time.Second
		kc, err := kubernetes.NewForConfig(kcfg)
		if err != nil {
			t.Fatal(err)
		}
		s := &suiteKube{Backend: b, w: w, cfg: cfg, kc: kc, jobs: map[string]*suiteJob{}, down: map[string]bool{}, preempts: setup.Preemptions}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); s.kubelet(stop) }()
		t.Cleanup(func() {
			close(stop)
			<-done
			s.mu.Lock()
			for _, tm := range s.timers {
				tm.Stop()
			}
			cur := s.Backend
			s.mu.Unlock()
			cur.Close()
		})
		return s
	})
	if sum.Scenarios == 0 {
		t.Fatal("no scenario ran")
	}
}
