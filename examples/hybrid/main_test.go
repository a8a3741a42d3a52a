package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/internal/slurmtest"
)

// errNotOurCluster: see slurmtest.ErrNotOurCluster.
var errNotOurCluster = slurmtest.ErrNotOurCluster

// slurmMarker: see slurmtest.Marker.
const slurmMarker = slurmtest.Marker

// ourCluster returns the slurm.conf of the cluster in dir (the state dir
// of hack/slurm-up.sh) after checking that the script started it: the
// marker file's token and the ClusterName `scontrol show config` reports
// must agree (the rule of the SLURM and kube backends' tests). Any other
// cluster is refused with errNotOurCluster; $SLURM_CONF is never used.
func ourCluster(dir string) (string, error) { return slurmtest.Cluster(dir) }

// testCluster returns the slurm.conf of the tests' own cluster
// ($BERTH_SLURM_DIR, default /tmp/berth-slurm, checked by ourCluster), or
// skips (fails under BERTH_REQUIRE_INTEGRATION=1). The example binds the
// jobs of the cluster's berth partition, so it refuses any other.
func testCluster(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BERTH_SLURM_DIR")
	if dir == "" {
		dir = "/tmp/berth-slurm"
	}
	conf, err := ourCluster(dir)
	if err != nil {
		msg := "no SLURM test cluster of this example's tests (they only use one that hack/slurm-up.sh started in $BERTH_SLURM_DIR): " + err.Error()
		if os.Getenv("BERTH_REQUIRE_INTEGRATION") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if env := os.Getenv("SLURM_CONF"); env != "" && env != conf {
		t.Logf("SLURM_CONF=%s is ignored: the tests use %s", env, conf)
	}
	return conf
}

// A state dir without hack/slurm-up.sh's marker is refused.
func TestClusterWithoutMarkerRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "slurm.conf"), []byte("ClusterName=berth\nSlurmctldHost=localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ourCluster(dir); !errors.Is(err, errNotOurCluster) {
		t.Fatalf("got %v, want errNotOurCluster", err)
	}
}

// The example, built once for the tests.
var (
	build sync.Once
	built struct {
		bin string
		err error
	}
)

// run builds the example (once) and runs it on the test cluster
// with the site of site-local.json (its log_dir in a temporary
// directory, scripts as given) and jobs, until they are done. It returns
// the exit status, the output and the log directory.
func run(t *testing.T, conf string, scripts map[string]string, jobs string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	build.Do(func() {
		bdir, err := os.MkdirTemp("", "hybrid-test")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(bdir, "hybrid")
		if out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	bin := built.bin
	logs := filepath.Join(dir, "logs")
	b, err := os.ReadFile("site-local.json")
	if err != nil {
		t.Fatal(err)
	}
	site := strings.Replace(string(b), `"/tmp/berth-hybrid-logs"`, `"`+logs+`"`, 1)
	var sc []string
	for name, body := range scripts {
		file := filepath.Join(dir, name+".sbatch")
		if body == "" { // the example's own
			file, _ = filepath.Abs(name + ".sbatch")
		} else if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sc = append(sc, `"`+name+`": "`+file+`"`)
	}
	site = strings.Replace(site, `"train-llm": "train-llm.sbatch"`, strings.Join(sc, ", "), 1)
	for path, s := range map[string]string{"site.json": site, "jobs.json": jobs} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-config", filepath.Join(dir, "site.json"), "-jobs", filepath.Join(dir, "jobs.json"), "-until-done")
	cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the example did not finish in 3 minutes:\n%s", out)
	}
	rc := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		rc = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return rc, string(out), logs
}

// The documented local run succeeds end to end: the sample batch script
// runs on two nodes and its output is in its log file.
func TestLocalRunSucceeds(t *testing.T) {
	conf := testCluster(t)
	jobs, err := os.ReadFile("jobs-local.json")
	if err != nil {
		t.Fatal(err)
	}
	rc, out, logs := run(t, conf, map[string]string{"train-llm": ""}, string(jobs))
	if rc != 0 {
		t.Fatalf("exit status %d:\n%s", rc, out)
	}
	for _, want := range []string{"job train-llm-1 (SLURM job", "job eval-sweep-1 (SLURM job", "completed, exit status 0", "every job of"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	files, _ := filepath.Glob(filepath.Join(logs, "train-llm-*.log"))
	if len(files) != 1 {
		t.Fatalf("train-llm's log: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	for _, want := range []string{"berth job train-llm-1", "rank 0 of 2", "rank 1 of 2", "step 3"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", files[0], want, b)
		}
	}
}

// A job that fails is printed with its exit status, its log file and the
// log's last lines, and -until-done exits with status 1.
func TestFailedJobIsReported(t *testing.T) {
	conf := testCluster(t)
	rc, out, logs := run(t, conf, map[string]string{"bad": "#!/bin/sh\necho starting\necho 'python: cannot open train.py' >&2\nexit 3\n"},
		`[{"id": "bad-1", "name": "bad", "pools": ["slurm"], "members": 1, "gpus_per_member": 8, "runtime_estimate": "1m"}]`)
	if rc != 1 {
		t.Fatalf("exit status %d, want 1:\n%s", rc, out)
	}
	for _, want := range []string{"job bad-1 (SLURM job", "FAILED: state FAILED, exit status 3:0", filepath.Join(logs, "bad-"),
		"its last lines:\n    starting\n    python: cannot open train.py", "failed: [bad-1]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.bin != "" {
		_ = os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}
