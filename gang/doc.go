// Package gang places one job, a gang of members, on a topology snapshot:
// all members or none.
//
// A Request has one or more groups (members x GPUs per member, GPU model,
// node selector, host CPU and memory) and a topology constraint with a
// required level and a preferred level at the same time: "inside one block,
// on the fewest racks". Place answers with per-member nodes and exact GPU
// indices, or with a Reason in numbers ("at most 23 of 32 members fit in any
// block").
//
// # How it is fast
//
// Place reads the per-domain counters of the topo.Snapshot: for each domain
// of the required level, the member capacity of each preferred domain inside
// it is sum_k h[k]*floor(k/s) over the domain's free-GPU histogram. The
// fewest preferred domains that hold the gang are taken greedily from the
// largest, which is exact for one group; picks are then swapped for smaller
// domains while the sum still suffices (tightest fit). The levels around the
// preferred one are minimised by a small knapsack over the domains of the
// level that splits (blocks, say), run only when cheap bounds leave it
// open (a Lagrangian bound, dualBelow, rules out most of what it would;
// a cheap witness of an answer skips that bound and limits the knapsack's
// candidates).
// With several domains of the required level, each one's fewest preferred
// domains is counted first, and only the domains whose least possible key
// can still win are searched further. Only then are nodes visited, and
// only the nodes of the chosen domains. The cost grows with the
// number of domains read and the nodes of the chosen domains, not with the
// GPUs of the cluster. Members of groups with selectors or host resources
// take a slower path that scans nodes of candidate domains.
//
// # Policy
//
// See Place. In short: one required domain; fewest preferred domains (the
// finest level above nodes when no preferred level is given); then the
// fewest domains at every coarser level (the racks of a gang in as few
// blocks as they can be) and at every finer level (compact.go), for a
// gang of several groups too (see "Several groups"); the
// tightest fit so big free domains stay whole; members pack onto the nodes
// with the fewest free GPUs that hold them, each inside one NVLink island
// when one holds it, else over the fewest; lower indices win ties, so the
// same input always gives the same answer.
//
// # GPU models
//
// A group may accept one GPU model (Group.GPUModel) or a set of them
// (Group.GPUModels: Kubernetes node affinity "In" over the GPU product
// label, SLURM --constraint="a|b", openb's gpu_spec "A|B"). A set of one
// model places exactly as GPUModel; models the cluster lacks are never
// matched, and a set none of whose models the cluster has is
// NoMatchingNodes.
//
// By default the model is chosen per member: a member may land on any
// node of a model in the set, so one gang may span models. That is what
// both backends' request forms mean (a Kubernetes pod's affinity is its
// own; SLURM's "a|b" is per node), it never places less than any one
// model of the set would, and it keeps the counters' fast path: a
// domain's capacity for a set is the sum of its capacities per model
// (each node has one model), and the domain memo keys on the set.
// Group.SameModel asks instead that all members of the group share one
// model (SLURM's "[a|b]", a job whose processes must match): the models
// are tried in the order listed, each as a set of one, and the first
// that places the whole group wins; a failure reports the model that
// came closest. Scorers see the set: FGD's and Berth's target shapes name
// sets (ModelSet, "A|B"), so a shape fits the nodes of any of its models.
// Reasons name the set ("no ready node with a GPU in {A100-40GB,
// A100-80GB} ...").
//
// # Several groups
//
// A gang of several groups (a launcher and its workers, members of
// different sizes) is compacted as one: its domains are chosen for a
// relaxed gang of one group, whose members are the greatest common
// divisor of the groups' GPUs per member and as many as the gang's GPUs
// make (on the nodes every group accepts when they accept the same), by
// the single-group search above; then every group is packed onto the
// nodes of those domains, largest members first. A set of domains that
// holds the gang holds the relaxed gang, so when the packing succeeds no
// placement has smaller spreads. When it fails, the relaxed gang asking
// for a few largest members more, the gang rounded up to whole largest
// members, and, for each size of member, the members at least that large
// in units of that size are tried, and the least spreads that pack win;
// failing those, preferred domains are added, the most free GPUs first,
// until the gang packs. Compared with every set of racks by brute force
// (TestDifferentialBruteForceTwoGroups), the spreads are the least in
// 800 of 803 two-group gangs, and whether a gang fits is never wrong
// when its groups accept the same nodes.
//
// # Scoring nodes
//
// Node choice inside the chosen domains is an extension point, in the
// spirit of the kube-scheduler's Score plugins: a Scorer ranks the nodes
// that can hold a member, and a Placer with Placer.Scorer set takes them
// from the highest score down (ties to Placer.Ties, else the lower node
// ID) instead of packing. Domain choice, the filter (which nodes hold a
// member at all) and the all-or-nothing rule do not change: a scorer
// changes where a gang goes, never whether it fits. A scorer may also
// choose the GPU of a fractional member (ShareChooser). Scorers read what
// a topo.Snapshot holds (NodeGPUMilli: free thousandths per GPU, shared
// GPUs and MIG included; free host CPU and memory; the GPU model), so a
// placement tried on a clone is scored as the clone stands.
//
// The package ships the node scorers of the FGD paper ("Beware of
// Fragmentation", USENIX ATC'23), with the artifact's arithmetic: Random,
// DotProd, GpuClustering, GpuPacking, BestFit and FGD (fragmentation
// gradient descent against a Target workload, NewTarget); and Berth,
// berth's own fragmentation-aware scorer (the best allocation measured on
// the openb experiment, see docs/fgd.md). Kueue is a baseline for
// replays: the greedy topology-aware placement of Kueue, not a node score
// (docs/price.md). ScorerSpec names one as plain
// data (it round-trips through JSON; engine.Config.Scorer is one) and
// NewScorer builds it:
//
//	sc, err := gang.NewScorer(gang.ScorerSpec{Name: "berth", Target: gang.NewTarget(workload, 0.95).Shapes})
//	p := gang.Placer{Scorer: sc}
//	res, err := p.Place(snap, &req)
//
// Without a scorer nothing changes: Place packs as described under Policy.
// A multi-group gang (a launcher and its workers) is scored group by
// group, largest members first, each on the nodes of the chosen domains
// that the groups before it left room on; where a scored choice leaves a
// later group without room, the gang is packed as without a scorer.
//
// # Apply and undo
//
// A Result is computed without changing the snapshot. Result.Apply books
// it (all or nothing) and Result.Undo releases it, so callers can try a
// placement on a clone, or on the live snapshot, and roll back.
//
// # Concurrency
//
// Place is safe for concurrent use on distinct snapshots. A Placer holds
// scratch buffers and belongs to one goroutine, and so does a Scorer with
// state (FGD and Berth cache per node, Random draws from its stream,
// GpuClustering counts the kinds it is told about); DotProd, GpuPacking and
// BestFit are stateless values.
package gang
