package kube_test

// TestHybridDayNight: the federation left to itself over both real
// systems (the SLURM test cluster and envtest's kube-apiserver sharing
// four nodes) through a day and a night of load. Unlike
// TestHybridFederation, no move is asked for by the test: the
// federation's own rebalancer (RunRebalancer) moves the nodes from the
// demand it books, while training jobs keep running in SLURM and
// inference replicas in Kubernetes. Nothing may be lost and no node may
// be owned by both systems at any instant, as each system itself reports
// it (scontrol show node; the Kubernetes Node's cordon and taints),
// sampled all along.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// nodeSide is one node as one system reports it.
type nodeSide struct {
	sched bool // it may start new work there
	busy  bool // work of that system runs there
}

// readSlurmNodes reads the nodes from `scontrol show node --oneliner`:
// schedulable unless DRAIN(ED/ING), DOWN or FAIL is in its state; busy
// while ALLOCATED, MIXED or COMPLETING.
func readSlurmNodes(conf string, nodes []string) (map[string]nodeSide, error) {
	out, err := slurmCmd(conf, "scontrol", "show", "node", "--oneliner", strings.Join(nodes, ","))
	if err != nil {
		return nil, fmt.Errorf("scontrol show node: %v: %s", err, out)
	}
	m := map[string]nodeSide{}
	for _, line := range strings.Split(out, "\n") {
		var name, state string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "NodeName="); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(f, "State="); ok {
				state = v
			}
		}
		if name == "" {
			continue
		}
		if state == "" {
			return nil, fmt.Errorf("scontrol show node %s: no State in %q", name, line)
		}
		has := func(s ...string) bool {
			for _, x := range s {
				if strings.Contains(state, x) {
					return true
				}
			}
			return false
		}
		m[name] = nodeSide{sched: !has("DRAIN", "DOWN", "FAIL"), busy: has("ALLOCATED", "MIXED", "COMPLETING")}
	}
	for _, n := range nodes {
		if _, ok := m[n]; !ok {
			return nil, fmt.Errorf("scontrol show node: %s missing from %q", n, out)
		}
	}
	return m, nil
}

// readKubeNodes reads the Nodes and the pods of w from the API server:
// schedulable unless cordoned (spec.unschedulable) or tainted NoSchedule
// or NoExecute; busy while a pod that has not ended is bound there.
func readKubeNodes(ctx context.Context, w *world, nodes []string) (map[string]nodeSide, error) {
	m := map[string]nodeSide{}
	for _, n := range nodes {
		kn, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		sched := !kn.Spec.Unschedulable
		for _, tn := range kn.Spec.Taints {
			if tn.Effect == corev1.TaintEffectNoSchedule || tn.Effect == corev1.TaintEffectNoExecute {
				sched = false
			}
		}
		m[n] = nodeSide{sched: sched}
	}
	pods, err := cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		if s, ok := m[p.Spec.NodeName]; ok && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			s.busy = true
			m[p.Spec.NodeName] = s
		}
	}
	return m, nil
}

// viewOwner names the system that may schedule on a node by both systems'
// reports: "slurm", "kube", "" (neither: a move in progress).
func viewOwner(s, k nodeSide) string {
	switch {
	case s.sched && !k.sched:
		return "slurm"
	case k.sched && !s.sched:
		return "kube"
	case !s.sched && !k.sched:
		return ""
	}
	return "both"
}

// sampler checks, all along, that no node is schedulable in both systems
// or runs work of both, from the systems' own reports: SLURM is read
// before and after Kubernetes, and a node counts as schedulable (or busy)
// in SLURM only when both reads say so, so that a move between the reads
// is not taken for an overlap (a move lends in one system before it
// reclaims in the other, and a node moves at most once per Cooldown: a
// sample that took longer than within, the Cooldown, is dropped). It also
// runs the federation's own check (CheckExclusive, which asks both
// systems through the members) all along.
type sampler struct {
	conf   string
	w      *world
	nodes  []string
	within time.Duration

	mu         sync.Mutex
	samples    int
	slow       int // samples dropped: slower than within
	fedChecks  int
	violations []string
	errs       []error
	owner      map[string]string   // last seen owner by the views
	seen       map[string][]string // every owner each node had, in order
}

func (s *sampler) sample(ctx context.Context) {
	t0 := time.Now()
	s1, err := readSlurmNodes(s.conf, s.nodes)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	k, err := readKubeNodes(ctx, s.w, s.nodes)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s2, err := readSlurmNodes(s.conf, s.nodes)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(t0) >= s.within {
		// Too slow to be one instant: two moves could fit between the
		// reads (a node moves at most once per Cooldown).
		s.slow++
		return
	}
	s.samples++
	for _, n := range s.nodes {
		sl := nodeSide{sched: s1[n].sched && s2[n].sched, busy: s1[n].busy && s2[n].busy}
		if sl.sched && k[n].sched {
			s.violations = append(s.violations, fmt.Sprintf("%s: schedulable in SLURM and in Kubernetes at once (SLURM %+v %+v, Kubernetes %+v)", n, s1[n], s2[n], k[n]))
		}
		if sl.busy && k[n].busy {
			s.violations = append(s.violations, fmt.Sprintf("%s: runs a SLURM job and a pod at once", n))
		}
		o := viewOwner(sl, k[n])
		if s1[n].sched != s2[n].sched {
			o = "" // changed between the reads: moving
		}
		if o != s.owner[n] {
			s.owner[n] = o
			if o != "" {
				s.seen[n] = append(s.seen[n], o)
			}
		}
	}
}

// checkFed runs the federation's own check once.
func (s *sampler) checkFed(ctx context.Context, fed *federation.Federation) {
	err := fed.CheckExclusive(ctx)
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fedChecks++
	if err != nil {
		s.violations = append(s.violations, "federation.CheckExclusive: "+err.Error())
	}
}

func (s *sampler) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// owners returns the nodes each system alone may schedule on now, by the
// last sample.
func (s *sampler) owners() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for _, n := range s.nodes {
		if o := s.owner[n]; o != "" {
			out[o] = append(out[o], n)
		}
	}
	return out
}

func (s *sampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// trainer keeps training jobs running in SLURM: one whole-node job at a
// time (submitted when the one before it has ended), plus the gangs the
// test submits. Every job appends "<SLURM job ID> <its nodes>" to a file
// as it ends, so that a job run twice (or never) shows.
type trainer struct {
	conf, ran string
	mu        sync.Mutex
	ids       []string
	errs      []error
}

func (tr *trainer) submit(nodes, limitMin int) (string, error) {
	out, err := slurmCmd(tr.conf, "sbatch", "--parsable", "-o", "/dev/null", "-p", "berth",
		"-N", fmt.Sprint(nodes), "--gres=gpu:h100:8", "-t", fmt.Sprint(limitMin),
		"--wrap", "sleep 2; echo $SLURM_JOB_ID $SLURM_JOB_NODELIST >> "+tr.ran)
	if err != nil {
		return "", fmt.Errorf("sbatch: %v: %s", err, out)
	}
	tr.mu.Lock()
	tr.ids = append(tr.ids, out)
	tr.mu.Unlock()
	return out, nil
}

// state is the job's state in SLURM (COMPLETED, RUNNING, ...).
func (tr *trainer) state(id string) string {
	out, _ := slurmCmd(tr.conf, "squeue", "-h", "-t", "all", "-j", id, "-o", "%T")
	return out
}

// stream runs one job after the other until stop is closed; each job
// must end within bound (a hang bound, not a timing).
func (tr *trainer) stream(stop <-chan struct{}, bound time.Duration) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		id, err := tr.submit(1, 1)
		if err != nil {
			tr.fail(err)
			return
		}
		deadline := time.Now().Add(bound)
		for st := tr.state(id); st != "COMPLETED"; st = tr.state(id) {
			if st != "" && st != "PENDING" && st != "RUNNING" && st != "CONFIGURING" && st != "COMPLETING" {
				tr.fail(fmt.Errorf("training job %s ended %s", id, st))
				return
			}
			if time.Now().After(deadline) {
				tr.fail(fmt.Errorf("training job %s not completed after %v (state %q)", id, bound, tr.state(id)))
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func (tr *trainer) fail(err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.errs = append(tr.errs, err)
}

func (tr *trainer) submitted() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.ids)
}

// traceOut is where the hybrid tests' logs go: stderr with
// BERTH_HYBRID_TRACE set, else nowhere.
func traceOut() io.Writer {
	if os.Getenv("BERTH_HYBRID_TRACE") != "" {
		return os.Stderr
	}
	return io.Discard
}

func TestHybridDayNight(t *testing.T) {
	needAPI(t)
	conf := hybridSlurm(t)
	w := newWorld(t)
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(w.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := hybridNodes(t, ctx, conf, w)
	const cooldown = 5 * time.Second

	sb, err := slurm.New(slurm.Config{
		Partitions:   map[string]slurm.Partition{"berth": {}},
		PollInterval: 200 * time.Millisecond,
		Env:          []string{"SLURM_CONF=" + conf},
		DefaultQueue: "default",
		OnSkip:       func(job string, err error) { t.Logf("slurm backend: job %q: %v", job, err) },
	})
	require.NoError(t, err)
	kb, err := kube.New(cs, dyn, kube.Config{SchedulerName: w.sched, NodeSelector: map[string]string{"pool": w.pool}, Logf: t.Logf})
	require.NoError(t, err)
	require.NoError(t, kb.Start(ctx))
	defer kb.Close()
	logOut := traceOut()
	// The rebalancer's settings, for a test that lasts seconds: a round
	// every minute (demand is pending GPU-hours over that minute), a check
	// for a short pool every second, a node moved at most every 5 s.
	// Hysteresis 1.5 nodes: a one-node training job waiting a moment for
	// the node SLURM keeps by day (8 GPUs of unmet demand, for its 1-minute
	// limit) does not make SLURM reclaim a busy inference node; the night's
	// two-node gang (32 GPUs over the minute, for its 2-minute limit) does
	// take nodes back. The drain bounds are hang bounds.
	fed, err := federation.New(federation.Config{
		Pools: []federation.Pool{
			{Name: "slurm", Backend: sb, Quota: 0.5},
			{Name: "kube", Backend: kb, Quota: 0.5},
		},
		DrainTimeout: 2 * time.Minute, PollInterval: 200 * time.Millisecond,
		Rebalance: federation.RebalanceConfig{Interval: time.Minute, EarlyInterval: time.Second,
			Cooldown: cooldown, Hysteresis: 1.5},
		Logger: slog.New(slog.NewTextHandler(logOut, nil)),
	})
	require.NoError(t, err)

	runner, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "default"}}},
			Policy:           queue.StrictPriority(),
			Backfill:         engine.BackfillConfig{Mode: engine.BackfillEASY},
			MIG:              engine.MIGConfig{Disabled: true},
			BindRetryBackoff: time.Second,
		},
		Backend:      fed,
		TickInterval: time.Second,
		Parallelism:  16,
		Observe:      fed.Observe,
		OnStepError: func(ev engine.Event, err error) error {
			t.Logf("step %v %s: %v", ev.Kind, ev.JobID, err)
			return fed.OnStepError(ev, err)
		},
	})
	require.NoError(t, err)
	rctx, stopRunner := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx) }()
	defer func() {
		stopRunner()
		<-done
	}()
	eventually(t, 30*time.Second, "the federation's inventory", func() bool { _, _, ok := fed.Owner(nodes[0]); return ok })

	// Both systems' views, sampled from now to the end.
	smp := &sampler{conf: conf, w: w, nodes: nodes, within: cooldown, owner: map[string]string{}, seen: map[string][]string{}}
	sctx, stopSampling := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(2)
	go func() {
		defer swg.Done()
		for sctx.Err() == nil {
			smp.sample(sctx)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer swg.Done()
		for sctx.Err() == nil {
			smp.checkFed(sctx, fed)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopSampling(); swg.Wait() }()
	waitOwners := func(what string, ok func(map[string][]string) bool) map[string][]string {
		t.Helper()
		var o map[string][]string
		eventually(t, 90*time.Second, what, func() bool {
			n := smp.count()
			eventually(t, 30*time.Second, "a new sample", func() bool { return smp.count() > n+1 })
			o = smp.owners()
			return ok(o)
		})
		return o
	}
	start := waitOwners("both systems to report the initial split", func(o map[string][]string) bool {
		return slices.Equal(o["slurm"], nodes[:2]) && slices.Equal(o["kube"], nodes[2:])
	})
	t.Logf("start: SLURM schedules on %v, Kubernetes on %v", start["slurm"], start["kube"])

	// Training runs throughout: one whole-node job after another.
	tr := &trainer{conf: conf, ran: filepath.Join(t.TempDir(), "ran")}
	stopTraining := make(chan struct{})
	var twg sync.WaitGroup
	twg.Add(1)
	go func() { defer twg.Done(); tr.stream(stopTraining, 2*time.Minute) }()
	stopStream := sync.OnceFunc(func() { close(stopTraining); twg.Wait() })
	defer stopStream()

	// Inference: two replicas, one per Kubernetes node; the test plays
	// the kubelet (and, below, the autoscaler that sets the replicas).
	pods := map[string]string{} // pod -> the node it was bound to
	replica := func(name string) {
		t.Helper()
		w.pod(name, 8, annotate(kube.AnnotationRuntimeEstimate, "1h"))
	}
	bound := func(names ...string) {
		t.Helper()
		w.waitBound(60*time.Second, names...)
		for _, p := range names {
			pods[p] = w.nodeOf(p)
			setRunning(t, w, p)
		}
	}
	replica("infer-0")
	replica("infer-1")
	bound("infer-0", "infer-1")
	assert.ElementsMatch(t, nodes[2:], []string{pods["infer-0"], pods["infer-1"]}, "the replicas run on Kubernetes' nodes")
	eventually(t, 60*time.Second, "the first training jobs to run", func() bool { return len(tr.submitted()) >= 2 })

	// The rebalancer starts: from now on every move is the federation's.
	bctx, stopRebalancer := context.WithCancel(ctx)
	rbDone := make(chan error, 1)
	go func() { rbDone <- fed.RunRebalancer(bctx) }()
	stopRB := sync.OnceFunc(func() { stopRebalancer(); <-rbDone })
	defer stopRB()
	require.Empty(t, fed.Moves(), "no move before the day's load")

	// Day: inference demand rises to three replicas. The third waits for
	// capacity until the federation lends Kubernetes an idle SLURM node
	// (SLURM drains it, Kubernetes uncordons it), and binds there; the
	// training stream goes on on the node SLURM keeps.
	replica("infer-2")
	bound("infer-2")
	lent := pods["infer-2"]
	require.Contains(t, nodes[:2], lent, "the third replica runs on a node SLURM lent")
	day := waitOwners("both systems to report the day's split", func(o map[string][]string) bool {
		return len(o["slurm"]) == 1 && len(o["kube"]) == 3
	})
	t.Logf("day: SLURM schedules on %v, Kubernetes on %v", day["slurm"], day["kube"])
	assert.Contains(t, day["kube"], lent)
	assert.Contains(t, slurmNode(t, conf, lent), "drain", "SLURM's own view of the lent node")
	dayMoves := fed.Moves()
	require.NotEmpty(t, dayMoves)
	for _, mv := range dayMoves {
		t.Logf("day move: %s %s -> %s: %s (err %v)", mv.Host, mv.From, mv.To, mv.Reason, mv.Err)
	}
	i := slices.IndexFunc(dayMoves, func(m federation.MoveRecord) bool { return m.Host == lent && m.To == "kube" })
	require.GreaterOrEqual(t, i, 0, "the federation's move of %s to Kubernetes", lent)
	assert.NoError(t, dayMoves[i].Err)
	assert.Equal(t, "slurm", dayMoves[i].From)
	assert.True(t, strings.HasPrefix(dayMoves[i].Reason, "demand: kube wants"), dayMoves[i].Reason)
	// More training while Kubernetes has the node: on SLURM's own.
	n := len(tr.submitted())
	eventually(t, 60*time.Second, "two more training jobs by day", func() bool { return len(tr.submitted()) >= n+2 })

	// Night: inference falls to one replica (the autoscaler removes the
	// newest two) and a two-node training gang comes. SLURM is under its
	// quota and short: the federation takes idle nodes back from
	// Kubernetes (cordoned there, resumed in SLURM) and the gang runs.
	zero := int64(0)
	for _, p := range []string{"infer-2", "infer-1"} {
		require.NoError(t, cs.CoreV1().Pods(w.ns).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	}
	gang, err := tr.submit(2, 2)
	require.NoError(t, err)
	night := waitOwners("both systems to report SLURM with its nodes back", func(o map[string][]string) bool {
		return len(o["slurm"]) >= 2 && len(o["kube"]) >= 1
	})
	t.Logf("night: SLURM schedules on %v, Kubernetes on %v", night["slurm"], night["kube"])
	assert.Contains(t, night["kube"], pods["infer-0"], "the remaining replica's node stays Kubernetes'")
	eventually(t, 90*time.Second, "the night's gang to end", func() bool { return tr.state(gang) == "COMPLETED" })
	ran, err := os.ReadFile(tr.ran)
	require.NoError(t, err)
	var gangNodes []string
	for _, line := range strings.Split(strings.TrimSpace(string(ran)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == gang {
			gangNodes = strings.Fields(mustSlurm(t, conf, "scontrol", "show", "hostnames", f[1]))
		}
	}
	require.Len(t, gangNodes, 2, "the gang's nodes, from its own record (%q)", ran)
	assert.True(t, slices.ContainsFunc(gangNodes, func(n string) bool { return slices.Contains(day["kube"], n) }),
		"the gang ran on %v, a node Kubernetes had by day (%v) among them", gangNodes, day["kube"])
	backs := 0
	for _, mv := range fed.Moves()[len(dayMoves):] {
		t.Logf("night move: %s %s -> %s: %s (err %v)", mv.Host, mv.From, mv.To, mv.Reason, mv.Err)
		if mv.Err == nil && mv.To == "slurm" {
			backs++
		}
	}
	assert.GreaterOrEqual(t, backs, 1, "a node moved back to SLURM at night")

	// The end of the night: the training stream stops, the last replica
	// ends; every job is accounted for.
	stopStream()
	w.setPhase("infer-0", corev1.PodSucceeded)
	ids := tr.submitted()
	eventually(t, 90*time.Second, "every training job to end", func() bool {
		for _, id := range ids {
			if tr.state(id) != "COMPLETED" {
				return false
			}
		}
		return true
	})
	stopRB()
	tr.mu.Lock()
	assert.Empty(t, tr.errs)
	tr.mu.Unlock()
	ran, err = os.ReadFile(tr.ran)
	require.NoError(t, err)
	runs := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(ran)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			runs[f[0]]++
		}
	}
	for _, id := range ids {
		assert.Equal(t, 1, runs[id], "SLURM job %s ran once and ended", id)
	}
	assert.Len(t, runs, len(ids), "no job ran that was not submitted: %v", runs)
	// Every replica was bound once, to one node, and none waits.
	for p, node := range pods {
		assert.NotEmpty(t, node, p)
	}
	assert.Len(t, pods, 3)
	l, err := cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range l.Items {
		assert.Equal(t, corev1.PodSucceeded, p.Status.Phase, "pod %s", p.Name)
		assert.Equal(t, pods[p.Name], p.Spec.NodeName, "pod %s", p.Name)
	}
	eventually(t, 30*time.Second, "berth to see nothing pending or running", func() bool {
		v := runner.View()
		return v != nil && len(v.Pending) == 0 && len(v.Running()) == 0
	})
	// The books and both systems agree on every node's owner.
	last := smp.owners()
	for _, n := range nodes {
		owner, moving, _ := fed.Owner(n)
		assert.False(t, moving, n)
		assert.Contains(t, last[owner], n, "%s: owned by %s in the books; the systems say %v", n, owner, last)
	}
	stopSampling()
	swg.Wait()
	smp.mu.Lock()
	defer smp.mu.Unlock()
	t.Logf("%d samples of both systems (%d dropped as slower than %v), %d federation checks; %d training jobs; moves: %d; owners seen: %v",
		smp.samples, smp.slow, cooldown, smp.fedChecks, len(ids), len(fed.Moves()), smp.seen)
	assert.GreaterOrEqual(t, smp.samples, 3)
	assert.GreaterOrEqual(t, smp.fedChecks, 3)
	assert.Empty(t, smp.errs)
	assert.Empty(t, smp.violations)
	assert.Contains(t, smp.seen[lent], "kube", "the lent node was seen Kubernetes'")
	assert.Equal(t, "slurm", smp.seen[lent][0])
}

// TestHybridScaleUpBorrows: the federation's node autoscaling on the real
// systems. A scale-up of Kubernetes' pool first borrows SLURM's idle node
// (drained in SLURM, uncordoned in Kubernetes); SLURM keeps half its
// quota, so a second scale-up borrows nothing and goes to Kubernetes' own
// provisioning (not configured here: refused). A scale-down of the
// borrowed node while SLURM is short lends it back instead of releasing
// it. Each step is checked from both systems' own views.
func TestHybridScaleUpBorrows(t *testing.T) {
	needAPI(t)
	conf := hybridSlurm(t)
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := hybridNodes(t, ctx, conf, w)
	sb, err := slurm.New(slurm.Config{Partitions: map[string]slurm.Partition{"berth": {}}, Env: []string{"SLURM_CONF=" + conf}})
	require.NoError(t, err)
	kb, err := kube.New(cs, dyn, kube.Config{SchedulerName: w.sched, NodeSelector: map[string]string{"pool": w.pool}, Logf: t.Logf})
	require.NoError(t, err)
	require.NoError(t, kb.Start(ctx))
	defer kb.Close()
	ac := federation.PinAutoscalePools(autoscale.Config{Pools: []autoscale.Pool{
		{Name: federation.AutoscalePool("kube", "gpu"), GPUsPerNode: 8, Max: 8},
	}})
	var mu sync.Mutex
	slurmShort := false
	fed, err := federation.New(federation.Config{
		Pools:        []federation.Pool{{Name: "slurm", Backend: sb, Quota: 0.5}, {Name: "kube", Backend: kb, Quota: 0.5}},
		DrainTimeout: time.Minute, PollInterval: 200 * time.Millisecond,
		Rebalance: federation.RebalanceConfig{Cooldown: time.Millisecond},
		Autoscale: &ac,
		Demand: func() map[string]federation.PoolDemand {
			mu.Lock()
			defer mu.Unlock()
			if !slurmShort {
				return nil
			}
			return map[string]federation.PoolDemand{"slurm": {Pool: "slurm", ReservedGPUs: 32}}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the kube backend's informer to see the nodes", func() bool {
		sp, err := kb.Cluster(ctx)
		return err == nil && len(sp.Nodes) == len(nodes)
	})
	_, err = fed.Cluster(ctx)
	require.NoError(t, err)
	views := func() (map[string]nodeSide, map[string]nodeSide) {
		t.Helper()
		s, err := readSlurmNodes(conf, nodes)
		require.NoError(t, err)
		k, err := readKubeNodes(ctx, w, nodes)
		require.NoError(t, err)
		for _, n := range nodes {
			require.False(t, s[n].sched && k[n].sched, "%s schedulable in both", n)
		}
		require.NoError(t, fed.CheckExclusive(ctx))
		return s, k
	}
	s, k := views()
	for i, n := range nodes {
		assert.Equal(t, i < 2, s[n].sched, "%s in SLURM at the start", n)
		assert.Equal(t, i >= 2, k[n].sched, "%s in Kubernetes at the start", n)
	}

	require.NoError(t, fed.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1, Jobs: []string{"infer"}}))
	s, k = views()
	assert.False(t, s[nodes[0]].sched, "borrowed: drained in SLURM")
	assert.True(t, k[nodes[0]].sched, "borrowed: uncordoned in Kubernetes")
	assert.Contains(t, slurmNode(t, conf, nodes[0]), "drain")
	assert.True(t, s[nodes[1]].sched, "SLURM keeps its other node")
	assert.Equal(t, federation.ProvisionStats{Borrowed: 1}, fed.ProvisionStats())

	// Nothing more to borrow: Kubernetes' own provisioning is asked, and
	// refuses (no ProvisioningRequest pools configured); nothing moved.
	err = fed.ScaleUp(ctx, autoscale.ScaleUp{Pool: "kube/gpu", Nodes: 1, Jobs: []string{"infer"}})
	require.Error(t, err)
	t.Logf("second scale-up: %v", err)
	s, _ = views()
	assert.True(t, s[nodes[1]].sched)
	assert.Len(t, fed.Moves(), 1)

	// SLURM is short: the borrowed node, released by Kubernetes' pool, goes
	// back to SLURM instead.
	mu.Lock()
	slurmShort = true
	mu.Unlock()
	require.NoError(t, fed.ScaleDown(ctx, federation.NodeName("kube", nodes[0])))
	s, k = views()
	assert.True(t, s[nodes[0]].sched, "lent back: resumed in SLURM")
	assert.False(t, k[nodes[0]].sched, "lent back: cordoned in Kubernetes")
	assert.Equal(t, federation.ProvisionStats{Borrowed: 1, Lent: 1}, fed.ProvisionStats())
	mv := fed.Moves()
	require.Len(t, mv, 2)
	t.Logf("moves: %s; %s", mv[0].Reason, mv[1].Reason)
	assert.Contains(t, mv[1].Reason, "lent instead of released")
}

// TestHybridRunnerAutoscaleBorrows: a Runner autoscaling over the
// federation on the real systems, no rebalancer running. Kubernetes' two
// nodes run two inference replicas; a third waits for capacity. The
// Runner's round plans a node of kube/gpu for it (SLURM's free nodes are
// not its capacity: their copies are labelled berth.io/pool=slurm and the
// pool declares berth.io/pool=kube), the federation's ScaleUp borrows
// SLURM's idle node (Kubernetes has no provisioning configured here), and
// the replica binds there.
func TestHybridRunnerAutoscaleBorrows(t *testing.T) {
	needAPI(t)
	conf := hybridSlurm(t)
	w := newWorld(t)
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(w.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := hybridNodes(t, ctx, conf, w)
	sb, err := slurm.New(slurm.Config{Partitions: map[string]slurm.Partition{"berth": {}}, PollInterval: 200 * time.Millisecond,
		Env: []string{"SLURM_CONF=" + conf}, DefaultQueue: "default"})
	require.NoError(t, err)
	kb, err := kube.New(cs, dyn, kube.Config{SchedulerName: w.sched, NodeSelector: map[string]string{"pool": w.pool}, Logf: t.Logf})
	require.NoError(t, err)
	require.NoError(t, kb.Start(ctx))
	defer kb.Close()
	ac := federation.PinAutoscalePools(autoscale.Config{Pools: []autoscale.Pool{
		{Name: federation.AutoscalePool("kube", "gpu"), GPUsPerNode: 8, Max: 8},
	}})
	fed, err := federation.New(federation.Config{
		Pools:        []federation.Pool{{Name: "slurm", Backend: sb, Quota: 0.5}, {Name: "kube", Backend: kb, Quota: 0.5}},
		DrainTimeout: time.Minute, PollInterval: 200 * time.Millisecond,
		Autoscale: &ac,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	runner, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "default"}}},
			Policy:           queue.StrictPriority(),
			MIG:              engine.MIGConfig{Disabled: true},
			BindRetryBackoff: time.Second,
		},
		Backend: fed, TickInterval: time.Second, Parallelism: 16,
		Observe: fed.Observe, OnStepError: fed.OnStepError,
		Autoscale: &ac, AutoscaleInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(traceOut(), nil)),
	})
	require.NoError(t, err)
	rctx, stopRunner := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx) }()
	defer func() {
		stopRunner()
		<-done
	}()
	eventually(t, 30*time.Second, "the federation's inventory", func() bool { _, _, ok := fed.Owner(nodes[0]); return ok })

	for _, p := range []string{"infer-0", "infer-1"} {
		w.pod(p, 8)
	}
	w.waitBound(60*time.Second, "infer-0", "infer-1")
	for _, p := range []string{"infer-0", "infer-1"} {
		setRunning(t, w, p)
	}
	assert.ElementsMatch(t, nodes[2:], []string{w.nodeOf("infer-0"), w.nodeOf("infer-1")})
	require.Empty(t, fed.Moves())

	w.pod("infer-2", 8)
	w.waitBound(90*time.Second, "infer-2")
	lent := w.nodeOf("infer-2")
	require.Contains(t, nodes[:2], lent, "the replica runs on the node SLURM lent")
	s, err := readSlurmNodes(conf, nodes)
	require.NoError(t, err)
	k, err := readKubeNodes(ctx, w, nodes)
	require.NoError(t, err)
	assert.False(t, s[lent].sched, "drained in SLURM")
	assert.True(t, k[lent].sched, "uncordoned in Kubernetes")
	for _, n := range nodes {
		assert.False(t, s[n].sched && k[n].sched, "%s schedulable in both", n)
	}
	require.NoError(t, fed.CheckExclusive(ctx))
	mv := fed.Moves()
	require.Len(t, mv, 1)
	assert.NoError(t, mv[0].Err)
	assert.True(t, strings.HasPrefix(mv[0].Reason, "autoscale: kube/gpu is short of 1 nodes (jobs ["), mv[0].Reason)
	t.Logf("move: %s", mv[0].Reason)
	assert.Equal(t, federation.ProvisionStats{Borrowed: 1}, fed.ProvisionStats())
	st := runner.AutoscaleStats()
	assert.GreaterOrEqual(t, st.ScaleUps, 1)
	assert.Zero(t, st.Failures)
	t.Logf("autoscale: %+v", st)
}
