package kube

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// Labels and environment of the pods LaunchJob creates.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by, "berth" on launched pods.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelJob carries berth's job ID on launched pods.
	LabelJob = "berth.dev/job"
	// EnvJobID and EnvQueue are set in a launched pod's containers.
	EnvJobID = "BERTH_JOB_ID"
	EnvQueue = "BERTH_QUEUE"
)

// ErrBadJob: a job LaunchJob cannot create as pods (wrapped in
// backends.ErrRefused).
var ErrBadJob = errors.New("kube: job cannot be launched")

// LaunchConfig is the site's template for the pods of jobs a federation
// launches (LaunchJob).
type LaunchConfig struct {
	// Namespace of the pods. Empty: "default".
	Namespace string
	// Image of the pods' one container. Empty: "busybox:1.36".
	Image string
	// Command of the container. Nil: sleep for the job's runtime estimate
	// ("sleep infinity" without one).
	Command []string
	// Labels are added to the pods (berth's own labels win).
	Labels map[string]string
}

func (c LaunchConfig) withDefaults() LaunchConfig {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Image == "" {
		c.Image = "busybox:1.36"
	}
	return c
}

// podName is the name of member i of a launched job: berth-<id>-<i>, the
// ID made a DNS label (with a hash of it when that changed it).
func podName(id string, i int) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(id) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
	}
	s := sb.String()
	if s != id || len(s) > 40 {
		h := fnv.New32a()
		h.Write([]byte(id))
		s = fmt.Sprintf("%.40s-%08x", s, h.Sum32())
	}
	return "berth-" + s + "-" + strconv.Itoa(i)
}

// LaunchJob creates a job of a federation's own (federation.Launcher) as
// pods: one per member of its one group of whole GPUs, each asking
// GPUsPerMember of ResourceGPU, from Config.Launch (namespace, image,
// command, labels), labelled LabelManagedBy=berth and LabelJob=<ID>, with
// BERTH_JOB_ID and BERTH_QUEUE in the environment, RuntimeLimit as
// activeDeadlineSeconds and RuntimeEstimate as AnnotationRuntimeEstimate,
// scheduled by Config.SchedulerName. The backend knows them as the job
// j.ID from then on (the engine has it from the federation; they are not
// submitted again): BindMember binds them, their end is reported as the
// job's. Idempotent for a job already launched. A job of several groups,
// MIG or fractional GPUs, or an ID that is not a label value is refused
// (backends.ErrRefused wrapping ErrBadJob). The ID mapping is in memory.
func (b *Backend) LaunchJob(ctx context.Context, j *queue.Job) error {
	if j == nil || j.ID == "" {
		return fmt.Errorf("%w: %w: a job with an ID is needed", backends.ErrRefused, ErrBadJob)
	}
	if errs := validation.IsValidLabelValue(j.ID); len(errs) > 0 {
		return fmt.Errorf("%w: %w: job ID %q is not a label value: %s", backends.ErrRefused, ErrBadJob, j.ID, strings.Join(errs, "; "))
	}
	gs := j.Request.Groups
	if len(gs) != 1 || gs[0].Members < 1 || gs[0].GPUsPerMember < 1 || gs[0].MIGProfile != "" || gs[0].GPUMilli != 0 {
		return fmt.Errorf("%w: %w: job %s: one group of whole GPUs per launched job", backends.ErrRefused, ErrBadJob, j.ID)
	}
	g := gs[0]
	lc := b.cfg.Launch.withDefaults()
	b.lmu.Lock()
	defer b.lmu.Unlock()
	b.mu.Lock()
	if b.launched[j.ID] {
		b.mu.Unlock()
		return nil
	}
	if b.jobs[j.ID] != nil {
		b.mu.Unlock()
		return fmt.Errorf("%w: %w: job %s is already a job of this cluster", backends.ErrRefused, ErrBadJob, j.ID)
	}
	b.launched[j.ID] = true // syncPods leaves its pods to us
	b.mu.Unlock()

	cmd := lc.Command
	if cmd == nil {
		d := "infinity"
		if j.RuntimeEstimate > 0 {
			d = strconv.FormatInt(int64((j.RuntimeEstimate+time.Second-1)/time.Second), 10)
		}
		cmd = []string{"sleep", d}
	}
	labels := maps.Clone(lc.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy], labels[LabelJob] = "berth", j.ID
	ann := map[string]string{}
	if j.RuntimeEstimate > 0 {
		ann[AnnotationRuntimeEstimate] = j.RuntimeEstimate.String()
	}
	if !j.Preemptible {
		ann[AnnotationPreemptible] = "false"
	}
	var deadline *int64
	if j.RuntimeLimit > 0 {
		s := int64((j.RuntimeLimit + time.Second - 1) / time.Second)
		deadline = &s
	}
	grace := int64(j.GracePeriod / time.Second)
	gpus := *resource.NewQuantity(int64(g.GPUsPerMember), resource.DecimalSI)
	nj := &job{id: j.ID, launched: true, assigned: map[string]int{}, bound: map[int]engine.Member{}}
	var created []podRef
	fail := func(err error) error {
		zero := int64(0)
		for _, pr := range created {
			_ = b.cs.CoreV1().Pods(pr.ns).Delete(context.WithoutCancel(ctx), pr.name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		b.mu.Lock()
		delete(b.launched, j.ID)
		for _, pr := range created {
			b.deleted[pr.uid] = true
		}
		b.mu.Unlock()
		return err
	}
	for i := range g.Members {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: lc.Namespace, Name: podName(j.ID, i), Labels: labels, Annotations: ann},
			Spec: corev1.PodSpec{
				SchedulerName: b.cfg.SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
				ActiveDeadlineSeconds: deadline, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name: "job", Image: lc.Image, Command: cmd,
					Env:       []corev1.EnvVar{{Name: EnvJobID, Value: j.ID}, {Name: EnvQueue, Value: j.Queue}},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: gpus}},
				}},
			},
		}
		got, err := b.cs.CoreV1().Pods(lc.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			if apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
				err = fmt.Errorf("%w: %w: creating pod %s/%s: %w", backends.ErrRefused, ErrBadJob, lc.Namespace, p.Name, err)
			} else {
				err = fmt.Errorf("kube: creating pod %s/%s: %w", lc.Namespace, p.Name, err)
			}
			return fail(err)
		}
		created = append(created, podRef{ns: got.Namespace, name: got.Name, uid: got.UID, d: demand{gpus: g.GPUsPerMember}})
	}
	nj.pods = created
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pr := range created {
		b.byUID[pr.uid] = j.ID
	}
	b.jobs[j.ID] = nj
	return nil
}

// WithdrawJob deletes the pods of a launched job whose bind failed
// (grace 0) and forgets the job without an event: the engine still has
// it pending. A job LaunchJob did not create is nil.
func (b *Backend) WithdrawJob(ctx context.Context, job string) error {
	b.lmu.Lock()
	defer b.lmu.Unlock()
	b.mu.Lock()
	j := b.jobs[job]
	if !b.launched[job] || j == nil || !j.launched {
		b.mu.Unlock()
		return nil
	}
	pods := append([]podRef(nil), j.pods...)
	// Forgotten first, so that no sync reports the pods' deletion as
	// the job's end; launched stays set, so that none submits them.
	b.forget(j)
	b.launched[job] = true
	for _, pr := range pods {
		b.deleted[pr.uid] = true
	}
	b.mu.Unlock()
	zero := int64(0)
	for _, pr := range pods {
		err := b.cs.CoreV1().Pods(pr.ns).Delete(ctx, pr.name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pr.uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			// Still launched: registered again, for a retry or a bind.
			b.mu.Lock()
			for _, pr := range pods {
				delete(b.deleted, pr.uid)
				b.byUID[pr.uid] = job
			}
			j.assigned, j.bound = map[string]int{}, map[int]engine.Member{}
			b.jobs[job] = j
			b.mu.Unlock()
			return fmt.Errorf("kube: WithdrawJob %s: deleting pod %s: %w", job, pr.key(), err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.launched, job)
	return nil
}

// LaunchedPods returns the pods (namespace/name) of a launched job.
func (b *Backend) LaunchedPods(job string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobs[job]
	if j == nil || !j.launched {
		return nil
	}
	var out []string
	for _, pr := range j.pods {
		out = append(out, pr.key())
	}
	return out
}

var _ federation.Launcher = (*Backend)(nil)
