package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/backends"
)

const insertStep = `INSERT INTO job_steps (job_id, kind, at_ms, queue, account, user_name, partitions, partition_name,
	reason, nodes, gpus, gpu_milli, driver, image, run_start_ms, gpu_us)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// upsertJob keeps one summary row per job: the first submission and
// start, the last end and state, counts and the usage summed.
const upsertJob = `INSERT INTO jobs (job_id, queue, account, user_name, partition_name, state, submit_ms,
	first_start_ms, end_ms, runs, preemptions, requeues, gpu_us)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (job_id) DO UPDATE SET
	queue = CASE WHEN excluded.queue <> '' THEN excluded.queue ELSE jobs.queue END,
	account = CASE WHEN excluded.account <> '' THEN excluded.account ELSE jobs.account END,
	user_name = CASE WHEN excluded.user_name <> '' THEN excluded.user_name ELSE jobs.user_name END,
	partition_name = CASE WHEN excluded.partition_name <> '' THEN excluded.partition_name ELSE jobs.partition_name END,
	state = CASE WHEN excluded.state <> '' THEN excluded.state ELSE jobs.state END,
	submit_ms = COALESCE(jobs.submit_ms, excluded.submit_ms),
	first_start_ms = COALESCE(jobs.first_start_ms, excluded.first_start_ms),
	end_ms = COALESCE(excluded.end_ms, jobs.end_ms),
	runs = jobs.runs + excluded.runs,
	preemptions = jobs.preemptions + excluded.preemptions,
	requeues = jobs.requeues + excluded.requeues,
	gpu_us = jobs.gpu_us + excluded.gpu_us`

// stateAfter is the job state a record leaves the job in ("" keeps it).
var stateAfter = map[backends.RecordKind]string{
	backends.RecordSubmit: "pending", backends.RecordReject: "rejected", backends.RecordWait: "pending",
	backends.RecordStart: "running", backends.RecordPreempt: "stopping", backends.RecordRequeue: "pending",
	backends.RecordResize: "running", backends.RecordDevices: "running",
}

// Insert writes recs in one transaction: a job_steps row each, and the
// jobs summary rows updated. Writer calls it from its own goroutine; it
// may be called directly (tests, imports).
func (db *DB) Insert(ctx context.Context, recs []backends.JobRecord) error {
	if len(recs) == 0 {
		return nil
	}
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("accounting: %s: begin: %w", db.engine, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	step, err := tx.PrepareContext(ctx, db.bind(insertStep))
	if err != nil {
		return fmt.Errorf("accounting: %s: prepare: %w", db.engine, err)
	}
	defer step.Close()
	job, err := tx.PrepareContext(ctx, db.bind(upsertJob))
	if err != nil {
		return fmt.Errorf("accounting: %s: prepare: %w", db.engine, err)
	}
	defer job.Close()
	for i := range recs {
		r := &recs[i]
		var milli int64
		var nodes []string
		for _, g := range r.GPUs {
			milli += g.Milli
			if !slices.Contains(nodes, g.Node) {
				nodes = append(nodes, g.Node)
			}
		}
		var runStart int64
		if !r.RunStart.IsZero() {
			runStart = r.RunStart.UnixMilli()
		}
		at := r.Time.UnixMilli()
		if _, err := step.ExecContext(ctx, r.Job, r.Kind.String(), at, r.Queue, r.Account, r.User,
			strings.Join(r.Partitions, ","), r.Partition, r.Reason, strings.Join(nodes, ","),
			backends.FormatGPUs(r.GPUs), milli, r.Driver, r.Image, runStart, r.GPUMicroseconds); err != nil {
			return fmt.Errorf("accounting: %s: insert step of %q: %w", db.engine, r.Job, err)
		}
		var submit, start, end sql.NullInt64
		var runs, pre, req int
		state := stateAfter[r.Kind]
		switch r.Kind {
		case backends.RecordSubmit:
			submit = sql.NullInt64{Int64: at, Valid: true}
		case backends.RecordStart:
			start = sql.NullInt64{Int64: at, Valid: true}
			if r.Reason != "resized" {
				runs = 1
			}
		case backends.RecordPreempt:
			pre = 1
		case backends.RecordRequeue:
			req = 1
		case backends.RecordEnd:
			end = sql.NullInt64{Int64: at, Valid: true}
			state = r.Reason
			if i := strings.IndexByte(state, ':'); i >= 0 {
				state = state[:i]
			}
		}
		if _, err := job.ExecContext(ctx, r.Job, r.Queue, r.Account, r.User, r.Partition, state,
			submit, start, end, runs, pre, req, r.GPUMicroseconds); err != nil {
			return fmt.Errorf("accounting: %s: update job %q: %w", db.engine, r.Job, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("accounting: %s: commit: %w", db.engine, err)
	}
	return nil
}
