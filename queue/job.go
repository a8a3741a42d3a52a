package queue

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/gang"
)

// Class is the kind of work a job does.
type Class uint8

// Job classes. The zero value is ClassTraining.
const (
	ClassTraining Class = iota
	ClassInference
	ClassBestEffort
	numClasses
)

func (c Class) String() string {
	switch c {
	case ClassTraining:
		return "training"
	case ClassInference:
		return "inference"
	case ClassBestEffort:
		return "best-effort"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Elastic bounds the member count of the first group of an elastic job. The
// zero value means "not elastic". When set, Request.Groups[0].Members is the
// count asked for (and charged to quota) and must lie in
// [MinMembers, MaxMembers]; the engine may run the job with fewer members,
// down to MinMembers.
type Elastic struct {
	MinMembers int `json:",omitzero"`
	MaxMembers int `json:",omitzero"`
}

// IsZero reports whether the job is not elastic.
func (e Elastic) IsZero() bool { return e.MinMembers == 0 && e.MaxMembers == 0 }

// Job is one unit of pending work: a gang plus the facts the queues need to
// admit and order it.
//
// Ownership: once a job is handed to Intake.Submit or Pending.Add, the queue
// package and observers of snapshots read it from other goroutines, so the
// caller must not modify it any more.
type Job struct {
	// ID identifies the job; unique among pending jobs. Ties in every order
	// break on it.
	ID string
	// Queue is the name of the leaf queue the job is charged to.
	Queue string `json:",omitzero"`
	// Account is the Fair Tree account of the job; empty means the account
	// mirroring Queue.
	Account string `json:",omitzero"`
	// User is the submitting user, for per-user limits and accounting;
	// empty: none given.
	User string `json:",omitzero"`
	// Partitions names the partitions the job may run in (placement stays
	// inside one of them); empty: the engine's default.
	Partitions []string `json:",omitzero"`
	// Priority: larger runs first under the priority orders.
	Priority int32 `json:",omitzero"`
	// Class is training, inference or best effort.
	Class Class `json:",omitzero"`
	// Request is the placement shape: member groups and topology constraint.
	Request gang.Request `json:",omitzero"`
	// RuntimeEstimate is the expected runtime; zero: unknown.
	RuntimeEstimate time.Duration `json:",omitzero"`
	// RuntimeLimit is the wall-clock limit; zero: none.
	RuntimeLimit time.Duration `json:",omitzero"`
	// Preemptible allows the engine to preempt the job once it has run
	// MinRuntime, giving it GracePeriod to stop.
	Preemptible bool          `json:",omitzero"`
	MinRuntime  time.Duration `json:",omitzero"`
	GracePeriod time.Duration `json:",omitzero"`
	// Elastic bounds the first group's members; zero: not elastic.
	Elastic Elastic `json:",omitzero"`
	// Submit is the submission time, given by the caller. Required: it
	// orders FIFO and drives aging.
	Submit time.Time `json:",omitzero"`
	// ArrayIndex is the index of the job within its job array; zero when it
	// is not part of one.
	ArrayIndex int `json:",omitzero"`
	// Name is the job's name (SLURM's --job-name): jobs of one User with
	// one Name and a singleton dependency run one at a time.
	Name string `json:",omitzero"`
	// Dependencies must be met before the job may start (see Dependency);
	// empty: none.
	Dependencies []Dependency `json:",omitzero"`

	// dem caches the demand of the job for one tree. Written only by the
	// owning goroutine before the job is published.
	dem *demand
}

// MaxQuantity bounds every per-resource amount a job may ask for (about
// 10^15 thousandths of a GPU), so that sums over a whole cluster never come
// near saturation and charge/release stay exact inverses.
const MaxQuantity Amount = 1 << 50

// Errors of job validation and admission, wrapped by *FieldError or returned
// with %w; match them with errors.Is.
var (
	ErrInvalidJob     = errors.New("queue: invalid job")
	ErrUnknownQueue   = errors.New("queue: unknown queue")
	ErrUnknownAccount = errors.New("queue: unknown account")
	ErrDuplicateJob   = errors.New("queue: duplicate job ID")
	ErrNilJob         = errors.New("queue: nil job")
)

// FieldError names the field of a job that is invalid.
type FieldError struct {
	JobID string
	// Field is a Go-syntax path, e.g. "RuntimeEstimate" or
	// "Request.Groups[1].Members".
	Field string
	// Err is ErrInvalidJob, ErrUnknownQueue or ErrUnknownAccount.
	Err error
	// Cause is the underlying error (a *gang.FieldError), if any.
	Cause error
	Msg   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: job %q: %s: %s", e.Err, e.JobID, e.Field, e.Msg)
}

// Unwrap gives both the sentinel and the cause to errors.Is and errors.As.
func (e *FieldError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// Validate checks the job on its own, without a queue tree: identity,
// counts, durations and the request. The queue and account are checked
// against a tree by Tree.ValidateJob (and by Pending.Add). It returns nil or
// a *FieldError wrapping ErrInvalidJob.
func (j *Job) Validate() error {
	if j == nil {
		return ErrNilJob
	}
	bad := func(field, format string, args ...any) error {
		return &FieldError{JobID: j.ID, Field: field, Err: ErrInvalidJob, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case j.ID == "":
		return bad("ID", "must not be empty")
	case j.Queue == "":
		return bad("Queue", "must not be empty")
	case j.Class >= numClasses:
		return bad("Class", "unknown class %d", j.Class)
	}
	if err := j.Request.Validate(); err != nil {
		field := "Request"
		if fe, ok := errors.AsType[*gang.FieldError](err); ok {
			if fe.Group >= 0 {
				field = fmt.Sprintf("Request.Groups[%d].%s", fe.Group, fe.Field)
			} else {
				field = "Request." + fe.Field
			}
		}
		return &FieldError{JobID: j.ID, Field: field, Err: ErrInvalidJob, Cause: err, Msg: err.Error()}
	}
	for i := range j.Request.Groups {
		g := &j.Request.Groups[i]
		for k := range g.Selector {
			if k == "" {
				return bad(fmt.Sprintf("Request.Groups[%d].Selector", i), "empty label key")
			}
		}
		if g.Members > 1<<24 {
			return bad(fmt.Sprintf("Request.Groups[%d].Members", i), "at most %d, got %d", 1<<24, g.Members)
		}
	}
	// Bound the demand without building it (Submit stays allocation-free):
	// per kind, summed over groups and GPU models.
	var gpu, mig, cpu, mem Amount
	for i := range j.Request.Groups {
		g := &j.Request.Groups[i]
		m := int64(g.Members)
		gpu = gpu.Add(WholeGPUs(int64(g.GPUsPerMember)).Mul(m)).Add(Amount(g.GPUMilli).Mul(m))
		if g.MIGProfile != "" {
			mig = mig.Add(Amount(m))
		}
		cpu = cpu.Add(Amount(g.CPUMilli).Mul(m))
		mem = mem.Add(Amount(g.MemoryMiB).Mul(m))
	}
	for _, q := range [...]Quantity{{GPUMilli, gpu}, {"mig", mig}, {CPUMilli, cpu}, {MemoryMiB, mem}} {
		if q.Amount > MaxQuantity {
			return bad("Request", "asks for more than %d of %s", MaxQuantity, q.Name)
		}
	}
	switch {
	case j.RuntimeEstimate < 0:
		return bad("RuntimeEstimate", "must not be negative, got %v", j.RuntimeEstimate)
	case j.RuntimeLimit < 0:
		return bad("RuntimeLimit", "must not be negative, got %v", j.RuntimeLimit)
	case j.RuntimeLimit > 0 && j.RuntimeEstimate > j.RuntimeLimit:
		return bad("RuntimeEstimate", "%v is over the limit %v", j.RuntimeEstimate, j.RuntimeLimit)
	case j.MinRuntime < 0:
		return bad("MinRuntime", "must not be negative, got %v", j.MinRuntime)
	case j.RuntimeLimit > 0 && j.MinRuntime > j.RuntimeLimit:
		return bad("MinRuntime", "%v is over the limit %v", j.MinRuntime, j.RuntimeLimit)
	case j.GracePeriod < 0:
		return bad("GracePeriod", "must not be negative, got %v", j.GracePeriod)
	case j.ArrayIndex < 0:
		return bad("ArrayIndex", "must not be negative, got %d", j.ArrayIndex)
	case j.Submit.IsZero():
		return bad("Submit", "must be set")
	case j.Submit.Before(minSubmit) || j.Submit.After(maxSubmit):
		return bad("Submit", "%v is outside %v..%v", j.Submit, minSubmit, maxSubmit)
	}
	for i, d := range j.Dependencies {
		if d.Kind < AfterOK || d.Kind > Singleton {
			return bad(fmt.Sprintf("Dependencies[%d].Kind", i), "unknown kind %d", d.Kind)
		}
	}
	if !j.Elastic.IsZero() {
		m := j.Request.Groups[0].Members
		switch {
		case j.Elastic.MinMembers <= 0:
			return bad("Elastic.MinMembers", "must be positive, got %d", j.Elastic.MinMembers)
		case j.Elastic.MaxMembers < j.Elastic.MinMembers:
			return bad("Elastic.MinMembers", "%d is above MaxMembers %d", j.Elastic.MinMembers, j.Elastic.MaxMembers)
		case m < j.Elastic.MinMembers || m > j.Elastic.MaxMembers:
			return bad("Request.Groups[0].Members", "%d is outside the elastic range %d..%d", m, j.Elastic.MinMembers, j.Elastic.MaxMembers)
		}
	}
	return nil
}

// Submit times must fit time.Time.UnixNano.
var (
	minSubmit = time.Unix(0, math64Min)
	maxSubmit = time.Unix(0, math64Max)
)

const (
	math64Min = -1 << 63
	math64Max = 1<<63 - 1
)

// AccountName is the Fair Tree account of the job: Account, or Queue when
// Account is empty.
func (j *Job) AccountName() string {
	if j.Account != "" {
		return j.Account
	}
	return j.Queue
}

// Demand is the quota the job asks for, summed over its groups, sorted by
// resource name (see ResourceName for the units and the GPU model
// convention). Counts are saturating; Validate bounds them. The result is a
// fresh slice.
func (j *Job) Demand() Resources {
	// At most three resources a group (GPUs or MIG, CPU, memory): one
	// array, not one per append.
	rs := j.appendDemand(make(Resources, 0, min(3*len(j.Request.Groups), 8)))
	if len(rs) == 0 {
		return nil // as before the array was made up front
	}
	return rs
}

// appendDemand appends Demand's quantities to rs (empty) and sorts them
// by name: Demand without its array when rs has room (Tree.demandOf
// passes one on its stack).
func (j *Job) appendDemand(rs Resources) Resources {
	for i := range j.Request.Groups {
		g := &j.Request.Groups[i]
		m := int64(g.Members)
		model := g.GPUModel
		if model == "" && len(g.GPUModels) == 1 {
			model = g.GPUModels[0]
		}
		switch {
		case g.GPUsPerMember > 0:
			rs = addQuantity(rs, GPUModel(model), WholeGPUs(int64(g.GPUsPerMember)).Mul(m))
		case g.GPUMilli > 0:
			rs = addQuantity(rs, GPUModel(model), Amount(g.GPUMilli).Mul(m))
		case g.MIGProfile != "":
			rs = addQuantity(rs, MIG(g.MIGProfile), Amount(m))
		}
		if g.CPUMilli > 0 {
			rs = addQuantity(rs, CPUMilli, Amount(g.CPUMilli).Mul(m))
		}
		if g.MemoryMiB > 0 {
			rs = addQuantity(rs, MemoryMiB, Amount(g.MemoryMiB).Mul(m))
		}
	}
	slices.SortFunc(rs, func(a, b Quantity) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return rs
}

// addQuantity is Resources.add returning the slice (so that appendDemand's
// array can stay on its caller's stack).
func addQuantity(rs Resources, name ResourceName, a Amount) Resources {
	for i := range rs {
		if rs[i].Name == name {
			rs[i].Amount = rs[i].Amount.Add(a)
			return rs
		}
	}
	return append(rs, Quantity{Name: name, Amount: a})
}

// GPUMilliTotal is the job's GPU demand in thousandths of a GPU over all
// models, MIG instances counted by compute slices (a "3g.40gb" instance is
// 3/7 of a GPU). This is the rate at which a running job accrues GPU-time
// for fair share.
func (j *Job) GPUMilliTotal() float64 {
	var s float64
	for _, q := range j.Demand() {
		s += float64(q.Amount) * q.Name.gpuMilliWeight()
	}
	return s
}
