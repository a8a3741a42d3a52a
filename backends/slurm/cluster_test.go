package slurm_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/berthsched/berth/internal/slurmtest"
)

// errNotOurCluster: see slurmtest.ErrNotOurCluster.
var errNotOurCluster = slurmtest.ErrNotOurCluster

// slurmMarker: see slurmtest.Marker.
const slurmMarker = slurmtest.Marker

// slurmDir is the tests' SLURM state dir: $BERTH_SLURM_DIR, else
// hack/slurm-up.sh's default.
func slurmDir() string {
	if dir := os.Getenv("BERTH_SLURM_DIR"); dir != "" {
		return dir
	}
	return "/tmp/berth-slurm"
}

// testCluster returns the slurm.conf of the SLURM test cluster in dir (the
// state dir of hack/slurm-up.sh) after checking that the script started
// it and that the slurmctld answering is that cluster's: the marker
// file's token and the ClusterName `scontrol show config` reports must
// agree (the rule of backends/kube's tests). The tests cancel every job
// and drain or resume every node of the cluster they use, so any other
// cluster (a user's, or another on the same ports) is refused with
// errNotOurCluster; $SLURM_CONF is never used.
func testCluster(dir string) (string, error) { return slurmtest.Cluster(dir) }

// refusal is the message of a test that has no cluster of its own.
func refusal(err error) string {
	return "no SLURM test cluster of this suite (it cancels every job and drains or resumes every node of the cluster it uses, so it only uses one that hack/slurm-up.sh started in $BERTH_SLURM_DIR): " + err.Error()
}

// slurmConf returns the slurm.conf of the tests' own SLURM cluster
// (testCluster of slurmDir), or skips (fails under
// BERTH_REQUIRE_INTEGRATION=1).
func slurmConf(tb testing.TB) string {
	tb.Helper()
	conf, err := testCluster(slurmDir())
	if err != nil {
		if os.Getenv("BERTH_REQUIRE_INTEGRATION") == "1" {
			tb.Fatal(refusal(err))
		}
		tb.Skip(refusal(err))
	}
	if env := os.Getenv("SLURM_CONF"); env != "" && env != conf {
		tb.Logf("SLURM_CONF=%s is ignored: the tests use %s", env, conf)
	}
	return conf
}

// benchConf is slurmConf for benchmarks: they skip without a cluster
// (the tests are what fails under BERTH_REQUIRE_INTEGRATION=1).
func benchConf(b *testing.B) string {
	b.Helper()
	conf, err := testCluster(slurmDir())
	if err != nil {
		b.Skip(refusal(err))
	}
	return conf
}

// A cluster hack/slurm-up.sh did not start is refused: a state dir
// without the marker, and (with the tests' own cluster running) a marker
// whose token is not the running slurmctld's ClusterName.
func TestClusterWithoutMarkerRefused(t *testing.T) {
	dir := t.TempDir()
	require := func(err error, what string) {
		t.Helper()
		if !errors.Is(err, errNotOurCluster) {
			t.Fatalf("%s: got %v, want errNotOurCluster", what, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "etc", "slurm.conf")
	if err := os.WriteFile(conf, []byte("ClusterName=users\nSlurmctldHost=localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := testCluster(dir)
	require(err, "no marker")
	if err := os.WriteFile(filepath.Join(dir, slurmMarker), []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = testCluster(dir)
	require(err, "empty marker")

	// The running cluster's own conf, under a marker it does not match.
	own := slurmConf(t)
	raw, err := os.ReadFile(own)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, slurmMarker), []byte("not-this-cluster\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = testCluster(dir)
	require(err, "marker of another cluster")
	if _, err := testCluster(slurmDir()); err != nil {
		t.Fatalf("the tests' own cluster is refused: %v", err)
	}
}
