package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
)

// slurmOutput is the sbatch --output of launched jobs, in the log
// directory: the job's name (its name in -jobs, else berth-<ID>) and its
// SLURM job ID; stdout and stderr both.
const slurmOutput = "%x-%j.log"

// jobLogs follows the jobs of -jobs: it says where each one's output goes
// when it starts, and how it ended; a job that failed is printed with its
// exit status, its log file and the log's last lines.
type jobLogs struct {
	dir       string
	slurm     *slurm.Backend
	slurmConf string
	kube      *kube.Backend // nil without an inference pool
	cs        kubernetes.Interface

	mu     sync.Mutex
	names  map[string]string   // job -> name in -jobs
	pods   map[string][]string // job -> its pods (namespace/name), from its bind
	left   int                 // jobs not ended yet
	failed []string
	wg     sync.WaitGroup
	done   chan struct{} // closed when every job has ended
}

func newJobLogs(dir string, jobs []fedJob) *jobLogs {
	l := &jobLogs{dir: dir, names: map[string]string{}, pods: map[string][]string{}, done: make(chan struct{})}
	for _, j := range jobs {
		l.names[j.ID] = j.Name
	}
	l.left = len(jobs)
	if l.left == 0 {
		close(l.done)
	}
	return l
}

// slurmLog is the log file of a job launched in SLURM as SLURM job sid.
func (l *jobLogs) slurmLog(job, sid string) string {
	name := l.names[job]
	if name == "" {
		name = "berth-" + job
	}
	return filepath.Join(l.dir, name+"-"+sid+".log")
}

// bound is told of a bind of a job of -jobs.
func (l *jobLogs) bound(job string, ms []engine.Member) {
	l.mu.Lock()
	_, ours := l.names[job]
	l.mu.Unlock()
	if !ours || len(ms) == 0 {
		return
	}
	pool, _, _ := federation.SplitNode(ms[0].Node)
	if sid, ok := l.slurm.SlurmJobID(job); ok {
		log.Printf("hybrid: job %s started in pool %s (SLURM job %s); its output: %s", job, pool, sid, l.slurmLog(job, sid))
		return
	}
	if l.kube != nil {
		pods := l.kube.LaunchedPods(job)
		l.mu.Lock()
		l.pods[job] = pods
		l.mu.Unlock()
		log.Printf("hybrid: job %s started in pool %s (pods %s); its output is copied to %s/<pod>.log when it ends",
			job, pool, strings.Join(pods, ", "), l.dir)
	}
}

// ended is told of the end of a job (Finished or Cancelled); it reads how
// the job ended in the background.
func (l *jobLogs) ended(ctx context.Context, ev engine.Event) {
	l.mu.Lock()
	_, ours := l.names[ev.JobID]
	l.mu.Unlock()
	if !ours {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ok := l.report(ctx, ev)
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.names, ev.JobID)
		if !ok {
			l.failed = append(l.failed, ev.JobID)
		}
		if l.left--; l.left == 0 {
			close(l.done)
		}
	}()
}

// report prints how a job ended and reports whether it succeeded.
func (l *jobLogs) report(ctx context.Context, ev engine.Event) bool {
	job := ev.JobID
	if sid, ok := l.slurm.SlurmJobID(job); ok {
		path := l.slurmLog(job, sid)
		state, exit, err := l.slurmEnd(ctx, sid)
		if err != nil {
			log.Printf("hybrid: job %s (SLURM job %s) ended; its state is unknown (%v); its output: %s", job, sid, err, path)
			return ev.Kind == engine.EventJobFinished
		}
		if state == "COMPLETED" && exit == "0:0" {
			log.Printf("hybrid: job %s (SLURM job %s) completed, exit status 0; its output: %s", job, sid, path)
			return true
		}
		log.Printf("hybrid: job %s (SLURM job %s) FAILED: state %s, exit status %s (code:signal); its output: %s%s",
			job, sid, state, exit, path, tail(path))
		return false
	}
	l.mu.Lock()
	pods := l.pods[job]
	l.mu.Unlock()
	if l.kube == nil || len(pods) == 0 {
		ok := ev.Kind == engine.EventJobFinished
		log.Printf("hybrid: job %s ended (%v) before it was bound: no output", job, ev.Kind)
		return ok
	}
	ok := true
	for _, key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		path := filepath.Join(l.dir, name+".log")
		p, err := l.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			log.Printf("hybrid: job %s: pod %s ended and is gone (%v): its exit status and output are lost", job, key, err)
			ok = false
			continue
		}
		raw, err := l.cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		if err != nil {
			path = fmt.Sprintf("(not copied: %v; try kubectl logs -n %s %s)", err, ns, name)
		}
		code, reason := podExit(p)
		if p.Status.Phase == corev1.PodSucceeded {
			log.Printf("hybrid: job %s: pod %s succeeded, exit status 0; its output: %s", job, key, path)
			continue
		}
		ok = false
		log.Printf("hybrid: job %s: pod %s FAILED: phase %s, exit status %s (%s); its output: %s%s",
			job, key, p.Status.Phase, code, reason, path, tail(path))
	}
	return ok
}

// slurmEnd reads a SLURM job's final state and exit status ("code:signal")
// with scontrol (SLURM keeps ended jobs for MinJobAge, 300 s by default).
func (l *jobLogs) slurmEnd(ctx context.Context, sid string) (state, exit string, err error) {
	cmd := exec.CommandContext(ctx, "scontrol", "show", "job", "-o", sid)
	if l.slurmConf != "" {
		cmd.Env = append(os.Environ(), "SLURM_CONF="+l.slurmConf)
	}
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("scontrol show job %s: %w", sid, err)
	}
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "JobState="); ok {
			state = v
		}
		if v, ok := strings.CutPrefix(f, "ExitCode="); ok {
			exit = v
		}
	}
	if state == "" {
		return "", "", fmt.Errorf("scontrol show job %s: no JobState in %q", sid, out)
	}
	return state, exit, nil
}

func podExit(p *corev1.Pod) (code, reason string) {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprint(t.ExitCode), t.Reason
		}
	}
	return "unknown", p.Status.Reason
}

// tail returns the last lines of a log file, indented, for a failure's
// message ("" when it cannot be read).
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf(" (not readable here: %v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 4096 {
		_, _ = f.Seek(-4096, io.SeekEnd)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	if len(lines) == 0 {
		return " (empty)"
	}
	var b bytes.Buffer
	b.WriteString("; its last lines:")
	for _, s := range lines {
		b.WriteString("\n    " + s)
	}
	return b.String()
}

// followed is the federation as the Runner's backend, telling jobLogs of
// binds and ends.
type followed struct {
	*federation.Federation
	logs *jobLogs
	ctx  context.Context
}

func (b followed) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	evs, err := b.Federation.Next(ctx, wake)
	for _, ev := range evs {
		if ev.Kind == engine.EventJobFinished || ev.Kind == engine.EventJobCancelled {
			b.logs.ended(b.ctx, ev)
		}
	}
	return evs, err
}

func (b followed) BindMember(ctx context.Context, job string, m engine.Member) error {
	if err := b.Federation.BindMember(ctx, job, m); err != nil {
		return err
	}
	b.logs.bound(job, []engine.Member{m})
	return nil
}

func (b followed) BindGang(ctx context.Context, job string, ms []engine.Member) error {
	if err := b.Federation.BindGang(ctx, job, ms); err != nil {
		return err
	}
	b.logs.bound(job, ms)
	return nil
}
