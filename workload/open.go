package workload

import (
	"fmt"
	"os"
	"path/filepath"
)

// Kinds of trace file that Open reads.
const (
	KindSWF   = "swf"   // a Standard Workload Format log (plain or .gz)
	KindITP   = "itp"   // the ITP GPU job CSV
	KindOpenb = "openb" // the openb pod list with its node list
)

// Kinds returns the trace kinds Open reads, in a stable order.
func Kinds() []string { return []string{KindSWF, KindITP, KindOpenb} }

// defaultTrace is the shared trace each kind opens when no path is given.
var defaultTrace = map[string]string{KindSWF: SWFNASA, KindITP: ITPCluster04, KindOpenb: OpenbPods}

// Open reads the trace of the given kind at path. An empty path opens the
// shared trace of that kind (SWFNASA, ITPCluster04, OpenbPods under
// TracesDir). For KindOpenb, path is the directory that holds the pod list
// and the node list (openb_pod_list_default.csv and
// openb_node_list_gpu_node.csv), and the nodes come back in Trace.Nodes.
// Errors: ErrKind for an unknown kind, ErrNoTraces when an empty path finds
// no trace directory, a *ParseError for malformed input, or the I/O error.
func Open(kind, path string) (*Trace, error) {
	rel, ok := defaultTrace[kind]
	if !ok {
		return nil, fmt.Errorf("%w: %q (want one of %v)", ErrKind, kind, Kinds())
	}
	if path == "" {
		p, err := TracePath(rel)
		if err != nil {
			return nil, err
		}
		path = p
		if kind == KindOpenb {
			path = filepath.Dir(p)
		}
	}
	switch kind {
	case KindSWF:
		return OpenSWF(path)
	case KindITP:
		return OpenITP(path)
	}
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: openb wants the directory holding %s and %s, not the file %s",
			ErrKind, filepath.Base(OpenbPods), filepath.Base(OpenbNodes), path)
	}
	tr, err := OpenOpenbPods(filepath.Join(path, filepath.Base(OpenbPods)))
	if err != nil {
		return nil, err
	}
	if tr.Nodes, err = OpenOpenbNodes(filepath.Join(path, filepath.Base(OpenbNodes))); err != nil {
		return nil, err
	}
	return tr, nil
}
