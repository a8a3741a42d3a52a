// Package accounting keeps berth's accounting and audit trail in a real
// database: one row per step of every job's life (submission, pending
// reason, start, preemption, requeue, resize, end) with the nodes, GPU
// indices and UUIDs, driver and image of its runs and the GPU usage each
// run is charged, and one summary row per job.
//
// Two engines share one schema and its versioned migrations through
// database/sql: SQLite (modernc.org/sqlite, pure Go; the embedded
// default, a file) and PostgreSQL (pgx; a postgres:// URL). Open picks
// the engine from the name and migrates.
//
// A Writer is the backends.Recorder to give a Runner
// (backends.RunnerConfig.Recorder) or a replay (replay.Config.Recorder):
// records are queued without blocking and written in batches on the
// Writer's goroutine; a full buffer drops a record, counts it
// (WriterStats.Dropped, berth_accounting_records_dropped_total) and logs
// it. Usage (GPU-hours by account, queue, partition or user over a
// period) and Audit (a job's steps) read the database back; `berth
// account` and `berth audit` print them.
//
// The package is an adapter: the core (topo, gang, queue, mig, engine)
// and backends do not import it. See docs/accounting.md.
package accounting
