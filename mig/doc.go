// Package mig models MIG (Multi-Instance GPU) geometry, fractional and
// shared GPUs, and the planning of MIG reconfiguration for pending work.
//
// # What is here
//
//   - Geometry (geometry.go, geometry_data.go): the GPU-instance profiles of
//     A100-40GB, A100-80GB, H100-80GB, H200-141GB, B200-180GB and A30-24GB:
//     compute and memory slices, nominal memory, maxCount, the listed
//     placements (in memory slices), whether switching MIG mode needs a
//     reset. The tables are transcribed from the project's MIG reference
//     data and a test keeps them equal to it (docs/traces.md); the package itself does no I/O.
//   - Layout (layout.go): the instances placed on one GPU, an 8-byte value
//     over a fixed-width bitset of memory slices. Every Layout built here is
//     valid (listed placements, disjoint memory slices, maxCount, so at most
//     one +me). Model.Layouts enumerates them all: 2,319 on an 8-slice GPU
//     (127 distinct non-empty profile multisets), 84 on A30.
//     Layout.Alloc places one instance where it blocks the least.
//   - Request resolution (request.go): a profile by name ("1g.10gb", or
//     "1g" for the smallest 1g) or a fraction (Milli, openb's gpu_milli,
//     and/or MemoryMiB), resolved per model to the smallest profile that
//     holds it.
//   - Sharing (share.go): time-slicing (replicas) and MPS (thread
//     percentage, pinned memory, client limit) as shares with exact
//     accounting.
//   - Pool (pool.go, alloc.go, index.go): N GPUs with dense indices, each
//     with a model, MIG mode, layout, in-use instances and sharing mode (32
//     bytes per GPU). It grants an instance or a share for a Request on one
//     GPU, on a range (a node) or on the tightest GPU of a roaring set, and
//     takes grants back; errors, never corruption, on double release or
//     over-allocation.
//   - Planner (plan.go): Pool.Plan chooses new layouts for idle capacity
//     against the pending demand; Pool.Apply carries a plan out. In-use
//     instances never move; the plan says per GPU what to destroy and
//     create, whether MIG mode must be switched (and a reset is needed),
//     and what it all costs.
//
// # Concurrency
//
// Models, Profiles, Layouts and the geometry are immutable values, safe to
// share. Derived tables are built once on first use under sync.Once. A Pool
// is single-owner: not safe for concurrent use; Clone gives an independent
// copy for what-if work. Nothing here starts goroutines, reads the clock or
// uses global randomness; every choice breaks ties on indices, so the same
// inputs give the same answers.
//
// # Usage
//
//	h100, _ := mig.LookupModel("H100-80GB")
//	pool := mig.NewPool(16)
//	for g := range uint32(16) {
//		_ = pool.Configure(g, mig.GPUConfig{Model: h100, MIG: true})
//	}
//	grant, err := pool.AllocateIn(nil, mig.Request{Milli: 120}, mig.MayCreate)
//	// grant.Instance is a 1g.10gb; grant.Created says it must be created.
//	_ = pool.Release(grant)
//
//	plan, _ := pool.Plan([]mig.Demand{{Request: mig.Request{Profile: "3g"}, Count: 4}}, mig.PlanOptions{})
//	// weigh plan.Cost against waiting, actuate plan.Changes, then:
//	_ = pool.Apply(plan)
//
// # Not modelled
//
// Compute instances inside a GPU instance (one CI per GI is assumed),
// sharing a MIG instance by time-slicing, real (not nominal) instance
// memory, and driver-version gates (1g.10gb on A100-40GB, 4g+3g before
// R510).
package mig
