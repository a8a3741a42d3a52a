package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/config"
	"github.com/berthsched/berth/engine"
)

// FuzzRead: any input gives a File or an error, never a panic; a File
// that reads without error writes and reads back equal, in YAML and JSON.
func FuzzRead(f *testing.F) {
	ps, _ := filepath.Glob("../examples/config/*.yaml")
	for _, p := range ps {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"cluster":{"nodes":[{"name":"n","gpus":1}]},"queues":{"halfLife":"0s","queues":[{"name":"q"}]},"engine":{}}`))
	f.Add([]byte("queues: {queues: [{name: q, quota: {gpu: {nominal: 1.5, borrowingLimit: unlimited, lendingLimit: 0}}}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := config.Read(data)
		if err != nil {
			return
		}
		for _, enc := range []func(*config.File) ([]byte, error){(*config.File).YAML, (*config.File).JSON} {
			b, err := enc(file)
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			g, err := config.Read(b)
			if err != nil {
				t.Fatalf("read back: %v\n%s", err, b)
			}
			if !file.Equal(g) {
				t.Fatalf("round trip differs:\n%s", b)
			}
		}
	})
}

// Per-input bounds of FuzzConfig. The allocation bound is the
// deterministic one: it fails an input that expands without bound whatever
// the machine's load. The time bound only catches a hang: the largest file
// the limits allow (65,536 nodes of 64 GPUs in one line) is read and built
// in about 0.5 s of CPU, but takes 3 s on a loaded 2-core machine and over
// 5 s there under -race.
const (
	fuzzTimeBound  = 30 * time.Second
	fuzzAllocBound = 512 << 20 // bytes allocated per input
)

// hostile are the inputs the limits were written for (docs/config.md,
// "Limits").
func hostile() []string {
	base := "cluster:\n  nodes:\n    - {name: n, gpus: 8}\nqueues:\n  halfLife: 0s\n  queues:\n    - {name: q}\nengine: {}\n"
	return []string{
		"count: 1000000000",
		strings.Replace(base, "{name: n, gpus: 8}", "{name: n, count: 1000000000, gpus: 8}", 1),
		strings.Replace(base, "{name: n, gpus: 8}", fmt.Sprintf("{name: n, count: %d, gpus: 64}", config.MaxNodes), 1),
		strings.Replace(base, "{name: n, gpus: 8}", "{name: n, count: 40000, gpus: 8}\n    - {name: m, count: 40000, gpus: 8}", 1),
		strings.Replace(base, "engine: {}", "engine: {intakeCapacity: 1073741824}", 1),
		strings.Replace(base, "engine: {}", "engine: {scorer: {name: fgd, target: [{gpus: 1, weight: .inf}]}}", 1),
		strings.Replace(base, "engine: {}", "engine: {mig: {waitFactor: .nan}}", 1),
		strings.Replace(base, "{name: q}", "{name: q, weight: -.inf}", 1),
		aliasBomb(),
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
		"a: &a [*a]",
	}
}

// aliasBomb is a YAML "billion laughs": nine levels of ten aliases each
// stand for 10^9 nodes in a few hundred bytes.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("cluster:\n  levels: &l0 [a, a, a, a, a, a, a, a, a, a]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  gpuLevels: &l%d [*l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d]\n", i, i-1)
	}
	return b.String()
}

// FuzzConfig: the loader answers any input (read, build, and an engine
// made from what builds, up to 1,024 nodes) within fuzzTimeBound and fuzzAllocBound, with a
// File or an error and never a panic or a hang.
func FuzzConfig(f *testing.F) {
	ps, _ := filepath.Glob("../examples/config/*.yaml")
	for _, p := range ps {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, h := range hostile() {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		done := make(chan error, 1)
		go func() {
			file, err := config.ReadFile(path)
			if err != nil {
				done <- nil
				return
			}
			cfg, err := file.Build()
			if err != nil {
				done <- fmt.Errorf("Build fails what ReadFile accepted: %w", err)
				return
			}
			// An engine for the small ones: topo.New of the largest cluster
			// is the engine's cost, measured by its benchmarks, not the loader's.
			if len(cfg.Cluster.Nodes) > 1024 {
				done <- nil
				return
			}
			if _, err := engine.New(cfg); err != nil {
				done <- fmt.Errorf("engine.New refuses what Build gave: %w", err)
				return
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(fuzzTimeBound):
			t.Fatalf("no answer within %v for %d bytes", fuzzTimeBound, len(data))
		}
		runtime.ReadMemStats(&m1)
		if a := m1.TotalAlloc - m0.TotalAlloc; a > fuzzAllocBound {
			t.Fatalf("%d MiB allocated for %d bytes of input (bound %d MiB)", a>>20, len(data), fuzzAllocBound>>20)
		}
	})
}
