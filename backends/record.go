package backends

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
)

// RecordKind is the step of a job's life a JobRecord reports.
type RecordKind uint8

// Record kinds.
const (
	// RecordSubmit: the engine accepted the submission.
	RecordSubmit RecordKind = iota + 1
	// RecordReject: the submission was refused (Reason says why).
	RecordReject
	// RecordWait: the job is pending for a new reason (Reason); recorded
	// when the reason changes, not every cycle.
	RecordWait
	// RecordStart: the backend confirmed the job's bind (or the job was
	// adopted) on Members; Time is when the bind was confirmed (the
	// backend's start time for an adopted job).
	RecordStart
	// RecordPreempt: the backend accepted a preemption of the job; its
	// run goes on until it is requeued or ends.
	RecordPreempt
	// RecordRequeue: the job's run stopped and it is pending again
	// (after a preemption or a node failure); the run's usage is charged.
	RecordRequeue
	// RecordResize: an elastic job's members changed; the run so far is
	// charged and a new run begins on Members.
	RecordResize
	// RecordDevices: the backend reported that the job holds other GPUs
	// than booked (Members are the new ones).
	RecordDevices
	// RecordEnd: the job ended (finished, cancelled or failed: Reason);
	// the last run's usage is charged.
	RecordEnd
)

var recordKinds = [...]string{RecordSubmit: "submit", RecordReject: "reject", RecordWait: "wait", RecordStart: "start",
	RecordPreempt: "preempt", RecordRequeue: "requeue", RecordResize: "resize", RecordDevices: "devices", RecordEnd: "end"}

func (k RecordKind) String() string {
	if int(k) < len(recordKinds) && recordKinds[k] != "" {
		return recordKinds[k]
	}
	return fmt.Sprintf("RecordKind(%d)", uint8(k))
}

// ParseRecordKind is the inverse of RecordKind.String.
func ParseRecordKind(s string) (RecordKind, error) {
	for k, n := range recordKinds {
		if n != "" && n == s {
			return RecordKind(k), nil
		}
	}
	return 0, fmt.Errorf("backends: unknown record kind %q", s)
}

// RecordGPU is one device a record's job holds: a node, the node-local
// GPU index, and (where the backend reports it) the UUID of the GPU or of
// its MIG instance.
type RecordGPU struct {
	Node  string
	Index int
	UUID  string
	// Milli is the part of the GPU held, in thousandths: 1000 for a whole
	// GPU, less for a share or a MIG instance.
	Milli int64
}

// JobRecord is one step of one job's life as the Runner saw it, for
// accounting and audit (see Recorder).
type JobRecord struct {
	Kind RecordKind
	Time time.Time
	Job  string
	// Queue, Account, User and Partitions are the job's (from its
	// submission or adoption).
	Queue, Account, User string
	Partitions           []string
	// Partition is the partition the job runs in (start records), where
	// known; see chosenPartition.
	Partition string
	// Reason says why: the pending reason (wait), the preemption's cause
	// and beneficiary (preempt), the error (reject), finished, cancelled
	// or the failed node (end), adopted (start).
	Reason string
	// GPUs are the devices held (start, resize, devices; and the run
	// charged by requeue, resize and end).
	GPUs []RecordGPU
	// Driver and Image are what the backend reports for the run
	// (AttributeReporter); empty when it reports nothing.
	Driver, Image string
	// RunStart and GPUMicroseconds, on requeue, resize and end records of
	// a job that ran: when the run charged began, and its usage in GPU
	// microseconds (GPU thousandths held x whole milliseconds run), exact
	// so that sums over many records are too.
	RunStart        time.Time
	GPUMicroseconds int64
}

// GPUSeconds is the record's usage in GPU-seconds.
func (r *JobRecord) GPUSeconds() float64 { return float64(r.GPUMicroseconds) / 1e6 }

// Recorder receives the Runner's JobRecords (RunnerConfig.Recorder). Record
// is called on Run's goroutine, in time order, and must not block: a
// recorder that writes to a database queues the record and returns. The
// record is owned by the recorder.
type Recorder interface {
	Record(rec JobRecord)
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(JobRecord)

// Record calls f(rec).
func (f RecorderFunc) Record(rec JobRecord) { f(rec) }

// JobAttributes are facts about a run that a backend knows and the engine
// does not, for the audit trail.
type JobAttributes struct {
	// UUIDs are the UUIDs of the devices held, one per member GPU in the
	// order of the members and their GPUs (a MIG instance's own UUID for
	// a fractional member); empty when unknown.
	UUIDs []string
	// Driver is the GPU driver version; Image the container image.
	Driver, Image string
}

// AttributeReporter is an optional Backend method: the Runner asks it,
// when a Recorder is set, for the attributes of every run it records as
// started. It is called on Run's goroutine, so it must answer from what
// the backend already knows (no remote call) and not block.
type AttributeReporter interface {
	JobAttributes(job string, members []engine.Member) JobAttributes
}

// recJob is what the Runner remembers of a job for its records.
type recJob struct {
	queue, account, user string
	partitions           []string
	partition            string
	members              []engine.Member
	start                time.Time // of the current run; zero: not running
	reason               engine.ReasonCode
	waited               bool // a wait record was written
}

// recorder turns the Runner's events and cycles into JobRecords.
type recorder struct {
	out   Recorder
	attrs AttributeReporter // nil: the backend reports none
	jobs  map[string]*recJob
	// binding: binds issued and not confirmed yet (their start is
	// recorded on engine.EventBindApplied); preempting: preemptions
	// issued, recorded on engine.EventPreemptApplied.
	binding    map[string]issuedBind
	preempting map[string]engine.Preemption
}

// issuedBind is a bind the recorder waits to see confirmed.
type issuedBind struct {
	run     uint64
	members []engine.Member
	reason  string
}

func newRecorder(out Recorder, be Backend) *recorder {
	if out == nil {
		return nil
	}
	ar, _ := be.(AttributeReporter)
	return &recorder{out: out, attrs: ar, jobs: map[string]*recJob{}, binding: map[string]issuedBind{}, preempting: map[string]engine.Preemption{}}
}

func (rc *recorder) base(kind RecordKind, at time.Time, id string, j *recJob) JobRecord {
	r := JobRecord{Kind: kind, Time: at, Job: id}
	if j != nil {
		r.Queue, r.Account, r.User, r.Partitions, r.Partition = j.queue, j.account, j.user, j.partitions, j.partition
	}
	return r
}

// chosenPartition is the partition a job runs in: the one the engine
// chose for its bind (engine.Bind.Partition), else, with no bind at hand
// (adoption, restore), the job's only partition when it names exactly one.
func chosenPartition(j *recJob, b *engine.Bind) string {
	if b != nil && b.Partition != "" {
		return b.Partition
	}
	if len(j.partitions) == 1 {
		return j.partitions[0]
	}
	return ""
}

// event records what an accepted event did (err == nil) or a refused
// submission.
func (rc *recorder) event(ev engine.Event, err error) {
	switch ev.Kind {
	case engine.EventJobSubmitted, engine.EventJobAdopted:
		if ev.Job == nil {
			return
		}
		j := &recJob{queue: ev.Job.Queue, account: ev.Job.Account, user: ev.Job.User, partitions: slices.Clone(ev.Job.Partitions)}
		if err != nil {
			if _, dup := rc.jobs[ev.Job.ID]; dup {
				j = rc.jobs[ev.Job.ID]
			}
			r := rc.base(RecordReject, ev.Time, ev.Job.ID, j)
			r.Reason = err.Error()
			rc.out.Record(r)
			return
		}
		rc.jobs[ev.Job.ID] = j
		if ev.Kind == engine.EventJobSubmitted {
			rc.out.Record(rc.base(RecordSubmit, ev.Time, ev.Job.ID, j))
			return
		}
		start := ev.Started
		if start.IsZero() || start.After(ev.Time) {
			start = ev.Time
		}
		j.partition = chosenPartition(j, nil)
		rc.start(j, ev.Job.ID, start, ev.Members, "adopted")
	case engine.EventJobFinished, engine.EventJobCancelled:
		if err != nil {
			return
		}
		reason := "finished"
		if ev.Kind == engine.EventJobCancelled {
			reason = "cancelled"
		}
		rc.end(ev.JobID, ev.Time, reason)
	case engine.EventBindApplied:
		b, ok := rc.binding[ev.JobID]
		j := rc.jobs[ev.JobID]
		if err != nil || !ok || b.run != ev.Run || j == nil {
			return
		}
		delete(rc.binding, ev.JobID)
		rc.start(j, ev.JobID, ev.Time, b.members, b.reason)
	case engine.EventBindFailed, engine.EventBindDeferred:
		b, ok := rc.binding[ev.JobID]
		if err != nil || !ok || b.run != ev.Run {
			return
		}
		delete(rc.binding, ev.JobID)
		j := rc.jobs[ev.JobID]
		if j == nil || ev.Reason == "" {
			return
		}
		j.reason, j.waited = engine.ReasonBindRefused, true
		r := rc.base(RecordWait, ev.Time, ev.JobID, j)
		r.Reason = engine.ReasonBindRefused.String() + ": " + ev.Reason
		rc.out.Record(r)
	case engine.EventPreemptApplied:
		p, ok := rc.preempting[ev.JobID]
		j := rc.jobs[ev.JobID]
		if err != nil || !ok || p.Run != ev.Run || j == nil {
			return
		}
		delete(rc.preempting, ev.JobID)
		r := rc.base(RecordPreempt, ev.Time, ev.JobID, j)
		r.Reason = fmt.Sprintf("%s: for %s, grace until %s, %.0f GPU-seconds lost", p.Cause, p.For,
			p.Deadline.UTC().Format(time.RFC3339), p.CostGPUSeconds)
		rc.out.Record(r)
	case engine.EventPreemptFailed:
		if p, ok := rc.preempting[ev.JobID]; ok && p.Run == ev.Run {
			delete(rc.preempting, ev.JobID)
		}
	case engine.EventResizeFailed:
		j := rc.jobs[ev.JobID]
		if err != nil || j == nil || j.start.IsZero() {
			return
		}
		members := slices.DeleteFunc(slices.Clone(j.members), func(m engine.Member) bool {
			return slices.ContainsFunc(ev.Members, func(x engine.Member) bool { return sameMember(m, x) })
		})
		if len(members) == len(j.members) {
			return
		}
		r := rc.base(RecordResize, ev.Time, ev.JobID, j)
		r.Reason = fmt.Sprintf("grow failed, back to %d members", len(members))
		rc.charge(&r, j, ev.JobID, ev.Time)
		rc.out.Record(r)
		rc.start(j, ev.JobID, ev.Time, members, "resized")
	case engine.EventDevicesReported:
		j := rc.jobs[ev.JobID]
		if err != nil || j == nil || j.start.IsZero() {
			return
		}
		j.members = slices.Clone(ev.Members)
		r := rc.base(RecordDevices, ev.Time, ev.JobID, j)
		r.GPUs, r.Driver, r.Image = rc.gpus(ev.JobID, j.members)
		r.Reason = "reported by the backend"
		rc.out.Record(r)
	}
}

// start records a run beginning at at on members.
func (rc *recorder) start(j *recJob, id string, at time.Time, members []engine.Member, reason string) {
	j.members, j.start, j.reason, j.waited = slices.Clone(members), at, engine.ReasonNone, false
	r := rc.base(RecordStart, at, id, j)
	r.Reason = reason
	r.GPUs, r.Driver, r.Image = rc.gpus(id, j.members)
	rc.out.Record(r)
}

// charge fills r with the usage of j's current run up to at and ends it.
func (rc *recorder) charge(r *JobRecord, j *recJob, id string, at time.Time) {
	if j.start.IsZero() {
		return
	}
	r.RunStart = j.start
	r.GPUs, r.Driver, r.Image = rc.gpus(id, j.members)
	var milli int64
	for _, g := range r.GPUs {
		milli += g.Milli
	}
	if d := at.Sub(j.start); d > 0 {
		r.GPUMicroseconds = milli * d.Milliseconds()
	}
	j.start = time.Time{}
}

func (rc *recorder) end(id string, at time.Time, reason string) {
	delete(rc.binding, id)
	delete(rc.preempting, id)
	j := rc.jobs[id]
	r := rc.base(RecordEnd, at, id, j)
	if j == nil {
		// A job the recorder never saw start (one a restored engine
		// held): its end, without usage.
		r.Reason = reason
		rc.out.Record(r)
		return
	}
	r.Reason = reason
	rc.charge(&r, j, id, at)
	delete(rc.jobs, id)
	rc.out.Record(r)
}

// cycle records what a cycle applied: replica stops, rejections, requeues,
// failures, preemptions, resizes, starts and new pending reasons.
func (rc *recorder) cycle(rd *engine.Ready, out *engine.Outcome) {
	at := rd.At
	for _, st := range rd.Stops {
		// A replica the engine removed (its service shrank or was
		// deleted) ends; one never bound was never recorded.
		if rc.jobs[st.Job] != nil {
			rc.end(st.Job, at, "stopped: "+st.Cause.String())
		}
	}
	for _, rj := range rd.Rejected {
		r := rc.base(RecordReject, at, rj.Job, rc.jobs[rj.Job])
		if rj.Err != nil {
			r.Reason = rj.Err.Error()
		}
		delete(rc.jobs, rj.Job)
		rc.out.Record(r)
	}
	for _, f := range rd.Failed {
		rc.end(f.Job, at, "failed: node "+f.Node+" failed")
	}
	for _, id := range rd.Requeued {
		j := rc.jobs[id]
		if j == nil {
			continue
		}
		delete(rc.binding, id)
		delete(rc.preempting, id)
		r := rc.base(RecordRequeue, at, id, j)
		r.Reason = "requeued"
		rc.charge(&r, j, id, at)
		rc.out.Record(r)
	}
	for _, p := range rd.Preemptions {
		// Recorded when the backend takes it (engine.EventPreemptApplied).
		if rc.jobs[p.Victim] != nil && !slices.Contains(out.RefusedPreemptions, p.Victim) {
			rc.preempting[p.Victim] = p
		}
	}
	for _, rs := range rd.Resizes {
		j := rc.jobs[rs.Job]
		if j == nil || j.start.IsZero() {
			continue
		}
		members := slices.DeleteFunc(slices.Clone(j.members), func(m engine.Member) bool {
			return slices.ContainsFunc(rs.Remove, func(x engine.Member) bool { return sameMember(m, x) })
		})
		if !slices.Contains(out.RefusedResizes, rs.Job) {
			members = append(members, rs.Add...)
		}
		if len(members) == len(j.members) {
			continue
		}
		r := rc.base(RecordResize, at, rs.Job, j)
		r.Reason = fmt.Sprintf("resized to %d members", len(members))
		rc.charge(&r, j, rs.Job, at)
		rc.out.Record(r)
		rc.start(j, rs.Job, at, members, "resized")
	}
	for i := range rd.Binds {
		b := &rd.Binds[i]
		if slices.Contains(out.RefusedBinds, b.Job) {
			continue
		}
		j := rc.jobs[b.Job]
		if j == nil {
			// Submitted through Engine.Intake, not an event: the bind
			// says its queue and submission time.
			j = &recJob{queue: b.Queue}
			rc.jobs[b.Job] = j
			if !b.Submit.IsZero() {
				rc.out.Record(rc.base(RecordSubmit, b.Submit, b.Job, j))
			}
		}
		j.partition = chosenPartition(j, b)
		reason := "placed"
		if b.Backfill {
			reason = "placed by backfill"
		}
		if !out.AssumeBinds {
			rc.start(j, b.Job, at, b.Members, reason)
			continue
		}
		// Recorded when the backend confirms it (engine.EventBindApplied).
		rc.binding[b.Job] = issuedBind{run: b.Run, members: slices.Clone(b.Members), reason: reason}
	}
	for i := range rd.Pending {
		p := &rd.Pending[i]
		j := rc.jobs[p.Job]
		if j == nil || (j.waited && j.reason == p.Reason) || p.Reason == engine.ReasonNone {
			continue
		}
		j.reason, j.waited = p.Reason, true
		r := rc.base(RecordWait, at, p.Job, j)
		r.Reason = p.String()
		rc.out.Record(r)
	}
	for _, id := range out.RefusedBinds {
		j := rc.jobs[id]
		if j == nil || (j.waited && j.reason == engine.ReasonBindRefused) {
			continue
		}
		j.reason, j.waited = engine.ReasonBindRefused, true
		r := rc.base(RecordWait, at, id, j)
		r.Reason = engine.ReasonBindRefused.String() + ": the backend refused the bind"
		rc.out.Record(r)
	}
}

// gpus lists the devices of members, with the backend's attributes.
func (rc *recorder) gpus(id string, members []engine.Member) (gs []RecordGPU, driver, image string) {
	var at JobAttributes
	if rc.attrs != nil {
		at = rc.attrs.JobAttributes(id, members)
	}
	for _, m := range members {
		for k, g := range m.GPUs {
			rg := RecordGPU{Node: m.Node, Index: g, Milli: 1000}
			if m.Fractional {
				rg.Milli = fractionMilli(m)
				if k > 0 {
					continue
				}
			}
			if n := len(gs); n < len(at.UUIDs) {
				rg.UUID = at.UUIDs[n]
			}
			gs = append(gs, rg)
		}
	}
	return gs, at.Driver, at.Image
}

// fractionMilli is the part of its GPU a fractional member holds: a
// share's thousandths, or a MIG instance's compute slices.
func fractionMilli(m engine.Member) int64 {
	if m.Share.ID != 0 {
		return int64(m.Share.Milli)
	}
	return instanceMilli(m.Instance)
}

func instanceMilli(in mig.Instance) int64 {
	return int64(in.Profile.ComputeSlices()) * 1000 / int64(max(1, in.Profile.Model().ComputeSlices()))
}

func sameMember(a, b engine.Member) bool {
	return a.Node == b.Node && slices.Equal(a.GPUs, b.GPUs) && a.Fractional == b.Fractional &&
		a.Instance == b.Instance && a.Share.ID == b.Share.ID
}

// FormatGPUs writes gs as "node:index[=uuid][@milli]" items joined by
// commas (the form the accounting database stores).
func FormatGPUs(gs []RecordGPU) string {
	var sb strings.Builder
	for i, g := range gs {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%s:%d", g.Node, g.Index)
		if g.UUID != "" {
			sb.WriteString("=" + g.UUID)
		}
		if g.Milli != 1000 {
			fmt.Fprintf(&sb, "@%d", g.Milli)
		}
	}
	return sb.String()
}

// seed makes the recorder know the jobs of an engine restored from st:
// their queue, account, user and partitions from the saved submissions
// (and the snapshot's jobs),
// and for running jobs their members and start (the View's, else now), so
// that their runs are charged in full when they end. It records nothing:
// the steps so far were recorded before the restart.
func (rc *recorder) seed(eng *engine.Engine, st *engine.State) {
	meta := map[string]*queue.Job{}
	if sn := st.Snapshot; sn != nil {
		for _, sjs := range [][]engine.SavedJob{sn.Pending, sn.Running} {
			for _, sj := range sjs {
				if sj.Job != nil {
					meta[sj.Job.ID] = sj.Job
				}
			}
		}
	}
	for _, r := range st.Records {
		if r.Event != nil && r.Event.Job != nil {
			meta[r.Event.Job.ID] = r.Event.Job
		}
		for _, j := range r.Intake {
			meta[j.ID] = j
		}
	}
	starts := map[string]time.Time{}
	if v := eng.View(); v != nil {
		for _, rj := range v.Running() {
			starts[rj.Job] = rj.Start
		}
	}
	known := func(id string) *recJob {
		j := &recJob{}
		if q := meta[id]; q != nil {
			j.queue, j.account, j.user, j.partitions = q.Queue, q.Account, q.User, slices.Clone(q.Partitions)
			j.partition = chosenPartition(j, nil)
		}
		rc.jobs[id] = j
		return j
	}
	pending, running := eng.JobIDs()
	for _, id := range pending {
		known(id)
	}
	for _, id := range running {
		j := known(id)
		j.members, _ = eng.Members(id)
		j.start = eng.Now()
		if t, ok := starts[id]; ok {
			j.start = t
		}
	}
}
