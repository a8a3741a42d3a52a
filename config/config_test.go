package config_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/berthsched/berth/config"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

func examples(t *testing.T) []string {
	t.Helper()
	ps, err := filepath.Glob("../examples/config/*.yaml")
	if err != nil || len(ps) < 3 {
		t.Fatalf("example configs: %v %v", ps, err)
	}
	return ps
}

// sameEngine compares two engine configs, the policy by name.
func sameEngine(t *testing.T, a, b engine.Config) {
	t.Helper()
	if a.Policy.Name() != b.Policy.Name() {
		t.Fatalf("policy %q != %q", a.Policy.Name(), b.Policy.Name())
	}
	a.Policy, b.Policy = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("engine configs differ:\n%+v\n%+v", a, b)
	}
}

func TestExamplesRoundTrip(t *testing.T) {
	for _, p := range examples(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := config.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := f.Build()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := engine.New(cfg); err != nil {
				t.Fatalf("engine.New: %v", err)
			}
			for _, enc := range []func(*config.File) ([]byte, error){(*config.File).YAML, (*config.File).JSON} {
				b, err := enc(f)
				if err != nil {
					t.Fatal(err)
				}
				g, err := config.Read(b)
				if err != nil {
					t.Fatalf("read back: %v\n%s", err, b)
				}
				if !f.Equal(g) {
					t.Fatalf("round trip differs:\n%s", b)
				}
				cfg2, err := g.Build()
				if err != nil {
					t.Fatal(err)
				}
				sameEngine(t, cfg, cfg2)
			}
			// The effective settings are valid, keep what was written and
			// are a fixed point.
			eff := f.Effective()
			if err := eff.Validate(); err != nil {
				t.Fatal(err)
			}
			if !eff.Effective().Equal(eff) {
				t.Fatal("Effective is not idempotent")
			}
			if f.Engine.Backfill.Mode != "" && eff.Engine.Backfill.Mode != f.Engine.Backfill.Mode {
				t.Fatalf("Effective changed backfill mode %q to %q", f.Engine.Backfill.Mode, eff.Engine.Backfill.Mode)
			}
		})
	}
}

// The case: a borrowing limit of 2 GPUs comes back as 2 GPUs, and
// unlimited is written as such.
func TestLimitsSerialise(t *testing.T) {
	f, err := config.ReadFile("../examples/config/k8s-platform.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"borrowingLimit": 2,`) || !strings.Contains(string(b), `"lendingLimit": "unlimited"`) {
		t.Fatalf("limits not written:\n%s", b)
	}
	g, err := config.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := g.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range cfg.Queues.Queues {
		if q.Name != "vision" {
			continue
		}
		bl := q.Quota[queue.GPUMilli].BorrowingLimit
		if v, ok := bl.Get(); !ok || v != queue.WholeGPUs(2) {
			t.Fatalf("vision borrowing limit = %v, want 2 GPUs (2000)", bl)
		}
		if _, ok := q.Quota[queue.GPUMilli].LendingLimit.Get(); ok {
			t.Fatalf("vision lending limit should be unlimited")
		}
		return
	}
	t.Fatal("no queue vision")
}

func TestRejectsWithFieldAndLine(t *testing.T) {
	base, err := os.ReadFile("../examples/config/k8s-platform.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to string
		path           string
		line           int
	}{
		{"limit absent", "{nominal: 32, borrowingLimit: 2, lendingLimit: unlimited}", "{nominal: 32, lendingLimit: unlimited}",
			"queues.queues[1].quota.gpu.borrowingLimit", 45},
		{"bad limit", "borrowingLimit: 24", "borrowingLimit: lots", "(file)", 0},
		{"unknown field", "  agingPeriod: 1h0m0s", "  agingPeriode: 1h0m0s", "(file)", 0},
		{"bad mode", "mode: easy", "mode: eazy", "engine.backfill.mode", 54},
		{"bad scorer", "name: bestfit", "name: bestest", "engine.scorer", 58},
		{"bad gpus", "      gpus: 8\n      gpuModel: H100-80GB\n      cpus: 96\n      memoryMiB: 2097152\n    - name: b0-r1",
			"      gpus: 80\n      gpuModel: H100-80GB\n      cpus: 96\n      memoryMiB: 2097152\n    - name: b0-r1", "cluster.nodes[0].gpus", 11},
		{"unknown cohort", "cohort: research\n      weight: 2", "cohort: reserch\n      weight: 2", "queues.queues[0].cohort", 37},
		{"duplicate queue", "name: vision", "name: notebooks", "queues.queues[2].name", 46},
		{"bad resource", "cpu: {nominal", "cpux: {nominal", "queues.queues[0].quota.cpux", 41},
		{"negative duration", "bindRetryBackoff: 30s", "bindRetryBackoff: -30s", "engine.bindRetryBackoff", 56},
		{"fractional memory", "cpu: {nominal: 512", "memory: {nominal: 0.5", "queues.queues[0].quota.memory.nominal", 41},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := string(base)
			if !strings.Contains(s, tc.from) {
				t.Fatalf("fixture lacks %q", tc.from)
			}
			_, err := config.Read([]byte(strings.Replace(s, tc.from, tc.to, 1)))
			var fe *config.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want a *FieldError", err)
			}
			if fe.Path != tc.path {
				t.Fatalf("path = %q, want %q (%v)", fe.Path, tc.path, err)
			}
			if tc.line > 0 && fe.Line != tc.line {
				t.Fatalf("line = %d, want %d (%v)", fe.Line, tc.line, err)
			}
			if tc.path == "(file)" && !strings.Contains(err.Error(), "line ") {
				t.Fatalf("parse error without a line: %v", err)
			}
		})
	}
}

// randFile draws a File of random settings (not necessarily valid: the
// round trip must hold for any File Read can decode).
func randFile(r *rand.Rand) *config.File {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	q := func() config.Quantity { return config.Milli(r.Int64N(1_000_000)) }
	lim := func() config.Limit {
		if r.IntN(3) == 0 {
			return config.NoLimit()
		}
		return config.Cap(q())
	}
	dur := func() config.Duration { return config.Duration(r.Int64N(1e13)) }
	f := &config.File{}
	if r.IntN(2) == 0 {
		f.Cluster.Levels = []string{"rack"}
	}
	f.Cluster.ShareFreeGPUs = r.IntN(2) == 0
	for i := range 1 + r.IntN(4) {
		n := config.Node{Name: pick("a", "b", "gpu") + string(rune('0'+i)), Count: r.IntN(3), GPUs: 1 + r.IntN(8),
			GPUModel: pick("", "A100-80GB", "H100-80GB"), CPUs: q(), MemoryMiB: r.Int64N(1 << 20), State: pick("", "ready", "draining")}
		if f.Cluster.Levels != nil {
			n.Domains = []string{pick("r0", "r1")}
		}
		if r.IntN(4) == 0 {
			n.Labels = map[string]string{"zone": pick("x", "y")}
		}
		if r.IntN(4) == 0 {
			n.Sharing = &config.Sharing{Mode: "mps", Replicas: 1 + r.IntN(48)}
		}
		f.Cluster.Nodes = append(f.Cluster.Nodes, n)
	}
	f.Queues.HalfLife = dur()
	f.Queues.Cohorts = []config.Cohort{{Name: "c", Weight: float64(r.IntN(5)) / 2}}
	for i := range 1 + r.IntN(4) {
		qu := config.Queue{Name: "q" + string(rune('0'+i)), Cohort: pick("", "c"), Weight: r.Float64() * 4}
		qu.Quota = map[string]config.Quota{}
		for _, res := range []string{"gpu", "gpu/H100-80GB", "cpu", "memory", "mig/1g.10gb"} {
			if r.IntN(2) == 0 {
				qu.Quota[res] = config.Quota{Nominal: q(), BorrowingLimit: lim(), LendingLimit: lim()}
			}
		}
		if len(qu.Quota) == 0 {
			qu.Quota = nil
		}
		f.Queues.Queues = append(f.Queues.Queues, qu)
	}
	e := &f.Engine
	e.Policy.Name = pick("", "drs", "priority", "fairtree", "multifactor")
	if e.Policy.Name == "multifactor" {
		e.Policy.Weights = &config.Weights{Age: r.Float64(), MaxAge: dur(), FairShare: 3, FavorSmall: true}
	}
	e.AgingPeriod, e.IntakeCapacity = dur(), r.IntN(10000)
	e.Backfill = config.Backfill{Mode: pick("", "none", "easy", "conservative"), Depth: r.IntN(40), Window: dur(), MaxProbes: r.IntN(100)}
	e.Preemption = config.Preemption{Priority: r.IntN(2) == 0, Reclaim: r.IntN(2) == 0, MaxVictimsPerCycle: r.IntN(9)}
	e.NodeFailure = pick("", "requeue", "fail")
	e.BindRetryBackoff = dur()
	e.MIG = config.MIG{Disabled: r.IntN(2) == 0, WaitFactor: r.Float64(), CreateCost: dur(), MaxGPUs: r.IntN(9)}
	e.Scorer.Name = pick("", "random", "bestfit", "berth")
	if e.Scorer.Name == "random" {
		e.Scorer.Seed = r.Int64()
	}
	if e.Scorer.Name == "berth" {
		e.Scorer.Target = []config.Shape{{GPUs: 1, Milli: 1000, Weight: 0.75}, {GPUs: 0, Milli: 500, Weight: 0.25}}
	}
	return f
}

func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for i := range 500 {
		f := randFile(r)
		for name, enc := range map[string]func(*config.File) ([]byte, error){"yaml": (*config.File).YAML, "json": (*config.File).JSON} {
			b, err := enc(f)
			if err != nil {
				t.Fatal(err)
			}
			g, err := config.Read(b)
			if g == nil {
				t.Fatalf("file %d (%s) does not read back: %v\n%s", i, name, err, b)
			}
			if err == nil {
				valid++
			}
			if !f.Equal(g) {
				t.Fatalf("file %d (%s) differs after a round trip:\n%s\n%+v\n%+v", i, name, b, f, g)
			}
		}
	}
	if valid == 0 {
		t.Fatal("no generated file was valid: the generator tests nothing that builds")
	}
	t.Logf("%d of 1000 round trips were valid files", valid)
}

func TestQuantity(t *testing.T) {
	for _, s := range []string{"0", "2", "0.5", "1.125", "7.25", "123456"} {
		q, err := config.ParseQuantity(s)
		if err != nil || q.String() != s {
			t.Errorf("%q -> %v %v", s, q, err)
		}
	}
	for _, s := range []string{"", "-1", "1.2345", "1e3", ".5", "1.", "x"} {
		if _, err := config.ParseQuantity(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// The site section: partitions, limits and the dependency policy reach
// the engine config; bad names and values are refused with their path.
func TestSiteSection(t *testing.T) {
	f, err := config.ReadFile("../examples/config/slurm-site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Build()
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Site
	if len(s.Partitions) != 2 || s.Partitions[0].Name != "gpu-8x" || s.Partitions[0].PreemptMode != engine.PreemptOff ||
		s.Partitions[0].Domains[0] != (engine.DomainRef{Level: "rack", Name: "r0"}) || !s.Partitions[1].Default ||
		s.Partitions[1].MaxGPUsPerJob != 2 || s.Limits.MaxJobsPerUser != 16 || s.Limits.Accounts["biology"] != 48 {
		t.Fatalf("site config %+v", s)
	}
	for _, c := range []struct{ yaml, path string }{
		{"site:\n  neverMet: later\n", "site.neverMet"},
		{"site:\n  partitions:\n    - name: p\n      nodes: [a]\n      preemptMode: suspend\n", "site.partitions[0].preemptMode"},
		{"site:\n  partitions:\n    - name: p\n      nodes: [a]\n      maxRuntime: -1h\n", "site.partitions[0].maxRuntime"},
		{"site:\n  partitions:\n    - name: p\n", "site"},
		{"site:\n  partitions:\n    - name: p\n      nodes: [a]\n      color: red\n", ""},
	} {
		base := "cluster:\n  nodes:\n    - {name: a, gpus: 8}\nqueues:\n  halfLife: 0s\n  queues:\n    - name: q\nengine:\n  policy: {}\n  backfill: {}\n  preemption: {}\n  mig: {}\n  scorer: {}\n"
		g, err := config.Read([]byte(base + c.yaml))
		if err == nil {
			err = g.Validate()
		}
		var fe *config.FieldError
		if err == nil || (c.path != "" && (!errors.As(err, &fe) || fe.Path != c.path)) {
			t.Errorf("%q: got %v, want an error at %s", c.yaml, err, c.path)
		}
	}
}

// lazyPending is on when unset (the engine's default), false turns it off
// (engine.Config.EagerPending), and Effective writes the default out.
func TestLazyPendingDefault(t *testing.T) {
	base := "cluster:\n  nodes: [{name: n0, gpus: 8}]\nqueues:\n  queues: [{name: q}]\n"
	for _, c := range []struct {
		engine      string
		eager, lazy bool // EagerPending built, lazyPending in Effective
	}{
		{"", false, true},
		{"engine:\n  lazyPending: true\n", false, true},
		{"engine:\n  lazyPending: false\n", true, false},
	} {
		f, err := config.Read([]byte(base + c.engine))
		if err != nil {
			t.Fatalf("%q: %v", c.engine, err)
		}
		cfg, err := f.Build()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.EagerPending != c.eager || cfg.LazyPending {
			t.Errorf("%q: EagerPending %v LazyPending %v, want %v false", c.engine, cfg.EagerPending, cfg.LazyPending, c.eager)
		}
		eff := f.Effective()
		if eff.Engine.LazyPending == nil || *eff.Engine.LazyPending != c.lazy {
			t.Errorf("%q: Effective lazyPending %v, want %v", c.engine, eff.Engine.LazyPending, c.lazy)
		}
		if cfg2, err := eff.Build(); err != nil || cfg2.EagerPending != c.eager {
			t.Errorf("%q: Effective builds EagerPending %v (%v), want %v", c.engine, cfg2.EagerPending, err, c.eager)
		}
	}
}
