package kube_test

// The federation against both real systems at once: the project's SLURM
// test cluster (hack/slurm-up.sh in BERTH_SLURM_DIR, checked by its
// marker; never $SLURM_CONF) and envtest's
// kube-apiserver, with Kubernetes Nodes named as the SLURM nodes. Skips
// without either; fails under BERTH_REQUIRE_INTEGRATION=1.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/internal/slurmtest"
	"github.com/berthsched/berth/queue"
)

// errNotOurCluster: see slurmtest.ErrNotOurCluster.
var errNotOurCluster = slurmtest.ErrNotOurCluster

// slurmMarker: see slurmtest.Marker.
const slurmMarker = slurmtest.Marker

// testSlurm returns the slurm.conf of the SLURM test cluster in dir (the
// state dir of hack/slurm-up.sh), after checking that it is one the
// script started and that the slurmctld answering is that cluster's: the
// marker file's token and the ClusterName `scontrol show config` reports
// must agree. The test cancels every job of the cluster and drains its
// nodes, so any other cluster (a user's, or another on the same ports)
// is refused (errNotOurCluster); $SLURM_CONF is never used.
func testSlurm(dir string) (string, error) { return slurmtest.Cluster(dir) }

// hybridSlurm returns the slurm.conf of the test's own SLURM cluster
// ($BERTH_SLURM_DIR, default /tmp/berth-slurm, checked by testSlurm), or
// skips (fails under BERTH_REQUIRE_INTEGRATION=1).
func hybridSlurm(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BERTH_SLURM_DIR")
	if dir == "" {
		dir = "/tmp/berth-slurm"
	}
	conf, err := testSlurm(dir)
	if err != nil {
		msg := "no SLURM test cluster of this suite (it cancels every job and drains every node of the cluster it uses, so it only uses one that hack/slurm-up.sh started in $BERTH_SLURM_DIR): " + err.Error()
		if os.Getenv("BERTH_REQUIRE_INTEGRATION") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if env := os.Getenv("SLURM_CONF"); env != "" && env != conf {
		t.Logf("SLURM_CONF=%s is ignored: the test uses %s", env, conf)
	}
	return conf
}

func slurmCmd(conf, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, name, args...)
	c.Env = append(os.Environ(), "SLURM_CONF="+conf)
	c.Dir = os.TempDir()
	out, err := c.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func mustSlurm(t *testing.T, conf, name string, args ...string) string {
	t.Helper()
	out, err := slurmCmd(conf, name, args...)
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return out
}

// slurmNode is what sinfo says of a node: its state (drained, idle,
// allocated, ...).
func slurmNode(t *testing.T, conf, node string) string {
	return mustSlurm(t, conf, "sinfo", "-h", "-n", node, "-o", "%T")
}

// setRunning plays the kubelet, retrying when the backend wrote the pod's
// status in between.
func setRunning(t *testing.T, w *world, name string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := cs.CoreV1().Pods(w.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &now
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now})
		_, err = cs.CoreV1().Pods(w.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	}))
}

// hybridNodes readies four SLURM nodes of the berth partition, idle
// and running nothing (the cluster's other nodes drained for the test),
// and the same hosts as Kubernetes Nodes of w. The initial split: SLURM
// owns the first two (the federation cordons their Kubernetes copies),
// Kubernetes the last two (drained in SLURM here). Cleanup cancels every
// SLURM job and resumes every node.
func hybridNodes(t *testing.T, ctx context.Context, conf string, w *world) []string {
	t.Helper()
	// Four SLURM nodes of the berth partition; none running anything.
	if ids := strings.Fields(mustSlurm(t, conf, "squeue", "-h", "-o", "%i")); len(ids) > 0 {
		_, _ = slurmCmd(conf, "scancel", ids...)
	}
	all := strings.Fields(mustSlurm(t, conf, "scontrol", "show", "hostnames",
		mustSlurm(t, conf, "sinfo", "-h", "-p", "berth", "-o", "%N")))
	require.GreaterOrEqual(t, len(all), 4)
	nodes := all[:4]
	for _, n := range all {
		if st := slurmNode(t, conf, n); strings.Contains(st, "drain") {
			mustSlurm(t, conf, "scontrol", "update", "NodeName="+n, "State=RESUME")
		}
	}
	// Idle and responding, for two seconds in a row: a node resumed after
	// a drain can be flagged NOT_RESPONDING ("idle*") until slurmd
	// registers again, and a federation that takes its inventory then
	// sees it down and gives the host to Kubernetes (TestHybridFederation
	// failed so in CI: "node01 owned by kube; SLURM says drained").
	var calm time.Time
	eventually(t, 60*time.Second, "SLURM's jobs to end and its nodes to be idle and responding", func() bool {
		if out, _ := slurmCmd(conf, "squeue", "-h", "-o", "%i"); out != "" {
			calm = time.Time{}
			return false
		}
		for _, n := range nodes {
			if st := slurmNode(t, conf, n); st != "idle" {
				calm = time.Time{}
				return false
			}
		}
		if calm.IsZero() {
			calm = time.Now()
		}
		return time.Since(calm) >= 2*time.Second
	})
	for _, n := range all[4:] { // keep the test to four nodes
		mustSlurm(t, conf, "scontrol", "update", "NodeName="+n, "State=DRAIN", "Reason=berth-hybrid-test")
	}
	t.Cleanup(func() {
		if ids, _ := slurmCmd(conf, "squeue", "-h", "-o", "%i"); ids != "" {
			_, _ = slurmCmd(conf, "scancel", strings.Fields(ids)...)
		}
		for _, n := range all {
			_, _ = slurmCmd(conf, "scontrol", "update", "NodeName="+n, "State=RESUME")
		}
	})
	// The same hosts as Kubernetes Nodes. The initial split: SLURM owns
	// the first two (the Kubernetes copies cordoned by the federation),
	// Kubernetes the last two (drained in SLURM here).
	for _, n := range nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool": w.pool, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(8, resource.DecimalSI)},
				Allocatable: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(8, resource.DecimalSI)},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		}
		created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
		w.nodes = append(w.nodes, n)
		created.Spec.Taints = nil // no node lifecycle controller to lift the not-ready taint
		_, err = cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	for _, n := range nodes[2:] {
		mustSlurm(t, conf, "scontrol", "update", "NodeName="+n, "State=DRAIN", "Reason="+slurm.LendReason)
	}
	return nodes
}

func TestHybridFederation(t *testing.T) {
	needAPI(t)
	conf := hybridSlurm(t)
	w := newWorld(t)
	// Pods bound to the shared node names would outlive the test (no
	// kubelet, no namespace controller) and hold their GPUs for the next
	// test that names its nodes the same (-count 2): delete them.
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(w.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	nodes := hybridNodes(t, ctx, conf, w)

	sb, err := slurm.New(slurm.Config{
		Partitions:   map[string]slurm.Partition{"berth": {}, "berth-hi": {Priority: 10}},
		PollInterval: 200 * time.Millisecond,
		Env:          []string{"SLURM_CONF=" + conf},
		DefaultQueue: "default",
		OnSkip:       func(job string, err error) { t.Logf("slurm backend: job %q: %v", job, err) },
	})
	require.NoError(t, err)
	kb, err := kube.New(cs, dyn, kube.Config{SchedulerName: w.sched, NodeSelector: map[string]string{"pool": w.pool}, Logf: t.Logf,
		Launch: kube.LaunchConfig{Namespace: w.ns, Image: "registry.example/infer:1"}})
	require.NoError(t, err)
	require.NoError(t, kb.Start(ctx))
	defer kb.Close()
	fed, err := federation.New(federation.Config{
		Pools: []federation.Pool{
			{Name: "slurm", Backend: sb, Quota: 0.5},
			{Name: "kube", Backend: kb, Quota: 0.5},
		},
		DrainTimeout: 3 * time.Second, PollInterval: 200 * time.Millisecond,
		// A reclaim empties a busy SLURM node by requeueing its jobs
		// (MoveNode still waits for them).
		PreemptOnReclaim: true,
		Rebalance:        federation.RebalanceConfig{Cooldown: time.Millisecond},
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)

	// The invariant, sampled all along from both systems.
	var smu sync.Mutex
	var samples int
	var violations []error
	sctx, stopSampling := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		for sctx.Err() == nil {
			err := fed.CheckExclusive(sctx)
			smu.Lock()
			if err != nil && sctx.Err() == nil {
				violations = append(violations, err)
			}
			samples++
			smu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	runner, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:           queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "default"}}},
			Policy:           queue.StrictPriority(),
			Backfill:         engine.BackfillConfig{Mode: engine.BackfillEASY},
			MIG:              engine.MIGConfig{Disabled: true},
			BindRetryBackoff: time.Second,
			// Jobs submitted to the federation for several pools name
			// the pools' partitions.
			Site: engine.SiteConfig{Partitions: fed.Partitions()},
		},
		Backend:      fed,
		TickInterval: time.Second,
		Parallelism:  16,
		Observe: func(c backends.Cycle) {
			fed.Observe(c) // pending pods get berth's reason in federated mode too
			if os.Getenv("BERTH_HYBRID_TRACE") != "" {
				// Bind outcomes come back asynchronously (Cycle.Binds, those
				// stepped since the cycle before); Outcome.RefusedBinds is
				// always empty with assumed binds.
				var failed []string
				for _, br := range c.Binds {
					if br.Err != nil {
						failed = append(failed, fmt.Sprintf("%s: %v", br.Job, br.Err))
					}
				}
				t.Logf("cycle %d: binds %d pending %+v outcomes %d failed %v errors %v", c.Ready.Seq, len(c.Ready.Binds), c.Ready.Pending, len(c.Binds), failed, c.Errors)
			}
		},
		OnStepError: func(ev engine.Event, err error) error {
			t.Logf("step %v %s: %v", ev.Kind, ev.JobID, err)
			return fed.OnStepError(ev, err)
		},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	rctx, stopRunner := context.WithCancel(ctx)
	go func() { done <- runner.Run(rctx) }()
	defer func() {
		stopRunner()
		<-done
	}()
	eventually(t, 20*time.Second, "the federation's inventory", func() bool { _, _, ok := fed.Owner(nodes[0]); return ok })
	owners := fed.Owners()
	for _, n := range nodes {
		t.Logf("at start: %s owned by %s; SLURM says %q", n, owners[n], slurmNode(t, conf, n))
	}
	for i, n := range nodes {
		assert.Equal(t, map[bool]string{true: "slurm", false: "kube"}[i < 2], owners[n], n)
	}
	check := func(when string) {
		t.Helper()
		require.NoError(t, fed.CheckExclusive(ctx), when)
	}
	check("at start")

	// Jobs submitted to the federation itself, for any pool: two gangs
	// of two whole nodes each. A gang stays in one pool and each pool
	// owns two nodes, so one runs in SLURM (a real sbatch job, on the
	// nodes berth chose) and the other in Kubernetes (berth's pods).
	for _, id := range []string{"fed-any-1", "fed-any-2"} {
		require.NoError(t, fed.Submit(&queue.Job{ID: id, Queue: "default", Submit: time.Now(), RuntimeEstimate: 4 * time.Second,
			Request: gang.Request{Groups: []gang.Group{{Members: 2, GPUsPerMember: 8}}}}, federation.AnyPool))
	}
	where := map[string]string{}
	eventually(t, 30*time.Second, "both federated jobs to run, one in each system", func() bool {
		for _, id := range []string{"fed-any-1", "fed-any-2"} {
			if sid, ok := sb.SlurmJobID(id); ok {
				out, _ := slurmCmd(conf, "squeue", "-h", "-j", sid, "-o", "%T")
				if out == "RUNNING" {
					where[id] = "slurm"
				}
			}
			if pods := kb.LaunchedPods(id); len(pods) == 2 {
				bound := 0
				for _, p := range pods {
					if w.nodeOf(strings.TrimPrefix(p, w.ns+"/")) != "" {
						bound++
					}
				}
				if bound == 2 {
					where[id] = "kube"
				}
			}
		}
		return len(where) == 2
	})
	check("with the federated jobs running")
	assert.ElementsMatch(t, []string{"slurm", "kube"}, []string{where["fed-any-1"], where["fed-any-2"]}, "%v", where)
	for id, pool := range where {
		if pool == "slurm" {
			sid, _ := sb.SlurmJobID(id)
			ran := strings.Fields(mustSlurm(t, conf, "scontrol", "show", "hostnames", mustSlurm(t, conf, "squeue", "-h", "-j", sid, "-o", "%N")))
			assert.ElementsMatch(t, nodes[:2], ran, "the SLURM job runs on SLURM's nodes")
			assert.Equal(t, "berth-"+id, mustSlurm(t, conf, "squeue", "-h", "-j", sid, "-o", "%j"))
			continue
		}
		var ran []string
		for _, p := range kb.LaunchedPods(id) {
			name := strings.TrimPrefix(p, w.ns+"/")
			ran = append(ran, w.nodeOf(name))
			setRunning(t, w, name)
		}
		assert.ElementsMatch(t, nodes[2:], ran, "the pods run on Kubernetes' nodes")
	}
	// They end: the SLURM job's script (a sleep of its estimate) exits;
	// the pods succeed. Both systems are idle again.
	for id, pool := range where {
		if pool == "kube" {
			for _, p := range kb.LaunchedPods(id) {
				w.setPhase(strings.TrimPrefix(p, w.ns+"/"), corev1.PodSucceeded)
			}
		}
	}
	eventually(t, 30*time.Second, "the federated jobs to end in both systems", func() bool {
		if out, _ := slurmCmd(conf, "squeue", "-h", "-o", "%i"); out != "" {
			return false
		}
		for _, n := range nodes {
			if st, err := kb.NodeStatus(ctx, n); err != nil || st.Busy {
				return false
			}
			if st := slurmNode(t, conf, n); strings.HasPrefix(st, "alloc") || strings.HasPrefix(st, "mix") || strings.HasPrefix(st, "completing") {
				return false
			}
		}
		return len(fed.PlanRound(time.Now())) == 0
	})
	check("after the federated jobs ended")

	// A training gang goes to SLURM, on a node SLURM owns.
	train := mustSlurm(t, conf, "sbatch", "--parsable", "-o", "/dev/null", "-p", "berth", "-N", "1", "--gres=gpu:h100:8", "-t", "10", "--wrap", "sleep 300")
	eventually(t, 30*time.Second, "the training job to run", func() bool {
		return strings.Contains(mustSlurm(t, conf, "squeue", "-h", "-j", train, "-o", "%T"), "RUNNING")
	})
	trainNode := mustSlurm(t, conf, "squeue", "-h", "-j", train, "-o", "%N")
	assert.Contains(t, nodes[:2], trainNode)
	// An inference gang goes to Kubernetes, on the two nodes it owns.
	w.podGroup("infer", 2)
	for _, p := range []string{"infer-0", "infer-1"} {
		w.pod(p, 8, inGroup("infer"))
	}
	w.waitBound(30*time.Second, "infer-0", "infer-1")
	assert.ElementsMatch(t, nodes[2:], []string{w.nodeOf("infer-0"), w.nodeOf("infer-1")})
	for _, p := range []string{"infer-0", "infer-1"} {
		setRunning(t, w, p)
	}

	// A burst of inference demand: the idle SLURM node moves to
	// Kubernetes (drained there, uncordoned here) and the burst runs on it.
	idle := nodes[0]
	if trainNode == nodes[0] {
		idle = nodes[1]
	}
	w.pod("burst", 8)
	eventually(t, 10*time.Second, "the burst to be booked pending", func() bool {
		return len(fed.PlanRound(time.Now())) > 0
	})
	// Pending on the Kubernetes side, the pod shows berth's reason.
	eventually(t, 10*time.Second, "the pending burst pod to show berth's reason", func() bool {
		reason, msg, _, ok := kb.Written(w.ns, "burst")
		if ok {
			t.Logf("burst pending: %s: %s", reason, msg)
		}
		return ok && reason != "" && strings.HasPrefix(msg, "berth: ")
	})
	moved, err := fed.Rebalance(ctx)
	require.NoError(t, err)
	require.Len(t, moved, 1, "moves: %+v", moved)
	assert.Equal(t, federation.Move{Host: idle, From: "slurm", To: "kube", Reason: moved[0].Reason}, moved[0])
	t.Logf("move: %s", moved[0].Reason)
	assert.Contains(t, slurmNode(t, conf, idle), "drain")
	kn, err := cs.CoreV1().Nodes().Get(ctx, idle, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, kn.Spec.Unschedulable)
	check("after the move to Kubernetes")
	w.waitBound(30*time.Second, "burst")
	assert.Equal(t, idle, w.nodeOf("burst"))
	setRunning(t, w, "burst")

	// The burst ends: the node goes back to SLURM (toward the 50/50
	// quotas), cordoned here, resumed there.
	require.NoError(t, cs.CoreV1().Pods(w.ns).Delete(ctx, "burst", metav1.DeleteOptions{}))
	w.finishDeletes()
	eventually(t, 20*time.Second, "the node to be empty in Kubernetes", func() bool {
		st, err := kb.NodeStatus(ctx, idle)
		return err == nil && !st.Busy
	})
	eventually(t, 20*time.Second, "the burst's end to be booked", func() bool {
		mv := fed.PlanRound(time.Now())
		return len(mv) == 1 && mv[0].Host == idle
	})
	moved, err = fed.Rebalance(ctx)
	require.NoError(t, err)
	require.Len(t, moved, 1)
	assert.Equal(t, "slurm", moved[0].To)
	check("after the move back")
	assert.NotContains(t, slurmNode(t, conf, idle), "drain")
	kn, err = cs.CoreV1().Nodes().Get(ctx, idle, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, kn.Spec.Unschedulable)

	// A move whose drain times out (the training job keeps running) is
	// rolled back: resumed in SLURM, still cordoned in Kubernetes.
	err = fed.MoveNode(ctx, trainNode, "kube", "test: drain a busy node")
	require.True(t, errors.Is(err, federation.ErrDrainTimeout), "%v", err)
	check("after the rollback")
	owner, moving, _ := fed.Owner(trainNode)
	assert.Equal(t, "slurm", owner)
	assert.False(t, moving)
	assert.NotContains(t, slurmNode(t, conf, trainNode), "drain")
	kn, err = cs.CoreV1().Nodes().Get(ctx, trainNode, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, kn.Spec.Unschedulable)
	assert.True(t, strings.Contains(mustSlurm(t, conf, "squeue", "-h", "-j", train, "-o", "%T"), "RUNNING"))

	// A reclaim of the busy node under PreemptOnReclaim: the training job
	// is requeued in SLURM, the node drains there and goes to Kubernetes,
	// and the job starts again on the SLURM node that is left.
	require.NoError(t, fed.Reclaim(ctx, trainNode, "kube", "test: reclaim a busy node"))
	check("after the reclaim")
	mvs := fed.Moves()
	last := mvs[len(mvs)-1]
	assert.NoError(t, last.Err)
	assert.Equal(t, []string{train}, last.Preempted)
	owner, _, _ = fed.Owner(trainNode)
	assert.Equal(t, "kube", owner)
	assert.Contains(t, slurmNode(t, conf, trainNode), "drain")
	kn, err = cs.CoreV1().Nodes().Get(ctx, trainNode, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, kn.Spec.Unschedulable)
	eventually(t, 90*time.Second, "the requeued training job to run again on the other SLURM node", func() bool {
		out, _ := slurmCmd(conf, "squeue", "-h", "-j", train, "-o", "%T %N")
		return strings.HasPrefix(out, "RUNNING") && strings.HasSuffix(out, idle)
	})
	check("after the training job restarted")

	stopSampling()
	swg.Wait()
	require.NoError(t, fed.CheckExclusive(ctx))
	smu.Lock()
	defer smu.Unlock()
	t.Logf("%d samples of the invariant", samples)
	assert.GreaterOrEqual(t, samples, 3)
	assert.Empty(t, violations)
}

// The SLURM tests touch only a cluster that hack/slurm-up.sh started in
// the given state dir: a cluster without the script's marker (a user's
// own, found through any path) is refused, and so is one whose running
// slurmctld is not the cluster the marker names (another cluster on the
// same ports). TestHybridFederation cancels every job and drains every
// node of the cluster it is given: run beside a user's cluster it once
// cancelled that user's jobs.
func TestSlurmTestClusterRefusesOthers(t *testing.T) {
	// A cluster this suite did not start: a slurm.conf, no marker.
	users := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(users, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(users, "etc", "slurm.conf"), []byte("ClusterName=users\nSlurmctldHost=localhost\n"), 0o644))
	_, err := testSlurm(users)
	require.ErrorIs(t, err, errNotOurCluster)
	require.NoError(t, os.WriteFile(filepath.Join(users, slurmMarker), []byte("\n"), 0o644))
	_, err = testSlurm(users)
	require.ErrorIs(t, err, errNotOurCluster, "an empty marker")

	// The suite's own cluster passes; the same slurm.conf (the same
	// slurmctld) under a marker with another token does not.
	conf := hybridSlurm(t)
	other := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(other, "etc"), os.DirFS(filepath.Dir(conf))))
	require.NoError(t, os.WriteFile(filepath.Join(other, slurmMarker), []byte("000000000000\n"), 0o644))
	_, err = testSlurm(other)
	require.ErrorIs(t, err, errNotOurCluster)
	t.Logf("refused: %v", err)
}
