package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// EventReason is the reason of the Events berth records on pods it cannot
// place now (the same as kube-scheduler's).
const EventReason = "FailedScheduling"

// podStatus is what berth says of one pending pod.
type podStatus struct {
	uid       types.UID
	reason    string
	message   string
	nominated string
}

// statusDelay is how long a pod's new status waits before it is written.
// A pod bound meanwhile (a gang whose last members are arriving, a pod
// bound in the next cycle) is never written to, and a status that
// changes meanwhile (a forming gang's "has 3 of its 4 pods") is written
// once, as it is then: status writes share the API client's rate limit
// with the binds, and a burst of them (a 256-pod gang forming) delayed
// the binds that followed.
const statusDelay = time.Second

// statusWriter writes PodScheduled=False conditions, nominatedNodeName and
// Events for pending pods, off the scheduling loop: the latest status of a
// pod wins, a status equal to the last one written is not written again,
// and a status is written statusDelay after it was first wanted.
type statusWriter struct {
	cs      kubernetes.Interface
	rec     record.EventRecorder
	logf    func(string, ...any)
	isBound func(types.UID) bool
	delay   time.Duration

	mu      sync.Mutex
	want    map[string]podStatus
	written map[string]podStatus
	queue   []queuedStatus // by due time
	queued  map[string]bool
	wake    chan struct{}
}

type queuedStatus struct {
	key string
	due time.Time
}

func newStatusWriter(cs kubernetes.Interface, rec record.EventRecorder, logf func(string, ...any), isBound func(types.UID) bool) *statusWriter {
	return &statusWriter{cs: cs, rec: rec, logf: logf, isBound: isBound, delay: statusDelay,
		want: map[string]podStatus{}, written: map[string]podStatus{}, queued: map[string]bool{}, wake: make(chan struct{}, 1)}
}

func (w *statusWriter) set(key string, st podStatus) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.written[key]; ok && old == st {
		delete(w.want, key)
		return
	}
	w.want[key] = st
	if !w.queued[key] {
		w.queued[key] = true
		w.queue = append(w.queue, queuedStatus{key: key, due: time.Now().Add(w.delay)})
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// prune forgets the pods for which keep is false (bound or gone).
func (w *statusWriter) prune(keep func(key string) bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.written {
		if !keep(k) {
			delete(w.written, k)
		}
	}
	for k := range w.want {
		if !keep(k) {
			delete(w.want, k)
		}
	}
}

// waiting sets a status for pods that have not reached the engine.
func (w *statusWriter) waiting(pods []*corev1.Pod, reason, msg string) {
	for _, p := range pods {
		w.set(podKey(p), podStatus{uid: p.UID, reason: reason, message: msg})
	}
}

func (w *statusWriter) work(ctx context.Context) {
	for {
		w.mu.Lock()
		var key string
		var st podStatus
		found := false
		var wait time.Duration // until the head of the queue is due
		for len(w.queue) > 0 && !found {
			if d := time.Until(w.queue[0].due); d > 0 {
				wait = d
				break
			}
			key, w.queue = w.queue[0].key, w.queue[1:]
			delete(w.queued, key)
			st, found = w.want[key]
			delete(w.want, key)
		}
		if !found {
			w.mu.Unlock()
			var due <-chan time.Time
			var t *time.Timer
			if wait > 0 {
				t = time.NewTimer(wait)
				due = t.C
			}
			select {
			case <-ctx.Done():
			case <-w.wake:
			case <-due:
			}
			if t != nil {
				t.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if len(w.queue) > 0 {
			select { // more to do: wake another worker
			case w.wake <- struct{}{}:
			default:
			}
		}
		w.mu.Unlock()
		if err := w.write(ctx, key, st); err != nil {
			if ctx.Err() != nil {
				return
			}
			w.logf("kube: status of pod %s: %v", key, err)
			continue
		}
		w.mu.Lock()
		w.written[key] = st
		w.mu.Unlock()
	}
}

func (w *statusWriter) write(ctx context.Context, key string, st podStatus) error {
	if w.isBound(st.uid) {
		return nil // the binding set PodScheduled=True
	}
	ns, name, _ := strings.Cut(key, "/")
	var nominated any
	if st.nominated != "" {
		nominated = st.nominated
	}
	patch := map[string]any{
		"status": map[string]any{
			"conditions": []any{map[string]any{
				"type": string(corev1.PodScheduled), "status": string(corev1.ConditionFalse),
				"reason": st.reason, "message": st.message,
				"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
			}},
			"nominatedNodeName": nominated,
		},
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = w.cs.CoreV1().Pods(ns).Patch(rctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if w.rec != nil {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: st.uid}
		w.rec.Event(ref, corev1.EventTypeWarning, EventReason, st.message)
	}
	return nil
}

// Written returns the status berth last wrote for pod ns/name: the
// PodScheduled=False reason, message and nominated node. For tests and
// observers; ok is false when none was written.
func (b *Backend) Written(ns, name string) (reason, message, nominated string, ok bool) {
	w := b.status
	if w == nil {
		return "", "", "", false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.written[ns+"/"+name]
	return st.reason, st.message, st.nominated, ok
}

// Observe is for backends.RunnerConfig.Observe: after every cycle it gives
// every pending pod of berth's a PodScheduled=False condition with the
// engine's reason (condition reason: the reason code, e.g. "Capacity",
// "Reserved") and, where there is one, the estimated start in the message;
// pods of a job holding a reservation get status.nominatedNodeName; each
// change is also recorded as an Event (reason FailedScheduling). The
// writes happen on the backend's own goroutines. Cycle.Ready.Pending has
// every pending job's status: after a cycle whose walk stopped early the
// Runner computes the rest on demand (engine.Engine.PendingAll) for
// Observe.
func (b *Backend) Observe(c backends.Cycle) {
	nominated := map[string][]string{} // job -> node per pod
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range c.Ready.Reservations {
		if j := b.jobs[r.Job]; j != nil && b.cluster != nil {
			nominated[r.Job] = b.nominate(j, r)
		}
	}
	var excluded []*toldNode // nodes not counted, for capacity reasons
	for _, name := range slices.Sorted(maps.Keys(b.nodes)) {
		if t := b.nodes[name]; !t.gone && t.state != topo.Ready {
			excluded = append(excluded, t)
		}
	}
	for _, ps := range c.Ready.Pending {
		j := b.jobs[ps.Job]
		if j == nil || ps.Reason == engine.ReasonNone {
			continue
		}
		msg := "berth: " + ps.String()
		if ps.Reason == engine.ReasonCapacity {
			msg += notCounted(excluded, j.selectors)
		}
		if !ps.Start.IsZero() {
			msg += "; estimated start " + ps.Start.UTC().Format(time.RFC3339)
		}
		nodes := nominated[ps.Job]
		j.nominated = nodes
		for i, pr := range j.pods {
			if _, bound := j.bound[i]; bound {
				continue
			}
			st := podStatus{uid: pr.uid, reason: reasonName(ps.Reason), message: msg}
			if i < len(nodes) {
				st.nominated = nodes[i]
			}
			b.status.set(pr.key(), st)
		}
	}
}

// notCounted says which of the nodes that are not Ready a job could have
// used (their labels match one of its groups' selectors) and why they do
// not count: "; not counted: 3 nodes tainted
// node.kubernetes.io/not-ready:NoSchedule, 1 node unschedulable". Empty
// when there are none. berth does not match tolerations: a tainted node
// is never used.
func notCounted(excluded []*toldNode, selectors []map[string]string) string {
	count := map[string]int{}
	var causes []string
	for _, t := range excluded {
		match := len(selectors) == 0
		for _, sel := range selectors {
			ok := true
			for k, v := range sel {
				ok = ok && t.labels[k] == v
			}
			match = match || ok
		}
		if !match {
			continue
		}
		cause := t.cause
		if cause == "" {
			cause = t.state.String()
		}
		if count[cause] == 0 {
			causes = append(causes, cause)
		}
		count[cause]++
	}
	if len(causes) == 0 {
		return ""
	}
	slices.SortFunc(causes, func(a, b string) int { return cmp.Or(count[b]-count[a], strings.Compare(a, b)) })
	parts := make([]string, len(causes))
	for i, c := range causes {
		noun := "nodes"
		if count[c] == 1 {
			noun = "node"
		}
		parts[i] = fmt.Sprintf("%d %s %s", count[c], noun, c)
	}
	return "; not counted: " + strings.Join(parts, ", ")
}

// nominate spreads a job's pods over the nodes of its reservation, in
// the engine's GPU order. Caller holds mu.
func (b *Backend) nominate(j *job, r engine.Reservation) []string {
	free := map[string]int{}
	var order []string
	it := r.GPUs.Iterator()
	for it.HasNext() {
		id, err := b.cluster.NodeOfGPU(it.Next())
		if err != nil {
			continue
		}
		name := b.cluster.NodeName(id)
		if free[name] == 0 {
			order = append(order, name)
		}
		free[name]++
	}
	out := make([]string, len(j.pods))
	for i, pr := range j.pods {
		for _, n := range order {
			if need := max(pr.d.gpus, 1); free[n] >= need {
				out[i] = n
				free[n] -= need
				break
			}
		}
	}
	return out
}

// reasonName turns a reason code into a condition reason: "reserved-gpus"
// becomes "ReservedGPUs".
func reasonName(c engine.ReasonCode) string {
	var sb strings.Builder
	for part := range strings.SplitSeq(c.String(), "-") {
		switch part {
		case "gpus":
			sb.WriteString("GPUs")
		case "":
		default:
			sb.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return sb.String()
}
