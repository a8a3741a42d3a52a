package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
)

// engines runs f against a fresh SQLite file and, when BERTH_POSTGRES_URL
// names a server (hack/pg-up.sh starts one), a fresh schema of it. Without
// the server the PostgreSQL case skips, or fails under
// BERTH_REQUIRE_INTEGRATION=1.
func engines(t *testing.T, f func(t *testing.T, db *DB)) {
	t.Run("sqlite", func(t *testing.T) {
		db, err := Open(context.Background(), filepath.Join(t.TempDir(), "acct.db"))
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		require.Equal(t, SQLite, db.Engine())
		f(t, db)
	})
	t.Run("postgres", func(t *testing.T) {
		f(t, openPostgres(t))
	})
}

var schemaSeq atomic.Int64

// openPostgres opens a fresh schema of the test server, dropped at the end.
func openPostgres(t testing.TB) *DB {
	t.Helper()
	base := os.Getenv("BERTH_POSTGRES_URL")
	if base == "" {
		msg := "BERTH_POSTGRES_URL not set: no PostgreSQL test server (start one: bash hack/pg-up.sh)"
		if os.Getenv("BERTH_REQUIRE_INTEGRATION") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx := context.Background()
	admin, err := sql.Open("pgx", base)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	require.NoError(t, admin.PingContext(ctx), "PostgreSQL at BERTH_POSTGRES_URL")
	schema := fmt.Sprintf("acct_test_%d_%d", os.Getpid(), schemaSeq.Add(1))
	_, err = admin.ExecContext(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE") })
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := Open(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.Equal(t, Postgres, db.Engine())
	return db
}

func TestMigrate(t *testing.T) {
	engines(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		v, err := db.Version(ctx)
		require.NoError(t, err)
		require.Equal(t, SchemaVersion(), v)
		require.NoError(t, db.Migrate(ctx), "migrating again is a no-op")
		var n int
		require.NoError(t, db.SQL().QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n))
		require.Equal(t, len(migrations), n)
		_, err = db.SQL().ExecContext(ctx, db.bind("INSERT INTO schema_migrations (version, name, applied_ms) VALUES (?, ?, ?)"), 999, "future", 0)
		require.NoError(t, err)
		require.ErrorIs(t, db.Migrate(ctx), ErrSchema)
	})
}

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// life is job a's life (preempted once, then finished) and job b's (one
// run, no account: its queue's).
func life() []backends.JobRecord {
	a := func(k backends.RecordKind, s int) backends.JobRecord {
		return backends.JobRecord{Kind: k, Time: at(s), Job: "a", Queue: "q1", Account: "acctA", User: "alice",
			Partitions: []string{"gpu-8x"}, Partition: "gpu-8x"}
	}
	gpus := []backends.RecordGPU{{Node: "n1", Index: 0, UUID: "GPU-aaa", Milli: 1000}, {Node: "n1", Index: 1, UUID: "GPU-bbb", Milli: 1000}}
	sub := a(backends.RecordSubmit, 0)
	wait := a(backends.RecordWait, 0)
	wait.Reason = "capacity: 2 GPUs needed"
	st := a(backends.RecordStart, 10)
	st.GPUs, st.Driver, st.Image, st.Reason = gpus, "550.54.15", "nvcr.io/pytorch:24.01", "placed"
	pre := a(backends.RecordPreempt, 60)
	pre.Reason = "priority: for c"
	req := a(backends.RecordRequeue, 70)
	req.GPUs, req.RunStart, req.GPUMicroseconds = gpus, at(10), 2000*60_000
	st2 := a(backends.RecordStart, 100)
	st2.GPUs, st2.Reason = gpus[:1], "placed by backfill"
	end := a(backends.RecordEnd, 200)
	end.GPUs, end.RunStart, end.GPUMicroseconds, end.Reason = gpus[:1], at(100), 1000*100_000, "finished"

	b := func(k backends.RecordKind, s int) backends.JobRecord {
		return backends.JobRecord{Kind: k, Time: at(s), Job: "b", Queue: "q2", User: "bob"}
	}
	bg := []backends.RecordGPU{{Node: "n2", Index: 3, Milli: 1000}, {Node: "n3", Index: 0, Milli: 428}}
	bs := b(backends.RecordStart, 0)
	bs.GPUs = bg
	be := b(backends.RecordEnd, 3600)
	be.GPUs, be.RunStart, be.GPUMicroseconds, be.Reason = bg, at(0), 1428*3_600_000, "cancelled"
	return []backends.JobRecord{b(backends.RecordSubmit, 0), sub, wait, bs, st, pre, req, st2, end, be}
}

func TestUsageAndAudit(t *testing.T) {
	engines(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		recs := life()
		require.NoError(t, db.Insert(ctx, recs[:5]))
		require.NoError(t, db.Insert(ctx, recs[5:]))

		usage := func(q UsageQuery) map[string]int64 {
			rows, err := db.Usage(ctx, q)
			require.NoError(t, err)
			m := map[string]int64{}
			for _, r := range rows {
				m[r.Key] = r.GPUMicroseconds
				require.InDelta(t, float64(r.GPUMicroseconds)/3.6e9, r.GPUHours, 1e-12)
			}
			return m
		}
		aUse, bUse := int64(2000*60_000+1000*100_000), int64(1428*3_600_000)
		require.Equal(t, map[string]int64{"acctA": aUse, "q2": bUse}, usage(UsageQuery{By: "account"}))
		require.Equal(t, map[string]int64{"q1": aUse, "q2": bUse}, usage(UsageQuery{By: "queue"}))
		require.Equal(t, map[string]int64{"alice": aUse, "bob": bUse}, usage(UsageQuery{By: "user"}))
		require.Equal(t, map[string]int64{"gpu-8x": aUse, "": bUse}, usage(UsageQuery{By: "partition"}))
		// Clipped to [40 s, 150 s): a's first run 30 s of 2 GPUs, its
		// second 50 s of 1; b's 110 s of 1.428.
		require.Equal(t, map[string]int64{"alice": 2000*30_000 + 1000*50_000, "bob": 1428 * 110_000},
			usage(UsageQuery{By: "user", Since: at(40), Until: at(150)}))
		require.Equal(t, map[string]int64{"bob": 1428 * 3_399_000}, usage(UsageQuery{By: "user", Since: at(201)}))
		require.Empty(t, usage(UsageQuery{By: "user", Until: at(0)}))
		rows, err := db.Usage(ctx, UsageQuery{By: "queue"})
		require.NoError(t, err)
		require.Equal(t, "q2", rows[0].Key, "largest first")
		require.Equal(t, UsageRow{Key: "q1", GPUMicroseconds: aUse, GPUHours: float64(aUse) / 3.6e9, Jobs: 1, Runs: 2}, rows[1])

		_, err = db.Usage(ctx, UsageQuery{By: "colour"})
		require.ErrorIs(t, err, ErrInvalid)
		_, err = db.Usage(ctx, UsageQuery{By: "user", Since: at(10), Until: at(5)})
		require.ErrorIs(t, err, ErrInvalid)

		au, err := db.Audit(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, "finished", au.State)
		require.Equal(t, "acctA", au.Account)
		require.Equal(t, "gpu-8x", au.Partition)
		require.Equal(t, at(0), au.Submit)
		require.Equal(t, at(10), au.Start)
		require.Equal(t, at(200), au.End)
		require.Equal(t, [3]int{2, 1, 1}, [3]int{au.Runs, au.Preemptions, au.Requeues})
		require.Equal(t, aUse, au.GPUMicroseconds)
		var kinds []string
		for _, s := range au.Steps {
			kinds = append(kinds, s.Kind.String())
		}
		require.Equal(t, "submit wait start preempt requeue start end", strings.Join(kinds, " "))
		st := au.Steps[2]
		require.Equal(t, "n1", st.Nodes)
		require.Equal(t, "n1:0=GPU-aaa,n1:1=GPU-bbb", st.GPUs)
		require.Equal(t, "550.54.15", st.Driver)
		require.Equal(t, "nvcr.io/pytorch:24.01", st.Image)
		require.Equal(t, "capacity: 2 GPUs needed", au.Steps[1].Reason)
		require.Equal(t, "priority: for c", au.Steps[3].Reason)
		require.Equal(t, at(10), au.Steps[4].RunStart)

		bu, err := db.Audit(ctx, "b")
		require.NoError(t, err)
		require.Equal(t, "cancelled", bu.State)
		require.Equal(t, "n2,n3", bu.Steps[1].Nodes)
		require.Equal(t, "n2:3,n3:0@428", bu.Steps[1].GPUs)

		_, err = db.Audit(ctx, "nope")
		require.ErrorIs(t, err, ErrUnknownJob)
		total, err := db.TotalGPUMicroseconds(ctx)
		require.NoError(t, err)
		require.Equal(t, aUse+bUse, total)
	})
}

func TestWriterWrites(t *testing.T) {
	engines(t, func(t *testing.T, db *DB) {
		w, err := db.NewWriter(WriterConfig{Batch: 3, FlushInterval: time.Hour})
		require.NoError(t, err)
		recs := life()
		for _, r := range recs {
			w.Record(r)
		}
		require.NoError(t, w.Close())
		require.NoError(t, w.Close(), "Close is idempotent")
		require.Equal(t, WriterStats{Written: uint64(len(recs))}, w.Stats())
		w.Record(recs[0]) // after Close: dropped, counted
		require.Equal(t, uint64(1), w.Stats().Dropped)
		au, err := db.Audit(context.Background(), "a")
		require.NoError(t, err)
		require.Len(t, au.Steps, 7)
	})
}

// TestWriterFullBufferDropsNeverBlocks: with the database stuck, Record
// returns for every record; those beyond the buffer are counted dropped,
// and the rest are written once the database answers.
func TestWriterFullBufferDropsNeverBlocks(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var written atomic.Int64
	first := true
	w, err := newWriter(WriterConfig{Buffer: 4, Batch: 1, FlushInterval: time.Hour}, func(_ context.Context, recs []backends.JobRecord) error {
		if first {
			first = false
			close(entered)
			<-release // the database hangs
		}
		written.Add(int64(len(recs)))
		return nil
	})
	require.NoError(t, err)
	w.Record(backends.JobRecord{Job: "first"})
	<-entered // the writer holds "first" and waits on the database
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			w.Record(backends.JobRecord{Job: fmt.Sprint(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang detector, not a timing
		t.Fatal("Record blocked on a full buffer")
	}
	require.Equal(t, uint64(96), w.Stats().Dropped, "4 records fit the buffer, 96 are dropped")
	close(release)
	require.NoError(t, w.Close())
	require.Equal(t, int64(5), written.Load())
	require.Equal(t, WriterStats{Written: 5, Dropped: 96}, w.Stats())
	cs := w.Collectors()
	require.Len(t, cs, 3)
	require.Equal(t, []float64{5, 96, 0}, []float64{testutil.ToFloat64(cs[0]), testutil.ToFloat64(cs[1]), testutil.ToFloat64(cs[2])})
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		require.NoError(t, reg.Register(c))
	}
}

// A database that never answers fails each batch after WriteTimeout:
// Close returns, and the records are counted failed.
func TestWriterWriteTimeout(t *testing.T) {
	w, err := newWriter(WriterConfig{Batch: 2, WriteTimeout: time.Millisecond}, func(ctx context.Context, _ []backends.JobRecord) error {
		<-ctx.Done() // hung until the deadline
		return ctx.Err()
	})
	require.NoError(t, err)
	for range 3 {
		w.Record(backends.JobRecord{Job: "x"})
	}
	require.NoError(t, w.Close())
	require.Equal(t, WriterStats{Failed: 3}, w.Stats())
}

func TestWriterFailedBatchCounted(t *testing.T) {
	w, err := newWriter(WriterConfig{Batch: 2}, func(context.Context, []backends.JobRecord) error {
		return fmt.Errorf("disk full")
	})
	require.NoError(t, err)
	for range 3 {
		w.Record(backends.JobRecord{Job: "x"})
	}
	require.NoError(t, w.Close())
	require.Equal(t, WriterStats{Failed: 3}, w.Stats())
}

func TestOpenInvalid(t *testing.T) {
	_, err := Open(context.Background(), "")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Open(context.Background(), "sqlite://")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = newWriter(WriterConfig{Buffer: -1}, nil)
	require.ErrorIs(t, err, ErrInvalid)
}
