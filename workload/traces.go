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

// GetTraces says how to get the traces; every error about missing traces
// ends with it.
const GetTraces = "get them with `bash hack/get-traces.sh DIR` and set " + TracesEnv + "=DIR (docs/traces.md)"

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
			return "", fmt.Errorf("%w: $%s=%s is not a directory; %s", ErrNoTraces, TracesEnv, dir, GetTraces)
		}
		return filepath.Abs(dir)
	}
	for _, dir := range traceCandidates {
		if isDir(dir) {
			return filepath.Abs(dir)
		}
	}
	wd, _ := os.Getwd()
	return "", fmt.Errorf("%w: $%s is not set and no shared/traces beside the repository (looked from %s); %s",
		ErrNoTraces, TracesEnv, wd, GetTraces)
}

// TracePath joins TracesDir and rel (one of SWFNASA, ITPCluster04,
// OpenbPods, OpenbNodes, or another relative path). A file that is not
// there is an error wrapping ErrNoTraces, as is no directory.
func TracePath(rel string) (string, error) {
	dir, err := TracesDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s is not in %s (%w); %s", ErrNoTraces, rel, dir, err, GetTraces)
	}
	return p, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
