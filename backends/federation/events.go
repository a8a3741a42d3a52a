package federation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Next merges the members' event streams. The first call starts one
// goroutine per member that calls its Next with no wake-up and queues its
// events, translated to the federation's names (nodes "pool/node", jobs
// pinned to their pool); the federation's own node changes (from moves)
// join the same queue. Next returns the queued events in time order; an
// event stamped before one already returned is restamped to that time,
// since members' clocks are not one clock. It waits until wake on the
// wall clock. When every member's stream has ended it returns ErrClosed;
// a member that fails ends the federation's stream with its error.
//
// The pumps live until ctx of the first call is done, so members must be
// wall-clock backends (backends.Feed, SLURM, Kubernetes); simulated
// members on virtual clocks are driven by tests and the replay directly.
func (f *Federation) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	f.evMu.Lock()
	if !f.started {
		f.started = true
		for _, m := range f.members {
			go f.pump(ctx, m)
		}
	}
	f.evMu.Unlock()
	evs, err := f.feed.Next(ctx, wake)
	if errors.Is(err, backends.ErrClosed) {
		f.evMu.Lock()
		if len(f.errs) > 0 {
			err = errors.Join(f.errs...)
		}
		f.evMu.Unlock()
	}
	if err != nil || len(evs) == 0 {
		return evs, err
	}
	slices.SortStableFunc(evs, func(a, b engine.Event) int { return a.Time.Compare(b.Time) })
	f.evMu.Lock()
	for i := range evs {
		if evs[i].Time.Before(f.last) {
			evs[i].Time = f.last
		}
		f.last = evs[i].Time
	}
	f.evMu.Unlock()
	f.gate(evs)
	f.Account(evs)
	return evs, nil
}

// gate applies the books at delivery: a node copy reported ready whose
// host its pool does not own, or that is moving, is delivered cordoned.
// (Translate does the same when the event arrives; doing it again here
// covers a member's report translated before a move ended and delivered
// after the federation's own report of the move.)
func (f *Federation) gate(evs []engine.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range evs {
		ev := &evs[i]
		if ev.Kind != engine.EventNodeChanged && ev.Kind != engine.EventNodeAdded || ev.Node.State != topo.Ready {
			continue
		}
		pool, host, ok := SplitNode(ev.Node.Name)
		if h := f.hosts[host]; ok && h != nil && (h.owner != pool || h.moving) {
			ev.Node.State = topo.Cordoned
		}
	}
}

// pump feeds one member's events into the federation's stream. The stream
// ends when every member's has ended, or at once when one fails.
func (f *Federation) pump(ctx context.Context, m *member) {
	for {
		evs, err := m.Backend.Next(ctx, time.Time{})
		if err != nil {
			f.evMu.Lock()
			if errors.Is(err, backends.ErrClosed) {
				f.closed++
			} else if ctx.Err() == nil {
				f.errs = append(f.errs, fmt.Errorf("federation: pool %s: %w", m.Name, err))
			}
			end := f.closed == len(f.members) || len(f.errs) > 0
			f.evMu.Unlock()
			if end {
				f.feed.Close()
			}
			return
		}
		f.push(f.Translate(m.Name, evs)...)
	}
}

func (f *Federation) push(evs ...engine.Event) {
	if len(evs) > 0 {
		_ = f.feed.Push(evs...) // after the stream ended: nobody reads them
	}
}

// Translate turns events of pool's member into the federation's: node
// names become "pool/node", node labels gain LabelPool and LabelHost,
// submitted and adopted jobs are pinned to the pool. A member's report
// that a node it does not own is schedulable is kept but marked cordoned:
// the federation's books, not the member, decide ownership. Exposed for
// drivers that call member streams themselves (tests, the replay).
func (f *Federation) Translate(pool string, evs []engine.Event) []engine.Event {
	out := make([]engine.Event, 0, len(evs))
	for _, ev := range evs {
		switch ev.Kind {
		case engine.EventJobSubmitted:
			if ev.Job != nil {
				if f.ownSubmitted(ev.Job.ID) {
					continue // launched by the federation: the engine has it
				}
				ev.Job = f.pin(ev.Job, pool)
			}
		case engine.EventJobAdopted:
			if ev.Job != nil {
				ev.Job = f.pin(ev.Job, pool)
			}
			ev.Members = renameMembers(pool, ev.Members)
		case engine.EventDevicesReported:
			ev.Members = renameMembers(pool, ev.Members)
		case engine.EventNodeAdded, engine.EventNodeChanged:
			host := ev.Node.Name
			ev.Node.Name = NodeName(pool, host)
			ev.Node.Labels = poolLabels(ev.Node.Labels, pool, host)
			if ev.Kind == engine.EventNodeAdded {
				ev.Node.Domains = append([]string{pool}, ev.Node.Domains...)
			}
			f.mu.Lock()
			if h := f.hosts[host]; h != nil {
				h.labels[pool] = ev.Node.Labels
				if ev.Node.State == topo.Ready && (h.owner != pool || h.moving) {
					ev.Node.State = topo.Cordoned
				}
			}
			f.mu.Unlock()
		case engine.EventNodeFailed:
			ev.NodeName = NodeName(pool, ev.NodeName)
		case engine.EventJobFinished, engine.EventJobCancelled:
			// A job the federation launched that ends here is the
			// member's from now on: a later submission of it (a
			// requeue, in this same batch too) is passed on.
			f.forgetOwn(ev.JobID)
		}
		out = append(out, ev)
	}
	return out
}

// Account keeps the federation's books (pending demand by pool, jobs per
// node) from translated events. Next calls it on what it returns; drivers
// that read member streams themselves call it.
func (f *Federation) Account(evs []engine.Event) {
	for _, ev := range evs {
		switch ev.Kind {
		case engine.EventJobSubmitted:
			if ev.Job != nil {
				if len(ev.Job.Request.Groups) > 0 {
					if p, ok := ev.Job.Request.Groups[0].Selector[LabelPool]; ok {
						f.notePending(p, ev.Job)
					}
				}
			}
		case engine.EventJobAdopted:
			if ev.Job != nil && len(ev.Members) > 0 {
				p, _, _ := SplitNode(ev.Members[0].Node)
				f.noteRunning(p, ev.Job.ID, ev.Members)
			}
		case engine.EventJobFinished, engine.EventJobCancelled:
			f.noteEnded(ev.JobID)
			f.forgetOwn(ev.JobID)
		}
	}
}

// nodeEvent is the federation's own report of a node copy's state.
func (f *Federation) nodeEvent(pool, host string, st topo.NodeState) {
	f.mu.Lock()
	var labels map[string]string
	if h := f.hosts[host]; h != nil {
		labels = h.labels[pool]
	}
	f.mu.Unlock()
	if labels == nil {
		labels = poolLabels(nil, pool, host)
	}
	f.push(engine.NodeChanged(f.cfg.Clock.Now(), NodeName(pool, host), st, labels))
}
