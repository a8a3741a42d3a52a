package backends

import (
	"context"
	"sync"
	"time"

	"github.com/berthsched/berth/engine"
)

// Feed is an Events stream on the wall clock for backends that learn of
// changes by watching (informers, slurmctld polling): watchers Push events
// from any goroutine, and the Runner's Next takes them in order. Push and
// Close are safe for concurrent use; Next is for one goroutine.
type Feed struct {
	mu     sync.Mutex
	evs    []engine.Event
	closed bool
	notify chan struct{} // holds a token when evs may be non-empty or closed
}

// NewFeed returns an empty, open feed.
func NewFeed() *Feed { return &Feed{notify: make(chan struct{}, 1)} }

// Push appends events (stamped by the caller, normally time.Now()). It
// returns ErrClosed after Close.
func (f *Feed) Push(evs ...engine.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	f.evs = append(f.evs, evs...)
	f.signal()
	return nil
}

// Close ends the stream: Next returns the events still queued, then
// ErrClosed.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.signal()
}

func (f *Feed) signal() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// Next returns the queued events, waiting for some until wake (a zero wake:
// no limit) or ctx is done. See Events.
func (f *Feed) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	var timer <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(time.Until(wake))
		defer t.Stop()
		timer = t.C
	}
	for {
		f.mu.Lock()
		if len(f.evs) > 0 {
			evs := f.evs
			f.evs = nil
			f.mu.Unlock()
			return evs, nil
		}
		closed := f.closed
		f.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-f.notify:
		case <-timer:
			return []engine.Event{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var _ Events = (*Feed)(nil)
