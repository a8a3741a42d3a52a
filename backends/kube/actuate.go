package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: kube: "+format, append([]any{backends.ErrRefused}, args...)...)
}

func memberKey(m engine.Member) string {
	var sb strings.Builder
	sb.WriteString(m.Node)
	sb.WriteByte('|')
	sb.WriteString(strconv.Itoa(m.Group))
	for _, g := range m.GPUs {
		sb.WriteByte(',')
		sb.WriteString(strconv.Itoa(g))
	}
	if m.Fractional {
		sb.WriteString("|" + m.Instance.String())
	}
	return sb.String()
}

// BindMember binds one pending pod of job's group m.Group to m.Node
// through the pods/binding subresource. The GPU indices in m are the
// engine's books: with the device plugin the kubelet picks the physical
// GPUs, and berth books counts per node (see the package documentation).
// Before binding, the node's free count (its allocatable minus every live
// pod bound there, assumed binds included) must cover the pod: a node
// that still runs terminating pods gives a transient error. Refused: an
// unknown job, no pending pod left for the group, a MIG instance the
// engine wants created, a node or pod gone, a pod bound meanwhile.
func (b *Backend) BindMember(ctx context.Context, jobID string, m engine.Member) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.isReplicaJob(jobID) {
		return b.bindReplica(ctx, jobID, m)
	}
	if m.Created {
		return refused("job %q: the MIG instance %v on %s would have to be created; on Kubernetes the MIG manager lays out instances", jobID, m.Instance, m.Node)
	}
	key := memberKey(m)
	b.mu.Lock()
	j := b.jobs[jobID]
	if j == nil {
		b.mu.Unlock()
		return refused("unknown job %q", jobID)
	}
	i, ok := j.assigned[key]
	if ok {
		if _, done := j.bound[i]; done {
			b.mu.Unlock()
			return nil
		}
	} else {
		i = -1
		taken := mapValues(j.assigned)
		for k, pr := range j.pods {
			if pr.group != m.Group {
				continue
			}
			if _, bound := j.bound[k]; bound || slices.Contains(taken, k) {
				continue
			}
			if i < 0 {
				i = k
			}
			if k < len(j.nominated) && j.nominated[k] == m.Node {
				i = k // the pod nominated for this node
				break
			}
		}
		if i < 0 {
			b.mu.Unlock()
			return refused("job %q: no pending pod left for group %d", jobID, m.Group)
		}
		j.assigned[key] = i
	}
	pr := j.pods[i]
	if err := b.fitsLocked(m.Node, pr); err != nil {
		delete(j.assigned, key)
		b.mu.Unlock()
		return err
	}
	b.assumed[pr.uid] = assumedBind{node: m.Node, d: pr.d}
	b.mu.Unlock()

	// A pod with ResourceClaims gets its devices before the bind (dra.go).
	if err := b.allocateClaims(ctx, pr, m); err != nil {
		b.mu.Lock()
		delete(b.assumed, pr.uid)
		if cur := b.jobs[jobID]; cur == j {
			delete(j.assigned, key)
		}
		b.mu.Unlock()
		return err
	}

	// The Binding's annotations go onto the pod with the bind: the GPU
	// indices the engine booked, for a restarted berth to adopt the pod on.
	meta := metav1.ObjectMeta{Namespace: pr.ns, Name: pr.name, UID: pr.uid}
	if v := gpusAnnotation(m); v != "" {
		meta.Annotations = map[string]string{AnnotationGPUs: v}
	}
	err := b.cs.CoreV1().Pods(pr.ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: meta,
		Target:     corev1.ObjectReference{Kind: "Node", Name: m.Node},
	}, metav1.CreateOptions{})
	if err != nil {
		b.releasePodClaims(ctx, pr)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		delete(b.assumed, pr.uid)
		if cur := b.jobs[jobID]; cur == j {
			delete(j.assigned, key)
		}
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err):
			return refused("binding pod %s to %s: %v", pr.key(), m.Node, err)
		}
		return fmt.Errorf("kube: binding pod %s to %s: %w", pr.key(), m.Node, err)
	}
	if cur := b.jobs[jobID]; cur != j {
		// The job was cancelled while the bind was in flight: the pod
		// is bound anyway; it is adopted by the next sync.
		delete(b.assumed, pr.uid)
		return refused("job %q went away while its pod %s was bound", jobID, pr.key())
	}
	bm := m
	bm.GPUs = slices.Clone(m.GPUs)
	j.bound[i] = bm
	if d := b.devs[m.Node]; d != nil {
		d.book(jobID, bm)
	}
	if b.prov != nil && len(j.bound) == len(j.pods) {
		// The gang is bound: its ProvisioningRequest can go (the sync
		// loop may have looked before this bind was recorded).
		b.poke()
	}
	return nil
}

func mapValues(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// fitsLocked checks the node's free count of the pod's resource against
// what live pods (and assumed binds) hold. Caller holds mu.
func (b *Backend) fitsLocked(node string, pr podRef) error {
	t := b.nodes[node]
	if t == nil || t.gone {
		return refused("node %s is gone", node)
	}
	res, need := ResourceGPU, int64(pr.d.gpus)
	if pr.d.mig != "" {
		res, need = ResourceMIGPrefix+pr.d.mig, 1
	}
	if need == 0 {
		return nil
	}
	capacity := t.model.capacity[res]
	objs, err := b.podInf.GetIndexer().ByIndex(nodeIndex, node)
	if err != nil {
		return fmt.Errorf("kube: pods of node %s: %w", node, err)
	}
	var used int64
	terminating := false
	seen := map[types.UID]bool{}
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || !podLive(p) {
			continue
		}
		seen[p.UID] = true
		d, err := podDemand(p)
		if err != nil {
			continue
		}
		if n := demandOf(d, res); n > 0 {
			used += n
			terminating = terminating || p.DeletionTimestamp != nil
		}
	}
	for uid, a := range b.assumed {
		if a.node == node && !seen[uid] {
			used += demandOf(a.d, res)
		}
	}
	if used+need <= capacity {
		return nil
	}
	if terminating {
		return fmt.Errorf("kube: node %s has %d of %d %s in use, some by terminating pods: pod %s waits", node, used, capacity, res, pr.key())
	}
	return refused("node %s has %d of %d %s in use: pod %s does not fit (the engine's books and the cluster differ)", node, used, capacity, res, pr.key())
}

func demandOf(d demand, res string) int64 {
	switch {
	case res == ResourceGPU:
		return int64(d.gpus)
	case d.mig != "" && res == ResourceMIGPrefix+d.mig:
		return 1
	}
	return 0
}

// UnbindMember undoes a bind. A bound pod cannot be unbound in Kubernetes
// (spec.nodeName is immutable), so the pod is deleted at once (grace 0,
// with its UID as precondition): its controller, if any, makes a new one,
// which forms the gang again. A member that was never bound returns nil.
//
// The truth may be ahead of berth's record: a pod of the job that the
// informer shows on m's node with no bind of berth's recorded (a Binding
// the API server committed after its call gave up) is found and deleted
// too. A member whose bind call is still in flight cannot be undone yet:
// that is an error (not ErrRefused), and the Runner, for which the bind's
// outcome stays unknown, looks again (an unbind that returned nil there
// would be followed by the bind committing: a pod running that berth had
// given up).
func (b *Backend) UnbindMember(ctx context.Context, jobID string, m engine.Member) error {
	if b.isReplicaJob(jobID) {
		return b.unbindReplica(ctx, jobID, m)
	}
	key := memberKey(m)
	b.mu.Lock()
	j := b.jobs[jobID]
	if j == nil {
		b.mu.Unlock()
		return nil
	}
	i, ok := j.assigned[key]
	if !ok {
		i = b.unrecordedPodLocked(j, m)
	}
	if i < 0 {
		b.mu.Unlock()
		return nil
	}
	bm, bound := j.bound[i]
	pr := j.pods[i]
	if _, inFlight := b.assumed[pr.uid]; ok && !bound && inFlight {
		b.mu.Unlock()
		return fmt.Errorf("kube: the bind of pod %s to %s is in flight: it cannot be undone before it answers", pr.key(), m.Node)
	}
	if !ok {
		bound = true // on m's node, by the informer: bm is the zero Member, nothing booked
	}
	b.mu.Unlock()
	if bound {
		zero := int64(0)
		err := b.cs.CoreV1().Pods(pr.ns).Delete(ctx, pr.name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pr.uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("kube: deleting pod %s to undo its bind: %w", pr.key(), err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if bound {
		b.deleted[pr.uid] = true
	}
	delete(j.assigned, key)
	if _, booked := j.bound[i]; booked {
		delete(j.bound, i)
		if d := b.devs[bm.Node]; d != nil {
			d.free(jobID, &bm)
		}
	}
	delete(b.assumed, pr.uid)
	return nil
}

// unrecordedPodLocked returns the index in j.pods of a live pod of m's
// group that the informer shows bound on m's node and that berth has no
// bind of recorded (nor deleted), or -1. Caller holds mu.
func (b *Backend) unrecordedPodLocked(j *job, m engine.Member) int {
	if b.podList == nil {
		return -1
	}
	for i, pr := range j.pods {
		if _, booked := j.bound[i]; booked || pr.group != m.Group || b.deleted[pr.uid] {
			continue
		}
		p, err := b.podList.Pods(pr.ns).Get(pr.name)
		if err != nil || p.UID != pr.uid || !podLive(p) || p.DeletionTimestamp != nil || p.Spec.NodeName != m.Node {
			continue
		}
		return i
	}
	return -1
}

// Preempt evicts every bound pod of the victim through the Eviction API,
// which honours PodDisruptionBudgets. All evictions are first tried as a
// dry run: if the API server refuses any (429: a budget forbids it), the
// preemption is refused and nothing is evicted. The pods then terminate
// within their grace period, and Preempt returns once they are gone (see
// awaitGone): only then are the victim's GPUs free for the preemptor. When
// they are gone the job is reported cancelled (its controller, if any,
// makes new pods, a new job).
func (b *Backend) Preempt(ctx context.Context, p engine.Preemption) error {
	if b.isReplicaJob(p.Victim) {
		return b.preemptReplica(ctx, p)
	}
	b.mu.Lock()
	j := b.jobs[p.Victim]
	var pods []podRef
	if j != nil {
		for i := range j.bound {
			pods = append(pods, j.pods[i])
		}
	}
	b.mu.Unlock()
	if j == nil || len(pods) == 0 {
		return refused("preemption of %q, which is not running", p.Victim)
	}
	if j.foreign {
		return refused("preemption of %q, a pod of another scheduler", p.Victim)
	}
	slices.SortFunc(pods, func(a, c podRef) int { return compareStrings(a.key(), c.key()) })
	for _, dry := range []bool{true, false} {
		for _, pr := range pods {
			if err := b.evict(ctx, pr, dry); err != nil {
				return err
			}
		}
	}
	return b.awaitGone(ctx, pods)
}

// The longest awaitGone waits beyond the pods' grace period, and how
// often it looks at the informer.
const (
	goneSlack = 30 * time.Second
	goneLook  = 20 * time.Millisecond
)

// awaitGone waits until none of pods holds its node's GPUs any more: each
// is gone from the informer, replaced by a pod of another UID, or ended.
// A preemption on Kubernetes is applied when its victim's pods are gone,
// not when their evictions are issued: a preemptor bound while they
// terminate would be refused by the node's count (fitsLocked), back off,
// and let the requeued victim take the GPUs again (the two taking turns
// until the preemptor is held).
//
// The wait outlives ctx, which is the Runner's per-call bound: a grace
// period longer than CallTimeout makes the call abandoned (its outcome
// unknown), and the victim stays booked until the wait returns and its
// late answer comes (backends' reliability contract: GPUs freed only when
// the backend reports the job gone). It ends at the pods' grace period
// plus goneSlack (a pod on a node that does not answer stays terminating;
// nil then: the evictions were made), or when the backend closes.
func (b *Backend) awaitGone(ctx context.Context, pods []podRef) error {
	var grace time.Duration
	live := func() bool {
		for _, pr := range pods {
			p, err := b.podList.Pods(pr.ns).Get(pr.name)
			if err != nil || p.UID != pr.uid || !podLive(p) {
				continue
			}
			if g := p.DeletionGracePeriodSeconds; g != nil {
				grace = max(grace, time.Duration(*g)*time.Second)
			} else if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = max(grace, time.Duration(*g)*time.Second)
			}
			return true
		}
		return false
	}
	if !live() {
		return nil
	}
	life := b.life
	if life == nil {
		life = context.WithoutCancel(ctx)
	}
	end := time.Now().Add(grace + goneSlack)
	tick := time.NewTicker(goneLook)
	defer tick.Stop()
	for live() {
		if time.Now().After(end) {
			b.logf("preempt", "kube: evicted pods still terminating %v after their grace period: their GPUs are taken as free", goneSlack)
			return nil
		}
		select {
		case <-life.Done():
			return fmt.Errorf("kube: backend closed while evicted pods terminate: %w", life.Err())
		case <-tick.C:
		}
	}
	return nil
}

// evict posts one Eviction without client-side retries: client-go would
// otherwise retry a 429 for as long as ctx allows.
func (b *Backend) evict(ctx context.Context, pr podRef, dry bool) error {
	ev := &policyv1.Eviction{
		TypeMeta:      metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta:    metav1.ObjectMeta{Namespace: pr.ns, Name: pr.name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pr.uid}},
	}
	if dry {
		ev.DeleteOptions.DryRun = []string{metav1.DryRunAll}
	}
	err := b.cs.PolicyV1().RESTClient().Post().
		AbsPath("/api/v1/namespaces", pr.ns, "pods", pr.name, "eviction").
		Body(ev).MaxRetries(0).Do(ctx).Error()
	var st apierrors.APIStatus
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return nil // already gone
	case apierrors.IsTooManyRequests(err), errors.As(err, &st) && st.Status().Code == http.StatusTooManyRequests:
		return refused("eviction of pod %s refused (a PodDisruptionBudget forbids it): %v", pr.key(), err)
	case apierrors.IsForbidden(err), apierrors.IsConflict(err):
		return refused("eviction of pod %s: %v", pr.key(), err)
	}
	return fmt.Errorf("kube: eviction of pod %s: %w", pr.key(), err)
}

// ApplyMIG is refused: on Kubernetes the NVIDIA MIG manager owns MIG
// layouts (the nvidia.com/mig.config node label). RunnerConfig turns the
// engine's MIG planning off.
func (b *Backend) ApplyMIG(_ context.Context, r engine.MIGReconfiguration) error {
	return refused("MIG change on %s GPU %d: MIG layouts are the MIG manager's on Kubernetes", r.Node, r.GPU)
}
