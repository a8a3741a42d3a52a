package queue

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIntakeFullAndOrder(t *testing.T) {
	in, err := NewIntake(3) // rounds up to 4
	require.NoError(t, err)
	require.Equal(t, 4, in.Cap())
	for i := range 4 {
		require.NoError(t, in.Submit(oneGPUJob(fmt.Sprint(i), "q", 1, 0, t0)))
	}
	err = in.Submit(oneGPUJob("x", "q", 1, 0, t0))
	require.ErrorIs(t, err, ErrIntakeFull)
	require.Equal(t, 4, in.Len())
	got := in.Drain(nil)
	require.Len(t, got, 4)
	for i, j := range got {
		assert.Equal(t, fmt.Sprint(i), j.ID)
	}
	require.Equal(t, 0, in.Len())
	// Slots are reusable after a drain.
	require.NoError(t, in.Submit(oneGPUJob("y", "q", 1, 0, t0)))
	require.Len(t, in.Drain(nil), 1)
	// Invalid jobs are refused at the door.
	var fe *FieldError
	require.ErrorAs(t, in.Submit(&Job{ID: "bad"}), &fe)
	require.ErrorIs(t, in.Submit(nil), ErrNilJob)
	_, err = NewIntake(0)
	require.Error(t, err)
}

// 64 producers submit through a small intake while the owner drains into a
// Pending set and publishes snapshots, and readers walk the snapshots.
// Every job arrives exactly once, each producer's jobs in its order, and no
// snapshot is torn. Run with -race.
func TestIntakeConcurrentProducersAndReaders(t *testing.T) {
	const producers, perProducer = 64, 300
	tr, err := NewTree(TreeSpec{Queues: []QueueSpec{{Name: "q0"}, {Name: "q1"}, {Name: "q2"}}})
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{})
	require.NoError(t, err)
	in, err := NewIntake(256)
	require.NoError(t, err)

	var wg sync.WaitGroup
	var fulls atomic.Int64
	for w := range producers {
		wg.Go(func() {
			for i := range perProducer {
				j := oneGPUJob(fmt.Sprintf("p%02d-%04d", w, i), fmt.Sprintf("q%d", w%3), 1, 0, t0)
				for {
					err := in.Submit(j)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrIntakeFull) {
						t.Error(err)
						return
					}
					fulls.Add(1)
					runtime.Gosched()
				}
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := p.Snapshot()
				n := 0
				for _, q := range s.Queues() {
					c := 0
					s.Pending(q.Name, func(j *Job) bool {
						if j.Queue != q.Name {
							t.Errorf("job %s of %s listed under %s", j.ID, j.Queue, q.Name)
						}
						c++
						return true
					})
					if c != q.Pending {
						t.Errorf("queue %s: %d listed, %d counted", q.Name, c, q.Pending)
					}
					n += c
				}
				if n != s.Len() {
					t.Errorf("snapshot lists %d jobs, says %d", n, s.Len())
				}
				reads.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	removed := 0
	check := func(rej []Rejection) {
		require.Empty(t, rej)
	}
	step := 0
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		step++
		check(p.Drain(in, t0))
		// Remove jobs every other step, as an engine binding them would.
		for q := range 3 {
			var ids []string
			p.Ascend(fmt.Sprintf("q%d", q), func(j *Job) bool { ids = append(ids, j.ID); return true })
			if step%2 == 0 {
				for _, id := range ids {
					_, ok := p.Remove(id)
					require.True(t, ok)
					removed++
				}
			}
		}
		runtime.Gosched()
	}
	check(p.Drain(in, t0))
	close(stop)
	readers.Wait()
	t.Logf("full answers: %d, snapshot reads: %d", fulls.Load(), reads.Load())
	assert.Equal(t, 0, in.Len())
	assert.Positive(t, reads.Load())
	assert.Equal(t, producers*perProducer, removed+p.Len(), "every job arrives exactly once")
}

// Per-producer FIFO: a single drainer sees each producer's jobs in order.
func TestIntakeProducerFIFO(t *testing.T) {
	const producers, per = 64, 200
	in, err := NewIntake(1 << 15)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			for i := range per {
				j := oneGPUJob(fmt.Sprintf("%d/%d", w, i), "q", 1, 0, t0)
				j.ArrayIndex = i
				j.Priority = int32(w)
				require.NoError(t, in.Submit(j))
			}
		})
	}
	wg.Wait()
	got := in.Drain(nil)
	require.Len(t, got, producers*per)
	next := make([]int, producers)
	for _, j := range got {
		require.Equal(t, next[j.Priority], j.ArrayIndex, "producer %d out of order", j.Priority)
		next[j.Priority]++
	}
}
