package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

// BenchmarkJournal measures the saved state after a long run: jobs random
// gangs on 8 x 8 GPUs, run to the end by a Runner with a FileStore. It
// reports the state's size (state-bytes, records) and what one save
// (save-ms: JSON, write, fsync, rename) and one restore (restore-ms: read,
// decode, engine.Restore from the snapshot, if any, and the records) take.
// compact=never keeps the whole journal (both grow with the history);
// compact=1000 is the Runner's default (RunnerConfig.CompactAfter): the
// journal is compacted at a save once it has 1,000 records, so the state
// is the live jobs' snapshot (none at the end) and the records since.
func BenchmarkJournal(b *testing.B) {
	for _, n := range []int{500, 2000} {
		for _, compact := range []int{-1, backends.DefaultCompactAfter} {
			name := fmt.Sprintf("jobs=%d/compact=%d", n, compact)
			if compact < 0 {
				name = fmt.Sprintf("jobs=%d/compact=never", n)
			}
			b.Run(name, func(b *testing.B) { benchJournal(b, n, compact) })
		}
	}
}

func benchJournal(b *testing.B, n, compact int) {
	s := newSim(b, 8, 8)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range n {
		j := wholeJob(fmt.Sprintf("j%05d", i), time.Duration(rng.IntN(n))*time.Minute, 1+rng.IntN(2), []int{1, 2, 4, 8}[rng.IntN(4)])
		run := time.Duration(10+rng.IntN(110)) * time.Minute
		j.RuntimeEstimate, j.RuntimeLimit = run, run+time.Hour
		j.Priority = int32(rng.IntN(3))
		if rng.IntN(2) == 0 {
			j.Preemptible, j.GracePeriod = true, 5*time.Minute
		}
		if err := s.Submit(j, run); err != nil {
			b.Fatal(err)
		}
	}
	store := backends.FileStore{Path: filepath.Join(b.TempDir(), "berth.state")}
	cfg := restartConfig(s, store)
	cfg.CompactAfter = compact
	r, err := backends.NewRunner(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Load(ctx)
	if err != nil || st == nil {
		b.Fatalf("load: %v", err)
	}
	fi, err := os.Stat(store.Path)
	if err != nil {
		b.Fatal(err)
	}
	var save, restore time.Duration
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		if err := store.Save(ctx, st); err != nil {
			b.Fatal(err)
		}
		save += time.Since(t)
		t = time.Now()
		back, err := store.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := engine.Restore(cfg.Engine, back); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t)
	}
	b.ReportMetric(float64(fi.Size()), "state-bytes")
	b.ReportMetric(float64(len(st.Records)), "records")
	b.ReportMetric(float64(save.Milliseconds())/float64(b.N), "save-ms")
	b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
}
