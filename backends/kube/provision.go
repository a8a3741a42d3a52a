package kube

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/berthsched/berth/autoscale"
	"github.com/berthsched/berth/backends"
)

// Node autoscaling through cluster-autoscaler's ProvisioningRequest API
// (autoscaling.x-k8s.io/v1): see ProvisioningConfig, ScaleUp, ScaleDown,
// Provisioning, and docs/backends/kube.md, section "Node autoscaling
// (ProvisioningRequest)".

// ProvisioningRequestResource is cluster-autoscaler's ProvisioningRequest.
// Its CRD ships with cluster-autoscaler; testdata/crds holds the copy the
// tests install, written from the API's documented fields.
var ProvisioningRequestResource = schema.GroupVersionResource{Group: "autoscaling.x-k8s.io", Version: "v1", Resource: "provisioningrequests"}

// Names berth uses for node autoscaling.
const (
	// ProvisioningClassAtomic is the class berth asks by default: all the
	// capacity of the request or none (cluster-autoscaler's
	// best-effort-atomic-scale-up).
	ProvisioningClassAtomic = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
	// LabelProvisionedBy (the scheduler name) marks the
	// ProvisioningRequests and PodTemplates berth created: a restarted
	// berth finds its requests again by it.
	LabelProvisionedBy = "berth.dev/provisioned-by"
	// LabelProvisioningRequest names, on a PodTemplate, the request it
	// belongs to.
	LabelProvisioningRequest = "berth.dev/provisioning-request"
	// LabelProvisionPool names, on a request, the pool it asks nodes of.
	LabelProvisionPool = "berth.dev/pool"
	// AnnotationProvisionJobs lists, on a request, the gangs (berth job
	// IDs, a JSON array) it asks capacity for.
	AnnotationProvisionJobs = "berth.dev/jobs"
	// AnnotationProvisionDomain is the domain a request's nodes must land
	// in ("" or absent: anywhere in the pool).
	AnnotationProvisionDomain = "berth.dev/domain"
	// AnnotationProvisionNodes is the number of nodes berth's plan asked
	// (autoscale.ScaleUp.Nodes).
	AnnotationProvisionNodes = "berth.dev/nodes"
	// AnnotationScaleDown marks a node berth released (ScaleDown), with
	// the time (RFC 3339).
	AnnotationScaleDown = "berth.dev/scale-down"
	// AnnotationScaleDownDisabled is cluster-autoscaler's annotation that
	// keeps it from removing a node. berth sets it ("true") on the nodes
	// of its pools, so that only berth decides which idle node goes, and
	// ScaleDown removes it.
	AnnotationScaleDownDisabled = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
)

// Errors of node autoscaling.
var (
	// ErrInvalidProvision: a ScaleUp or ScaleDown the backend cannot
	// carry out as asked (unknown pool, job or node; provisioning not
	// configured). It wraps autoscale.ErrInvalid.
	ErrInvalidProvision = fmt.Errorf("kube: invalid provisioning: %w", autoscale.ErrInvalid)
	// ErrNodeBusy: ScaleDown of a node with pods bound to it (other than
	// a DaemonSet's).
	ErrNodeBusy = errors.New("kube: node is busy")
)

// ProvisioningConfig turns on node autoscaling through ProvisioningRequests
// (Config.Provisioning). Zero (no Pools): off.
type ProvisioningConfig struct {
	// Pools maps each pool's name (autoscale.Pool.Name) to the node labels
	// that identify its nodes (all of them must match). The labels are
	// also the required node selector of the pod templates berth asks
	// capacity for, so they must be labels cluster-autoscaler's node
	// groups of that pool put on their nodes.
	Pools map[string]map[string]string
	// DomainLabel is the node label that holds a node's domain (the
	// level autoscale.Pool.DomainLevel names, e.g. berth.dev/rack). A
	// scale-up into a domain becomes a required node selector on it.
	// Empty: pools have no domains.
	DomainLabel string
	// Namespace holds the ProvisioningRequests and their PodTemplates.
	// Empty: the namespace of the (first) gang's pods.
	Namespace string
	// ClassName is spec.provisioningClassName. Empty:
	// ProvisioningClassAtomic.
	ClassName string
	// Parameters go to spec.parameters as they are (class-specific, e.g.
	// ValidUntilSeconds).
	Parameters map[string]string
}

func (c ProvisioningConfig) on() bool { return len(c.Pools) > 0 }

func (c ProvisioningConfig) validate(scheduler string) error {
	if !c.on() {
		if c.DomainLabel != "" || c.Namespace != "" || c.ClassName != "" || c.Parameters != nil {
			return fmt.Errorf("%w: Provisioning fields set without Provisioning.Pools (provisioning is off without a pool)", ErrInvalidConfig)
		}
		return nil
	}
	if errs := validation.IsValidLabelValue(scheduler); len(errs) > 0 {
		return fmt.Errorf("%w: Provisioning needs a scheduler name that is a label value (%s): %s", ErrInvalidConfig, LabelProvisionedBy, strings.Join(errs, "; "))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Pools)) {
		sel := c.Pools[name]
		if errs := validation.IsValidLabelValue(name); name == "" || len(errs) > 0 {
			return fmt.Errorf("%w: Provisioning pool name %q is not a label value: %s", ErrInvalidConfig, name, strings.Join(errs, "; "))
		}
		if len(sel) == 0 {
			return fmt.Errorf("%w: Provisioning pool %q has no node labels (it would take every node)", ErrInvalidConfig, name)
		}
		for k, v := range sel {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				return fmt.Errorf("%w: Provisioning pool %q: label %s=%s: %s", ErrInvalidConfig, name, k, v, strings.Join(errs, "; "))
			}
		}
	}
	if c.DomainLabel != "" {
		if errs := validation.IsQualifiedName(c.DomainLabel); len(errs) > 0 {
			return fmt.Errorf("%w: Provisioning.DomainLabel %q: %s", ErrInvalidConfig, c.DomainLabel, strings.Join(errs, "; "))
		}
	}
	if c.Namespace != "" {
		if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
			return fmt.Errorf("%w: Provisioning.Namespace %q: %s", ErrInvalidConfig, c.Namespace, strings.Join(errs, "; "))
		}
	}
	if c.ClassName != "" {
		if errs := validation.IsDNS1123Subdomain(c.ClassName); len(errs) > 0 {
			return fmt.Errorf("%w: Provisioning.ClassName %q: %s", ErrInvalidConfig, c.ClassName, strings.Join(errs, "; "))
		}
	}
	return nil
}

// ProvisioningAccess lists the permissions node autoscaling adds to
// RequiredAccess (checked by Start when Config.Provisioning has pools,
// unless Config.SkipAccessCheck).
func ProvisioningAccess() []Access {
	const g = "autoscaling.x-k8s.io"
	return []Access{
		{g, "provisioningrequests", "", "list", "berth's ProvisioningRequests (found again after a restart)"},
		{g, "provisioningrequests", "", "watch", "ProvisioningRequest conditions"},
		{g, "provisioningrequests", "", "create", "scale-up"},
		{g, "provisioningrequests", "", "delete", "clean-up once a gang is bound or its request failed"},
		{"", "podtemplates", "", "create", "the pods a ProvisioningRequest asks room for"},
		{"", "podtemplates", "", "list", "PodTemplates left behind by a crash"},
		{"", "podtemplates", "", "delete", "clean-up with the request"},
		{"", "nodes", "", "patch", "scale-down (cordon, cluster-autoscaler's scale-down-disabled annotation)"},
	}
}

// provState is the provisioning part of a Backend (nil when off).
type provState struct {
	cfg     ProvisioningConfig
	factory dynamicinformer.DynamicSharedInformerFactory
	inf     cache.SharedIndexInformer

	mu sync.Mutex
	// created: requests ScaleUp made that the informer may not list yet
	// (by namespace/name), with when they were made.
	created map[string]createdReq
	// finished: requests (by UID) berth deleted or reported failed; the
	// informer may still list them.
	finished map[types.UID]bool
	failed   []backends.ProvisionFailure
	swept    bool // leftover PodTemplates looked for once
}

// provRequest is what berth reads of one of its ProvisioningRequests.
type provRequest struct {
	ns, name  string
	uid       types.UID
	created   time.Time
	pool      string
	domain    string
	nodes     int
	jobs      []string
	templates []string
	// conditions True now, by type, with when and why.
	conds map[string]provCond
}

type createdReq struct {
	r  provRequest
	at time.Time
}

type provCond struct {
	at  time.Time
	why string
}

func (r provRequest) key() string { return r.ns + "/" + r.name }

// startProvisioning registers the ProvisioningRequest informer (berth's
// own requests) and checks the API is served. Called by Start.
func (b *Backend) startProvisioning(ctx context.Context, h cache.ResourceEventHandler) error {
	if !b.cfg.Provisioning.on() {
		return nil
	}
	if !b.cfg.SkipAccessCheck {
		if err := checkAccess(ctx, b.cs, ProvisioningAccess()); err != nil {
			return err
		}
	}
	// An informer on a resource the API server does not serve would
	// never sync: Start would wait for its context.
	gv := ProvisioningRequestResource.GroupVersion().String()
	rl, err := b.cs.Discovery().ServerResourcesForGroupVersion(gv)
	if err == nil && !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == ProvisioningRequestResource.Resource }) {
		err = errors.New("no provisioningrequests resource")
	}
	if err != nil {
		return fmt.Errorf("%w: Provisioning needs %s provisioningrequests (cluster-autoscaler's CRD), which the API server does not serve: %v", ErrInvalidConfig, gv, err)
	}
	sel := labels.Set{LabelProvisionedBy: b.cfg.SchedulerName}.String()
	p := &provState{cfg: b.cfg.Provisioning, created: map[string]createdReq{}, finished: map[types.UID]bool{}}
	p.cfg.ClassName = cmp.Or(p.cfg.ClassName, ProvisioningClassAtomic)
	p.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(b.dyn, b.cfg.ResyncPeriod, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = sel })
	p.inf = p.factory.ForResource(ProvisioningRequestResource).Informer()
	if _, err := p.inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("kube: provisioning handler: %w", err)
	}
	p.factory.Start(ctx.Done())
	for _, ok := range p.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			p.factory.Shutdown()
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("kube: ProvisioningRequest informer did not sync")
		}
	}
	b.prov = p
	return nil
}

// requests returns berth's ProvisioningRequests the informer holds and
// those ScaleUp made that it does not list yet, in creation order.
func (p *provState) requests() []provRequest {
	var out []provRequest
	have := map[string]bool{}
	for _, o := range p.inf.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		out = append(out, readRequest(u))
		have[out[len(out)-1].key()] = true
	}
	p.mu.Lock()
	for key, c := range p.created {
		switch {
		case have[key] || time.Since(c.at) > time.Minute:
			delete(p.created, key) // listed, or deleted before it ever was
		default:
			out = append(out, c.r)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(x, y provRequest) int {
		if c := x.created.Compare(y.created); c != 0 {
			return c
		}
		return strings.Compare(x.key(), y.key())
	})
	return out
}

func readRequest(u *unstructured.Unstructured) provRequest {
	r := provRequest{ns: u.GetNamespace(), name: u.GetName(), uid: u.GetUID(), created: u.GetCreationTimestamp().Time,
		pool: u.GetLabels()[LabelProvisionPool], domain: u.GetAnnotations()[AnnotationProvisionDomain], conds: map[string]provCond{}}
	r.nodes, _ = strconv.Atoi(u.GetAnnotations()[AnnotationProvisionNodes])
	_ = json.Unmarshal([]byte(u.GetAnnotations()[AnnotationProvisionJobs]), &r.jobs)
	sets, _, _ := unstructured.NestedSlice(u.Object, "spec", "podSets")
	for _, s := range sets {
		if m, ok := s.(map[string]any); ok {
			if n, _, _ := unstructured.NestedString(m, "podTemplateRef", "name"); n != "" {
				r.templates = append(r.templates, n)
			}
		}
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["status"] != "True" {
			continue
		}
		typ, _ := m["type"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		at, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
		r.conds[typ] = provCond{at: at, why: strings.TrimSpace(typ + ": " + reason + " " + msg)}
	}
	return r
}

// poolOf is the pool whose labels node carries ("" none), the first by
// name when several match.
func (p *provState) poolOf(node map[string]string) string {
	for _, name := range slices.Sorted(maps.Keys(p.cfg.Pools)) {
		ok := true
		for k, v := range p.cfg.Pools[name] {
			if node[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return name
		}
	}
	return ""
}

// ScaleUp asks cluster-autoscaler for capacity for the gangs up.Jobs: one
// PodTemplate per distinct member shape of theirs (the members' container
// resources, node selector and node affinity, tolerations; plus the
// pool's labels and, with up.Domain, Provisioning.DomainLabel=up.Domain as
// required node selectors) and one ProvisioningRequest of
// Provisioning.ClassName whose podSets count the gangs' pending members.
// cluster-autoscaler decides how many nodes they need (up.Nodes, berth's
// plan, is recorded on the request and reported as booting nodes until
// nodes join). Gangs that a live request of berth's already asks for are
// left out: calling ScaleUp again for the same gangs makes no second
// request. A nil error means asked; nodes come in as node events.
// Errors wrap ErrInvalidProvision for a pool, domain or job it cannot ask
// for.
func (b *Backend) ScaleUp(ctx context.Context, up autoscale.ScaleUp) error {
	p := b.prov
	switch {
	case p == nil:
		return fmt.Errorf("%w: Config.Provisioning has no pools", ErrInvalidProvision)
	case p.cfg.Pools[up.Pool] == nil:
		return fmt.Errorf("%w: unknown pool %q", ErrInvalidProvision, up.Pool)
	case up.Nodes < 1:
		return fmt.Errorf("%w: scale-up of %d nodes", ErrInvalidProvision, up.Nodes)
	case len(up.Jobs) == 0:
		return fmt.Errorf("%w: scale-up for no job", ErrInvalidProvision)
	case up.Domain != "" && p.cfg.DomainLabel == "":
		return fmt.Errorf("%w: scale-up into domain %q without Provisioning.DomainLabel", ErrInvalidProvision, up.Domain)
	}
	if up.Domain != "" {
		if errs := validation.IsValidLabelValue(up.Domain); len(errs) > 0 {
			return fmt.Errorf("%w: domain %q is not a label value: %s", ErrInvalidProvision, up.Domain, strings.Join(errs, "; "))
		}
	}
	jobs := slices.Clone(up.Jobs)
	slices.Sort(jobs)
	jobs = slices.Compact(jobs)
	covered := b.coveredJobs()
	jobs = slices.DeleteFunc(jobs, func(j string) bool { return covered[j] })
	if len(jobs) == 0 {
		return nil
	}

	// The pending members of each gang, one pod per (gang, group) as the
	// shape's model, with how many members have it.
	type member struct {
		ref   podRef
		count int
	}
	var members []member
	b.mu.Lock()
	for _, id := range jobs {
		j := b.jobs[id]
		if j == nil {
			b.mu.Unlock()
			return fmt.Errorf("%w: job %s is not a pending gang of this backend", ErrInvalidProvision, id)
		}
		at := map[int]int{}
		for i, pr := range j.pods {
			if _, bound := j.bound[i]; bound {
				continue
			}
			if k, ok := at[pr.group]; ok {
				members[k].count++
				continue
			}
			at[pr.group] = len(members)
			members = append(members, member{ref: pr, count: 1})
		}
	}
	b.mu.Unlock()
	if len(members) == 0 {
		return fmt.Errorf("%w: jobs %v have no member waiting", ErrInvalidProvision, jobs)
	}
	ns := cmp.Or(p.cfg.Namespace, members[0].ref.ns)

	// Distinct shapes: members of equal template specs share one.
	type shape struct {
		spec  corev1.PodSpec
		count int
	}
	var shapes []shape
	keys := map[string]int{}
	for _, m := range members {
		pod, err := b.podList.Pods(m.ref.ns).Get(m.ref.name)
		if err != nil {
			return fmt.Errorf("%w: pod %s of a gang to provision for: %v", ErrInvalidProvision, m.ref.key(), err)
		}
		spec := templateSpec(pod, p.cfg.Pools[up.Pool], p.cfg.DomainLabel, up.Domain)
		raw, err := json.Marshal(spec)
		if err != nil {
			return fmt.Errorf("kube: pod template: %w", err)
		}
		if k, ok := keys[string(raw)]; ok {
			shapes[k].count += m.count
			continue
		}
		keys[string(raw)] = len(shapes)
		shapes = append(shapes, shape{spec: spec, count: m.count})
	}
	if len(shapes) > 32 {
		return fmt.Errorf("%w: %d member shapes, more than the 32 podSets of a ProvisioningRequest", ErrInvalidProvision, len(shapes))
	}

	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d", b.cfg.SchedulerName, up.Pool, up.Domain, strings.Join(jobs, "\x00"), time.Now().UnixNano())
	name := "berth-" + hex.EncodeToString(h.Sum(nil))[:12]
	own := map[string]string{LabelProvisionedBy: b.cfg.SchedulerName}

	// Templates first: cluster-autoscaler reads them when it sees the
	// request.
	var made []string
	var podSets []any
	for i, s := range shapes {
		t := &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns,
				Labels: map[string]string{LabelProvisionedBy: b.cfg.SchedulerName, LabelProvisioningRequest: name}},
			Template: corev1.PodTemplateSpec{Spec: s.spec},
		}
		if _, err := b.cs.CoreV1().PodTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			b.deleteTemplates(ctx, ns, made)
			return fmt.Errorf("kube: pod template %s/%s: %w", ns, t.Name, err)
		}
		made = append(made, t.Name)
		podSets = append(podSets, map[string]any{"podTemplateRef": map[string]any{"name": t.Name}, "count": int64(s.count)})
	}
	jobsJSON, _ := json.Marshal(jobs)
	spec := map[string]any{"provisioningClassName": p.cfg.ClassName, "podSets": podSets}
	if len(p.cfg.Parameters) > 0 {
		params := map[string]any{}
		for k, v := range p.cfg.Parameters {
			params[k] = v
		}
		spec["parameters"] = params
	}
	req := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ProvisioningRequestResource.GroupVersion().String(),
		"kind":       "ProvisioningRequest",
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{LabelProvisionedBy: own[LabelProvisionedBy], LabelProvisionPool: up.Pool},
			"annotations": map[string]any{
				AnnotationProvisionJobs:   string(jobsJSON),
				AnnotationProvisionDomain: up.Domain,
				AnnotationProvisionNodes:  strconv.Itoa(up.Nodes),
			},
		},
		"spec": spec,
	}}
	got, err := b.dyn.Resource(ProvisioningRequestResource).Namespace(ns).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		b.deleteTemplates(ctx, ns, made)
		return fmt.Errorf("kube: ProvisioningRequest %s/%s: %w", ns, name, err)
	}
	r := readRequest(got)
	p.mu.Lock()
	p.created[r.key()] = createdReq{r: r, at: time.Now()}
	p.mu.Unlock()
	return nil
}

// coveredJobs are the jobs a live request of berth's asks capacity for
// (not failed, not being cleaned up).
func (b *Backend) coveredJobs() map[string]bool {
	p := b.prov
	out := map[string]bool{}
	reqs := p.requests()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range reqs {
		if p.finished[r.uid] || failedCond(r) != "" {
			continue
		}
		for _, j := range r.jobs {
			out[j] = true
		}
	}
	return out
}

// failedCond says why a request failed ("" it did not): Failed,
// CapacityRevoked or BookingExpired True.
func failedCond(r provRequest) string {
	for _, t := range []string{"Failed", "CapacityRevoked", "BookingExpired"} {
		if c, ok := r.conds[t]; ok {
			return c.why
		}
	}
	return ""
}

// templateSpec is the pod spec a PodTemplate gives cluster-autoscaler for
// a member like pod: what decides which node can take it (container
// resources, node selector and node affinity, tolerations), the pool's
// labels and the domain required.
func templateSpec(pod *corev1.Pod, pool map[string]string, domainLabel, domain string) corev1.PodSpec {
	spec := corev1.PodSpec{Tolerations: slices.Clone(pod.Spec.Tolerations)}
	strip := func(cs []corev1.Container) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.Name, Image: c.Image, Resources: *c.Resources.DeepCopy()})
		}
		return out
	}
	spec.Containers = strip(pod.Spec.Containers)
	spec.InitContainers = strip(pod.Spec.InitContainers)
	spec.NodeSelector = maps.Clone(pod.Spec.NodeSelector)
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	maps.Copy(spec.NodeSelector, pool)
	if domain != "" {
		spec.NodeSelector[domainLabel] = domain
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		spec.Affinity = &corev1.Affinity{NodeAffinity: a.NodeAffinity.DeepCopy()}
	}
	return spec
}

func (b *Backend) deleteTemplates(ctx context.Context, ns string, names []string) {
	for _, n := range names {
		if err := b.cs.CoreV1().PodTemplates(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.cfg.Logf("kube: deleting pod template %s/%s: %v", ns, n, err)
		}
	}
}

// reconcileProvisioning follows berth's requests: one whose gangs are all
// bound or gone is deleted with its templates; one that failed (Failed,
// CapacityRevoked or BookingExpired True) before its gangs were bound is
// noted for Provisioning and deleted. It also marks the nodes of the
// pools scale-down-disabled for cluster-autoscaler (berth decides which
// idle node goes). Called by the sync loop once Running was read.
func (b *Backend) reconcileProvisioning(ctx context.Context, now time.Time) {
	p := b.prov
	if p == nil {
		return
	}
	reqs := p.requests()
	type verdict struct {
		r    provRequest
		fail string
	}
	var drop []verdict
	b.mu.Lock()
	for _, r := range reqs {
		done := true
		for _, id := range r.jobs {
			if j := b.jobs[id]; j != nil && len(j.bound) < len(j.pods) {
				done = false
			}
		}
		switch why := failedCond(r); {
		case done:
			drop = append(drop, verdict{r: r})
		case why != "":
			drop = append(drop, verdict{r: r, fail: why})
		}
	}
	b.mu.Unlock()
	seen := map[types.UID]bool{}
	for _, r := range reqs {
		seen[r.uid] = true
	}
	p.mu.Lock()
	for uid := range p.finished {
		if !seen[uid] {
			delete(p.finished, uid) // gone from the informer too
		}
	}
	var todo []verdict
	for _, v := range drop {
		if p.finished[v.r.uid] {
			continue
		}
		p.finished[v.r.uid] = true
		if v.fail != "" {
			at := now
			if c, ok := v.r.conds["Failed"]; ok && !c.at.IsZero() {
				at = c.at
			}
			p.failed = append(p.failed, backends.ProvisionFailure{At: at, Pool: v.r.pool, Domain: v.r.domain, Nodes: v.r.nodes,
				Reason: fmt.Sprintf("ProvisioningRequest %s for %s: %s", v.r.key(), strings.Join(v.r.jobs, ","), v.fail)})
		}
		todo = append(todo, v)
	}
	sweep := !p.swept
	p.swept = true
	p.mu.Unlock()
	for _, v := range todo {
		err := b.dyn.Resource(ProvisioningRequestResource).Namespace(v.r.ns).Delete(ctx, v.r.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			b.cfg.Logf("kube: deleting ProvisioningRequest %s: %v", v.r.key(), err)
			p.mu.Lock()
			delete(p.finished, v.r.uid) // tried again next time; a failure is not reported twice
			p.mu.Unlock()
			continue
		}
		b.deleteTemplates(ctx, v.r.ns, v.r.templates)
	}
	if sweep {
		b.sweepTemplates(ctx, reqs)
	}
	b.markPoolNodes(ctx)
}

// sweepTemplates deletes berth's PodTemplates whose request does not
// exist (berth stopped between creating them and the request).
func (b *Backend) sweepTemplates(ctx context.Context, reqs []provRequest) {
	l, err := b.cs.CoreV1().PodTemplates(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{LabelProvisionedBy: b.cfg.SchedulerName}.String()})
	if err != nil {
		b.cfg.Logf("kube: listing pod templates: %v", err)
		return
	}
	have := map[string]bool{}
	for _, r := range reqs {
		have[r.key()] = true
	}
	for _, t := range l.Items {
		if req := t.Labels[LabelProvisioningRequest]; !have[t.Namespace+"/"+req] && time.Since(t.CreationTimestamp.Time) > time.Minute {
			b.deleteTemplates(ctx, t.Namespace, []string{t.Name})
		}
	}
}

// markPoolNodes sets AnnotationScaleDownDisabled on the nodes of the pools
// that lack it and that berth did not release.
func (b *Backend) markPoolNodes(ctx context.Context) {
	list, err := b.nodeLst.List(labels.Everything())
	if err != nil {
		return
	}
	body := []byte(`{"metadata":{"annotations":{"` + AnnotationScaleDownDisabled + `":"true"}}}`)
	for _, n := range list {
		if b.prov.poolOf(n.Labels) == "" || n.Annotations[AnnotationScaleDownDisabled] == "true" || n.Annotations[AnnotationScaleDown] != "" || n.DeletionTimestamp != nil {
			continue
		}
		if _, err := b.cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.logf("scaledown/"+n.Name, "kube: marking node %s scale-down-disabled: %v", n.Name, err)
		}
	}
}

// ScaleDown releases an idle node of a pool: it cordons it
// (spec.unschedulable), marks it AnnotationScaleDown and removes
// cluster-autoscaler's scale-down-disabled annotation, so that
// cluster-autoscaler removes it (node and machine) once it finds it
// unneeded. berth does not delete the Node object: that would leave the
// machine running. Errors wrap ErrInvalidProvision (not a node of a pool)
// or ErrNodeBusy (a pod other than a DaemonSet's is bound to it).
func (b *Backend) ScaleDown(ctx context.Context, node string) error {
	p := b.prov
	if p == nil {
		return fmt.Errorf("%w: Config.Provisioning has no pools", ErrInvalidProvision)
	}
	n, err := b.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: no node %s", ErrInvalidProvision, node)
	}
	if err != nil {
		return fmt.Errorf("kube: node %s: %w", node, err)
	}
	if p.poolOf(n.Labels) == "" {
		return fmt.Errorf("%w: node %s is in no pool of Provisioning.Pools", ErrInvalidProvision, node)
	}
	st, err := b.NodeStatus(ctx, node)
	if err != nil {
		return err
	}
	if st.Busy {
		return fmt.Errorf("%w: %s has pods bound", ErrNodeBusy, node)
	}
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:null}},"spec":{"unschedulable":true}}`,
		AnnotationScaleDown, time.Now().UTC().Format(time.RFC3339), AnnotationScaleDownDisabled)
	if _, err := b.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("kube: scale down %s: %w", node, err)
	}
	return nil
}

// Provisioning reports the nodes of the pools as the node informer holds
// them (Pool from Provisioning.Pools, Domain from
// Provisioning.DomainLabel), plus, for each live request of berth's, the
// nodes it asked that have not joined yet as Booting nodes with
// placeholder names ("provreq/<namespace>/<request>/<i>", never a node's
// name): nodes of the request's pool and domain created after the
// request, oldest request first, count as its joined ones. Failed lists
// the requests that failed since the last call, each once.
func (b *Backend) Provisioning(ctx context.Context) (backends.ProvisionState, error) {
	p := b.prov
	if p == nil {
		return backends.ProvisionState{}, fmt.Errorf("%w: Config.Provisioning has no pools", ErrInvalidProvision)
	}
	if err := ctx.Err(); err != nil {
		return backends.ProvisionState{}, err
	}
	if b.nodeLst == nil {
		return backends.ProvisionState{}, ErrNotStarted
	}
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if started {
		b.reconcileProvisioning(ctx, time.Now())
	}
	list, err := b.nodeLst.List(labels.Everything())
	if err != nil {
		return backends.ProvisionState{}, fmt.Errorf("kube: listing nodes: %w", err)
	}
	slices.SortFunc(list, func(x, y *corev1.Node) int { return strings.Compare(x.Name, y.Name) })
	var st backends.ProvisionState
	type place struct{ pool, domain string }
	fresh := map[place][]time.Time{} // creation times of the nodes of each pool and domain
	for _, n := range list {
		pool := p.poolOf(n.Labels)
		if pool == "" {
			continue
		}
		dom := ""
		if p.cfg.DomainLabel != "" {
			dom = n.Labels[p.cfg.DomainLabel]
		}
		st.Nodes = append(st.Nodes, autoscale.Node{Name: n.Name, Pool: pool, Domain: dom})
		fresh[place{pool, dom}] = append(fresh[place{pool, dom}], n.CreationTimestamp.Time)
		if dom != "" {
			fresh[place{pool, ""}] = append(fresh[place{pool, ""}], n.CreationTimestamp.Time)
		}
	}
	for _, ts := range fresh {
		slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
	}
	reqs := p.requests()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range reqs {
		if p.finished[r.uid] || failedCond(r) != "" {
			continue
		}
		k := place{r.pool, r.domain}
		joined := 0
		ts := fresh[k]
		for len(ts) > 0 && joined < r.nodes {
			if !ts[0].Before(r.created) {
				joined++
			}
			ts = ts[1:]
		}
		fresh[k] = ts
		for i := joined; i < r.nodes; i++ {
			st.Nodes = append(st.Nodes, autoscale.Node{Name: fmt.Sprintf("provreq/%s/%d", r.key(), i), Pool: r.pool, Domain: r.domain, Booting: true})
		}
	}
	st.Failed, p.failed = p.failed, nil
	return st, nil
}

var _ backends.Provisioner = (*Backend)(nil)
