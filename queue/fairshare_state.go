package queue

import (
	"fmt"
	"math"
	"time"
)

// FairShareState is a Tree's decayed usage (see Advance) as data, for an
// engine's snapshot: the decayed GPU-seconds of each queue and account
// with any, and the time they are accrued up to. Usage of running jobs
// (Charge, Adopt) is not in it: it follows the jobs.
type FairShareState struct {
	Clock    time.Time
	Queues   map[string]float64 `json:",omitempty"`
	Accounts map[string]float64 `json:",omitempty"`
}

// FairShareState returns the tree's decayed usage.
func (t *Tree) FairShareState() FairShareState {
	s := FairShareState{Clock: t.clock}
	for _, q := range t.queues {
		if d := t.nodes[q].decayed; d != 0 {
			if s.Queues == nil {
				s.Queues = map[string]float64{}
			}
			s.Queues[t.nodes[q].name] = d
		}
	}
	for i := range t.accounts {
		if d := t.accounts[i].decayed; d != 0 {
			if s.Accounts == nil {
				s.Accounts = map[string]float64{}
			}
			s.Accounts[t.accounts[i].name] = d
		}
	}
	return s
}

// SetFairShareState replaces the tree's decayed usage and its clock with
// s (queues and accounts s leaves out have none). Errors: ErrUnknownQueue,
// ErrUnknownAccount, ErrInvalidJob for a value that is not finite and
// non-negative; the tree is unchanged then.
func (t *Tree) SetFairShareState(s FairShareState) error {
	for name, v := range s.Queues {
		if i, ok := t.nodeIdx[name]; !ok || t.nodes[i].kind != kindQueue {
			return fmt.Errorf("%w: %q", ErrUnknownQueue, name)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%w: queue %q: GPU-seconds %v", ErrInvalidJob, name, v)
		}
	}
	for name, v := range s.Accounts {
		if _, ok := t.acctIdx[name]; !ok {
			return fmt.Errorf("%w: %q", ErrUnknownAccount, name)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%w: account %q: GPU-seconds %v", ErrInvalidJob, name, v)
		}
	}
	for _, q := range t.queues {
		t.nodes[q].decayed = s.Queues[t.nodes[q].name]
	}
	for i := range t.accounts {
		t.accounts[i].decayed = s.Accounts[t.accounts[i].name]
	}
	t.clock = s.Clock
	t.sumCohorts()
	t.version++
	return nil
}
