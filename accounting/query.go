package accounting

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/backends"
)

// Keys Usage groups by.
var usageKeys = map[string]string{"account": "account", "queue": "queue", "partition": "partition_name", "user": "user_name"}

// UsageKeys returns the keys Usage groups by: account, partition, queue,
// user.
func UsageKeys() []string { return []string{"account", "partition", "queue", "user"} }

// UsageQuery selects and groups usage. Runs are clipped to [Since,
// Until): a run from 10:00 to 12:00 counts one hour in a period ending at
// 11:00. A zero Since or Until leaves that side open.
type UsageQuery struct {
	By           string // one of UsageKeys
	Since, Until time.Time
}

// UsageRow is the usage of one key.
type UsageRow struct {
	Key string
	// GPUMicroseconds is the exact usage (GPU thousandths x milliseconds);
	// GPUHours the same in hours.
	GPUMicroseconds int64
	GPUHours        float64
	// Jobs counts the distinct jobs, Runs the runs charged.
	Jobs, Runs int
}

// Usage returns the GPU usage charged in the period, by q.By, sorted by
// usage (largest first), then key. Only finished runs are charged (a run
// is charged when it ends, is requeued or resized). An account left empty
// is the job's queue (the queue's mirror account). Errors wrap ErrInvalid
// for an unknown key or a period that ends before it starts.
func (db *DB) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	col, ok := usageKeys[q.By]
	if !ok {
		return nil, fmt.Errorf("%w: cannot group by %q (want one of %s)", ErrInvalid, q.By, strings.Join(UsageKeys(), ", "))
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return nil, fmt.Errorf("%w: the period ends (%s) before it starts (%s)", ErrInvalid, q.Until, q.Since)
	}
	where, args := []string{"gpu_us > 0"}, []any{}
	var since, until int64
	if !q.Since.IsZero() {
		since = q.Since.UnixMilli()
		where, args = append(where, "at_ms > ?"), append(args, since)
	}
	if !q.Until.IsZero() {
		until = q.Until.UnixMilli()
		where, args = append(where, "run_start_ms < ?"), append(args, until)
	}
	keyExpr := col
	if q.By == "account" {
		keyExpr = "CASE WHEN account <> '' THEN account ELSE queue END"
	}
	rows, err := db.sql.QueryContext(ctx, db.bind(`SELECT `+keyExpr+`, job_id, run_start_ms, at_ms, gpu_us FROM job_steps WHERE `+
		strings.Join(where, " AND ")), args...)
	if err != nil {
		return nil, fmt.Errorf("accounting: %s: usage: %w", db.engine, err)
	}
	defer rows.Close()
	type acc struct {
		us   int64
		jobs map[string]bool
		runs int
	}
	by := map[string]*acc{}
	for rows.Next() {
		var key, job string
		var start, end, us int64
		if err := rows.Scan(&key, &job, &start, &end, &us); err != nil {
			return nil, fmt.Errorf("accounting: %s: usage: %w", db.engine, err)
		}
		// Clip the run to the period: the usage is milli x ms, so the part
		// in the period is milli x the overlap, exactly.
		if dur := end - start; dur > 0 && ((since != 0 && start < since) || (until != 0 && end > until)) {
			lo, hi := start, end
			if since != 0 {
				lo = max(lo, since)
			}
			if until != 0 {
				hi = min(hi, until)
			}
			if hi <= lo {
				continue
			}
			us = us / dur * (hi - lo)
		}
		a := by[key]
		if a == nil {
			a = &acc{jobs: map[string]bool{}}
			by[key] = a
		}
		a.us += us
		a.jobs[job] = true
		a.runs++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("accounting: %s: usage: %w", db.engine, err)
	}
	out := make([]UsageRow, 0, len(by))
	for k, a := range by {
		out = append(out, UsageRow{Key: k, GPUMicroseconds: a.us, GPUHours: float64(a.us) / 3.6e9, Jobs: len(a.jobs), Runs: a.runs})
	}
	slices.SortFunc(out, func(a, b UsageRow) int {
		return cmp.Or(cmp.Compare(b.GPUMicroseconds, a.GPUMicroseconds), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// Step is one recorded step of a job's life.
type Step struct {
	Kind backends.RecordKind
	Time time.Time
	// Reason says why the job waited, started, was preempted, requeued or
	// ended.
	Reason    string
	Partition string
	// Nodes and GPUs ("node:index[=uuid][@milli]", see
	// backends.FormatGPUs) held; Driver and Image where the backend
	// reports them.
	Nodes, GPUs   string
	Driver, Image string
	// RunStart and GPUMicroseconds: the run a requeue, resize or end
	// charged.
	RunStart        time.Time
	GPUMicroseconds int64
}

// Audit is a job's record: its summary and every step, in order.
type Audit struct {
	Job                  string
	Queue, Account, User string
	Partition            string
	// State is the last state: pending, running, stopping, finished,
	// cancelled, failed or rejected.
	State              string
	Submit, Start, End time.Time // zero: none recorded
	Runs, Preemptions  int
	Requeues           int
	GPUMicroseconds    int64
	Steps              []Step
}

// Audit returns everything recorded of job. Errors wrap ErrUnknownJob
// when there is nothing.
func (db *DB) Audit(ctx context.Context, job string) (Audit, error) {
	a := Audit{Job: job}
	var submit, start, end sql.NullInt64
	err := db.sql.QueryRowContext(ctx, db.bind(`SELECT queue, account, user_name, partition_name, state, submit_ms,
		first_start_ms, end_ms, runs, preemptions, requeues, gpu_us FROM jobs WHERE job_id = ?`), job).Scan(
		&a.Queue, &a.Account, &a.User, &a.Partition, &a.State, &submit, &start, &end, &a.Runs, &a.Preemptions, &a.Requeues, &a.GPUMicroseconds)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return a, fmt.Errorf("%w %q", ErrUnknownJob, job)
	case err != nil:
		return a, fmt.Errorf("accounting: %s: audit of %q: %w", db.engine, job, err)
	}
	a.Submit, a.Start, a.End = msTime(submit), msTime(start), msTime(end)
	rows, err := db.sql.QueryContext(ctx, db.bind(`SELECT kind, at_ms, reason, partition_name, nodes, gpus, driver, image,
		run_start_ms, gpu_us FROM job_steps WHERE job_id = ? ORDER BY id`), job)
	if err != nil {
		return a, fmt.Errorf("accounting: %s: audit of %q: %w", db.engine, job, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s Step
		var kind string
		var at, rs int64
		if err := rows.Scan(&kind, &at, &s.Reason, &s.Partition, &s.Nodes, &s.GPUs, &s.Driver, &s.Image, &rs, &s.GPUMicroseconds); err != nil {
			return a, fmt.Errorf("accounting: %s: audit of %q: %w", db.engine, job, err)
		}
		if s.Kind, err = backends.ParseRecordKind(kind); err != nil {
			return a, fmt.Errorf("accounting: audit of %q: %w", job, err)
		}
		s.Time = time.UnixMilli(at).UTC()
		if rs != 0 {
			s.RunStart = time.UnixMilli(rs).UTC()
		}
		a.Steps = append(a.Steps, s)
	}
	if err := rows.Err(); err != nil {
		return a, fmt.Errorf("accounting: %s: audit of %q: %w", db.engine, job, err)
	}
	return a, nil
}

func msTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// TotalGPUMicroseconds is the usage charged in the whole database.
func (db *DB) TotalGPUMicroseconds(ctx context.Context) (int64, error) {
	var v sql.NullInt64
	if err := db.sql.QueryRowContext(ctx, `SELECT SUM(gpu_us) FROM job_steps`).Scan(&v); err != nil {
		return 0, fmt.Errorf("accounting: %s: total: %w", db.engine, err)
	}
	return v.Int64, nil
}
