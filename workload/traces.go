package workload

import (
	"fmt"
	"os"
	"path/filepath"
)

// Paths of the shared traces, relative to TracesDir. The files are read in
// place and never copied into the repository.
const (
	// SWFNASA is the NASA Ames iPSC/860 log (Parallel Workloads Archive),
	// 18,239 jobs on 128 processors.
	SWFNASA = "hpc/NASA-iPSC-1993-3.1-cln.swf.gz"
	// ITPCluster04 is the ITP cluster04 GPU job trace (ElasticFlow), 15,802
	// jobs.
	ITPCluster04 = "gpu-jobs/elasticflow-itp-cluster04.csv"
	// OpenbPods is the openb pod list of the FGD paper, 8,152 pods.
	OpenbPods = "k8s-gpu-pods/openb_pod_list_default.csv"
	// OpenbNodes is the openb node list, 1,213 nodes with 6,212 GPUs.
	OpenbNodes = "k8s-gpu-pods/openb_node_list_gpu_node.csv"
)

// TracesEnv names the environment variable that overrides TracesDir.
const TracesEnv = "BERTH_TRACES"

// traceCandidates are tried in order, relative to the working directory:
// the repository root (the CLI), then package directories one and two
// levels down (go test runs in the package directory).
var traceCandidates = []string{
	"../shared/traces",
	"../../shared/traces",
	"../../../shared/traces",
}

// TracesDir returns the directory holding the shared traces: $BERTH_TRACES
// when set (it must then exist), else the first existing directory of
// ../shared/traces, ../../shared/traces and ../../../shared/traces relative
// to the working directory. The result is absolute. It returns an error
// wrapping ErrNoTraces when no directory is found.
func TracesDir() (string, error) {
	if dir := os.Getenv(TracesEnv); dir != "" {
		if !isDir(dir) {
			return "", fmt.Errorf("%w: $%s=%s is not a directory", ErrNoTraces, TracesEnv, dir)
		}
		return filepath.Abs(dir)
	}
	for _, dir := range traceCandidates {
		if isDir(dir) {
			return filepath.Abs(dir)
		}
	}
	wd, _ := os.Getwd()
	return "", fmt.Errorf("%w: set $%s, or place shared/traces beside the repository (looked from %s)",
		ErrNoTraces, TracesEnv, wd)
}

// TracePath joins TracesDir and rel (one of SWFNASA, ITPCluster04,
// OpenbPods, OpenbNodes, or another relative path).
func TracePath(rel string) (string, error) {
	dir, err := TracesDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, rel), nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
