package queue

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrIntakeFull is returned by Intake.Submit when the intake holds its
// configured bound of jobs that the owner has not drained yet. The job was
// not enqueued: the caller still owns it and should retry after a while
// (the owner drains once per cycle), shed load, or report back-pressure
// upstream. The intake never drops a job silently.
var ErrIntakeFull = errors.New("queue: intake full")

// Intake is a bounded, lock-free, multi-producer queue of submitted jobs:
// Dmitry Vyukov's bounded MPMC ring, where every slot carries a sequence
// number, producers claim a slot with one compare-and-swap and publish it
// with one atomic store. No mutex, no allocation per Submit.
//
// Submit, Len and Cap are safe from any goroutine; Drain too (consumers
// claim slots the same way), though the design has one owner draining once
// per cycle.
type Intake struct {
	_     [64]byte
	enq   atomic.Uint64
	_     [56]byte
	deq   atomic.Uint64
	_     [56]byte
	mask  uint64
	slots []intakeSlot
}

type intakeSlot struct {
	seq atomic.Uint64
	job *Job
}

// MaxIntakeCapacity bounds an intake's capacity: its slots are allocated
// up front (a million of them is 16 MiB).
const MaxIntakeCapacity = 1 << 20

// NewIntake returns an intake that holds up to capacity jobs, rounded up
// to a power of two (at least 2, at most MaxIntakeCapacity).
func NewIntake(capacity int) (*Intake, error) {
	if capacity <= 0 || capacity > MaxIntakeCapacity {
		return nil, fmt.Errorf("queue: intake capacity must be in 1..%d, got %d", MaxIntakeCapacity, capacity)
	}
	n := 2
	for n < capacity {
		n <<= 1
	}
	in := &Intake{mask: uint64(n - 1), slots: make([]intakeSlot, n)}
	for i := range in.slots {
		in.slots[i].seq.Store(uint64(i))
	}
	return in, nil
}

// Submit validates j (Job.Validate; the tree checks queue and account when
// the job is drained) and enqueues it. Errors: a *FieldError from
// Validate, ErrNilJob, or ErrIntakeFull. Once Submit returns nil the job
// belongs to the queue package; the caller must not modify it.
func (in *Intake) Submit(j *Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	return in.push(j)
}

// push enqueues without validation.
func (in *Intake) push(j *Job) error {
	pos := in.enq.Load()
	for {
		s := &in.slots[pos&in.mask]
		seq := s.seq.Load()
		switch dif := int64(seq - pos); {
		case dif == 0:
			if in.enq.CompareAndSwap(pos, pos+1) {
				s.job = j
				s.seq.Store(pos + 1)
				return nil
			}
			pos = in.enq.Load()
		case dif < 0:
			// The slot still holds a job of the previous lap: full.
			return ErrIntakeFull
		default:
			pos = in.enq.Load()
		}
	}
}

// pop dequeues one job; nil when empty (or when the next slot is claimed
// but not yet published, which Drain treats as the end of this drain).
func (in *Intake) pop() *Job {
	pos := in.deq.Load()
	for {
		s := &in.slots[pos&in.mask]
		seq := s.seq.Load()
		switch dif := int64(seq - (pos + 1)); {
		case dif == 0:
			if in.deq.CompareAndSwap(pos, pos+1) {
				j := s.job
				s.job = nil
				s.seq.Store(pos + in.mask + 1)
				return j
			}
			pos = in.deq.Load()
		case dif < 0:
			return nil
		default:
			pos = in.deq.Load()
		}
	}
}

// Drain appends to dst the jobs submitted so far, in submission order (the
// order producers won their slots), and returns it. It takes at most Cap
// jobs, so producers submitting all the while cannot keep it running.
func (in *Intake) Drain(dst []*Job) []*Job {
	for n := len(in.slots); n > 0; n-- {
		j := in.pop()
		if j == nil {
			break
		}
		dst = append(dst, j)
	}
	return dst
}

// Len is the number of jobs waiting (a moment's estimate under
// concurrency).
func (in *Intake) Len() int {
	d := in.deq.Load()
	e := in.enq.Load()
	if e < d {
		return 0
	}
	return int(e - d)
}

// Cap is the bound.
func (in *Intake) Cap() int { return len(in.slots) }
