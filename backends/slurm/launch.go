package slurm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/queue"
)

// EnvJobID and EnvQueue are set in the environment of a job LaunchJob
// submitted: berth's job ID and queue.
const (
	EnvJobID = "BERTH_JOB_ID"
	EnvQueue = "BERTH_QUEUE"
)

// launchDefaults checks and completes the launch fields of a Config.
func (c *Config) launchDefaults() error {
	if c.LaunchPartition == "" {
		c.LaunchPartition = slices.Sorted(maps.Keys(c.Partitions))[0]
	}
	if _, ok := c.Partitions[c.LaunchPartition]; !ok {
		return fmt.Errorf("%w: LaunchPartition %q is not a managed partition", ErrInvalidConfig, c.LaunchPartition)
	}
	if c.LaunchOutput == "" {
		c.LaunchOutput = "/dev/null"
	}
	if c.LaunchDir == "" {
		c.LaunchDir = "/tmp"
	}
	for name, s := range c.Scripts {
		if !strings.HasPrefix(s, "#!") {
			return fmt.Errorf("%w: Scripts[%q] does not start with #! (sbatch needs an interpreter line)", ErrInvalidConfig, name)
		}
	}
	return nil
}

// script is the batch script of a launched job: the one Config.Scripts
// registers under its Name, else a sleep of its runtime estimate (sleep
// infinity without one: it runs until cancelled or its time limit).
func (b *Backend) script(j *queue.Job) string {
	if s, ok := b.cfg.Scripts[j.Name]; ok && j.Name != "" {
		return s
	}
	d := "infinity"
	if j.RuntimeEstimate > 0 {
		d = strconv.FormatInt(int64((j.RuntimeEstimate+time.Second-1)/time.Second), 10)
	}
	return "#!/bin/sh\nexec sleep " + d + "\n"
}

// slurmID is the SLURM job ID of a job berth knows by id: the sbatch ID
// of a job LaunchJob submitted, else id itself.
func (b *Backend) slurmID(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slurmIDLocked(id)
}

func (b *Backend) slurmIDLocked(id string) string {
	if s, ok := b.toSlurm[id]; ok {
		return s
	}
	return id
}

// berthIDLocked is the berth job ID of a SLURM job ID. b.mu is held.
func (b *Backend) berthIDLocked(sid string) string {
	if id, ok := b.toBerth[sid]; ok {
		return id
	}
	return sid
}

// LaunchJob submits a job of a federation's own (federation.Launcher) as
// a real SLURM job: sbatch --hold into Config.LaunchPartition (a managed
// partition, where SLURM never starts it), one node per member of its one
// group of whole GPUs (--nodes, --gres=gpu[:model]:N), its RuntimeLimit
// as --time, the batch script Config.Scripts registers for j.Name (else
// a sleep of its runtime estimate), and BERTH_JOB_ID / BERTH_QUEUE in its
// environment. The backend knows it by j.ID from then on: BindGang moves
// it to RunPartition on the chosen nodes and releases the hold, and the
// event stream reports its devices and its end under j.ID, never its
// submission (the federation submitted it). The ID mapping is kept in
// memory only. Idempotent: a job already launched is not submitted again.
// A job of several groups, MIG or fractional GPUs, or an ID that looks
// like a SLURM job ID (it would be ambiguous) is refused
// (backends.ErrRefused wrapping ErrBadJob or ErrBadArgument).
func (b *Backend) LaunchJob(ctx context.Context, j *queue.Job) error {
	if j == nil || j.ID == "" {
		return fmt.Errorf("%w: %w: LaunchJob: a job with an ID is needed", backends.ErrRefused, ErrBadArgument)
	}
	if jobIDRE.MatchString(j.ID) {
		return fmt.Errorf("%w: %w: LaunchJob: job ID %q looks like a SLURM job ID", backends.ErrRefused, ErrBadArgument, j.ID)
	}
	if strings.ContainsAny(j.ID, "\n\r\x00") || strings.ContainsAny(j.Queue, "\n\r\x00") {
		return fmt.Errorf("%w: %w: LaunchJob: control characters in job %q or queue", backends.ErrRefused, ErrBadArgument, j.ID)
	}
	gs := j.Request.Groups
	if len(gs) != 1 || gs[0].Members < 1 || gs[0].GPUsPerMember < 1 || gs[0].MIGProfile != "" || gs[0].GPUMilli != 0 {
		return fmt.Errorf("%w: %w: LaunchJob %s: SLURM runs one group of whole GPUs per job", backends.ErrRefused, ErrBadJob, j.ID)
	}
	g := gs[0]
	if g.GPUModel != "" && !partRE.MatchString(g.GPUModel) {
		return fmt.Errorf("%w: %w: LaunchJob %s: GPU model %q", backends.ErrRefused, ErrBadArgument, j.ID, g.GPUModel)
	}
	b.lmu.Lock()
	defer b.lmu.Unlock()
	b.mu.Lock()
	_, done := b.toSlurm[j.ID]
	closed := b.closed
	b.mu.Unlock()
	if done {
		return nil
	}
	if closed {
		return ErrClosed
	}
	gres := "gpu:" + strconv.Itoa(g.GPUsPerMember)
	if g.GPUModel != "" {
		gres = "gpu:" + g.GPUModel + ":" + strconv.Itoa(g.GPUsPerMember)
	}
	name := j.Name
	if name == "" {
		name = "berth-" + j.ID
	}
	args := []string{"--parsable", "--hold", "--partition=" + b.cfg.LaunchPartition,
		"--nodes=" + strconv.Itoa(g.Members), "--gres=" + gres, "--job-name=" + name,
		"--output=" + b.cfg.LaunchOutput, "--chdir=" + b.cfg.LaunchDir,
		"--export=PATH," + EnvJobID + "," + EnvQueue}
	if j.RuntimeLimit > 0 {
		args = append(args, "--time="+strconv.FormatInt(int64((j.RuntimeLimit+time.Minute-1)/time.Minute), 10))
	}
	env := []string{EnvJobID + "=" + j.ID, EnvQueue + "=" + j.Queue}
	out, err := b.cli.runEnv(ctx, env, b.script(j), "sbatch", args...)
	if err != nil {
		return fmt.Errorf("%w: LaunchJob %s: %w", backends.ErrRefused, j.ID, err)
	}
	sid, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";") // "123" or "123;cluster"
	if checkJobID(sid) != nil {
		return fmt.Errorf("%w: LaunchJob %s: sbatch answered %q", ErrParse, j.ID, out)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.toSlurm[j.ID], b.toBerth[sid] = sid, j.ID
	b.jobs[j.ID] = &tracked{state: inPending, partition: b.cfg.LaunchPartition, nodes: g.Members, launched: true, sbatched: time.Now()}
	return nil
}

// WithdrawJob cancels a launched job that was not started (scancel) and
// forgets it, without an event: the engine still has it pending, to be
// launched elsewhere. A job LaunchJob did not submit is nil.
func (b *Backend) WithdrawJob(ctx context.Context, job string) error {
	b.lmu.Lock()
	defer b.lmu.Unlock()
	b.mu.Lock()
	sid, ok := b.toSlurm[job]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	if _, err := b.cli.run(ctx, "scancel", sid); err != nil && !strings.Contains(err.Error(), "already completed") {
		return fmt.Errorf("WithdrawJob %s (SLURM job %s): %w", job, sid, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.toSlurm, job)
	delete(b.toBerth, sid)
	delete(b.jobs, job)
	b.skipped[sid] = true // its cancelled record is nobody's
	return nil
}

// SlurmJobID returns the SLURM job ID of a job LaunchJob submitted.
func (b *Backend) SlurmJobID(job string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sid, ok := b.toSlurm[job]
	return sid, ok
}

var _ federation.Launcher = (*Backend)(nil)
