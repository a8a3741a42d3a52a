package workload

import (
	"strconv"
	"time"
)

// Job is one job (or pod) of a workload, as read from a trace or generated.
// It is a plain record: the replay converts it into engine jobs.
//
// GPU demand is described by three fields, because the openb trace asks for
// fractions of a GPU:
//
//   - NumGPU is the number of GPU devices the job touches (openb num_gpu;
//     for ITP, SWF and synthetic jobs the GPU or processor count).
//   - GPUMilli is the share of each of those devices, in thousandths:
//     1000 for whole GPUs; below 1000 for an openb share pod; 0 for no GPU
//     demand at all (a CPU-only pod, or an openb gpu_milli that clamps to 0).
//   - GPUs is the number of whole GPUs: NumGPU when GPUMilli is 1000, else 0.
//     A share pod therefore has GPUs == 0, NumGPU == 1 and GPUMilli < 1000.
//
// No trace used here records gang structure (members x GPUs per member), so
// a job's GPUs are a single group; the replay chooses how to split it over
// nodes.
type Job struct {
	ID       string        // trace job id (SWF job number, ITP UUID, openb pod name, or generated)
	Line     int           // 1-based source line; 0 for generated jobs
	Submit   time.Duration // submit time as an offset from the start of the trace
	Runtime  time.Duration // actual run time; 0 for openb pods that never ran
	Estimate time.Duration // requested time (runtime estimate); 0 when unknown

	GPUs     int // whole GPUs (see the type comment)
	NumGPU   int // GPU devices touched
	GPUMilli int // share of each device, 0..1000

	CPUMilli  int64    // CPU request in milli-CPUs; 0 when unknown
	MemoryMiB int64    // memory request in MiB; 0 when unknown
	GPUModels []string // allowed GPU models; nil means any. Shared between jobs: read only

	User  string // SWF user ("u12"); "" when unknown
	Group string // SWF group ("g1"); "" when unknown
	Queue string // SWF queue ("q1") or synthetic queue name; "" when unknown
	QoS   string // openb qos (LS, BE, Burstable, Guaranteed); "" elsewhere
}

// Shared reports whether the job asks for a fraction of one GPU (an openb
// share pod).
func (j *Job) Shared() bool { return j.NumGPU > 0 && j.GPUMilli > 0 && j.GPUMilli < 1000 }

// DemandMilli is the job's total GPU demand in thousandths of a GPU:
// NumGPU x GPUMilli (8 whole GPUs = 8000, a share pod of 460 = 460).
func (j *Job) DemandMilli() int64 { return int64(j.NumGPU) * int64(j.GPUMilli) }

// Node is one node of the openb node list.
type Node struct {
	Name      string // sn
	Line      int    // 1-based source line
	CPUMilli  int64  // CPU capacity in milli-CPUs
	MemoryMiB int64  // memory capacity in MiB
	GPUs      int    // whole GPUs on the node
	Model     string // GPU model (G2, T4, V100M16, ...); "" when the node has none
}

// Dropped is a job that a loader read but left out of Trace.Jobs because it
// cannot be replayed (see each loader for the rules).
type Dropped struct {
	Line   int    // 1-based source line
	ID     string // the job's id as written
	Reason string // why it was left out
}

// Trace is the result of loading a job trace. Jobs keep the file's order.
type Trace struct {
	Name    string    // the name given to the reader
	Jobs    []Job     // the jobs that can be replayed
	Dropped []Dropped // the jobs left out, in file order
	// Header holds the SWF header lines of the form "; Key: value" (the
	// first value of each key, trimmed). Nil for CSV traces.
	Header map[string]string
	// Nodes is the node list of traces that bring their cluster (openb
	// through Open); nil otherwise.
	Nodes []Node
	// Warnings report what may be wrong with the file as a whole: a last
	// line without a newline (the file may have been cut mid-number, so
	// its last job may be wrong).
	Warnings []string
}

// HeaderInt returns an integer SWF header field such as "MaxProcs".
func (t *Trace) HeaderInt(key string) (int, bool) {
	v, ok := t.Header[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, false
	}
	return n, true
}
