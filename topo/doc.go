// Package topo is berth's cluster model: the GPU index space, the topology
// tree and the allocatable state that placement reads.
//
// A Cluster is built once from a declarative Spec (levels coarsest first,
// nodes with their domain at each level, GPU count and model, labels, host
// resources) and is immutable. Nodes are numbered in topology order and GPU
// indices are dense and contiguous per node, so every domain at every level
// is one contiguous range of nodes and of GPUs; its GPU set is a roaring
// bitmap of one run (Cluster.DomainGPUs).
//
// A Snapshot is the changing part: which GPUs are booked, node states
// (ready, cordoned, draining, down) and host CPU / memory. For every
// domain of every level it keeps, incrementally, the free GPU count, the
// number of whole free nodes and a histogram h[k] of nodes with exactly k
// free GPUs (per GPU model in heterogeneous clusters). "How many members of
// s GPUs fit in this rack" is then sum_k h[k]*floor(k/s): an array read
// instead of a scan. Allocate and Release are all or nothing and return an
// error, never corrupt state, on double booking or unknown GPUs.
//
// Snapshot.Clone is copy-on-write over pages of 64 nodes and 64 domains:
// taking one costs a few pointer copies, and writing a page copies only
// that page, so what-if placement (reservations, preemption, backfill) can
// clone freely.
//
// # Concurrency
//
// A Cluster is safe for concurrent use. A Snapshot belongs to one goroutine
// at a time; distinct clones may be used by distinct goroutines.
//
// # Usage
//
//	c, err := topo.New(spec)
//	s := c.NewSnapshot()
//	err = s.Allocate([]uint32{0, 1, 2, 3})
//	rack, _ := c.Level("rack")
//	free := s.DomainFree(rack, 0)
package topo
