package backends_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

func TestFeed(t *testing.T) {
	f := backends.NewFeed()
	ctx := context.Background()

	// Wake-up with nothing queued.
	evs, err := f.Next(ctx, time.Now().Add(5*time.Millisecond))
	require.NoError(t, err)
	assert.Empty(t, evs)

	// Many pushers; every event comes out once, each pusher's in order.
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				require.NoError(t, f.Push(engine.Finished(t0.Add(time.Duration(i)), string(rune('a'+p)))))
			}
		}()
	}
	got := map[string][]time.Time{}
	for n := 0; n < 200; {
		evs, err := f.Next(ctx, time.Time{})
		require.NoError(t, err)
		for _, ev := range evs {
			got[ev.JobID] = append(got[ev.JobID], ev.Time)
		}
		n += len(evs)
	}
	wg.Wait()
	for _, ts := range got {
		require.Len(t, ts, 50)
		for i := 1; i < len(ts); i++ {
			assert.True(t, ts[i].After(ts[i-1]))
		}
	}

	// Cancel while waiting.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	_, err = f.Next(cctx, time.Time{})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Close: queued events first, then ErrClosed.
	require.NoError(t, f.Push(engine.Tick(t0)))
	f.Close()
	require.ErrorIs(t, f.Push(engine.Tick(t0)), backends.ErrClosed)
	evs, err = f.Next(ctx, time.Time{})
	require.NoError(t, err)
	assert.Len(t, evs, 1)
	_, err = f.Next(ctx, time.Time{})
	require.ErrorIs(t, err, backends.ErrClosed)
}
