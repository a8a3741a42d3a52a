package engine

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthsched/berth/queue"
)

// Services.
//
// A service is a long-running kind of work with replicas: ServiceSet
// creates (or replaces) it, ServiceScaled changes its desired replica
// count, ServiceDeleted removes it. Each replica is an ordinary job built
// from the service's Replica template, with the ID "<service>/<n>" (n =
// 1, 2, ... in creation order, never reused while the service exists), so
// everything the engine does for jobs applies to replicas: quota,
// topology, MIG and shares, reservations, preemption, reasons, Explain,
// Save and Restore. Replicas have no runtime estimate or limit: they run
// until the service shrinks or is deleted.
//
// Scaling up creates the missing replicas at once (in the Step of the
// event); the next cycle places all of them, as many as fit, each missing
// one with its pending reason. Scaling down removes replicas at once:
// pending ones are dropped, running ones are released (their GPUs are free
// in the same cycle, like an elastic shrink) and reported in Ready.Stops,
// which a backend carries out. The engine chooses which replicas go (see
// chooseRemovals for the rule). A replica that ends on its own (finished,
// cancelled, failed with its node) is replaced by a new one; a preempted
// replica is requeued like any job.
//
// The QoS class decides how replicas yield (see QoS).

// QoS is a service's quality-of-service class.
type QoS uint8

// QoS classes. The zero value is QoSGuaranteed.
const (
	// QoSGuaranteed: replicas start only within the queue's own (nominal)
	// quota, never by borrowing, and are never preempted.
	QoSGuaranteed QoS = iota
	// QoSBurstable: replicas may borrow quota beyond the queue's own;
	// while the queue borrows, its replicas are preemptible (reclaimed
	// with the service's grace period, after best-effort work).
	QoSBurstable
	// QoSBestEffort: replicas use idle capacity only; they are preemptible
	// by any job that is not best-effort and are the first victims.
	QoSBestEffort
)

func (q QoS) String() string {
	switch q {
	case QoSGuaranteed:
		return "guaranteed"
	case QoSBurstable:
		return "burstable"
	case QoSBestEffort:
		return "best-effort"
	}
	return fmt.Sprintf("QoS(%d)", uint8(q))
}

// MarshalText writes the class by name (guaranteed, burstable,
// best-effort).
func (q QoS) MarshalText() ([]byte, error) {
	if q > QoSBestEffort {
		return nil, fmt.Errorf("%w: unknown QoS class %d", ErrInvalidService, uint8(q))
	}
	return []byte(q.String()), nil
}

// UnmarshalText reads a class by name.
func (q *QoS) UnmarshalText(b []byte) error {
	for v := QoSGuaranteed; v <= QoSBestEffort; v++ {
		if v.String() == string(b) {
			*q = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown QoS class %q (want guaranteed, burstable or best-effort)", ErrInvalidService, b)
}

// MaxReplicas bounds a service's Max.
const MaxReplicas = 1 << 16

// Service is the spec of a service (see ServiceSet).
type Service struct {
	// Name identifies the service; it must not be empty nor contain '/'.
	// Its replicas are the jobs "<Name>/<n>".
	Name string
	// Queue is the leaf queue the replicas are charged to.
	Queue string
	// QoS is the class of the replicas.
	QoS QoS
	// Replica is the template of one replica: its Request (one gang:
	// whole GPUs, a MIG profile or a GPU fraction; fractional and MIG
	// replicas have one group) and Account, User, Partitions, MinRuntime.
	// ID, Queue, Priority, Preemptible, GracePeriod and Submit are set by
	// the engine (from the service, its QoS and the replica's creation
	// time); Class is inference (best-effort for QoSBestEffort).
	// RuntimeEstimate, RuntimeLimit, Elastic, ArrayIndex and Dependencies
	// must be zero.
	Replica queue.Job
	// Min <= Desired <= Max bound the replica count; Max <= MaxReplicas.
	// Min may be 0 (scale to zero).
	Min, Max, Desired int
	// Priority of the replicas.
	Priority int32
	// GracePeriod: how long a replica has to stop when it is preempted.
	GracePeriod time.Duration
}

// Errors of service events (in a *ServiceError; match with errors.Is).
var (
	// ErrInvalidService: a service spec is invalid (ServiceSet).
	ErrInvalidService = errors.New("engine: invalid service")
	// ErrUnknownService: ServiceScaled or ServiceDeleted names a service
	// the engine does not have.
	ErrUnknownService = errors.New("engine: unknown service")
	// ErrReplicaCount: a desired count outside [Min, Max].
	ErrReplicaCount = errors.New("engine: replica count out of range")
)

// ServiceError is the error of a rejected service event.
type ServiceError struct {
	Service string
	// Err is ErrInvalidService, ErrUnknownService or ErrReplicaCount.
	Err error
	// Cause is the underlying error (a *queue.FieldError, ...), if any.
	Cause error
	Msg   string
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("%v: service %q: %s", e.Err, e.Service, e.Msg)
}

// Unwrap gives the sentinel, ErrInvalidEvent and the cause to errors.Is.
func (e *ServiceError) Unwrap() []error {
	out := []error{e.Err, ErrInvalidEvent}
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	return out
}

// ServiceSet returns the event that creates the service s, or replaces
// the spec of the service named s.Name. Ownership of s passes to the
// engine. On a replacement, running replicas keep running with the
// template they were started from; pending ones are re-created from the
// new template; then the count is brought to s.Desired.
func ServiceSet(at time.Time, s *Service) Event {
	return Event{Kind: EventServiceSet, Time: at, Service: s}
}

// ServiceScaled returns the event that sets the desired replica count of
// service name (in [Min, Max]).
func ServiceScaled(at time.Time, name string, desired int) Event {
	return Event{Kind: EventServiceScaled, Time: at, ServiceName: name, Desired: desired}
}

// ServiceDeleted returns the event that deletes service name: all its
// replicas are removed (running ones reported in Ready.Stops).
func ServiceDeleted(at time.Time, name string) Event {
	return Event{Kind: EventServiceDeleted, Time: at, ServiceName: name}
}

// StopCause says why the engine stops a replica.
type StopCause uint8

const (
	// StopScaledDown: its service shrank.
	StopScaledDown StopCause = iota + 1
	// StopServiceDeleted: its service was deleted.
	StopServiceDeleted
)

func (c StopCause) String() string {
	switch c {
	case StopScaledDown:
		return "scaled-down"
	case StopServiceDeleted:
		return "service-deleted"
	}
	return fmt.Sprintf("StopCause(%d)", uint8(c))
}

// Stop tells the backend that a replica is removed. The engine no longer
// tracks it: its GPUs are free in this Ready (other jobs may be bound on
// them, as after an elastic shrink), and the backend must not report it
// finished. Running false: the replica was pending (never bound, or bound
// by a Ready whose Advance has not come yet); a backend that keeps
// objects for pending replicas (pods) deletes them.
type Stop struct {
	Job     string
	Service string
	Cause   StopCause
	Running bool
}

// ServiceStatus is one service in a View.
type ServiceStatus struct {
	Name  string
	Queue string
	QoS   QoS
	// Min, Max and Desired are the spec's; Running counts bound replicas,
	// Stopping those preempted and in their grace period, Pending those
	// waiting to be placed.
	Min, Max, Desired          int
	Running, Stopping, Pending int
	// Reason is why the first pending replica (in the policy's order) is
	// pending, and Detail says it in words; ReasonNone when none is.
	Reason ReasonCode
	Detail string
}

// service is the engine's record of one service.
type service struct {
	spec Service
	next int             // index of the next replica
	gen  uint64          // template generation (one per ServiceSet)
	reps map[string]*job // live replicas (pending, running, stopping)
}

// serviceOf is the service of replica ID id ("<service>/<n>"), or nil.
func (e *Engine) serviceOf(id string) (*service, int) {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 || e.svcs == nil {
		return nil, 0
	}
	s := e.svcs[id[:i]]
	if s == nil {
		return nil, 0
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n <= 0 || strconv.Itoa(n) != id[i+1:] {
		return nil, 0
	}
	return s, n
}

func svcErr(name string, err error, cause error, format string, args ...any) error {
	return &ServiceError{Service: name, Err: err, Cause: cause, Msg: fmt.Sprintf(format, args...)}
}

// replicaJob builds replica n of s at time at.
func replicaJob(s *Service, n int, at time.Time) *queue.Job {
	j := s.Replica
	j.Request.Groups = slices.Clone(s.Replica.Request.Groups)
	j.Partitions = slices.Clone(s.Replica.Partitions)
	j.ID = s.Name + "/" + strconv.Itoa(n)
	j.Queue = s.Queue
	j.Priority = s.Priority
	j.GracePeriod = s.GracePeriod
	j.Submit = at
	j.Class = queue.ClassInference
	j.Preemptible = s.QoS != QoSGuaranteed
	if s.QoS == QoSBestEffort {
		j.Class = queue.ClassBestEffort
	}
	return &j
}

// checkService validates a spec against the engine (its queues, cluster
// and site rules) by building a trial replica.
func (e *Engine) checkService(s *Service) error {
	if s == nil {
		return svcErr("", ErrInvalidService, nil, "no spec")
	}
	bad := func(format string, args ...any) error { return svcErr(s.Name, ErrInvalidService, nil, format, args...) }
	switch {
	case s.Name == "" || strings.ContainsAny(s.Name, "/"):
		return bad("Name must be non-empty without '/'")
	case s.QoS > QoSBestEffort:
		return bad("unknown QoS %d", uint8(s.QoS))
	case s.Min < 0 || s.Max < s.Min || s.Max > MaxReplicas:
		return bad("want 0 <= Min (%d) <= Max (%d) <= %d", s.Min, s.Max, MaxReplicas)
	case s.Desired < s.Min || s.Desired > s.Max:
		return svcErr(s.Name, ErrReplicaCount, nil, "Desired %d outside [%d, %d]", s.Desired, s.Min, s.Max)
	case s.GracePeriod < 0:
		return bad("negative GracePeriod")
	}
	r := &s.Replica
	switch {
	case r.RuntimeEstimate != 0 || r.RuntimeLimit != 0:
		return bad("replicas run until stopped: RuntimeEstimate and RuntimeLimit must be zero")
	case !r.Elastic.IsZero():
		return bad("replicas cannot be elastic")
	case r.ArrayIndex != 0 || len(r.Dependencies) > 0:
		return bad("replicas have no ArrayIndex or Dependencies")
	}
	j := replicaJob(s, 1, e.now)
	if err := j.Validate(); err != nil {
		return svcErr(s.Name, ErrInvalidService, err, "replica template: %v", err)
	}
	if err := e.tree.ValidateJob(j); err != nil {
		return svcErr(s.Name, ErrInvalidService, err, "replica template: %v", err)
	}
	for gi := range j.Request.Groups {
		if _, frac := sharedRequest(&j.Request.Groups[gi]); frac && len(j.Request.Groups) > 1 {
			return bad("a fractional or MIG replica has one group")
		}
	}
	if err := e.checkLevels(j); err != nil {
		return svcErr(s.Name, ErrInvalidService, err, "replica template: %v", err)
	}
	if err := e.checkFits(j); err != nil {
		return svcErr(s.Name, ErrInvalidService, err, "replica template: %v", err)
	}
	if err := e.siteCheck(j); err != nil {
		return svcErr(s.Name, ErrInvalidService, err, "replica template: %v", err)
	}
	return nil
}

func (e *Engine) setService(s *Service, at time.Time) error {
	if err := e.checkService(s); err != nil {
		return err
	}
	spec := *s
	spec.Replica.Request.Groups = slices.Clone(s.Replica.Request.Groups)
	spec.Replica.Partitions = slices.Clone(s.Replica.Partitions)
	if e.svcs == nil {
		e.svcs = map[string]*service{}
	}
	sv := e.svcs[s.Name]
	if sv == nil {
		// A service set again after a delete goes on numbering where
		// the old one stopped: no replica ID is reused.
		sv = &service{next: max(1, e.svcNext[s.Name]), reps: map[string]*job{}}
		e.svcs[s.Name] = sv
		// Running jobs already named like its replicas (adopted before
		// the service was set, e.g. after a backend restart) are its
		// replicas; pending ones stay ordinary jobs.
		for _, id := range sortedKeys(e.jobs) {
			if o, n := e.serviceOf(id); o == sv && e.jobs[id].st != statePending {
				js := e.jobs[id]
				js.svc = sv
				sv.reps[id] = js
				sv.next = max(sv.next, n+1)
			}
		}
	} else {
		// Pending replicas are re-created from the new template.
		for _, id := range sortedKeys(sv.reps) {
			if js := sv.reps[id]; js.st == statePending {
				e.removeReplica(sv, js, at, StopScaledDown)
			}
		}
	}
	sv.spec = spec
	sv.gen++
	e.scaleTo(sv, at)
	return nil
}

func (e *Engine) scaleService(name string, desired int, at time.Time) error {
	sv := e.svcs[name]
	if sv == nil {
		return svcErr(name, ErrUnknownService, nil, "not found")
	}
	if desired < sv.spec.Min || desired > sv.spec.Max {
		return svcErr(name, ErrReplicaCount, nil, "desired %d outside [%d, %d]", desired, sv.spec.Min, sv.spec.Max)
	}
	sv.spec.Desired = desired
	e.scaleTo(sv, at)
	return nil
}

func (e *Engine) deleteService(name string, at time.Time) error {
	sv := e.svcs[name]
	if sv == nil {
		return svcErr(name, ErrUnknownService, nil, "not found")
	}
	for _, id := range sortedKeys(sv.reps) {
		e.removeReplica(sv, sv.reps[id], at, StopServiceDeleted)
	}
	delete(e.svcs, name)
	if e.svcNext == nil {
		e.svcNext = map[string]int{}
	}
	e.svcNext[name] = sv.next
	return nil
}

// scaleTo brings sv's live replicas to its desired count.
func (e *Engine) scaleTo(sv *service, at time.Time) {
	n := len(sv.reps)
	d := sv.spec.Desired
	if n > d {
		for _, js := range e.chooseRemovals(sv, n-d) {
			e.removeReplica(sv, js, at, StopScaledDown)
		}
		return
	}
	for ; n < d; n++ {
		e.addReplica(sv, at)
	}
}

// addReplica creates one pending replica of sv.
func (e *Engine) addReplica(sv *service, at time.Time) {
	for {
		j := replicaJob(&sv.spec, sv.next, at)
		sv.next++
		if _, dup := e.jobs[j.ID]; dup {
			continue
		}
		if err := e.submitReplica(j); err != nil {
			// checkService vetted the template; report rather than lose it.
			e.rejected = append(e.rejected, Rejection{Job: j.ID, Err: err})
			return
		}
		js := e.jobs[j.ID]
		js.svc, js.tmpl = sv, sv.gen
		sv.reps[j.ID] = js
		return
	}
}

// removeReplica drops a replica, releasing its GPUs if it holds any.
func (e *Engine) removeReplica(sv *service, js *job, at time.Time, cause StopCause) {
	running := js.st != statePending
	if running {
		e.stopRunning(js, at)
	} else {
		e.pending.Remove(js.j.ID)
		delete(e.claims, js.j.ID)
	}
	delete(sv.reps, js.j.ID)
	js.svc = nil // no top-up (see forget)
	e.forget(js)
	e.stops = append(e.stops, Stop{Job: js.j.ID, Service: sv.spec.Name, Cause: cause, Running: running})
}

// replicaGone is forget's hook: a replica ended on its own.
func (e *Engine) replicaGone(js *job) {
	sv := js.svc
	delete(sv.reps, js.j.ID)
	js.svc = nil
	e.svcTopUp = true
}

// topUp replaces the replicas that ended on their own.
func (e *Engine) topUp(at time.Time) {
	if !e.svcTopUp {
		return
	}
	e.svcTopUp = false
	for _, name := range sortedKeys(e.svcs) {
		if sv := e.svcs[name]; len(sv.reps) < sv.spec.Desired {
			e.scaleTo(sv, at)
		}
	}
}

// chooseRemovals picks k of sv's replicas to remove. The rule, in order:
//  1. pending replicas (they hold nothing), newest first;
//  2. replicas in their grace period (already leaving);
//  3. running replicas whose removal frees the most useful capacity:
//     first those whose removal empties a node (for MIG and shared
//     replicas: frees a whole GPU), then those on the nodes with the
//     fewest GPUs in use (consolidating the others), then the newest
//     (latest start), then the highest index.
//
// Running replicas are chosen one at a time, each choice counting the
// GPUs the earlier ones free. Borrowing does not enter the rule: all
// replicas of a service are charged to its one queue, and quota is usage
// against a nominal amount, so any removal gives back borrowed quota
// first (docs/serving.md).
func (e *Engine) chooseRemovals(sv *service, k int) []*job {
	var pend, stopping, run []*job
	for _, js := range sv.reps {
		switch js.st {
		case statePending:
			pend = append(pend, js)
		case stateStopping:
			stopping = append(stopping, js)
		default:
			run = append(run, js)
		}
	}
	newest := func(a, b *job) int { return replicaIndexCmp(b.j.ID, a.j.ID) }
	slices.SortFunc(pend, newest)
	slices.SortFunc(stopping, newest)
	out := make([]*job, 0, k)
	for _, l := range [][]*job{pend, stopping} {
		for _, js := range l {
			if len(out) == k {
				return out
			}
			out = append(out, js)
		}
	}
	if len(out) == k || len(run) == 0 {
		return out
	}
	used := e.usedByNode()
	slices.SortFunc(run, newest)
	for len(out) < k && len(run) > 0 {
		best, bestKey := -1, removalKey{}
		for i, js := range run {
			key := e.removalKeyOf(js, used)
			if best < 0 || key.better(bestKey) {
				best, bestKey = i, key
			}
		}
		js := run[best]
		e.unuse(js, used)
		out = append(out, js)
		run = slices.Delete(run, best, best+1)
	}
	return out
}

// replicaIndexCmp orders replica IDs of one service by index.
func replicaIndexCmp(a, b string) int {
	ia, ib := replicaIndex(a), replicaIndex(b)
	switch {
	case ia < ib:
		return -1
	case ia > ib:
		return 1
	}
	return strings.Compare(a, b)
}

func replicaIndex(id string) int {
	i := strings.LastIndexByte(id, '/')
	n, _ := strconv.Atoi(id[i+1:])
	return n
}

// removalKey ranks a running replica for removal (see chooseRemovals).
type removalKey struct {
	empties int // nodes (or shared GPUs) its removal empties
	inUse   int // GPUs in use on its nodes
	start   time.Time
	index   int
}

func (a removalKey) better(b removalKey) bool {
	if a.empties != b.empties {
		return a.empties > b.empties
	}
	if a.inUse != b.inUse {
		return a.inUse < b.inUse
	}
	if !a.start.Equal(b.start) {
		return a.start.After(b.start)
	}
	return a.index > b.index
}

// usedByNode counts, per node (by NodeID), the GPUs in use: whole GPUs,
// and one for each member holding a MIG instance or a share.
func (e *Engine) usedByNode() []int32 {
	used := make([]int32, e.cluster.NumNodes())
	for _, js := range e.active {
		if js.place == nil {
			continue
		}
		for _, m := range js.place.members {
			used[m.node] += int32(max(len(m.gpus), 1))
		}
	}
	return used
}

func (e *Engine) removalKeyOf(js *job, used []int32) removalKey {
	key := removalKey{start: js.start, index: replicaIndex(js.j.ID)}
	ms := js.place.members
	for i, m := range ms {
		if slices.ContainsFunc(ms[:i], func(o pmember) bool { return o.node == m.node }) {
			continue // counted with the node's first member
		}
		mine := int32(0)
		for _, o := range ms[i:] {
			if o.node == m.node {
				mine += int32(max(len(o.gpus), 1))
			}
		}
		if used[m.node] <= mine {
			key.empties++
		}
		key.inUse += int(used[m.node])
	}
	return key
}

func (e *Engine) unuse(js *job, used []int32) {
	for _, m := range js.place.members {
		used[m.node] -= int32(max(len(m.gpus), 1))
	}
}

// guaranteedFit says whether a guaranteed replica fits its queue's own
// quota (no borrowing); when not, the resource, the need and what is left
// of the queue's own quota. Queues without governed resources always fit.
func (e *Engine) guaranteedFit(j *queue.Job) queue.Fit {
	for _, q := range j.Demand() {
		if !slices.Contains(e.tree.Resources(), q.Name) {
			continue
		}
		used, own := e.tree.Usage(j.Queue, q.Name), e.tree.SubtreeQuota(j.Queue, q.Name)
		if used.Add(q.Amount) > own {
			return queue.Fit{Resource: q.Name, Need: q.Amount, Available: max(own.Sub(used), 0)}
		}
	}
	return queue.Fit{OK: true}
}

// serviceStatuses is the View's Services, from the cycle's pending list.
func (e *Engine) serviceStatuses(pend []PendingStatus) []ServiceStatus {
	if len(e.svcs) == 0 {
		return nil
	}
	names := sortedKeys(e.svcs)
	out := make([]ServiceStatus, len(names))
	at := make(map[*service]int, len(names))
	for i, name := range names {
		sv := e.svcs[name]
		at[sv] = i
		st := ServiceStatus{Name: name, Queue: sv.spec.Queue, QoS: sv.spec.QoS, Min: sv.spec.Min, Max: sv.spec.Max, Desired: sv.spec.Desired}
		for _, js := range sv.reps {
			switch js.st {
			case statePending:
				st.Pending++
			case stateStopping:
				st.Stopping++
			default:
				st.Running++
			}
		}
		out[i] = st
	}
	for _, p := range pend {
		if p.js == nil || p.js.svc == nil {
			continue
		}
		if i, ok := at[p.js.svc]; ok && out[i].Reason == ReasonNone && p.Reason != ReasonNone {
			out[i].Reason, out[i].Detail = p.Reason, p.String()
		}
	}
	return out
}

// Services returns the names of the engine's services, sorted.
func (e *Engine) Services() []string { return sortedKeys(e.svcs) }

// adoptReplica attaches an adopted job named like a replica of a known
// service to it; the service then drops surplus pending replicas.
func (e *Engine) adoptReplica(js *job, at time.Time) {
	sv, n := e.serviceOf(js.j.ID)
	if sv == nil {
		return
	}
	js.svc = sv
	sv.reps[js.j.ID] = js
	sv.next = max(sv.next, n+1)
	if len(sv.reps) > sv.spec.Desired {
		// only pending replicas go: adopted work is never stopped here
		k := 0
		for _, r := range sv.reps {
			if r.st == statePending {
				k++
			}
		}
		k = min(k, len(sv.reps)-sv.spec.Desired)
		for _, r := range e.chooseRemovals(sv, k) {
			e.removeReplica(sv, r, at, StopScaledDown)
		}
	}
}

// submitReplica is submit for a replica built from a template that
// checkService vetted against this engine: the checks that depend only on
// the request and on what never changes after New (the topology levels,
// the never-fits check) passed for the template and are not repeated per
// replica; the queue's own checks are (Pending.Add), and so are the site
// rules' when a site is in use (they fill in per-job facts). A scale-up
// of hundreds of replicas pays for one never-fits check.
func (e *Engine) submitReplica(j *queue.Job) error {
	if err := e.siteCheck(j); err != nil {
		return err
	}
	if err := e.pending.Add(j); err != nil {
		return err
	}
	js := e.newJob(j)
	e.jobs[j.ID] = js
	e.byPtr[j] = js
	e.siteAttach(js)
	if js.frac {
		e.since.shaped = true
	}
	return nil
}
