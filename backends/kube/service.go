package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// Services (engine.Service) on Kubernetes: every replica is a pod per
// member, created from the service's pod template when the engine binds
// it.
//
// A site declares a service with SetService (from RunConfig.Started when
// it uses Run), giving the engine.Service and a pod template; ScaleService
// and DeleteService change it. The backend feeds the engine the events
// (engine.ServiceSet, ServiceScaled, ServiceDeleted) and keeps the
// template. The engine makes the replicas "<service>/<n>" and binds them
// like any gang: BindMember creates the member's pod already bound to the
// node berth chose (spec.nodeName set at creation, spec.schedulerName
// berth's), named "<service>-<n>-<k>" (k counts the replica's pods),
// labelled LabelService=<service> and LabelQueue=<queue>, annotated
// AnnotationReplica=<service>/<n>. StopReplica deletes the replica's pods
// and reports nothing (the engine already removed it); a preempted replica
// is evicted (PodDisruptionBudgets apply) and bound again later as new
// pods. A replica whose pod ends on its own (Succeeded, Failed, deleted by
// someone) is reported Finished (Cancelled when deleted) and the engine
// replaces it. A new leader (or a restart) adopts the running replica pods
// from their annotation, before the services are declared again.
//
// The pods of replicas are never berth's pending work nor adopted as
// ordinary jobs: the gang and adoption logic of the other pods skips every
// pod with LabelService.

// Names of replica pods.
const (
	// LabelService marks the pods of a service's replicas with the
	// service's name.
	LabelService = "berth.io/service"
	// AnnotationReplica is the replica ID ("<service>/<n>") of a replica
	// pod.
	AnnotationReplica = "berth.io/replica"
)

// ErrBadService: SetService, ScaleService or DeleteService got a service
// the backend cannot run (wrapped with the reason).
var ErrBadService = errors.New("kube: bad service")

var (
	// A DNS label short enough for "<service>-<n>-<k>" to stay one.
	kubeServiceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)
	kubeReplicaRE = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?)/([1-9][0-9]{0,8})$`)
)

func isReplicaID(id string) bool {
	return strings.IndexByte(id, '/') > 0 && kubeReplicaRE.MatchString(id)
}

// isReplicaJob says whether the engine's job ID names a replica of a
// service this backend knows (declared, or with pods it tracks), rather
// than a job of pods or one LaunchJob created.
func (b *Backend) isReplicaJob(id string) bool {
	if !isReplicaID(id) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.launched[id] || b.svc == nil {
		return false
	}
	return b.svc.specs[id[:strings.IndexByte(id, '/')]] != nil || b.svc.reps[id] != nil
}

func isReplicaPod(p *corev1.Pod) bool { return p.Labels[LabelService] != "" }

// svcState is what the backend keeps of its services (under Backend.mu).
type svcState struct {
	specs map[string]*svcSpec
	reps  map[string]*replica
	// next is the k of each replica's next pod; it outlives the replica's
	// record, so a replica bound again after a preemption never reuses the
	// name of a pod that may still be terminating.
	next map[string]int
}

type svcSpec struct {
	svc  engine.Service // a copy
	ns   string
	tmpl corev1.PodTemplateSpec
	d    demand
}

// replica states.
const (
	repRunning   = iota + 1
	repPreempted // evicted: its pods' end is not reported
	repStopping  // StopReplica is deleting its pods
)

type replica struct {
	state int
	pods  []*repPod
}

type repPod struct {
	ns, name string
	uid      types.UID // "" while its create is in flight
	m        engine.Member
	seen     bool // the informer has listed it
}

func (b *Backend) svcs() *svcState {
	if b.svc == nil {
		b.svc = &svcState{specs: map[string]*svcSpec{}, reps: map[string]*replica{}, next: map[string]int{}}
	}
	return b.svc
}

// SetService declares service svc (or replaces its spec) with the pod
// template of its replicas' pods, created in namespace ns; the engine gets
// engine.ServiceSet through Next. The backend keeps a copy of svc.
// Errors wrap ErrBadService: a nil service, a name that is not a DNS
// label of at most 40 characters, an empty namespace, a replica request
// other than one group of whole GPUs or of one MIG profile (no GPU
// fraction: berth shares no GPU on Kubernetes), or a template whose
// containers ask for other GPUs than the group's GPUsPerMember (or its MIG
// profile). The engine checks the rest when it steps the event.
func (b *Backend) SetService(svc *engine.Service, ns string, tmpl corev1.PodTemplateSpec) error {
	if svc == nil {
		return fmt.Errorf("%w: nil service", ErrBadService)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: service %q: "+format, append([]any{ErrBadService, svc.Name}, args...)...)
	}
	if !kubeServiceRE.MatchString(svc.Name) {
		return bad("name (want a DNS label of at most 40 characters)")
	}
	if ns == "" {
		return bad("no namespace")
	}
	gs := svc.Replica.Request.Groups
	if len(gs) != 1 || gs[0].Members < 1 || gs[0].GPUMilli != 0 || (gs[0].GPUsPerMember < 1) == (gs[0].MIGProfile == "") {
		return bad("a replica on Kubernetes is one group of whole GPUs or of one MIG profile per pod (no GPU fraction)")
	}
	d, err := podDemand(&corev1.Pod{Spec: tmpl.Spec})
	if err != nil {
		return bad("template: %v", err)
	}
	if d.gpus != gs[0].GPUsPerMember || d.mig != gs[0].MIGProfile {
		return bad("the template's containers ask for %v, the replica's group for %d GPUs / MIG profile %q", d, gs[0].GPUsPerMember, gs[0].MIGProfile)
	}
	mine := *svc
	mine.Replica.Request.Groups = slices.Clone(gs)
	b.mu.Lock()
	b.svcs().specs[svc.Name] = &svcSpec{svc: mine, ns: ns, tmpl: *tmpl.DeepCopy(), d: d}
	b.mu.Unlock()
	return b.feed.Push(engine.ServiceSet(time.Now(), svc))
}

// ScaleService sets the desired replica count of service name (the engine
// checks it against Min and Max). ErrBadService for a service SetService
// never declared.
func (b *Backend) ScaleService(name string, desired int) error {
	b.mu.Lock()
	known := b.svcs().specs[name] != nil
	b.mu.Unlock()
	if !known {
		return fmt.Errorf("%w: unknown service %q", ErrBadService, name)
	}
	return b.feed.Push(engine.ServiceScaled(time.Now(), name, desired))
}

// DeleteService deletes service name: the engine stops its replicas
// (StopReplica deletes their pods). The template stays known, so binds in
// flight find it.
func (b *Backend) DeleteService(name string) error {
	b.mu.Lock()
	known := b.svcs().specs[name] != nil
	b.mu.Unlock()
	if !known {
		return fmt.Errorf("%w: unknown service %q", ErrBadService, name)
	}
	return b.feed.Push(engine.ServiceDeleted(time.Now(), name))
}

// bindReplica creates the pod of one member of replica id on m.Node.
func (b *Backend) bindReplica(ctx context.Context, id string, m engine.Member) error {
	if m.Created {
		return refused("replica %q: the MIG instance %v on %s would have to be created; on Kubernetes the MIG manager lays out instances", id, m.Instance, m.Node)
	}
	name := id[:strings.IndexByte(id, '/')]
	n := id[strings.IndexByte(id, '/')+1:]
	b.mu.Lock()
	st := b.svcs()
	sp := st.specs[name]
	if sp == nil {
		b.mu.Unlock()
		return refused("replica %q: service %q was not declared with SetService", id, name)
	}
	r := st.reps[id]
	if r != nil && r.state != repRunning {
		if r.state == repStopping {
			b.mu.Unlock()
			return refused("replica %q is being stopped", id)
		}
		// Bound again after a preemption: its evicted pods are forgotten.
		for _, rp := range r.pods {
			if d := b.devs[rp.m.Node]; d != nil {
				d.free(id, &rp.m)
			}
		}
		r.state, r.pods = repRunning, nil
	}
	if r == nil {
		r = &replica{state: repRunning}
		st.reps[id] = r
	}
	for _, rp := range r.pods {
		if rp.m.Node == m.Node && memberKey(rp.m) == memberKey(m) {
			b.mu.Unlock()
			return nil // bound already (a retry)
		}
	}
	if len(r.pods) >= sp.svc.Replica.Request.Groups[0].Members {
		b.mu.Unlock()
		return refused("replica %q: all %d of its pods are bound", id, len(r.pods))
	}
	if err := b.fitsLocked(m.Node, podRef{ns: sp.ns, name: name, d: sp.d}); err != nil {
		if len(r.pods) == 0 {
			delete(st.reps, id)
		}
		b.mu.Unlock()
		return err
	}
	bm := m
	bm.GPUs = slices.Clone(m.GPUs)
	rp := &repPod{ns: sp.ns, name: fmt.Sprintf("%s-%s-%d", name, n, st.next[id]), m: bm}
	st.next[id]++
	r.pods = append(r.pods, rp)
	if d := b.devs[m.Node]; d != nil {
		d.book(id, bm)
	}
	pod := b.replicaPod(sp, id, rp)
	b.mu.Unlock()

	created, err := b.cs.CoreV1().Pods(rp.ns).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// An earlier attempt created it (its answer was lost).
		if cur, gerr := b.cs.CoreV1().Pods(rp.ns).Get(ctx, rp.name, metav1.GetOptions{}); gerr == nil &&
			cur.Annotations[AnnotationReplica] == id && cur.Spec.NodeName == m.Node && cur.DeletionTimestamp == nil {
			created, err = cur, nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if cur := b.svc.reps[id]; cur == r {
			r.pods = slices.DeleteFunc(r.pods, func(x *repPod) bool { return x == rp })
			if len(r.pods) == 0 {
				delete(b.svc.reps, id)
			}
		}
		if d := b.devs[m.Node]; d != nil {
			d.free(id, &bm)
		}
		switch {
		case apierrors.IsAlreadyExists(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsNotFound(err):
			return refused("creating pod %s/%s of replica %s on %s: %v", rp.ns, rp.name, id, m.Node, err)
		}
		return fmt.Errorf("kube: creating pod %s/%s of replica %s: %w", rp.ns, rp.name, id, err)
	}
	rp.uid = created.UID
	return nil
}

// replicaPod builds the pod of rp from the service's template. Caller
// holds mu.
func (b *Backend) replicaPod(sp *svcSpec, id string, rp *repPod) *corev1.Pod {
	t := sp.tmpl.DeepCopy()
	p := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	p.Namespace, p.Name, p.GenerateName = rp.ns, rp.name, ""
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Labels[LabelService] = sp.svc.Name
	p.Labels[LabelQueue] = sp.svc.Queue
	p.Annotations[AnnotationReplica] = id
	delete(p.Annotations, AnnotationGPUs)
	if v := gpusAnnotation(rp.m); v != "" {
		p.Annotations[AnnotationGPUs] = v
	}
	p.Spec.SchedulerName = b.cfg.SchedulerName
	p.Spec.NodeName = rp.m.Node
	return p
}

// unbindReplica deletes the pod of one member (rollback of a half-bound
// replica).
func (b *Backend) unbindReplica(ctx context.Context, id string, m engine.Member) error {
	b.mu.Lock()
	r := b.svcs().reps[id]
	var rp *repPod
	if r != nil {
		for _, x := range r.pods {
			if memberKey(x.m) == memberKey(m) {
				rp = x
			}
		}
	}
	b.mu.Unlock()
	if rp == nil {
		return nil
	}
	if err := b.deletePod(ctx, rp); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r.pods = slices.DeleteFunc(r.pods, func(x *repPod) bool { return x == rp })
	if len(r.pods) == 0 && b.svc.reps[id] == r {
		delete(b.svc.reps, id)
	}
	if d := b.devs[m.Node]; d != nil {
		d.free(id, &rp.m)
	}
	return nil
}

func (b *Backend) deletePod(ctx context.Context, rp *repPod) error {
	opts := metav1.DeleteOptions{}
	if rp.uid != "" {
		uid := rp.uid
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := b.cs.CoreV1().Pods(rp.ns).Delete(ctx, rp.name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kube: deleting pod %s/%s: %w", rp.ns, rp.name, err)
	}
	return nil
}

// StopReplica deletes the pods of a replica the engine removed
// (backends.ReplicaStopper), with their own grace period, without
// reporting an end. A replica without pods is a no-op.
func (b *Backend) StopReplica(ctx context.Context, st engine.Stop) error {
	b.mu.Lock()
	r := b.svcs().reps[st.Job]
	if r == nil {
		b.mu.Unlock()
		return nil
	}
	r.state = repStopping
	pods := slices.Clone(r.pods)
	b.mu.Unlock()
	for _, rp := range pods {
		if err := b.deletePod(ctx, rp); err != nil {
			return err // the Runner retries; the replica stays stopping
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.svc.reps[st.Job] == r {
		b.dropReplicaLocked(st.Job, r)
	}
	return nil
}

func (b *Backend) dropReplicaLocked(id string, r *replica) {
	delete(b.svc.reps, id)
	for _, rp := range r.pods {
		if d := b.devs[rp.m.Node]; d != nil {
			d.free(id, &rp.m)
		}
	}
}

// preemptReplica evicts the replica's pods (all tried as a dry run
// first, like Preempt); their end is not reported: the engine requeues
// the replica and binds it again as new pods.
func (b *Backend) preemptReplica(ctx context.Context, p engine.Preemption) error {
	b.mu.Lock()
	r := b.svcs().reps[p.Victim]
	var pods []podRef
	if r != nil && r.state == repRunning {
		for _, rp := range r.pods {
			pods = append(pods, podRef{ns: rp.ns, name: rp.name, uid: rp.uid})
		}
	}
	b.mu.Unlock()
	if len(pods) == 0 {
		return refused("preemption of replica %q, which is not running", p.Victim)
	}
	for _, pr := range pods {
		if err := b.evict(ctx, pr, true); err != nil {
			return err
		}
	}
	// Preempted before the evictions, so that the sync never takes the
	// pods' deletion for an end of their own.
	b.mu.Lock()
	if b.svc.reps[p.Victim] == r {
		r.state = repPreempted
	}
	b.mu.Unlock()
	for _, pr := range pods {
		if err := b.evict(ctx, pr, false); err != nil {
			b.mu.Lock()
			if b.svc.reps[p.Victim] == r && r.state == repPreempted {
				r.state = repRunning
			}
			b.mu.Unlock()
			return err
		}
	}
	return b.awaitGone(ctx, pods)
}

// replicaPods lists the live replica pods of the informer, by key.
func (b *Backend) replicaPods() (map[string]*corev1.Pod, error) {
	req, err := labels.NewRequirement(LabelService, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	list, err := b.podList.List(labels.NewSelector().Add(*req))
	if err != nil {
		return nil, err
	}
	out := make(map[string]*corev1.Pod, len(list))
	for _, p := range list {
		out[podKey(p)] = p
	}
	return out, nil
}

// syncReplicas reports the replicas whose pods ended on their own
// (Finished; Cancelled when a pod was deleted), deletes what is left of
// them, and forgets preempted and stopped replicas whose pods are gone.
func (b *Backend) syncReplicas(ctx context.Context, now time.Time) []engine.Event {
	pods, err := b.replicaPods()
	if err != nil {
		b.logf("replicas", "kube: listing replica pods: %v", err)
		return nil
	}
	var evs []engine.Event
	var cleanup []*repPod
	b.mu.Lock()
	st := b.svcs()
	for _, id := range slices.Sorted(maps.Keys(st.reps)) {
		r := st.reps[id]
		ended, deleted, gone := false, false, 0
		for _, rp := range r.pods {
			p := pods[rp.ns+"/"+rp.name]
			if p != nil && rp.uid != "" && p.UID != rp.uid {
				p = nil // an older pod of that name
			}
			switch {
			case p != nil:
				rp.seen = true
				if !podLive(p) {
					ended = true
					gone++
				} else if p.DeletionTimestamp != nil {
					ended, deleted = true, true
				}
			case rp.seen:
				ended, deleted = true, true
				gone++
			}
		}
		switch r.state {
		case repRunning:
			if !ended {
				continue
			}
			b.dropReplicaLocked(id, r)
			cleanup = append(cleanup, r.pods...)
			if deleted {
				evs = append(evs, engine.Cancelled(now, id))
			} else {
				evs = append(evs, engine.Finished(now, id))
			}
		default:
			if gone == len(r.pods) {
				b.dropReplicaLocked(id, r)
			}
		}
	}
	b.mu.Unlock()
	for _, rp := range cleanup {
		if p := pods[rp.ns+"/"+rp.name]; p != nil && podLive(p) && p.DeletionTimestamp == nil {
			if err := b.deletePod(ctx, rp); err != nil {
				b.logf("replica/"+rp.name, "kube: %v", err)
			}
		}
	}
	return evs
}

// adoptReplicas returns the replicas whose pods run (bound, live, not
// being deleted) as jobs to adopt, and tracks them. Called by Running.
func (b *Backend) adoptReplicas(now time.Time) []backends.RunningJob {
	pods, err := b.replicaPods()
	if err != nil {
		b.logf("replicas", "kube: listing replica pods: %v", err)
		return nil
	}
	byReplica := map[string][]*corev1.Pod{}
	for _, k := range slices.Sorted(maps.Keys(pods)) {
		p := pods[k]
		id := p.Annotations[AnnotationReplica]
		if !isReplicaID(id) || p.Spec.NodeName == "" || !podLive(p) || p.DeletionTimestamp != nil {
			continue
		}
		byReplica[id] = append(byReplica[id], p)
	}
	var out []backends.RunningJob
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.svcs()
	for _, id := range slices.Sorted(maps.Keys(byReplica)) {
		if st.reps[id] != nil {
			continue
		}
		ps := byReplica[id]
		d, err := podDemand(ps[0])
		if err != nil {
			b.cfg.Logf("kube: cannot adopt replica %s: %v", id, err)
			continue
		}
		r := &replica{state: repRunning}
		var ms []engine.Member
		ok := true
		for _, p := range ps {
			t, devs := b.nodes[p.Spec.NodeName], b.devs[p.Spec.NodeName]
			if t == nil || t.gone || devs == nil {
				ok = false
				break
			}
			m, took := devs.adoptAt(id, d, p)
			if !took {
				ok = false
				break
			}
			m.Node = p.Spec.NodeName
			ms = append(ms, m)
			r.pods = append(r.pods, &repPod{ns: p.Namespace, name: p.Name, uid: p.UID, m: m, seen: true})
			if i := strings.LastIndexByte(p.Name, '-'); i > 0 {
				if k, err := strconv.Atoi(p.Name[i+1:]); err == nil {
					st.next[id] = max(st.next[id], k+1)
				}
			}
		}
		if !ok {
			for _, m := range ms {
				b.devs[m.Node].free(id, &m)
			}
			b.cfg.Logf("kube: cannot adopt replica %s: a pod is on a node berth does not know or that has no room", id)
			continue
		}
		name := id[:strings.IndexByte(id, '/')]
		var j queue.Job
		if sp := st.specs[name]; sp != nil {
			j = sp.svc.Replica
			j.Request.Groups = slices.Clone(j.Request.Groups)
			j.Queue, j.Priority, j.GracePeriod = sp.svc.Queue, sp.svc.Priority, sp.svc.GracePeriod
		} else {
			j.Queue = ps[0].Labels[LabelQueue]
			if j.Queue == "" || !b.queues[j.Queue] {
				j.Queue = b.cfg.DefaultQueue
			}
			j.Request = gang.Request{Groups: []gang.Group{{Members: len(ps), GPUsPerMember: d.gpus, MIGProfile: d.mig}}}
		}
		j.ID, j.Class = id, queue.ClassInference
		start := now
		if s := ps[0].Status.StartTime; s != nil && s.Time.Before(now) {
			start = s.Time
		}
		j.Submit = start
		st.reps[id] = r
		out = append(out, backends.RunningJob{Job: &j, Members: ms, Start: start})
	}
	return out
}

// ReplicaPods returns the names of a replica's pods ("namespace/name"),
// for tools and tests.
func (b *Backend) ReplicaPods(replica string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	if r := b.svcs().reps[replica]; r != nil {
		for _, rp := range r.pods {
			out = append(out, rp.ns+"/"+rp.name)
		}
	}
	return out
}

var _ backends.ReplicaStopper = (*Backend)(nil)
