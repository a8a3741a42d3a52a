package engine

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// NoEstimate says why a pending job has no estimated start. Every pending
// job in a View has either an estimated start (Estimate.Start) or one of
// these reasons (see View.Estimates).
type NoEstimate uint8

// Why a pending job has no estimated start.
const (
	// EstimateGiven: the job has an estimated start.
	EstimateGiven NoEstimate = iota
	// NoEstimateQuota: its queue lacks the quota; the running jobs named
	// in Behind must end (or others in its cohort) before it can have it.
	// The timeline plans GPUs, not quota, so it gives no start.
	NoEstimateQuota
	// NoEstimateUnknownEnds: no limits known: the timeline ran out of
	// expected ends before the job fit, and running jobs with neither an
	// estimate nor a runtime limit (named in Behind) hold GPUs (or a
	// reservation ahead has no known length).
	NoEstimateUnknownEnds
	// NoEstimateNeverFits: the job cannot start on this cluster as it is
	// configured: an unsupported or invalid request, no placement even
	// when every running job ends (nodes down or cordoned, say), or a
	// quota it lacks while nothing in its queue or cohort runs.
	NoEstimateNeverFits
	// NoEstimateDepth: not planned this cycle: the reservations went to
	// jobs ahead of it (EASY backfill plans only the first blocked job,
	// conservative up to Config.Backfill.Depth, and without backfill no
	// job is planned).
	NoEstimateDepth
	// NoEstimateWindow: it cannot start within Config.Backfill.Window.
	NoEstimateWindow
	// NoEstimateProbes: planning gave up after Config.Backfill.MaxProbes
	// what-if placements.
	NoEstimateProbes
	// NoEstimateBehind: strict order without backfill: it waits behind
	// the blocked job named in Behind, which has no estimate either.
	NoEstimateBehind
	// NoEstimateBindRetry: the backend refused its bind; it waits for the
	// retry backoff (Engine.BindRetryAt).
	NoEstimateBindRetry
	// NoEstimateFractional: fractional and MIG jobs are not planned on the
	// timeline (it tracks whole GPUs); a MIG reconfiguration may serve it.
	NoEstimateFractional
	// NoEstimateNotEvaluated: the latest cycle did not consider it.
	NoEstimateNotEvaluated
	// NoEstimateHeld: a rule other than GPUs and quota holds it (its
	// PendingStatus.Reason says which); the timeline cannot say when the
	// rule lets it go.
	NoEstimateHeld

	// noEstimateNoRoom is what reserve reports when the timeline ran out:
	// Estimates turns it into NoEstimateUnknownEnds or NoEstimateNeverFits.
	noEstimateNoRoom
)

func (n NoEstimate) String() string {
	switch n {
	case EstimateGiven:
		return "estimated"
	case NoEstimateQuota:
		return "quota"
	case NoEstimateUnknownEnds:
		return "no-limits-known"
	case NoEstimateNeverFits:
		return "never-fits"
	case NoEstimateDepth:
		return "not-planned"
	case NoEstimateWindow:
		return "beyond-window"
	case NoEstimateProbes:
		return "probes-exhausted"
	case NoEstimateBehind:
		return "strict-order"
	case NoEstimateBindRetry:
		return "bind-retry"
	case NoEstimateFractional:
		return "fractional"
	case NoEstimateNotEvaluated:
		return "not-evaluated"
	case NoEstimateHeld:
		return "held"
	}
	return fmt.Sprintf("NoEstimate(%d)", uint8(n))
}

// Estimate is what a View tells of one pending job's start: a time from
// the timeline, or why none can be given.
type Estimate struct {
	Job string
	// Start is the estimated start (zero when Why is not EstimateGiven).
	// Under conservative backfill, with every running job ending by its
	// estimate, the job starts at or before it.
	Start time.Time
	Why   NoEstimate
	// Behind names the jobs it waits for when it has no estimate: running
	// jobs whose ends give its queue the quota back (by expected end,
	// enough to cover what is missing when their ends are known), running
	// jobs with no known end, or the blocked job ahead of it.
	Behind []string
}

func (x Estimate) String() string {
	if x.Why == EstimateGiven {
		return "starts by " + x.Start.Format(time.RFC3339)
	}
	s := "no estimate: " + x.Why.String()
	if len(x.Behind) > 0 {
		s += fmt.Sprintf(" (behind %s)", namesList(x.Behind, 5))
	}
	return s
}

// viewExtra is what a View keeps for Estimates and Explain beyond the
// cycle's statuses: a copy-on-write clone of the bookings (none under
// Config.BareViews) and the backfill settings.
type viewExtra struct {
	snap  *topo.Snapshot
	mode  BackfillMode
	depth int
}

func (e *Engine) viewExtra() viewExtra {
	x := viewExtra{mode: e.cfg.Backfill.Mode, depth: e.cfg.depth()}
	if e.snap != nil && !e.cfg.BareViews {
		x.snap = e.snap.Clone()
	}
	return x
}

// Estimates returns an Estimate for every pending job, in the order of
// Pending. It is computed when called, from the View alone (it
// allocates; the cycle pays nothing for it but a reason code per job).
func (v *View) Estimates() []Estimate {
	out := make([]Estimate, len(v.Pending))
	var run []RunningJob
	for i := range v.Pending {
		out[i] = v.estimate(&v.Pending[i], i, &run)
	}
	return out
}

// Estimate returns the Estimate of one pending job: one of Pending, or
// one after the walk's cut whose status the engine's owner computed
// (Engine.PendingStatuses); false for any other job.
func (v *View) Estimate(job string) (Estimate, bool) {
	p, i, ok := v.status(job)
	if !ok {
		return Estimate{}, false
	}
	var run []RunningJob
	return v.estimate(p, i, &run), true
}

// status finds a job's status: in Pending (i its index), or among those
// computed on demand (i = -1).
func (v *View) status(job string) (p *PendingStatus, i int, ok bool) {
	for i := range v.Pending {
		if v.Pending[i].Job == job {
			return &v.Pending[i], i, true
		}
	}
	for k := range v.more {
		if v.more[k].Job == job {
			return &v.more[k], -1, true
		}
	}
	return nil, 0, false
}

// estimate explains p, v.Pending[i] (i = -1: a status after the walk's
// cut computed on demand, in v.more); *run caches v.Running().
func (v *View) estimate(p *PendingStatus, i int, run *[]RunningJob) Estimate {
	x := Estimate{Job: p.Job}
	if !p.Start.IsZero() {
		x.Start = p.Start
		return x
	}
	running := func() []RunningJob {
		if *run == nil {
			*run = v.Running()
			if *run == nil {
				*run = []RunningJob{}
			}
		}
		return *run
	}
	switch p.Reason {
	case ReasonQuota:
		x.Why = NoEstimateQuota
		x.Behind = v.quotaBehind(p, running())
		if len(x.Behind) == 0 {
			// Nothing in its queue or cohort runs: no end gives quota back.
			x.Why = NoEstimateNeverFits
		}
	case ReasonBlocked:
		x.Why = NoEstimateBehind
		if h := v.headOf(i); h != nil {
			x.Behind = []string{h.Job}
		}
	case ReasonInvalid, ReasonUnsupported:
		x.Why = NoEstimateNeverFits
	case ReasonBindRefused, ReasonHeld, ReasonBinding, ReasonBindingUnknown:
		// Its start depends on the backend's answer (or a release).
		x.Why = NoEstimateBindRetry
	case ReasonReconfiguring:
		x.Why = NoEstimateFractional
	case ReasonNone:
		x.Why = NoEstimateNotEvaluated
	case ReasonCapacity, ReasonReservedGPUs, ReasonReserved, ReasonPreempting:
		x.Why = p.plan
		switch {
		case x.Why == EstimateGiven:
			// A capacity-blocked job whose reservation was dropped for a
			// preemptor ahead of it: planned again next cycle.
			x.Why = NoEstimateDepth
		case x.Why == noEstimateNoRoom:
			x.Why = NoEstimateNeverFits
			for _, r := range running() {
				if r.ExpectedEnd.IsZero() {
					x.Behind = append(x.Behind, r.Job)
				}
			}
			if len(x.Behind) > 0 || v.unboundedAhead(i) {
				x.Why = NoEstimateUnknownEnds
			}
		}
	default:
		// A reason this file does not know (a site rule holds the job,
		// say): the timeline cannot say when that ends.
		x.Why = NoEstimateHeld
	}
	return x
}

// headOf is the blocked job that job i waits behind under strict order
// (the first job before it not itself waiting behind another), or nil.
// For a job after the walk's cut (i = -1) it is the first of the cycle's
// own statuses or, when none is, of those computed on demand after the
// cut (the engine computes the jobs after the cut in order up to the
// first blocked one before any later one: Engine.tailStatus).
func (v *View) headOf(i int) *PendingStatus {
	ps, after := v.Pending, i < 0
	if after {
		ps, i = v.cyc, len(v.cyc)
	}
	for k := 0; k < i; k++ {
		switch ps[k].Reason {
		case ReasonCapacity, ReasonReservedGPUs, ReasonReserved:
			return &ps[k]
		}
	}
	if after {
		for k := range v.more {
			switch v.more[k].Reason {
			case ReasonCapacity, ReasonReservedGPUs, ReasonReserved:
				return &v.more[k]
			}
		}
	}
	return nil
}

// unboundedAhead reports whether another pending job holds a reservation
// while it has no estimate or limit (the timeline cannot plan past a
// reservation of unknown length). Usually a job ahead of i; a job behind
// it too, since a job that waited for quota is planned around the
// reservations of the jobs behind it (Engine.yieldTo).
func (v *View) unboundedAhead(i int) bool {
	for k := range v.Pending {
		if k == i {
			continue
		}
		p := &v.Pending[k]
		if p.Start.IsZero() || p.js == nil {
			continue
		}
		if _, bounded := duration(p.js.j); !bounded {
			return true
		}
	}
	return false
}

// quotaBehind names the running jobs whose ends give the queue of p the
// quota it lacks: the queue's own jobs, then the rest of its cohort's, by
// expected end (unknown ends last), until their GPUs cover the shortfall
// (all of them when the resource is not GPUs or ends are unknown).
func (v *View) quotaBehind(p *PendingStatus, run []RunningJob) []string {
	cohort := map[string]bool{p.Queue: true}
	if v.queues != nil {
		if qs, ok := v.queues.Queue(p.Queue); ok && qs.Cohort != "" {
			for _, o := range v.queues.Queues() {
				if o.Cohort == qs.Cohort {
					cohort[o.Name] = true
				}
			}
		}
	}
	var own, others []RunningJob
	for _, r := range run {
		switch {
		case r.Stopping && r.Deadline.IsZero():
		case r.Queue == p.Queue:
			own = append(own, r)
		case cohort[r.Queue]:
			others = append(others, r)
		}
	}
	byEnd := func(a, b RunningJob) int {
		switch {
		case a.ExpectedEnd.IsZero() != b.ExpectedEnd.IsZero():
			if a.ExpectedEnd.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(a.ExpectedEnd.Compare(b.ExpectedEnd), cmp.Compare(a.Job, b.Job))
	}
	slices.SortFunc(own, byEnd)
	slices.SortFunc(others, byEnd)
	short := int64(p.Quota.Need - p.Quota.Available)
	gpus := p.Quota.Resource == queue.GPUMilli
	var names []string
	var freed int64
	for _, r := range append(own, others...) {
		if gpus && freed >= short {
			break
		}
		names = append(names, r.Job)
		freed += int64(r.GPUs)*1000 + int64(r.Shared)*1000
	}
	return names
}

// namesList joins up to n names, then says how many more.
func namesList(names []string, n int) string {
	s := ""
	for i, x := range names {
		if i == n {
			return s + fmt.Sprintf(" and %d more", len(names)-n)
		}
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}
