package slurm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
)

// What SLURM users see of berth. Every job of a managed partition shows
// Reason=PartitionDown in squeue (the partition is DOWN so that SLURM never
// starts it); berth's own reason goes in the job's AdminComment, which
// `scontrol show job` prints:
//
//	AdminComment=berth:from=berth berth:waiting reserved, expected start 2026-12-06T03:32Z
//
// and a job berth can never run (GPUs per job, no GPU, a malformed berth:
// comment, a topology level the cluster does not have, a queue the engine
// refuses) is held with a user hold (Reason=JobHeldUser, which its user
// may release once the job is fixed: berth then reads it again) and
//
//	AdminComment=berth:rejected job not schedulable by berth GPUs per job (--gpus) are not supported; ...

// waitingTag and rejectedTag begin berth's text in an admin comment.
const (
	waitingTag  = "berth:waiting"
	rejectedTag = "berth:rejected"
)

// reasonText makes engine text safe and short for an admin comment: one
// line of plain characters, no berth: tags of its own.
func reasonText(s string) string {
	var sb strings.Builder
	space := false
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".,:;=/()%_+-<>", c)
		if !ok {
			space = sb.Len() > 0
			continue
		}
		if space {
			sb.WriteByte(' ')
			space = false
		}
		sb.WriteRune(c)
	}
	out := strings.ReplaceAll(sb.String(), "berth:", "berth")
	if len(out) > 200 {
		out = out[:200]
	}
	return out
}

// ShowReasons writes why berth keeps each job waiting into the job's
// AdminComment (see above), for the jobs of pending (a cycle's
// Ready.Pending or a View's Pending, in the policy's order). Call it from
// RunnerConfig.Observe, whose Cycle.Ready.Pending lists every pending
// job (the Runner computes on demand the statuses a walk that stopped
// early left out); it does not wait: a reason is written only when it
// changed, by one background scontrol at a time, at most
// Config.ReasonBatch jobs (the first in pending's order) every
// Config.ReasonInterval, so that it never slows binds or polls.
func (b *Backend) ShowReasons(pending []engine.PendingStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.cfg.ReasonInterval < 0 {
		return
	}
	var todo [][2]string
	for _, ps := range pending {
		t := b.jobs[ps.Job]
		if t == nil || t.state != inPending || t.bound || t.launched {
			continue
		}
		why := ps.String()
		if !ps.Start.IsZero() {
			// (to the minute: a reason is written again only when it changes)
			why += ", expected start " + ps.Start.UTC().Format("2006-01-02T15:04Z")
		}
		text := reasonText(why)
		if b.shown[ps.Job] == text {
			continue
		}
		todo = append(todo, [2]string{ps.Job, text})
		if len(todo) == b.cfg.ReasonBatch {
			break
		}
	}
	b.reasonTodo = todo
	if b.writing || len(todo) == 0 || time.Since(b.lastWrite) < b.cfg.ReasonInterval {
		return
	}
	b.writing = true
	go b.writeReasons()
}

// writeReasons writes the reasons ShowReasons queued, one scontrol each
// (scontrol's standard input keeps quotes in a value: a comment with
// spaces needs its own argument).
func (b *Backend) writeReasons() {
	b.mu.Lock()
	todo := b.reasonTodo
	b.reasonTodo = nil
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.writing, b.lastWrite = false, time.Now()
		b.mu.Unlock()
	}()
	for _, w := range todo {
		id, text := w[0], w[1]
		b.mu.Lock()
		t := b.jobs[id]
		sid := b.slurmIDLocked(id)
		ok := !b.closed && t != nil && t.state == inPending && !t.bound && checkJobID(sid) == nil
		part := ""
		if ok {
			part = t.partition
		}
		b.mu.Unlock()
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.CommandTimeout)
		_, err := b.cli.run(ctx, "scontrol", "update", "JobId="+sid, "AdminComment="+adminTag+part+" "+waitingTag+" "+text)
		cancel()
		b.mu.Lock()
		if err == nil {
			b.shown[id] = text
			b.stats.Reasons++
		}
		rebound := t.state != inPending || t.bound
		b.mu.Unlock()
		if rebound && err == nil {
			// Bound while the reason was written: the bind's admin
			// comment may have been overwritten; write it again.
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.CommandTimeout)
			_, _ = b.cli.run(ctx, "scontrol", "update", "JobId="+sid, "AdminComment="+adminTag+part)
			cancel()
		}
	}
}

// reject is a job berth holds because it can never run it.
type reject struct {
	id  string
	err error
}

// rejectLocked queues job id for a hold with err as its reason (applied
// by the poll, after b.mu is released). b.mu is held.
func (b *Backend) rejectLocked(id string, err error) {
	b.skipped[id] = true
	b.skip(id, err)
	b.rejects = append(b.rejects, reject{id: id, err: err})
}

// applyRejects holds the jobs rejectLocked queued: their reason in the
// admin comment, then a user hold (its user may release it once fixed).
func (b *Backend) applyRejects(ctx context.Context) {
	b.mu.Lock()
	rs := b.rejects
	b.rejects = nil
	b.mu.Unlock()
	for _, r := range rs {
		sid := b.slurmID(r.id)
		if err := checkJobID(sid); err != nil {
			continue
		}
		text := reasonText(strings.TrimPrefix(r.err.Error(), "slurm: "))
		_, err := b.cli.run(ctx, "scontrol", "update", "JobId="+sid, "AdminComment="+rejectedTag+" "+text)
		if err == nil {
			_, err = b.cli.run(ctx, "scontrol", "uhold", sid)
		}
		b.mu.Lock()
		if err == nil {
			b.held[r.id] = true
			b.stats.Rejects++
		}
		b.mu.Unlock()
		if err != nil {
			b.skip(r.id, fmt.Errorf("holding a job berth cannot run: %w", err))
		}
	}
}

// StepError is a RunnerConfig.OnStepError for this backend: a submission
// the engine refuses (a queue it does not have: the job's account, an
// invalid request) is held in SLURM with the engine's answer as its
// reason, and no longer tracked; other refused events are reported to
// Config.OnSkip. It returns nil: the Runner goes on.
func (b *Backend) StepError(ev engine.Event, err error) error {
	if ev.Kind != engine.EventJobSubmitted || ev.Job == nil {
		b.skip(ev.JobID, fmt.Errorf("the engine refused a %v event: %w", ev.Kind, err))
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.jobs[ev.Job.ID]; t != nil && t.state == inPending && !t.launched {
		delete(b.jobs, ev.Job.ID)
		b.rejectLocked(ev.Job.ID, fmt.Errorf("%w: %w", ErrBadJob, err))
		return nil
	}
	b.skip(ev.Job.ID, fmt.Errorf("the engine refused the job: %w", err))
	return nil
}

// checkLevels refuses a topology request naming a level the cluster does
// not have (known once Cluster read the topology). b.mu is held.
func (b *Backend) checkLevels(required, preferred string) error {
	if !b.levelsKnown {
		return nil
	}
	for _, l := range []string{required, preferred} {
		if l != "" && !slices.Contains(b.levels, l) {
			return fmt.Errorf("%w: topology level %q: this cluster has %q", ErrBadJob, l, b.levels)
		}
	}
	return nil
}
