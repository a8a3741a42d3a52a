package workload_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/berthsched/berth/workload"
)

func benchLoad(b *testing.B, rel string, read func([]byte) (int, error)) {
	data, err := os.ReadFile(tracetest.Path(b, rel))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n, err = read(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkLoadITP parses the whole ITP cluster04 trace (15,802 jobs) from
// memory.
func BenchmarkLoadITP(b *testing.B) {
	benchLoad(b, workload.ITPCluster04, func(d []byte) (int, error) {
		tr, err := workload.ReadITP(bytes.NewReader(d), "itp")
		if err != nil {
			return 0, err
		}
		return len(tr.Jobs), nil
	})
}

// BenchmarkLoadSWF parses the gzip-compressed NASA log (18,239 jobs).
func BenchmarkLoadSWF(b *testing.B) {
	benchLoad(b, workload.SWFNASA, func(d []byte) (int, error) {
		tr, err := workload.ReadSWF(bytes.NewReader(d), "swf")
		if err != nil {
			return 0, err
		}
		return len(tr.Jobs) + len(tr.Dropped), nil
	})
}

// BenchmarkLoadOpenbPods parses the openb pod list (8,152 pods).
func BenchmarkLoadOpenbPods(b *testing.B) {
	benchLoad(b, workload.OpenbPods, func(d []byte) (int, error) {
		tr, err := workload.ReadOpenbPods(bytes.NewReader(d), "pods")
		if err != nil {
			return 0, err
		}
		return len(tr.Jobs), nil
	})
}

// BenchmarkSynthetic generates the default workload (2,000 jobs).
func BenchmarkSynthetic(b *testing.B) {
	cfg := workload.DefaultSynthetic()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := workload.Synthetic(cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cfg.Jobs)*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
