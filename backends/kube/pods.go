package kube

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// demand is what one pod asks of its node: whole GPUs, or one MIG
// instance of a profile.
type demand struct {
	gpus int
	mig  string // profile name ("1g.10gb"); "" for whole GPUs
}

func (d demand) String() string {
	if d.mig != "" {
		return ResourceMIGPrefix + d.mig
	}
	return fmt.Sprintf("%d %s", d.gpus, ResourceGPU)
}

// podDemand reads a pod's GPU demand: containers summed, init containers
// taken at their largest (they run one at a time, before the others).
func podDemand(p *corev1.Pod) (demand, error) {
	sum := map[string]int64{}
	add := func(into map[string]int64, c *corev1.Container) {
		for name, q := range c.Resources.Limits {
			if isGPUResource(string(name)) {
				into[string(name)] += q.Value()
			}
		}
		for name, q := range c.Resources.Requests {
			if _, lim := c.Resources.Limits[name]; !lim && isGPUResource(string(name)) {
				into[string(name)] += q.Value()
			}
		}
	}
	for i := range p.Spec.Containers {
		add(sum, &p.Spec.Containers[i])
	}
	for i := range p.Spec.InitContainers {
		one := map[string]int64{}
		add(one, &p.Spec.InitContainers[i])
		for k, v := range one {
			sum[k] = max(sum[k], v)
		}
	}
	var d demand
	for _, name := range slices.Sorted(maps.Keys(sum)) {
		n := sum[name]
		if n <= 0 {
			continue
		}
		switch {
		case name == ResourceGPU:
			d.gpus = int(n)
		case d.mig != "" || n > 1:
			return demand{}, fmt.Errorf("pod asks for %d MIG instances (%s); berth places one MIG instance per pod", n, name)
		default:
			d.mig = strings.TrimPrefix(name, ResourceMIGPrefix)
		}
	}
	if d.gpus > 0 && d.mig != "" {
		return demand{}, fmt.Errorf("pod asks for whole GPUs and a MIG instance")
	}
	return d, nil
}

func isGPUResource(name string) bool {
	return name == ResourceGPU || strings.HasPrefix(name, ResourceMIGPrefix)
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// podLive: the pod holds (or will hold) resources: not Succeeded or Failed.
func podLive(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// groupOf returns the gang a pod belongs to: its name ("" for a pod on
// its own) and declared size (0: not known from the pod).
func groupOf(p *corev1.Pod) (name string, size int, err error) {
	if g := p.Labels[LabelPodGroup]; g != "" {
		return g, 0, nil
	}
	g := p.Labels[KueuePodGroupName]
	if g == "" {
		g = p.Annotations[KueuePodGroupName]
	}
	if g == "" {
		return "", 1, nil
	}
	s := p.Annotations[KueuePodGroupTotalCount]
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return g, 0, fmt.Errorf("annotation %s=%q is not a positive count", KueuePodGroupTotalCount, s)
	}
	return g, n, nil
}

// jobIDOf is the engine job ID of a pod: its gang, or the pod itself.
func jobIDOf(p *corev1.Pod, group string) string {
	if group == "" {
		return p.Namespace + "/pod/" + p.Name
	}
	return p.Namespace + "/group/" + group
}

// jobFacts are what a job's first pod says about the whole job.
type jobFacts struct {
	queue       string
	priority    int32
	preemptible bool
	grace       time.Duration
	estimate    time.Duration
	limit       time.Duration
	minRuntime  time.Duration
	required    string
	preferred   string
}

func (b *Backend) factsOf(p *corev1.Pod, ours bool) (jobFacts, error) {
	f := jobFacts{queue: b.cfg.DefaultQueue, preemptible: ours, grace: 30 * time.Second}
	if q := p.Labels[LabelQueue]; q != "" {
		if !b.queues[q] {
			return f, fmt.Errorf("label %s=%q names no leaf queue", LabelQueue, q)
		}
		f.queue = q
	} else if b.queues[p.Namespace] {
		f.queue = p.Namespace
	}
	if p.Spec.Priority != nil {
		f.priority = *p.Spec.Priority
	}
	if v, ok := p.Annotations[AnnotationPreemptible]; ok && ours {
		pre, err := strconv.ParseBool(v)
		if err != nil {
			return f, fmt.Errorf("annotation %s=%q is not a boolean", AnnotationPreemptible, v)
		}
		f.preemptible = pre
	}
	if p.Spec.TerminationGracePeriodSeconds != nil {
		f.grace = time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if p.Spec.ActiveDeadlineSeconds != nil {
		f.limit = time.Duration(*p.Spec.ActiveDeadlineSeconds) * time.Second
	}
	for _, a := range []struct {
		key string
		to  *time.Duration
	}{{AnnotationRuntimeEstimate, &f.estimate}, {AnnotationMinRuntime, &f.minRuntime}} {
		if v, ok := p.Annotations[a.key]; ok {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return f, fmt.Errorf("annotation %s=%q is not a duration", a.key, v)
			}
			*a.to = d
		}
	}
	var err error
	if f.required, err = b.levelOf(p.Annotations[KueueRequiredTopology]); err != nil {
		return f, fmt.Errorf("annotation %s: %w", KueueRequiredTopology, err)
	}
	if f.preferred, err = b.levelOf(p.Annotations[KueuePreferredTopology]); err != nil {
		return f, fmt.Errorf("annotation %s: %w", KueuePreferredTopology, err)
	}
	return f, nil
}

// levelOf maps a topology annotation (a node label key or a level name)
// to a level name.
func (b *Backend) levelOf(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	for _, l := range b.cfg.Levels {
		if v == l.Label || v == l.Name {
			return l.Name, nil
		}
	}
	return "", fmt.Errorf("%q is not a configured topology level", v)
}

// buildJob turns the pods of one gang (sorted by name) into a queue.Job
// and assigns each pod its group. Pods of the same shape (demand and
// nodeSelector) form one gang.Group.
func (b *Backend) buildJob(id string, pods []*corev1.Pod, ours bool, submit time.Time) (*queue.Job, []int, error) {
	f, err := b.factsOf(pods[0], ours)
	if err != nil {
		return nil, nil, err
	}
	j := &queue.Job{
		ID: id, Queue: f.queue, Priority: f.priority, Preemptible: f.preemptible,
		GracePeriod: f.grace, RuntimeEstimate: f.estimate, RuntimeLimit: f.limit, MinRuntime: f.minRuntime,
		Submit:  submit,
		Request: gang.Request{Required: f.required, Preferred: f.preferred},
	}
	groupOfPod := make([]int, len(pods))
	for i, p := range pods {
		d, err := podDemand(p)
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s: %w", podKey(p), err)
		}
		d, dra, err := b.claimDemand(p, d)
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s: %w", podKey(p), err)
		}
		g := gang.Group{Name: shapeName(d), Members: 1, GPUsPerMember: d.gpus, MIGProfile: d.mig}
		if len(p.Spec.NodeSelector) > 0 {
			g.Selector = maps.Clone(p.Spec.NodeSelector)
		}
		if b.dra != nil && (d.gpus > 0 || d.mig != "") {
			// With DRA on, a pod gets GPUs only through the path it asks.
			if g.Selector == nil {
				g.Selector = map[string]string{}
			}
			g.Selector[LabelGPUPath] = GPUPathDevicePlugin
			if dra {
				g.Selector[LabelGPUPath] = GPUPathDRA
			}
		}
		// A bound pod (adopted) is where it is: its constraint is not
		// read again, so one berth cannot parse never goes unbooked.
		if p.Spec.NodeName == "" {
			if err := setAffinityModels(&g, p, d); err != nil {
				return nil, nil, fmt.Errorf("pod %s: %w", podKey(p), err)
			}
		}
		k := slices.IndexFunc(j.Request.Groups, func(o gang.Group) bool {
			return o.GPUsPerMember == g.GPUsPerMember && o.MIGProfile == g.MIGProfile && maps.Equal(o.Selector, g.Selector) &&
				o.GPUModel == g.GPUModel && slices.Equal(o.GPUModels, g.GPUModels)
		})
		if k < 0 {
			k = len(j.Request.Groups)
			j.Request.Groups = append(j.Request.Groups, g)
		} else {
			j.Request.Groups[k].Members++
		}
		groupOfPod[i] = k
	}
	if err := j.Validate(); err != nil {
		return nil, nil, err
	}
	return j, groupOfPod, nil
}

// setAffinityModels sets g's GPU models from the pod's required node
// affinity over LabelGPUProduct (backends.AffinityModels): In [A, B] lets
// each member land on a node of either model (gang.Group.GPUModels); one
// model is gang.Group.GPUModel, as a single-model request always was; no
// constraint leaves g as it is. Label values become the engine's model
// names as nodes' do (modelNode): "NVIDIA-" trimmed, and for a MIG
// demand the MIG model's name ("NVIDIA-A100-SXM4-80GB" -> "A100-80GB").
// Forms that name no set (NotIn, Gt, a set left empty) are
// backends.ErrModelConstraint.
func setAffinityModels(g *gang.Group, p *corev1.Pod, d demand) error {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var terms [][]backends.NodeRequirement
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var term []backends.NodeRequirement
		for _, r := range t.MatchExpressions {
			term = append(term, backends.NodeRequirement{Key: r.Key, Operator: string(r.Operator), Values: r.Values})
		}
		terms = append(terms, term)
	}
	labels, err := backends.AffinityModels(LabelGPUProduct, terms)
	if err != nil || labels == nil {
		return err
	}
	var models []string
	for _, l := range labels {
		m := strings.TrimPrefix(l, "NVIDIA-")
		if d.mig != "" {
			if mm, err := lookupModel(l); err == nil {
				m = mm.String()
			}
		}
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	if len(models) == 1 {
		g.GPUModel = models[0]
	} else {
		g.GPUModels = models
	}
	return nil
}

func shapeName(d demand) string {
	if d.mig != "" {
		return "mig-" + d.mig
	}
	return strconv.Itoa(d.gpus) + "gpu"
}

func sortPods(ps []*corev1.Pod) {
	slices.SortFunc(ps, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// quantity reads a resource list entry as an int64 (0 when absent).
func quantity(l corev1.ResourceList, name string) int64 {
	q, ok := l[corev1.ResourceName(name)]
	if !ok {
		return 0
	}
	return q.Value()
}
