package workload

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

var openbPodColumns = []string{
	// required
	"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
	// optional
	"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time",
}

const (
	podName = iota
	podCPU
	podMemory
	podNumGPU
	podGPUMilli
	podSpec
	podQoS
	podPhase
	podCreation
	podDeletion
	podScheduled
	podRequired = podSpec
)

// ReadOpenbPods reads the pod list of the Alibaba GPU trace used by the FGD
// paper ("openb"; header name,cpu_milli,memory_mib,num_gpu,gpu_milli,
// gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time).
// The first five columns are required, the rest optional; columns are found
// by name. name labels errors.
//
// Mapping (docs/fgd.md, Procedure step 1): ID = name; CPUMilli, MemoryMiB as given; NumGPU =
// num_gpu; GPUMilli = gpu_milli clamped to [0, 1000] (above 1000 becomes
// 1000, at most 0 becomes 0) and 0 when num_gpu is 0; GPUs = NumGPU when
// GPUMilli is 1000, else 0; GPUModels = gpu_spec split on '|' (nil when
// empty: any model); QoS = qos. Submit = creation_time; Runtime =
// deletion_time - scheduled_time when both are present and the difference
// is positive, else 0 (pending pods have no scheduled_time). The FGD
// experiment ignores all times.
//
// Every pod is kept: Trace.Dropped is always empty. Negative counts or
// resources are errors.
func ReadOpenbPods(r io.Reader, name string) (*Trace, error) {
	c, err := newCSVReader(r, name, openbPodColumns, podRequired)
	if err != nil {
		return nil, err
	}
	t := &Trace{Name: name}
	models := map[string][]string{} // interned gpu_spec lists
	qos := interner{}
	buf := c.buffer()
	for {
		ok, err := c.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			t.Jobs, t.Warnings = buf.jobs(), c.lr.warnings()
			return t, nil
		}
		j := Job{Line: c.line()}
		if j.CPUMilli, err = c.int(podCPU, 0, 1<<50); err != nil {
			return nil, err
		}
		if j.MemoryMiB, err = c.int(podMemory, 0, 1<<50); err != nil {
			return nil, err
		}
		n, err := c.int(podNumGPU, 0, maxCount)
		if err != nil {
			return nil, err
		}
		milli, err := c.int(podGPUMilli, -1<<50, 1<<50)
		if err != nil {
			return nil, err
		}
		milli = max(0, min(1000, milli))
		if n == 0 {
			milli = 0
		}
		j.NumGPU, j.GPUMilli = int(n), int(milli)
		if milli == 1000 {
			j.GPUs = j.NumGPU
		}
		if spec := c.field(podSpec); len(spec) > 0 {
			m, ok := models[string(spec)]
			if !ok {
				for _, s := range strings.Split(string(spec), "|") {
					if s = strings.TrimSpace(s); s != "" {
						m = append(m, s)
					}
				}
				models[string(spec)] = m
			}
			j.GPUModels = m
		}
		j.QoS = qos.get(c.field(podQoS))
		if len(c.field(podCreation)) > 0 {
			if j.Submit, err = c.seconds(podCreation); err != nil {
				return nil, err
			}
		}
		if d, s := c.field(podDeletion), c.field(podScheduled); len(d) > 0 && len(s) > 0 {
			del, err := c.seconds(podDeletion)
			if err != nil {
				return nil, err
			}
			sched, err := c.seconds(podScheduled)
			if err != nil {
				return nil, err
			}
			j.Runtime = max(0, del-sched)
		}
		buf.add(j, c.field(podName))
	}
}

// OpenOpenbPods reads the openb pod CSV at path; see ReadOpenbPods.
func OpenOpenbPods(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	return ReadOpenbPods(f, path)
}

var openbNodeColumns = []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}

const (
	nodeName = iota
	nodeCPU
	nodeMemory
	nodeGPUs
	nodeModel
)

// ReadOpenbNodes reads the openb node list (header
// sn,cpu_milli,memory_mib,gpu,model; columns found by name, all required).
// name labels errors. Nodes keep the file's order. Negative values are
// errors; a node with 0 GPUs is kept.
func ReadOpenbNodes(r io.Reader, name string) ([]Node, error) {
	c, err := newCSVReader(r, name, openbNodeColumns, len(openbNodeColumns))
	if err != nil {
		return nil, err
	}
	var nodes []Node
	for {
		ok, err := c.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nodes, nil
		}
		n := Node{Name: string(c.field(nodeName)), Line: c.line()}
		if n.CPUMilli, err = c.int(nodeCPU, 0, 1<<50); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = c.int(nodeMemory, 0, 1<<50); err != nil {
			return nil, err
		}
		g, err := c.int(nodeGPUs, 0, maxCount)
		if err != nil {
			return nil, err
		}
		n.GPUs = int(g)
		n.Model = string(bytes.TrimSpace(c.field(nodeModel)))
		nodes = append(nodes, n)
	}
}

// OpenOpenbNodes reads the openb node CSV at path; see ReadOpenbNodes.
func OpenOpenbNodes(path string) ([]Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	return ReadOpenbNodes(f, path)
}
