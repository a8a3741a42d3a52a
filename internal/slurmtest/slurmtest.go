// Package slurmtest is the one rule every test that touches SLURM follows
// (backends/slurm, backends/kube's hybrid test, examples/hybrid): it uses
// only a cluster that hack/slurm-up.sh started, never $SLURM_CONF, since
// those tests cancel jobs and drain or resume nodes.
package slurmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotOurCluster: the SLURM cluster is not one hack/slurm-up.sh started
// in the state dir the tests were given.
var ErrNotOurCluster = errors.New("not a test cluster of hack/slurm-up.sh")

// Marker is the file in which hack/slurm-up.sh keeps its cluster's token;
// the running slurmctld's ClusterName is berth-<token>.
const Marker = "berth-test-cluster"

// Cluster returns the slurm.conf of the SLURM test cluster in dir (the
// state dir of hack/slurm-up.sh) after checking that the script started it
// and that the slurmctld answering is that cluster's: the marker file's
// token and the ClusterName `scontrol show config` reports must agree. Any
// other cluster (a user's, or another on the same ports) is refused with
// ErrNotOurCluster.
func Cluster(dir string) (string, error) {
	conf := filepath.Join(dir, "etc", "slurm.conf")
	if _, err := os.Stat(conf); err != nil {
		return "", fmt.Errorf("no slurm.conf at %s (start one: BERTH_SLURM_DIR=%s bash hack/slurm-up.sh): %w", conf, dir, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, Marker))
	if err != nil {
		return "", fmt.Errorf("%w: %s has no %s marker: %w", ErrNotOurCluster, dir, Marker, err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return "", fmt.Errorf("%w: %s's %s marker is empty", ErrNotOurCluster, dir, Marker)
	}
	if _, err := exec.LookPath("scontrol"); err != nil {
		return "", fmt.Errorf("scontrol not installed: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scontrol", "show", "config")
	cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("slurmctld of %s does not answer (%v): %s", conf, err, strings.TrimSpace(string(out)))
	}
	name := ""
	for line := range strings.SplitSeq(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "ClusterName" {
			name = strings.TrimSpace(v)
		}
	}
	if name != "berth-"+token {
		return "", fmt.Errorf("%w: the slurmctld of %s is cluster %q, the marker says berth-%s", ErrNotOurCluster, conf, name, token)
	}
	return conf, nil
}
