package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// SiteConfig holds the rules a site runs every day (see
// docs/site-features.md): partitions, per-user and per-account limits, and
// what becomes of a job whose dependency can never be met. The zero value
// turns them all off, and the engine then pays nothing for them.
type SiteConfig struct {
	// Partitions are named sets of nodes with their own limits and access
	// lists. A job names the partitions it may run in
	// (queue.Job.Partitions); its placement stays inside one of them.
	Partitions []Partition
	// Limits bound what one user or account may run at once.
	Limits Limits
	// NeverMet says what becomes of a job whose dependency can never be
	// met (the job depended on failed, for afterok). Zero:
	// CancelNeverMet.
	NeverMet NeverMetPolicy
}

// Partition is a named set of nodes (SLURM's partition). A node is in it
// when it is named in Nodes, or carries every label of Selector, or lies
// in one of Domains; a node may be in several partitions.
type Partition struct {
	Name string
	// Default: jobs that name no partition go to this one (at most one
	// partition is the default). With no default, such jobs may run on
	// any node.
	Default  bool
	Nodes    []string
	Selector map[string]string
	Domains  []DomainRef
	// Limits checked at submission; zero: none.
	MaxGPUsPerJob int
	MaxRuntime    time.Duration // a job's RuntimeLimit may not exceed it
	// DefaultRuntime is the RuntimeLimit given to a job that has none
	// (else MaxRuntime, when set).
	DefaultRuntime time.Duration
	// MaxNodes bounds a job's members (each member runs on one node).
	MaxNodes int
	// PriorityTier orders the partitions a job names: higher tiers are
	// tried first.
	PriorityTier int
	// PreemptMode: PreemptInherit (jobs keep their Preemptible flag) or
	// PreemptOff (jobs running in the partition are never preempted).
	PreemptMode PreemptMode
	// AllowAccounts and AllowQueues: when not empty, only jobs of these
	// accounts (queue.Job.AccountName) and queues may submit.
	AllowAccounts []string
	AllowQueues   []string
}

// DomainRef names a topology domain: the node's domain at Level
// (topo.NodeSpec.Domains) is Name.
type DomainRef struct {
	Level string
	Name  string
}

// PreemptMode is a partition's preemption mode.
type PreemptMode uint8

// Preemption modes.
const (
	// PreemptInherit: a job's own Preemptible flag decides.
	PreemptInherit PreemptMode = iota
	// PreemptOff: jobs running in the partition are never preempted.
	PreemptOff
)

// Limits are per-user and per-account limits in the spirit of SLURM's QOS
// (MaxJobsPerUser, MaxTRESPerUser=gres/gpu, GrpTRES=gres/gpu). A job that
// would pass one waits (ReasonLimit, PendingStatus.Limit names it). Zero:
// no limit. GPUs are the whole GPUs a job asks for.
type Limits struct {
	MaxJobsPerUser int
	MaxGPUsPerUser int
	// MaxGPUsPerAccount bounds the GPUs the running jobs of each account
	// hold; Accounts overrides it for the accounts it names.
	MaxGPUsPerAccount int
	Accounts          map[string]int
}

// NeverMetPolicy says what becomes of a job whose dependency can never be
// met.
type NeverMetPolicy uint8

// Policies for dependencies that can never be met.
const (
	// CancelNeverMet ends the job; Ready.Failed reports it with the
	// dependency (SLURM's kill_invalid_depend).
	CancelNeverMet NeverMetPolicy = iota
	// HoldNeverMet keeps it pending (ReasonDependencyNeverMet) until it is
	// cancelled.
	HoldNeverMet
)

// Errors of the site rules.
var (
	// ErrPartition: a submission the partitions refuse; the error is a
	// *PartitionError naming the partition and the rule.
	ErrPartition = errors.New("engine: refused by partition")
	// ErrDependency: a submission whose dependency names no job the engine
	// tracks (or the job itself).
	ErrDependency = errors.New("engine: invalid dependency")
)

// PartitionError is a submission refused by a partition.
type PartitionError struct {
	Job       string
	Partition string
	// Rule: "unknown", "access-account", "access-queue",
	// "max-gpus-per-job", "max-runtime" or "max-nodes".
	Rule string
	Msg  string
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("%v: job %q: partition %q: %s: %s", ErrPartition, e.Job, e.Partition, e.Rule, e.Msg)
}

// Unwrap gives ErrPartition to errors.Is.
func (e *PartitionError) Unwrap() error { return ErrPartition }

// Validate checks the site config (Config.Validate calls it); errors wrap
// ErrInvalidConfig.
func (c *SiteConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: Site: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	seen := map[string]bool{}
	defaults := 0
	for i, p := range c.Partitions {
		switch {
		case p.Name == "":
			return bad("Partitions[%d]: empty name", i)
		case seen[p.Name]:
			return bad("Partitions[%d]: duplicate name %q", i, p.Name)
		case len(p.Nodes) == 0 && len(p.Selector) == 0 && len(p.Domains) == 0:
			return bad("partition %q has no Nodes, Selector or Domains", p.Name)
		case p.MaxGPUsPerJob < 0 || p.MaxNodes < 0 || p.MaxRuntime < 0 || p.DefaultRuntime < 0:
			return bad("partition %q: negative limit", p.Name)
		case p.MaxRuntime > 0 && p.DefaultRuntime > p.MaxRuntime:
			return bad("partition %q: DefaultRuntime %v is over MaxRuntime %v", p.Name, p.DefaultRuntime, p.MaxRuntime)
		case p.PreemptMode > PreemptOff:
			return bad("partition %q: unknown PreemptMode %d", p.Name, p.PreemptMode)
		}
		for _, d := range p.Domains {
			if d.Level == "" || d.Name == "" {
				return bad("partition %q: domain needs a Level and a Name", p.Name)
			}
		}
		seen[p.Name] = true
		if p.Default {
			defaults++
		}
	}
	if defaults > 1 {
		return bad("%d default partitions, at most one", defaults)
	}
	l := c.Limits
	if l.MaxJobsPerUser < 0 || l.MaxGPUsPerUser < 0 || l.MaxGPUsPerAccount < 0 {
		return bad("Limits: negative limit")
	}
	for a, n := range l.Accounts {
		if a == "" || n < 0 {
			return bad("Limits.Accounts: bad entry %q: %d", a, n)
		}
	}
	if c.NeverMet > HoldNeverMet {
		return bad("NeverMet: unknown policy %d", c.NeverMet)
	}
	return nil
}

func (c *SiteConfig) isZero() bool {
	return len(c.Partitions) == 0 && c.Limits.MaxJobsPerUser == 0 && c.Limits.MaxGPUsPerUser == 0 &&
		c.Limits.MaxGPUsPerAccount == 0 && len(c.Limits.Accounts) == 0
}

// outcome is how a job ended, for dependencies.
type outcome uint8

const (
	endFailed outcome = iota // zero: a job the engine ended (failed node)
	endOK
	endCancelled
)

// siteState is the engine's state for the site rules; nil until one is
// used (config, an array, a dependency, an advance reservation).
type siteState struct {
	cfg     *SiteConfig
	parts   []Partition // sorted by tier (highest first), then config order
	partIdx map[string]int
	deflt   int // index in parts of the default partition; -1: none
	limits  bool

	users    map[string]*usage
	accounts map[string]*usage
	singles  map[string]int // running jobs by singleton key

	arrays     map[string]*jobArray
	dependents map[string][]string // job -> jobs that depend on it
	ending     outcome             // set by finish/cancel for forget's hook

	adv map[string]*advRes
	// lastHolds is the last cycle's Ready.Holds (a copy): a resumed cycle
	// keeps those of the walk it resumes.
	lastHolds map[string]string
}

type usage struct{ jobs, gpus int }

// siteJob is a job's facts under the site rules.
type siteJob struct {
	parts []int          // partitions it may run in, by tier
	reqs  []gang.Request // its request restricted to each of parts
	// shapes are the failure memo's shape IDs of reqs (0: not memoized).
	shapes []uint64
	cur    int // index in parts of the one it is placed in / tried
	array  *jobArray
	deps   []depState
	key    string // singleton key (User/Name) when it has a singleton dependency
	// counted: usage charged at activate (undone at deactivate).
	counted    bool
	countedGPU int
}

// partitionLabel is the label the engine gives the nodes of a partition.
func partitionLabel(name string) string { return "partition.berth.dev/" + name }

func (e *Engine) siteInit() {
	if e.site != nil {
		return
	}
	st := &siteState{cfg: &e.cfg.Site, partIdx: map[string]int{}, deflt: -1}
	st.parts = slices.Clone(e.cfg.Site.Partitions)
	slices.SortStableFunc(st.parts, func(a, b Partition) int { return b.PriorityTier - a.PriorityTier })
	for i, p := range st.parts {
		st.partIdx[p.Name] = i
		if p.Default {
			st.deflt = i
		}
	}
	l := e.cfg.Site.Limits
	st.limits = l.MaxJobsPerUser > 0 || l.MaxGPUsPerUser > 0 || l.MaxGPUsPerAccount > 0 || len(l.Accounts) > 0
	e.site = st
}

// siteOf is js's site facts, created on first use.
func (e *Engine) siteOf(js *job) *siteJob {
	if js.site == nil {
		js.site = &siteJob{}
	}
	return js.site
}

// siteCheck checks a submission against the partitions and its
// dependencies; on success it gives the job its partition's default
// runtime limit when it has none. Nothing else changes.
func (e *Engine) siteCheck(j *queue.Job) error {
	if e.site == nil && len(j.Dependencies) == 0 && len(j.Partitions) == 0 {
		return nil
	}
	e.siteInit()
	parts, err := e.checkPartitions(j)
	if err != nil {
		return err
	}
	if err := e.checkDeps(j); err != nil {
		return err
	}
	if j.RuntimeLimit == 0 && len(parts) > 0 {
		p := &e.site.parts[parts[0]]
		if p.DefaultRuntime > 0 {
			j.RuntimeLimit = p.DefaultRuntime
		} else if p.MaxRuntime > 0 {
			j.RuntimeLimit = p.MaxRuntime
		}
	}
	return nil
}

// siteAttach gives a job just admitted (submitted or adopted) its site
// facts: partitions, dependencies, usage.
func (e *Engine) siteAttach(js *job) {
	if e.site == nil {
		return
	}
	j := js.j
	parts, _ := e.checkPartitions(j) // checked by siteCheck (adopt: not checked, kept when known)
	if len(parts) > 0 {
		sj := e.siteOf(js)
		sj.parts = parts
		sj.reqs = make([]gang.Request, len(parts))
		sj.shapes = make([]uint64, len(parts))
		for k, pi := range parts {
			sj.reqs[k] = withPartition(js.req, e.site.parts[pi].Name)
			sj.shapes[k] = e.partShapeID(js.shape, e.site.parts[pi].Name)
		}
		js.req, js.shape = sj.reqs[0], sj.shapes[0]
	}
	if len(j.Dependencies) > 0 {
		e.attachDeps(js)
	}
	if e.site.limits {
		e.siteOf(js)
	}
}

// siteWait is the site rules' part of consider for a job that has site
// facts: it reports whether the job waits, sets the reason, and notes what
// it waits on for Ready.Holds.
func (e *Engine) siteWait(js *job, st *PendingStatus) bool {
	r, why, held := e.siteHold(js, true)
	if !held {
		return false
	}
	st.Reason = r
	cs := &e.cyc
	if cs.holdsBy == nil {
		cs.holdsBy = map[string]string{}
	}
	cs.holdsBy[js.j.ID] = why
	return true
}

// siteHold reports whether a site rule holds js now, and (with explain)
// which.
func (e *Engine) siteHold(js *job, explain bool) (ReasonCode, string, bool) {
	sj := js.site
	if len(sj.deps) > 0 || sj.key != "" {
		if r, ok := e.depsWait(js); ok {
			if !explain {
				return r, "", true
			}
			return r, e.depsDetail(js), true
		}
	}
	if a := sj.array; a != nil && a.throttle > 0 && a.running >= a.throttle {
		return ReasonArrayThrottled, fmt.Sprintf("array %s: %d of %%%d running", a.id, a.running, a.throttle), true
	}
	if e.site.limits {
		if why, ok := e.limitWait(js); ok {
			return ReasonLimit, why, true
		}
	}
	return 0, "", false
}

// siteAllows reports whether js may start now under the site rules; the
// walk checks them in consider, this is for the starts after it
// (preemption claims, shrinking elastic jobs), when jobs bound later in
// the walk may have used up a limit.
func (e *Engine) siteAllows(js *job) bool {
	if js.site == nil {
		return true
	}
	_, _, held := e.siteHold(js, false)
	return !held
}

// siteActivate and siteDeactivate keep the usage counts of running jobs.
func (e *Engine) siteActivate(js *job) {
	sj := js.site
	if sj.counted {
		return
	}
	sj.counted, sj.countedGPU = true, js.gpuN
	st := e.site
	if st.limits {
		u := st.user(js.j.User)
		u.jobs++
		u.gpus += sj.countedGPU
		a := st.account(js.j.AccountName())
		a.jobs++
		a.gpus += sj.countedGPU
	}
	if sj.array != nil {
		sj.array.running++
	}
	if sj.key != "" {
		if st.singles == nil {
			st.singles = map[string]int{}
		}
		st.singles[sj.key]++
	}
}

func (e *Engine) siteDeactivate(js *job) {
	sj := js.site
	if !sj.counted {
		return
	}
	sj.counted = false
	st := e.site
	if st.limits {
		u := st.user(js.j.User)
		u.jobs--
		u.gpus -= sj.countedGPU
		a := st.account(js.j.AccountName())
		a.jobs--
		a.gpus -= sj.countedGPU
	}
	if sj.array != nil {
		sj.array.running--
	}
	if sj.key != "" {
		if st.singles[sj.key]--; st.singles[sj.key] <= 0 {
			delete(st.singles, sj.key)
		}
	}
}

// siteForget is forget's hook: a job ended (e.site.ending says how).
func (e *Engine) siteForget(js *job) {
	st := e.site
	how := st.ending
	st.ending = endFailed
	if sj := js.site; sj != nil {
		if a := sj.array; a != nil {
			a.left--
			if a.left <= 0 {
				delete(st.arrays, a.id)
			}
		}
		for _, d := range sj.deps {
			e.dropDependent(d.Job, js.j.ID)
		}
	}
	e.depEnded(js.j.ID, how)
}

// PartitionOf returns the partition a job runs in (or, pending, the one
// it was last tried in); ok false when the engine does not track the job
// or it is in none (no partitions configured, or none named and no
// default).
func (e *Engine) PartitionOf(id string) (string, bool) {
	js := e.jobs[id]
	if js == nil || js.site == nil || len(js.site.parts) == 0 || e.site == nil {
		return "", false
	}
	return e.site.parts[js.site.parts[js.site.cur]].Name, true
}

// boundPartition is the partition js starts in on p: for a job that may
// run in several, the first (by tier) holding every member's node (a
// reservation planned in one partition may start after the job was last
// tried in another). It sets js's current partition and request to it.
func (e *Engine) boundPartition(js *job, p *placement) string {
	sj := js.site
	if sj == nil || len(sj.parts) == 0 {
		return ""
	}
	if len(sj.parts) > 1 {
		c := e.cluster
		for k, pi := range sj.parts {
			sel := map[string]string{partitionLabel(e.site.parts[pi].Name): "true"}
			if !slices.ContainsFunc(p.members, func(m pmember) bool { return !c.MatchesSelector(m.node, sel) }) {
				sj.cur = k
				js.req, js.shape = sj.reqs[k], sj.shapes[k]
				break
			}
		}
	}
	return e.site.parts[sj.parts[sj.cur]].Name
}

// noPreempt reports whether a running job's partition forbids preempting
// it.
func (e *Engine) noPreempt(js *job) bool {
	if js.site == nil || len(js.site.parts) == 0 {
		return false
	}
	return e.site.parts[js.site.parts[js.site.cur]].PreemptMode == PreemptOff
}

// siteResumable reports whether the site rules allow resuming the last
// walk (see resumable): not while an advance reservation is set, since
// which jobs it keeps off its GPUs changes with the clock alone.
// Partitions are fixed; limits, throttles and dependencies change only
// with binds (the last cycle was not quiet) and with events that already
// turn resumption off (ends, cancels).
func (e *Engine) siteResumable() bool {
	return e.site == nil || len(e.site.adv) == 0
}

// claimAllowed reports whether a preemptor may still bind on its claimed
// GPUs under the site rules set since the claim was made (an advance
// reservation on them, a limit, a dependency).
func (e *Engine) claimAllowed(js *job, p *placement) bool {
	if !e.siteAllows(js) {
		return false
	}
	if e.advApplies(js, e.cyc.now) {
		return allFree(e.advSnap(e.cyc.plan, js, e.cyc.now), p.gpus)
	}
	return true
}

func (m PreemptMode) String() string {
	switch m {
	case PreemptInherit:
		return "inherit"
	case PreemptOff:
		return "off"
	}
	return fmt.Sprintf("PreemptMode(%d)", uint8(m))
}

// MarshalText writes the mode by name (inherit, off).
func (m PreemptMode) MarshalText() ([]byte, error) {
	if m > PreemptOff {
		return nil, fmt.Errorf("%w: unknown preempt mode %d", ErrInvalidConfig, uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads a mode by name.
func (m *PreemptMode) UnmarshalText(b []byte) error {
	for v := PreemptInherit; v <= PreemptOff; v++ {
		if v.String() == string(b) {
			*m = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown preempt mode %q (want inherit or off)", ErrInvalidConfig, b)
}

func (p NeverMetPolicy) String() string {
	switch p {
	case CancelNeverMet:
		return "cancel"
	case HoldNeverMet:
		return "hold"
	}
	return fmt.Sprintf("NeverMetPolicy(%d)", uint8(p))
}

// MarshalText writes the policy by name (cancel, hold).
func (p NeverMetPolicy) MarshalText() ([]byte, error) {
	if p > HoldNeverMet {
		return nil, fmt.Errorf("%w: unknown never-met policy %d", ErrInvalidConfig, uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a policy by name.
func (p *NeverMetPolicy) UnmarshalText(b []byte) error {
	for v := CancelNeverMet; v <= HoldNeverMet; v++ {
		if v.String() == string(b) {
			*p = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown never-met policy %q (want cancel or hold)", ErrInvalidConfig, b)
}

// takeHolds returns this cycle's Ready.Holds: what siteWait noted, and,
// for a cycle that resumed the last walk, the holds of that walk's jobs
// (their statuses are copied, not computed again).
func (e *Engine) takeHolds(resumed bool) map[string]string {
	cs := &e.cyc
	h := cs.holdsBy
	cs.holdsBy = nil
	if e.site == nil {
		return h
	}
	if resumed {
		for id, why := range e.site.lastHolds {
			if _, ok := h[id]; !ok {
				if h == nil {
					h = map[string]string{}
				}
				h[id] = why
			}
		}
	}
	e.site.lastHolds = maps.Clone(h)
	return h
}
