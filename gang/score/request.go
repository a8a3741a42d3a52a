package score

import (
	"errors"
	"fmt"
)

// Errors. They come wrapped with details; match them with errors.Is.
var (
	// ErrBadRequest: a Request is malformed (negative amounts, milli
	// outside 0..1000).
	ErrBadRequest = errors.New("score: invalid request")
	// ErrUnknownNode: a node ID outside the cluster.
	ErrUnknownNode = errors.New("score: unknown node")
	// ErrNoFit: the request does not fit where it was asked to go.
	ErrNoFit = errors.New("score: request does not fit")
	// ErrNotBound: a Binding released twice, or not made by this State.
	ErrNotBound = errors.New("score: binding not held")
	// ErrBadCluster: the cluster cannot be accounted (a node with more
	// GPUs than a per-node mask holds).
	ErrBadCluster = errors.New("score: cluster not supported")
	// ErrInconsistent: Check found the mirror and the booked state apart.
	ErrInconsistent = errors.New("score: accounting inconsistent")
)

// FullMilli is one whole GPU in thousandths.
const FullMilli = 1000

// Request is one single-member placement request: GPUs devices of Milli
// thousandths each, plus host CPU and memory. It is the pod of the openb
// trace (docs/fgd.md, Procedure step 1).
//
//   - CPU-only: GPUs == 0 or Milli == 0 (no GPU condition at all).
//   - Share: GPUs == 1 and 0 < Milli < 1000 (a fraction of one GPU).
//   - Whole: Milli == 1000 (GPUs completely free GPUs).
//
// A request of several GPUs with Milli < 1000 takes Milli on each of the
// first GPUs, in index order, that have room (the greedy in-order
// assignment of the original).
type Request struct {
	GPUs      int   // k: GPU devices touched
	Milli     int   // u: thousandths of each device, 0..1000
	CPUMilli  int64 // c
	MemoryMiB int64 // m: constrains feasibility only
	// Models are the allowed GPU models; nil or empty means any. Read
	// only; shared between requests is fine.
	Models []string
}

// Validate checks the ranges.
func (r Request) Validate() error {
	switch {
	case r.GPUs < 0:
		return fmt.Errorf("%w: GPUs %d < 0", ErrBadRequest, r.GPUs)
	case r.Milli < 0 || r.Milli > FullMilli:
		return fmt.Errorf("%w: Milli %d outside 0..1000", ErrBadRequest, r.Milli)
	case r.CPUMilli < 0:
		return fmt.Errorf("%w: CPUMilli %d < 0", ErrBadRequest, r.CPUMilli)
	case r.MemoryMiB < 0:
		return fmt.Errorf("%w: MemoryMiB %d < 0", ErrBadRequest, r.MemoryMiB)
	}
	return nil
}

// UsesGPU reports whether the request asks for any GPU.
func (r Request) UsesGPU() bool { return r.GPUs > 0 && r.Milli > 0 }

// Shared reports a share request: a fraction of one GPU.
func (r Request) Shared() bool { return r.GPUs == 1 && r.Milli > 0 && r.Milli < FullMilli }

// Demand is the GPU demand in thousandths, GPUs x Milli (D_p).
func (r Request) Demand() int64 {
	if !r.UsesGPU() {
		return 0
	}
	return int64(r.GPUs) * int64(r.Milli)
}

// Kind classifies GPU requests the way GpuClustering tags pods: KindShared
// for a fraction of a GPU, Kind(k) for k whole GPUs.
type Kind int

// KindShared is the kind of requests with Milli < 1000.
const KindShared Kind = 0

// Kind returns the request's kind; ok is false for CPU-only requests.
func (r Request) Kind() (k Kind, ok bool) {
	switch {
	case !r.UsesGPU():
		return 0, false
	case r.Milli < FullMilli:
		return KindShared, true
	}
	return Kind(r.GPUs), true
}

func (r Request) modelOK(model string) bool {
	if len(r.Models) == 0 {
		return true
	}
	for _, m := range r.Models {
		if m == model {
			return true
		}
	}
	return false
}
