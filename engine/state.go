package engine

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// StateVersion is the version of the State format that Save writes.
// Restore reads it and the versions before it: 1 and 2 are whole
// journals (2 added the service events), 3 adds the Snapshot a journal
// may start from (Compact). A state of a later version is
// ErrInvalidState.
const StateVersion = 3

// ErrInvalidState: Restore was given a state of another version, or one
// whose records the engine rejects (it was saved under another Config).
var ErrInvalidState = errors.New("engine: invalid saved state")

// State is an engine's saved state, for a restart without loss (see
// EnableJournal, Save, Compact and Restore). It is plain data, encodable
// as JSON.
//
// It is the engine's journal: where it starts (the cluster and clock the
// engine was created with, or, once compacted, a Snapshot of its live
// state with the cluster and clock as they were then), then every input
// that changed it since (the events Step accepted, the cycles Ready ran
// with the jobs they drained from the intake, and the refusals Advance
// accepted). The engine is deterministic, so replaying them rebuilds
// everything: pending jobs in order, running jobs with their members and
// real start times, sticky reservations, fair-share usage, preemption
// holds, bind backoffs, MIG layouts and the clock; the restored engine
// then decides what the one that never stopped would have (see Compact
// for what a snapshot does not carry). Without Compact the records grow
// with the engine's history (one per event and cycle) and Restore takes
// as long as replaying them; Compact bounds both by the live jobs.
type State struct {
	Version int
	Cluster topo.Spec // the cluster given to New, or as it was at the snapshot
	Start   time.Time // New's clock, or the snapshot's
	// Snapshot, if set, is the live state at Start that Records follow
	// (version 3).
	Snapshot *Snapshot `json:",omitempty"`
	Records  []Record
}

// Record is one input of a saved engine; exactly one of its fields is set
// (Intake only with Ready).
type Record struct {
	Event *SavedEvent `json:",omitempty"`
	// Ready: a Ready that ran a cycle; Intake: the jobs it drained.
	Ready   bool          `json:",omitempty"`
	Intake  []*queue.Job  `json:",omitempty"`
	Advance *SavedOutcome `json:",omitempty"`
}

// SavedEvent is an Event as data (MIG instances by model and profile
// name).
type SavedEvent struct {
	Kind     EventKind
	Time     time.Time
	Job      *queue.Job     `json:",omitempty"`
	JobID    string         `json:",omitempty"`
	Members  []SavedMember  `json:",omitempty"`
	Started  time.Time      `json:",omitempty"`
	Node     *topo.NodeSpec `json:",omitempty"`
	NodeName string         `json:",omitempty"`
	// Failed, Tasks, Throttle, Reservation: see Event.
	Failed      bool                `json:",omitempty"`
	Tasks       int                 `json:",omitempty"`
	Throttle    int                 `json:",omitempty"`
	Reservation *AdvanceReservation `json:",omitempty"`
	// Service, ServiceName, Desired: see Event (version 2).
	Service     *Service `json:",omitempty"`
	ServiceName string   `json:",omitempty"`
	Desired     int      `json:",omitempty"`
	// Run, Reason: see Event (the bind outcomes).
	Run    uint64 `json:",omitempty"`
	Reason string `json:",omitempty"`
	// GPU: see Event (the MIG outcomes).
	GPU int `json:",omitempty"`
}

// SavedMember is a Member as data.
type SavedMember struct {
	Group      int
	Node       string
	GPUs       []int
	CPUMilli   int64 `json:",omitempty"`
	MemoryMiB  int64 `json:",omitempty"`
	Fractional bool  `json:",omitempty"`
	// Model and Profile name the MIG instance's profile (empty: none).
	Model, Profile string    `json:",omitempty"`
	Start          uint8     `json:",omitempty"`
	Created        bool      `json:",omitempty"`
	Share          mig.Share `json:",omitzero"`
}

// SavedOutcome is an Outcome as data: MIG refusals by node and GPU (how
// Advance matches them).
type SavedOutcome struct {
	AssumeBinds        bool       `json:",omitempty"`
	AssumePreemptions  bool       `json:",omitempty"`
	AssumeMIG          bool       `json:",omitempty"`
	RefusedBinds       []string   `json:",omitempty"`
	RefusedPreemptions []string   `json:",omitempty"`
	RefusedResizes     []string   `json:",omitempty"`
	RefusedMIG         []SavedGPU `json:",omitempty"`
}

// SavedGPU names one GPU: a node and its node-local index.
type SavedGPU struct {
	Node string
	GPU  int
}

type journal struct {
	cluster topo.Spec
	start   time.Time
	snap    *Snapshot // where recs start (nil: from New)
	recs    []Record
	// the Ready being recorded (its drained jobs)
	ready *Record
}

// EnableJournal makes the engine record its inputs so that Save can save
// them. It must be called before the first Step or Ready (ErrInvalidEvent
// otherwise); calling it again does nothing.
func (e *Engine) EnableJournal() error {
	if e.jn != nil {
		return nil
	}
	if e.touched {
		return fmt.Errorf("%w: EnableJournal after the engine was used", ErrInvalidEvent)
	}
	e.jn = &journal{cluster: cloneSpec(e.cfg.Cluster), start: e.cfg.Start}
	return nil
}

// Save returns the engine's state (see State). The engine must have its
// journal on (EnableJournal). The State shares the jobs the engine was
// given (read-only); encode it before giving the engine more events if it
// is to be written elsewhere concurrently. Call it between an Advance and
// the next Ready: a Ready not yet advanced is saved as unanswered, and
// its decisions count as applied after Restore.
func (e *Engine) Save() (*State, error) {
	if e.jn == nil {
		return nil, fmt.Errorf("%w: the journal is off (EnableJournal)", ErrInvalidEvent)
	}
	return &State{Version: StateVersion, Cluster: cloneSpec(e.jn.cluster), Start: e.jn.start, Snapshot: e.jn.snap, Records: slices.Clone(e.jn.recs)}, nil
}

// Restore returns an engine in the state st was saved in, with its
// journal on: from st's Snapshot if it has one, else from New, then st's
// Records replayed. cfg must be the Config the saved engine was created
// with (its Policy a new value of the same policy); st's Cluster and
// Start replace cfg's. It reads versions 1 to StateVersion. Errors:
// ErrInvalidConfig, ErrInvalidState.
func Restore(cfg Config, st *State) (*Engine, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil state", ErrInvalidState)
	}
	if st.Version < 1 || st.Version > StateVersion {
		return nil, fmt.Errorf("%w: version %d, this engine reads 1 to %d", ErrInvalidState, st.Version, StateVersion)
	}
	if st.Snapshot != nil && st.Version < 3 {
		return nil, fmt.Errorf("%w: a snapshot in a version %d state", ErrInvalidState, st.Version)
	}
	cfg.Cluster, cfg.Start = cloneSpec(st.Cluster), st.Start
	var e *Engine
	var err error
	if st.Snapshot != nil {
		e, err = fromSnapshot(cfg, st)
	} else {
		e, err = New(cfg)
	}
	if err != nil {
		return nil, err
	}
	e.jn = &journal{cluster: cloneSpec(st.Cluster), start: st.Start, snap: st.Snapshot}
	var rd Ready
	for i, r := range st.Records {
		bad := func(err error) (*Engine, error) {
			return nil, fmt.Errorf("%w: record %d: %w", ErrInvalidState, i, err)
		}
		switch {
		case r.Event != nil:
			ev, err := r.Event.event()
			if err != nil {
				return bad(err)
			}
			if err := e.Step(ev); err != nil {
				return bad(err)
			}
		case r.Ready:
			for _, j := range r.Intake {
				if err := e.intake.Submit(j); err != nil {
					return bad(err)
				}
			}
			if !e.HasReady() {
				return bad(errors.New("a saved cycle with nothing to do"))
			}
			rd = e.Ready()
		case r.Advance != nil:
			out := Outcome{
				AssumeBinds:        r.Advance.AssumeBinds,
				AssumePreemptions:  r.Advance.AssumePreemptions,
				AssumeMIG:          r.Advance.AssumeMIG,
				RefusedBinds:       r.Advance.RefusedBinds,
				RefusedPreemptions: r.Advance.RefusedPreemptions,
				RefusedResizes:     r.Advance.RefusedResizes,
			}
			for _, g := range r.Advance.RefusedMIG {
				k := slices.IndexFunc(rd.MIG, func(m MIGReconfiguration) bool { return m.Node == g.Node && m.GPU == g.GPU })
				if k < 0 {
					return bad(fmt.Errorf("refused MIG change of %s GPU %d, which the cycle did not make", g.Node, g.GPU))
				}
				out.RefusedMIG = append(out.RefusedMIG, rd.MIG[k])
			}
			if err := e.Advance(rd, out); err != nil {
				return bad(err)
			}
		default:
			return bad(errors.New("empty record"))
		}
	}
	return e, nil
}

func (e *Engine) recordEvent(ev Event) {
	se := &SavedEvent{Kind: ev.Kind, Time: ev.Time, Job: ev.Job, JobID: ev.JobID, Started: ev.Started, NodeName: ev.NodeName,
		Failed: ev.Failed, Tasks: ev.Tasks, Throttle: ev.Throttle, Reservation: cloneAdv(ev.Reservation),
		Service: cloneService(ev.Service), ServiceName: ev.ServiceName, Desired: ev.Desired, Run: ev.Run, Reason: ev.Reason, GPU: ev.GPU}
	if ev.Kind == EventNodeAdded || ev.Kind == EventNodeChanged {
		n := ev.Node
		n.Labels = cloneLabels(n.Labels)
		se.Node = &n
	}
	se.Members = savedMembers(ev.Members)
	e.jn.recs = append(e.jn.recs, Record{Event: se})
}

func (se *SavedEvent) event() (Event, error) {
	ev := Event{Kind: se.Kind, Time: se.Time, Job: se.Job, JobID: se.JobID, Started: se.Started, NodeName: se.NodeName,
		Failed: se.Failed, Tasks: se.Tasks, Throttle: se.Throttle, Reservation: cloneAdv(se.Reservation),
		Service: cloneService(se.Service), ServiceName: se.ServiceName, Desired: se.Desired, Run: se.Run, Reason: se.Reason, GPU: se.GPU}
	if se.Node != nil {
		ev.Node = *se.Node
	}
	ms, err := members(se.Members)
	if err != nil {
		return Event{}, err
	}
	ev.Members = ms
	return ev, nil
}

// savedMembers is ms as data.
func savedMembers(ms []Member) []SavedMember {
	var out []SavedMember
	for _, m := range ms {
		sm := SavedMember{Group: m.Group, Node: m.Node, GPUs: slices.Clone(m.GPUs), CPUMilli: m.CPUMilli, MemoryMiB: m.MemoryMiB,
			Fractional: m.Fractional, Start: m.Instance.Start, Created: m.Created, Share: m.Share}
		if m.Instance.Profile.Valid() {
			sm.Model, sm.Profile = m.Instance.Profile.Model().String(), m.Instance.Profile.Name()
		}
		out = append(out, sm)
	}
	return out
}

// members is the Members sms describe.
func members(sms []SavedMember) ([]Member, error) {
	var out []Member
	for _, sm := range sms {
		m := Member{Group: sm.Group, Node: sm.Node, GPUs: sm.GPUs, CPUMilli: sm.CPUMilli, MemoryMiB: sm.MemoryMiB,
			Fractional: sm.Fractional, Created: sm.Created, Share: sm.Share}
		if sm.Profile != "" {
			model, err := mig.LookupModel(sm.Model)
			if err != nil {
				return nil, err
			}
			p, err := model.Profile(sm.Profile)
			if err != nil {
				return nil, err
			}
			m.Instance = mig.Instance{Profile: p, Start: sm.Start}
		}
		out = append(out, m)
	}
	return out, nil
}

func (e *Engine) recordAdvance(out Outcome) {
	so := &SavedOutcome{
		AssumeBinds:        out.AssumeBinds,
		AssumePreemptions:  out.AssumePreemptions,
		AssumeMIG:          out.AssumeMIG,
		RefusedBinds:       slices.Clone(out.RefusedBinds),
		RefusedPreemptions: slices.Clone(out.RefusedPreemptions),
		RefusedResizes:     slices.Clone(out.RefusedResizes),
	}
	for _, m := range out.RefusedMIG {
		so.RefusedMIG = append(so.RefusedMIG, SavedGPU{Node: m.Node, GPU: m.GPU})
	}
	e.jn.recs = append(e.jn.recs, Record{Advance: so})
}

func cloneSpec(sp topo.Spec) topo.Spec {
	out := sp
	out.Levels = slices.Clone(sp.Levels)
	out.GPULevels = slices.Clone(sp.GPULevels)
	out.Nodes = slices.Clone(sp.Nodes)
	for i := range out.Nodes {
		out.Nodes[i].Labels = cloneLabels(out.Nodes[i].Labels)
	}
	return out
}

// JobIDs returns the IDs of the jobs the engine tracks, sorted: those
// pending (including the intake's, once drained) and those running or in
// their grace period.
func (e *Engine) JobIDs() (pending, running []string) {
	for id, js := range e.jobs {
		if js.st == statePending {
			pending = append(pending, id)
		} else {
			running = append(running, id)
		}
	}
	sort.Strings(pending)
	sort.Strings(running)
	return pending, running
}

func cloneService(s *Service) *Service {
	if s == nil {
		return nil
	}
	c := *s
	c.Replica.Request.Groups = slices.Clone(s.Replica.Request.Groups)
	c.Replica.Partitions = slices.Clone(s.Replica.Partitions)
	return &c
}
