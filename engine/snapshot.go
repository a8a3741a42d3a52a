package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
)

// ErrNotCompactable: Compact was called on an engine that holds state a
// Snapshot does not describe (see Compact). The journal is left whole;
// Save still saves everything.
var ErrNotCompactable = errors.New("engine: state cannot be compacted")

// Snapshot is an engine's live state at one time (State.Start), from
// which Restore starts before it replays State.Records (see Compact). Its
// size is bounded by the live jobs, not by the history: ended jobs leave
// nothing in it.
//
// It is plain data, encodable as JSON; every field is optional, so that
// later versions may add fields (a reader that does not know a field
// ignores it, and an absent field is its zero value).
type Snapshot struct {
	// Pending jobs, by ID (their order in the queues follows from the jobs:
	// aged priority, submit time, ID).
	Pending []SavedJob `json:",omitempty"`
	// Running jobs, in their grace period included, by ID.
	Running []SavedJob `json:",omitempty"`
	// FairShare: the queues' and accounts' decayed usage.
	FairShare queue.FairShareState `json:",omitzero"`
	// Reservations: the advance reservations, by name.
	Reservations []SavedReservation `json:",omitempty"`
	// Claims: the GPUs preemptors wait for while their victims stop.
	Claims []SavedClaim `json:",omitempty"`
	// Arrays: the job arrays with tasks left, by ID (their tasks are
	// jobs above, SavedJob.Array).
	Arrays []SavedArray `json:",omitempty"`
	// Dependents: by job, the jobs whose dependencies on it are not
	// settled yet, in the order they were submitted.
	Dependents map[string][]string `json:",omitempty"`
	// Sticky: the last cycle's reservations of pending jobs, which the
	// next cycle keeps while they stay valid.
	Sticky []SavedSticky `json:",omitempty"`
	// Seq is the latest Ready's sequence number; Runs counts the runs
	// started (a job's run is which one it is).
	Seq, Runs uint64 `json:",omitempty"`
	// MIGNotBefore: no MIG plan before then (one was refused).
	MIGNotBefore time.Time `json:",omitzero"`
	// MaxNotBefore: the latest bind backoff end ever set; RetryAt: the
	// earliest one pending (see Engine.BindRetryAt); zero: none.
	MaxNotBefore, RetryAt time.Time `json:",omitzero"`
	// Site: the site rules' state exists (a config, or an advance
	// reservation was ever set). FracSeen: a fractional or MIG job was
	// ever known. Dirty: the next Ready runs a cycle.
	Site, FracSeen, Dirty bool `json:",omitempty"`
	// Requeued and Failed: reported with the next Ready.
	Requeued []string     `json:",omitempty"`
	Failed   []JobFailure `json:",omitempty"`
}

// SavedJob is one live job of a Snapshot. The fields after Job are the
// engine's facts about it; zero values are the defaults, so a field added
// later (a new job state, a hold with its reason) reads as "not set" in
// older snapshots.
type SavedJob struct {
	Job *queue.Job
	// NotBefore: a refused bind's backoff (pending); Refusals: the
	// consecutive refused binds.
	NotBefore time.Time `json:",omitzero"`
	Refusals  int       `json:",omitempty"`
	// LastPreempted: when it was last preempted (or a preemption of it
	// refused); Checkpoint: its last checkpoint (running).
	LastPreempted time.Time `json:",omitzero"`
	Checkpoint    time.Time `json:",omitzero"`
	// QuotaWait: blocked by quota since it last started.
	QuotaWait bool `json:",omitempty"`
	// Partition: the partition it runs in or was last tried in, of the
	// several it may use (site rules); empty: it has no choice.
	Partition string `json:",omitempty"`
	// Array: the array it is a task of. Deps: where each of its
	// dependencies (Job.Dependencies but singletons, in order) stands.
	Array string     `json:",omitempty"`
	Deps  []SavedDep `json:",omitempty"`
	// HasRes: it held a reservation in the last cycle (Snapshot.Sticky).
	HasRes bool `json:",omitempty"`
	// Running: where, since when, which run, whether Advance confirmed
	// its bind, whether it was backfilled.
	Members    []SavedMember `json:",omitempty"`
	Started    time.Time     `json:",omitzero"`
	Run        uint64        `json:",omitempty"`
	Confirmed  bool          `json:",omitempty"`
	Backfilled bool          `json:",omitempty"`
	// Deadline and VictimFor: in its grace period (preempted for
	// VictimFor), it stops by Deadline.
	Deadline  time.Time `json:",omitzero"`
	VictimFor string    `json:",omitempty"`
	// Binding: its bind is assumed ("assumed": booked, the backend has not
	// answered) or unknown ("unknown": the call timed out) under
	// Outcome.AssumeBinds; empty: neither. Held: held after
	// Config.MaxBindTries failed binds (pending). LastErr: the last bind
	// failure's reason.
	Binding string `json:",omitempty"`
	Held    bool   `json:",omitempty"`
	LastErr string `json:",omitempty"`
	// Preempting: in its grace period, its preemption is assumed or
	// unknown under Outcome.AssumePreemptions; empty: neither (or taken).
	// PreemptErr: pending, a preemption made for it failed.
	Preempting string `json:",omitempty"`
	PreemptErr string `json:",omitempty"`
}

// SavedArray is a job array: its ID and throttle (most tasks running).
type SavedArray struct {
	ID       string
	Throttle int `json:",omitempty"`
}

// SavedDep is where one dependency stands: met, never to be met, or
// neither (waiting).
type SavedDep struct {
	Met   bool `json:",omitempty"`
	Never bool `json:",omitempty"`
}

// SavedReservation is an advance reservation with the GPUs it resolved to
// when it was set (a reservation by GPU count keeps off the others').
type SavedReservation struct {
	Spec AdvanceReservation
	GPUs []SavedGPU `json:",omitempty"`
}

// SavedClaim is a preemptor's claim: its placement, its victims, and when
// the last of them stops.
type SavedClaim struct {
	Job     string
	Members []SavedMember
	Victims []string
	Start   time.Time
}

// SavedSticky is a reservation of the last cycle: the job, its start, its
// GPUs (cluster indices) and the placement on them (none: GPUs only).
type SavedSticky struct {
	Job     string
	Start   time.Time
	GPUs    []uint32
	Members []SavedMember `json:",omitempty"`
}

// Compact replaces the journal with a Snapshot of the engine's live state
// now: Save then returns the snapshot and the records since, and Restore
// starts from the snapshot, so that the saved state and the time to
// restore it are bounded by the live jobs, not by the history.
//
// Call it between an Advance and the next Ready. The restored engine
// decides what the one that never stopped would have, except in what the
// snapshot does not carry: the policy's own state (Config.Policy starts
// anew, as with Restore), the caches and the cycle resumption (which
// change no decision), and the View's pending list (empty until the first
// cycle). Engines with services, MIG nodes, or fractional jobs live
// cannot be compacted yet (ErrNotCompactable: the
// journal stays whole). Errors: ErrInvalidEvent (journal off, a Ready not
// advanced), ErrNotCompactable.
func (e *Engine) Compact() error {
	if e.jn == nil {
		return fmt.Errorf("%w: the journal is off (EnableJournal)", ErrInvalidEvent)
	}
	if e.out != nil {
		return fmt.Errorf("%w: Compact before the latest Ready was advanced", ErrInvalidEvent)
	}
	if err := e.compactable(); err != nil {
		return err
	}
	sn := &Snapshot{
		FairShare: e.tree.FairShareState(), Seq: e.seq, Runs: e.runs, MIGNotBefore: e.migNotBefore,
		Site: e.site != nil, FracSeen: e.fracSeen, Dirty: e.dirty,
		Requeued: slices.Clone(e.requeued), Failed: slices.Clone(e.failed),
	}
	if e.maxNotBefore != 0 {
		sn.MaxNotBefore = time.Unix(0, e.maxNotBefore).In(e.now.Location())
	}
	if e.retryAt != 0 {
		sn.RetryAt = time.Unix(0, e.retryAt).In(e.now.Location())
	}
	for _, id := range sortedKeys(e.jobs) {
		js := e.jobs[id]
		sj := SavedJob{Job: js.j, Refusals: int(js.refusals), LastPreempted: js.lastPreempted, Checkpoint: js.checkpoint, QuotaWait: js.quotaWait, HasRes: js.hasRes, Held: js.held, LastErr: js.lastErr, PreemptErr: js.preemptErr}
		switch js.bindSt {
		case bindAssumed:
			sj.Binding = "assumed"
		case bindUnknown:
			sj.Binding = "unknown"
		}
		if sjs := js.site; sjs != nil {
			if len(sjs.parts) > 1 {
				sj.Partition, _ = e.PartitionOf(id)
			}
			if sjs.array != nil {
				sj.Array = sjs.array.id
			}
			for _, d := range sjs.deps {
				sj.Deps = append(sj.Deps, SavedDep{Met: d.met, Never: d.never})
			}
		}
		if js.notBefore != 0 {
			sj.NotBefore = time.Unix(0, js.notBefore).In(e.now.Location())
		}
		if js.st == statePending {
			sn.Pending = append(sn.Pending, sj)
			continue
		}
		sj.Members = savedMembers(toMembers(e.cluster, js.place.members))
		sj.Started, sj.Run, sj.Confirmed, sj.Backfilled = js.start, js.run, js.confirmed, js.backfilled
		if js.st == stateStopping {
			sj.Deadline, sj.VictimFor = js.deadline, js.victimFor
			sj.Preempting = bindStateText(js.preemptSt)
		}
		sn.Running = append(sn.Running, sj)
	}
	if e.site != nil {
		for _, id := range sortedKeys(e.site.arrays) {
			sn.Arrays = append(sn.Arrays, SavedArray{ID: id, Throttle: e.site.arrays[id].throttle})
		}
		for on, ids := range e.site.dependents {
			if sn.Dependents == nil {
				sn.Dependents = map[string][]string{}
			}
			sn.Dependents[on] = slices.Clone(ids)
		}
		for _, name := range sortedKeys(e.site.adv) {
			a := e.site.adv[name]
			sr := SavedReservation{Spec: a.spec}
			for _, g := range a.refs {
				sr.GPUs = append(sr.GPUs, SavedGPU{Node: g.node, GPU: g.idx})
			}
			sn.Reservations = append(sn.Reservations, sr)
		}
	}
	for _, id := range sortedKeys(e.claims) {
		c := e.claims[id]
		sn.Claims = append(sn.Claims, SavedClaim{Job: id, Members: savedMembers(toMembers(e.cluster, c.place.members)),
			Victims: slices.Clone(c.victims), Start: c.start})
	}
	for _, id := range sortedKeys(e.lastRes) {
		r := e.lastRes[id]
		ss := SavedSticky{Job: r.job, Start: r.start, GPUs: slices.Clone(r.gpus)}
		if r.pl != nil {
			ss.Members = savedMembers(toMembers(e.cluster, r.pl.members))
		}
		sn.Sticky = append(sn.Sticky, ss)
	}
	e.jn.cluster, e.jn.start, e.jn.snap, e.jn.recs = cloneSpec(e.spec), e.now, sn, nil
	return nil
}

// compactable says why the engine's state is beyond a Snapshot, if it is.
func (e *Engine) compactable() error {
	no := func(why string) error { return fmt.Errorf("%w: %s", ErrNotCompactable, why) }
	switch {
	case len(e.svcs) > 0 || len(e.svcNext) > 0:
		return no("services")
	case e.intake.Len() > 0:
		return no("jobs in the intake")
	}
	for i := range e.spec.Nodes {
		if e.spec.Nodes[i].MIG {
			return no("MIG nodes")
		}
	}
	for _, js := range e.jobs {
		if js.frac {
			return no("fractional jobs")
		}
	}
	return nil
}

// fromSnapshot makes the engine st.Snapshot describes (see Compact).
func fromSnapshot(cfg Config, st *State) (*Engine, error) {
	sn := st.Snapshot
	e, err := New(cfg)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Engine, error) {
		return nil, fmt.Errorf("%w: snapshot: %s", ErrInvalidState, fmt.Sprintf(format, args...))
	}
	if n := len(sn.Pending) + len(sn.Running); n > 0 {
		// No rehash while they fill (byPtr holds the pending jobs only).
		e.jobs, e.byPtr = make(map[string]*job, n), make(map[*queue.Job]*job, len(sn.Pending))
	}
	if sn.Site {
		e.siteInit()
	}
	for _, a := range sn.Arrays {
		e.siteInit()
		if e.site.arrays == nil {
			e.site.arrays = map[string]*jobArray{}
		}
		e.site.arrays[a.ID] = &jobArray{id: a.ID, throttle: a.Throttle}
	}
	for _, sr := range sn.Reservations {
		r := sr.Spec
		end := r.End
		if end.IsZero() {
			end = r.Start.Add(r.Duration)
		}
		a := &advRes{spec: r, start: r.Start, end: end}
		for _, g := range sr.GPUs {
			id, ok := e.cluster.NodeByName(g.Node)
			if _, n := e.cluster.NodeGPUs(id); !ok || g.GPU < 0 || g.GPU >= n {
				return bad("reservation %q: no GPU %d on node %q", r.Name, g.GPU, g.Node)
			}
			a.refs = append(a.refs, gpuRef{g.Node, g.GPU})
		}
		e.siteInit()
		if e.site.adv == nil {
			e.site.adv = map[string]*advRes{}
		}
		e.site.adv[r.Name] = a
	}
	for _, sj := range sn.Running {
		if sj.Job == nil {
			return bad("a running job without its job")
		}
		if sj.Refusals < 0 || sj.Refusals > math.MaxInt32 {
			return bad("job %q: %d refusals (want 0 to %d)", sj.Job.ID, sj.Refusals, math.MaxInt32)
		}
		ms, err := members(sj.Members)
		if err != nil {
			return bad("job %q: %v", sj.Job.ID, err)
		}
		if err := e.admitSaved(&sj, func() error { return e.adopt(sj.Job, ms, e.now, sj.Started) }); err != nil {
			return bad("job %q: %v", sj.Job.ID, err)
		}
		js := e.jobs[sj.Job.ID]
		js.start, js.run, js.confirmed, js.backfilled = sj.Started, sj.Run, sj.Confirmed, sj.Backfilled
		e.patch(js, &sj)
		switch sj.Binding {
		case "":
		case "assumed", "unknown":
			e.assume(js)
			if sj.Binding == "unknown" {
				js.bindSt = bindUnknown
			}
		default:
			return bad("job %q: binding %q (want assumed or unknown)", sj.Job.ID, sj.Binding)
		}
		if !sj.Deadline.IsZero() {
			js.st, js.deadline, js.victimFor = stateStopping, sj.Deadline, sj.VictimFor
			e.stopping++
			switch sj.Preempting {
			case "":
			case "assumed":
				js.preemptSt = bindAssumed
			case "unknown":
				js.preemptSt = bindUnknown
			default:
				return bad("job %q: preempting %q (want assumed or unknown)", sj.Job.ID, sj.Preempting)
			}
		}
		e.tlRekey(js)
		e.runUpsert(js)
	}
	for _, sj := range sn.Pending {
		if sj.Job == nil {
			return bad("a pending job without its job")
		}
		if sj.Refusals < 0 || sj.Refusals > math.MaxInt32 {
			return bad("job %q: %d refusals (want 0 to %d)", sj.Job.ID, sj.Refusals, math.MaxInt32)
		}
		if err := e.admitSaved(&sj, func() error { return e.submit(sj.Job) }); err != nil {
			return bad("job %q: %v", sj.Job.ID, err)
		}
		e.patch(e.jobs[sj.Job.ID], &sj)
	}
	if len(sn.Dependents) > 0 {
		if e.site == nil {
			return bad("dependents without site rules")
		}
		e.site.dependents = map[string][]string{}
		for on, ids := range sn.Dependents {
			e.site.dependents[on] = slices.Clone(ids)
		}
	} else if e.site != nil {
		e.site.dependents = nil
	}
	for _, sc := range sn.Claims {
		js := e.jobs[sc.Job]
		if js == nil {
			return bad("claim of unknown job %q", sc.Job)
		}
		pl, err := e.placementOf(js, sc.Members)
		if err != nil {
			return bad("claim of %q: %v", sc.Job, err)
		}
		e.claims[sc.Job] = &claim{job: sc.Job, place: pl, victims: slices.Clone(sc.Victims), start: sc.Start}
	}
	for _, ss := range sn.Sticky {
		r := &resv{job: ss.Job, start: ss.Start, gpus: slices.Clone(ss.GPUs)}
		for k, g := range r.gpus {
			if int(g) >= e.cluster.NumGPUs() || (k > 0 && g <= r.gpus[k-1]) {
				return bad("reservation of %q: GPUs %v", ss.Job, ss.GPUs)
			}
		}
		if js := e.jobs[ss.Job]; js != nil {
			r.dur, r.bounded = duration(js.j)
			r.lim, r.limited = js.j.RuntimeLimit, js.j.RuntimeLimit > 0
			if len(ss.Members) > 0 {
				if r.pl, err = e.placementOf(js, ss.Members); err != nil {
					return bad("reservation of %q: %v", ss.Job, err)
				}
				if !slices.Equal(r.pl.gpus, r.gpus) {
					return bad("reservation of %q: GPUs %v, its members hold %v", ss.Job, r.gpus, r.pl.gpus)
				}
			}
		}
		r.bm = bitmapOf(r.gpus)
		e.lastRes[ss.Job] = r
	}
	if err := e.tree.SetFairShareState(sn.FairShare); err != nil {
		return bad("%v", err)
	}
	e.seq, e.runs, e.migNotBefore, e.fracSeen, e.dirty = sn.Seq, sn.Runs, sn.MIGNotBefore, e.fracSeen || sn.FracSeen, sn.Dirty
	e.maxNotBefore, e.retryAt = unixNano(sn.MaxNotBefore), unixNano(sn.RetryAt)
	e.requeued, e.failed = slices.Clone(sn.Requeued), slices.Clone(sn.Failed)
	e.publish(&Ready{Seq: e.seq}, nil)
	e.publishRestored()
	return e, nil
}

// admitSaved submits or adopts a saved job (admit), with its array and
// the state of its dependencies. The dependencies are not checked again:
// those settled name jobs that ended (Snapshot.Dependents replaces what
// attachDeps records).
func (e *Engine) admitSaved(sj *SavedJob, admit func() error) error {
	j := sj.Job
	deps := j.Dependencies
	j.Dependencies = nil
	err := admit()
	j.Dependencies = deps
	if err != nil {
		return err
	}
	js := e.jobs[j.ID]
	if len(deps) == 0 && sj.Array == "" {
		return nil
	}
	if e.site == nil {
		return errors.New("dependencies or an array without site rules")
	}
	// A running job was counted (siteActivate) before its singleton key
	// and array were known, or not at all when it had no site facts then.
	wasCounted := js.site != nil && js.site.counted
	if len(deps) > 0 {
		e.attachDeps(js)
		if len(sj.Deps) != len(js.site.deps) {
			return fmt.Errorf("%d dependency states for %d dependencies", len(sj.Deps), len(js.site.deps))
		}
		for k, d := range sj.Deps {
			js.site.deps[k].met, js.site.deps[k].never = d.Met, d.Never
		}
	}
	if sj.Array != "" {
		a := e.site.arrays[sj.Array]
		if a == nil {
			return fmt.Errorf("task of unknown array %q", sj.Array)
		}
		e.siteOf(js).array = a
		a.left++
	}
	switch {
	case js.st == statePending:
	case !wasCounted:
		e.siteActivate(js)
	default:
		if js.site.array != nil {
			js.site.array.running++
		}
		if js.site.key != "" {
			if e.site.singles == nil {
				e.site.singles = map[string]int{}
			}
			e.site.singles[js.site.key]++
		}
	}
	return nil
}

// patch sets a restored job's facts that submit and adopt do not.
func (e *Engine) patch(js *job, sj *SavedJob) {
	js.notBefore, js.refusals, js.lastErr = unixNano(sj.NotBefore), int32(sj.Refusals), sj.LastErr
	js.preemptErr = sj.PreemptErr
	if sj.Held && !js.held {
		js.held = true
		e.held++
	}
	js.lastPreempted, js.checkpoint, js.quotaWait, js.hasRes = sj.LastPreempted, sj.Checkpoint, sj.QuotaWait, sj.HasRes
	if sj.Partition != "" && js.site != nil {
		for k, pi := range js.site.parts {
			if e.site.parts[pi].Name == sj.Partition {
				js.site.cur = k
				js.req, js.shape = js.site.reqs[k], js.site.shapes[k]
			}
		}
	}
}

// placementOf is the placement of js on saved members (not booked).
func (e *Engine) placementOf(js *job, sms []SavedMember) (*placement, error) {
	ms, err := members(sms)
	if err != nil {
		return nil, err
	}
	return fromMembers(e.cluster, ms, mig.Request{}) // no fractional job is compacted
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// publishRestored publishes a View of an engine restored from a snapshot,
// before its first cycle: every pending job is listed (held ones as
// ReasonHeld, those waiting for a bind backoff as ReasonBindRefused, the
// rest as ReasonNone, not evaluated yet), by ID, so that no job the engine
// knows is missing from the View until the first cycle lists them in
// order.
func (e *Engine) publishRestored() {
	var since []PendingStatus
	var holds map[string]string
	for _, id := range sortedKeys(e.jobs) {
		js := e.jobs[id]
		if js.st != statePending {
			continue
		}
		st := PendingStatus{Job: id, Queue: js.j.Queue, Reason: ReasonNone, js: js}
		switch {
		case js.held:
			st.Reason = ReasonHeld
			if holds == nil {
				holds = map[string]string{}
			}
			holds[id] = heldText(js)
		case js.notBefore > e.now.UnixNano():
			st.Reason = ReasonBindRefused
		}
		since = append(since, st)
	}
	e.publishWith(&Ready{Seq: e.seq, At: e.now, Holds: holds}, nil, since, nil)
}
