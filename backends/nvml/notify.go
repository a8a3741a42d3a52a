package nvml

import "sync"

// callbacks runs the embedding program's callbacks (OnExit, OnHealth) on
// one goroutine, in the order the backend produced them, never under the
// backend's lock.
type callbacks struct {
	mu     sync.Mutex
	queue  []func()
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

func newCallbacks() *callbacks {
	c := &callbacks{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *callbacks) add(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.queue = append(c.queue, f)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *callbacks) loop() {
	defer close(c.done)
	for {
		c.mu.Lock()
		q := c.queue
		c.queue = nil
		closed := c.closed
		c.mu.Unlock()
		for _, f := range q {
			f()
		}
		if closed && len(q) == 0 {
			return
		}
		if len(q) == 0 {
			<-c.wake
		}
	}
}

// close runs what is queued, then stops.
func (c *callbacks) close() {
	c.mu.Lock()
	c.closed = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.mu.Unlock()
	<-c.done
}
