package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// FuzzRestoreSnapshot: a compacted state (running, stopping and pending
// jobs, claims, sticky reservations, fair-share usage), changed at random
// as JSON, either restores or is refused with an error; a restored engine
// then runs cycles without panicking. An input that takes over 10 s is a
// failure (a hang), not a stall of the fuzzer.
func FuzzRestoreSnapshot(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 5))
	cfg := fuzzConfig(rng, false)
	cfg.Preemption.Priority = true
	cfg.Backfill.Mode = BackfillEASY
	cfg.Policy = fuzzPolicy(5)
	e, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := e.EnableJournal(); err != nil {
		f.Fatal(err)
	}
	now := fuzzT0
	for i := range 60 {
		_ = e.Step(Submitted(now, fuzzJob(rng, fmt.Sprintf("j%d", i), now, false)))
		if i%5 == 4 {
			now = now.Add(10 * time.Minute)
			_ = e.Step(Tick(now))
			rd := e.Ready()
			var out Outcome
			if len(rd.Binds) > 1 {
				out.RefusedBinds = []string{rd.Binds[0].Job}
			}
			if err := e.Advance(rd, out); err != nil {
				f.Fatal(err)
			}
			if err := e.Compact(); err != nil {
				f.Fatal(err)
			}
			st, err := e.Save()
			if err != nil {
				f.Fatal(err)
			}
			b, err := json.Marshal(st)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				panic("slow input")
			}
		}()
		var st State
		if json.Unmarshal(b, &st) != nil {
			return
		}
		c := cfg
		c.Policy = fuzzPolicy(5)
		e, err := Restore(c, &st)
		if err != nil {
			return
		}
		for k := range 3 {
			rd := e.Ready()
			_ = e.Advance(rd, Outcome{})
			_ = e.Step(Tick(e.Now().Add(time.Duration(k+1) * time.Hour)))
		}
	})
}
