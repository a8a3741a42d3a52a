package slurm

import (
	"context"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/queue"
)

var _ backends.PendingReporter = (*Backend)(nil)

// Pending reports the jobs of the managed partitions that wait (PENDING,
// not held; each task of a pending array), so that a Runner started again
// tells a job berth had bound and SLURM never started (Running moves it
// back) from one that ended: the first is requeued, not finished. The jobs
// are tracked as pending, so Next does not submit them again. Jobs berth
// cannot schedule are left out (they are reported to OnSkip by Next).
//
// The jobs are read as a poll reads them (readJobs: fixed-format squeue
// reads, JSON only where a check fails), not from squeue --json, which
// prints every job slurmctld keeps: on the test cluster, 12 MB and 3-4 s
// for 3,300 jobs, most of them ended, at every start.
func (b *Backend) Pending(ctx context.Context) ([]*queue.Job, error) {
	recs, err := b.readJobs(ctx)
	if err != nil {
		return nil, err
	}
	var out []*queue.Job
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		if _, managed := b.cfg.Partitions[r.Partition]; !managed || r.State != "PENDING" {
			continue
		}
		if r.StateReason == "JobHeldUser" || r.StateReason == "JobHeldAdmin" {
			continue // placed once released
		}
		if !r.detail {
			continue // its fields not read (skipped before): Next decides
		}
		ids, idx, err := b.recJobs(r)
		if err != nil {
			continue // Next fails on it
		}
		for k, id := range ids {
			if b.skipped[id] {
				continue
			}
			j, err := b.toJob(id, r, r.Partition, idx[k])
			if err == nil {
				err = b.checkLevels(j.Request.Required, j.Request.Preferred)
			}
			if err != nil {
				continue // Next holds it, with its reason
			}
			if t := b.jobs[id]; t == nil || t.state != inPending {
				b.jobs[id] = &tracked{state: inPending, partition: r.Partition, nodes: max(r.NodeCount, 1), restarts: r.RestartCnt}
			}
			out = append(out, j)
		}
	}
	return out, nil
}
