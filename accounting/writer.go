package accounting

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthsched/berth/backends"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Buffer is how many records may wait to be written. When it is full
	// a record is dropped (counted in Stats.Dropped and logged), never
	// waited for. Zero: 65536.
	Buffer int
	// Batch is the most records written in one transaction. Zero: 512.
	Batch int
	// FlushInterval is the longest a record waits for its batch to fill.
	// Zero: one second.
	FlushInterval time.Duration
	// WriteTimeout bounds each batch's transaction: a batch the database
	// has not taken by then fails (counted in Stats.Failed and logged), so
	// a hung database never holds the Writer, or Close, for longer. Zero:
	// 30 s.
	WriteTimeout time.Duration
	// Logger receives dropped records and failed writes (Warn, Error).
	// Nil: no logs.
	Logger *slog.Logger
}

// WriterStats counts what a Writer did with its records.
type WriterStats struct {
	// Written: records committed to the database.
	Written uint64
	// Dropped: records refused because the buffer was full.
	Dropped uint64
	// Failed: records of batches the database refused (logged).
	Failed uint64
}

// Writer is a backends.Recorder that writes records to a DB in batches on
// its own goroutine. Record never blocks: a record that finds the buffer
// full is dropped, counted and logged. Close flushes what is queued.
type Writer struct {
	cfg  WriterConfig
	log  *slog.Logger
	sink func(ctx context.Context, recs []backends.JobRecord) error

	mu     sync.RWMutex // Record (read) against Close (write)
	closed bool
	ch     chan backends.JobRecord
	done   chan struct{}

	written, dropped, failed atomic.Uint64
}

var _ backends.Recorder = (*Writer)(nil)

// NewWriter starts a Writer that writes to db.
func (db *DB) NewWriter(cfg WriterConfig) (*Writer, error) {
	return newWriter(cfg, db.Insert)
}

func newWriter(cfg WriterConfig, sink func(context.Context, []backends.JobRecord) error) (*Writer, error) {
	if cfg.Buffer < 0 || cfg.Batch < 0 || cfg.FlushInterval < 0 || cfg.WriteTimeout < 0 {
		return nil, fmt.Errorf("%w: negative WriterConfig field: %+v", ErrInvalid, cfg)
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = 1 << 16
	}
	if cfg.Batch == 0 {
		cfg.Batch = 512
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{cfg: cfg, log: log, sink: sink, ch: make(chan backends.JobRecord, cfg.Buffer), done: make(chan struct{})}
	go w.loop()
	return w, nil
}

// Record queues rec, or drops it when the buffer is full (or the Writer
// is closed). It never blocks.
func (w *Writer) Record(rec backends.JobRecord) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.closed {
		select {
		case w.ch <- rec:
			return
		default:
		}
	}
	n := w.dropped.Add(1)
	if bits.OnesCount64(n) == 1 { // the 1st, 2nd, 4th, 8th ... drop: bounded logging
		w.log.Warn("accounting: record dropped (buffer full or writer closed)", "job", rec.Job,
			"kind", rec.Kind.String(), "dropped", n, "buffer", w.cfg.Buffer)
	}
}

// Stats returns the counts so far.
func (w *Writer) Stats() WriterStats {
	return WriterStats{Written: w.written.Load(), Dropped: w.dropped.Load(), Failed: w.failed.Load()}
}

// Close stops accepting records, writes those queued and returns when
// they are written (or their batches failed: WriteTimeout bounds each).
// It is idempotent.
func (w *Writer) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
	w.mu.Unlock()
	<-w.done
	return nil
}

func (w *Writer) loop() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.FlushInterval)
	defer t.Stop()
	batch := make([]backends.JobRecord, 0, w.cfg.Batch)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.WriteTimeout)
		err := w.sink(ctx, batch)
		cancel()
		if err != nil {
			w.failed.Add(uint64(len(batch)))
			w.log.Error("accounting: batch not written", "records", len(batch), "failed", w.failed.Load(), "err", err)
		} else {
			w.written.Add(uint64(len(batch)))
		}
		batch = batch[:0]
	}
	for {
		select {
		case rec, ok := <-w.ch:
			if !ok {
				flush()
				return
			}
			batch = append(batch, rec)
			if len(batch) >= w.cfg.Batch {
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// Collectors returns Prometheus counters of the Writer's Stats:
// berth_accounting_records_written_total, _dropped_total and
// _failed_total.
func (w *Writer) Collectors() []prometheus.Collector {
	c := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		c("berth_accounting_records_written_total", "Accounting records written to the database.", &w.written),
		c("berth_accounting_records_dropped_total", "Accounting records dropped because the write buffer was full.", &w.dropped),
		c("berth_accounting_records_failed_total", "Accounting records of batches the database refused.", &w.failed),
	}
}
