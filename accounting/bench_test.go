package accounting

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
)

// BenchmarkWriterRecord is the cost of Record on the Runner's goroutine:
// a channel send, or, when the tight loop outruns the writer's goroutine
// and fills the buffer, a counted drop (the "dropped" metric says how
// many of the b.N records took that path).
func BenchmarkWriterRecord(b *testing.B) {
	w, err := newWriter(WriterConfig{}, func(context.Context, []backends.JobRecord) error { return nil })
	require.NoError(b, err)
	rec := life()[4]
	b.ReportAllocs()
	for b.Loop() {
		w.Record(rec)
	}
	b.StopTimer()
	require.NoError(b, w.Close())
	b.ReportMetric(float64(w.Stats().Dropped), "dropped")
}

// BenchmarkInsert writes batches of 512 records into SQLite (and
// PostgreSQL with BERTH_POSTGRES_URL): records/s is what a Writer
// sustains on that database.
func BenchmarkInsert(b *testing.B) {
	recs := make([]backends.JobRecord, 512)
	base := life()
	for i := range recs {
		recs[i] = base[i%len(base)]
		recs[i].Job = fmt.Sprint("j", i/len(base))
	}
	run := func(b *testing.B, db *DB) {
		n := 0
		for b.Loop() {
			require.NoError(b, db.Insert(context.Background(), recs))
			n += len(recs)
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("sqlite", func(b *testing.B) {
		db, err := Open(context.Background(), filepath.Join(b.TempDir(), "acct.db"))
		require.NoError(b, err)
		defer db.Close()
		run(b, db)
	})
	b.Run("postgres", func(b *testing.B) {
		run(b, openPostgres(b))
	})
}
