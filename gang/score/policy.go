package score

import (
	"github.com/berthsched/berth/topo"
)

// MaxScore is the highest score of the published policies (kube-scheduler's
// MaxNodeScore). Policies of this package score in [0, MaxScore], except
// Berth, whose scores are wider keys (any int64 order is allowed).
const MaxScore = 100

// Policy ranks the feasible nodes of one request, like a kube-scheduler
// score plugin together with its PreScore and NormalizeScore, and chooses
// the GPU of a share request (its Reserve step).
//
// Policies are deterministic functions of the State and the request,
// except Random, which draws from the stream it was given. A Policy may
// keep caches and belongs, like the State, to one goroutine.
type Policy interface {
	// Name is the policy's lower-case name (random, dotprod, clustering,
	// packing, bestfit, fgd, berth).
	Name() string
	// Score writes the score of feasible[i] into scores[i]. feasible holds
	// at least two nodes, each of which fits r, in ascending ID order;
	// len(scores) == len(feasible), all 0 on entry. The highest score wins; ties go to the
	// node of lowest rank (Scheduler.Rank).
	Score(s *State, r Request, feasible []topo.NodeID, scores []int64)
	// ShareGPU returns the local index of the GPU of node n that takes
	// share request r (r.Shared(); r fits n). It is called whether or not
	// Score ran (a single feasible node is taken without scoring).
	ShareGPU(s *State, r Request, n topo.NodeID) int
}

// Scheduler runs the scheduling cycle of docs/fgd.md (Scheduling one pod) for one request
// at a time: filter every node; fail when none fits; take the only one
// without scoring; else score the feasible nodes and take the highest
// score, a tie going to the lowest rank; then choose GPUs (§4: whole GPUs
// and multi-GPU requests the lowest-index GPUs that have room, a share the
// policy's ShareGPU) and bind.
//
// A Scheduler keeps scratch buffers and belongs to one goroutine.
type Scheduler struct {
	State  *State
	Policy Policy
	// Rank is the tie-break rank of each node (a permutation of the node
	// IDs, or any distinct values); nil means the node ID, so ties go to
	// the lowest ID.
	Rank []int32

	feasible []topo.NodeID
	scores   []int64
}

// Decision is the outcome of one cycle.
type Decision struct {
	// Placed says whether the request was placed (and bound, by Schedule).
	Placed bool
	// Feasible is the number of nodes that passed the filter.
	Feasible  int
	Placement Placement
}

// Place chooses where r goes without booking it. A request that fits
// nowhere gives Decision{Placed: false}; only an invalid request is an
// error.
func (sc *Scheduler) Place(r Request) (Decision, error) {
	if err := r.Validate(); err != nil {
		return Decision{}, err
	}
	s := sc.State
	sc.feasible = s.appendFeasible(sc.feasible[:0], r)
	d := Decision{Feasible: len(sc.feasible)}
	switch len(sc.feasible) {
	case 0:
		return d, nil
	case 1:
		d.Placement.Node = sc.feasible[0]
	default:
		if cap(sc.scores) < len(sc.feasible) {
			sc.scores = make([]int64, len(sc.feasible), 2*len(sc.feasible))
		}
		sc.scores = sc.scores[:len(sc.feasible)]
		clear(sc.scores)
		sc.Policy.Score(s, r, sc.feasible, sc.scores)
		best := 0
		for i := 1; i < len(sc.feasible); i++ {
			if sc.scores[i] > sc.scores[best] ||
				(sc.scores[i] == sc.scores[best] && sc.rank(sc.feasible[i]) < sc.rank(sc.feasible[best])) {
				best = i
			}
		}
		d.Placement.Node = sc.feasible[best]
	}
	switch {
	case r.Shared():
		d.Placement.GPUs = []int{sc.Policy.ShareGPU(s, r, d.Placement.Node)}
	case r.UsesGPU():
		d.Placement.GPUs = s.DefaultGPUs(d.Placement.Node, r)
	}
	d.Placed = true
	return d, nil
}

func (sc *Scheduler) rank(n topo.NodeID) int32 {
	if sc.Rank == nil {
		return int32(n)
	}
	return sc.Rank[n]
}

// Schedule is Place followed by State.Bind of the chosen placement.
func (sc *Scheduler) Schedule(r Request) (Decision, *Binding, error) {
	d, err := sc.Place(r)
	if err != nil || !d.Placed {
		return d, nil, err
	}
	b, err := sc.State.Bind(d.Placement, r)
	if err != nil {
		return Decision{Feasible: d.Feasible}, nil, err
	}
	return d, b, nil
}
