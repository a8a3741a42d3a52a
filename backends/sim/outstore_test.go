package sim

import (
	"context"
	"errors"
	"hash/maphash"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// runJob submits id at submit, delivers it, binds it on GPU 0 of n0 and
// runs the simulator until it finished.
func runJob(t *testing.T, s *Sim, id string, submit time.Time, rt time.Duration) {
	t.Helper()
	j := &queue.Job{ID: id, Queue: "q", Submit: submit, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}}}
	if err := s.Submit(j, rt); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Next(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.BindMember(ctx, id, engine.Member{Node: "n0", GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Next(ctx, time.Time{})
	if err != nil || len(evs) != 1 || evs[0].Kind != engine.EventJobFinished {
		t.Fatalf("want the finish of %s, got %v, %v", id, evs, err)
	}
}

// A finished job's outcome is kept without pointers where its times are
// offsets from the start that give them back exactly, and whole where
// they are not (another location, a monotonic reading): either way the
// outcomes read back are those the job had, and its ID stays known.
func TestOutcomeRecords(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Config{Cluster: topo.Uniform(nil, nil, 1, 1, "H100"), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	zone := time.FixedZone("X", 3600)
	mono := time.Now() // a monotonic reading
	submits := []time.Time{
		start.Add(time.Minute),
		start.Add(2 * time.Minute).In(zone),             // another location: kept whole
		mono.Add(-mono.Sub(start.Add(3 * time.Minute))), // a monotonic reading: kept whole
		start.Add(4*time.Minute + 7*time.Nanosecond),
	}
	ids := []string{"a", "b", "c", "a-much-longer-id-than-the-others"}
	for i, id := range ids {
		runJob(t, s, id, submits[i], time.Duration(i+1)*time.Second)
	}
	outs := s.Outcomes()
	if len(outs) != len(ids) {
		t.Fatalf("%d outcomes", len(outs))
	}
	for i, o := range outs {
		want := Outcome{ID: ids[i], Submit: submits[i], Start: submits[i], End: submits[i].Add(time.Duration(i+1) * time.Second),
			Started: true, Finished: true, GPUs: 1, Milli: 1000}
		if o != want {
			t.Errorf("outcome %d = %+v, want %+v", i, o, want)
		}
	}
	if n := len(s.full); n != 2 {
		t.Errorf("%d outcomes kept whole, want 2 (the other location, the monotonic reading)", n)
	}
	for _, id := range ids {
		err := s.Submit(&queue.Job{ID: id, Submit: s.Now()}, time.Second)
		if !errors.Is(err, ErrDuplicateJob) {
			t.Errorf("resubmitting finished %s: %v, want ErrDuplicateJob", id, err)
		}
		if err := s.BindMember(context.Background(), id, engine.Member{Node: "n0", GPUs: []int{0}}); err == nil {
			t.Errorf("binding finished %s: accepted", id)
		}
	}
	if s.known("d") {
		t.Error("d, never submitted, is known")
	}
}

// Finished IDs whose hashes collide are all known: the second goes to the
// exact set. (The hash set is kept once the IDs stop increasing.)
func TestFinishedIDCollision(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Config{Cluster: topo.Uniform(nil, nil, 1, 1, "H100"), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	runJob(t, s, "x", start, time.Second)
	runJob(t, s, "w", s.Now(), time.Second) // before x: the hash set from here on
	if s.sorted || len(s.done) != 2 {
		t.Fatalf("sorted %v, %d IDs in the hash set, want false, 2", s.sorted, len(s.done))
	}
	// "y"'s hash is taken by job 0 ("x") before "y" finishes.
	s.done[maphash.String(s.seed, "y")] = 0
	runJob(t, s, "y", s.Now(), time.Second)
	if _, ok := s.doneX["y"]; !ok {
		t.Fatal("y is not in the exact set")
	}
	for _, id := range []string{"w", "x", "y"} {
		if !s.known(id) {
			t.Errorf("%s is not known", id)
		}
	}
	for _, id := range []string{"v", "z", "xx"} {
		if s.known(id) {
			t.Errorf("%s is known", id)
		}
	}
}

// While the IDs increase, finished IDs are found in the records by a
// binary search, unfinished ones in the jobs by ID; an ID between them or
// after them is not known.
func TestFinishedIDSorted(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Config{Cluster: topo.Uniform(nil, nil, 1, 1, "H100"), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j01", "j03", "j05", "j07"} {
		runJob(t, s, id, s.Now(), time.Second)
	}
	// j09 is submitted and not finished.
	if err := s.Submit(&queue.Job{ID: "j09", Queue: "q", Submit: s.Now().Add(time.Hour)}, time.Second); err != nil {
		t.Fatal(err)
	}
	if !s.sorted || len(s.done) != 0 {
		t.Fatalf("sorted %v, %d IDs in the hash set, want true, 0", s.sorted, len(s.done))
	}
	for _, id := range []string{"j01", "j03", "j05", "j07", "j09"} {
		if !s.known(id) {
			t.Errorf("%s is not known", id)
		}
		if err := s.Submit(&queue.Job{ID: id, Submit: s.Now().Add(2 * time.Hour)}, time.Second); !errors.Is(err, ErrDuplicateJob) {
			t.Errorf("resubmitting %s: %v, want ErrDuplicateJob", id, err)
		}
	}
	for _, id := range []string{"j", "j00", "j02", "j04", "j08", "j10", "k"} {
		if s.known(id) {
			t.Errorf("%s is known", id)
		}
	}
	if s.finishedID("j09") {
		t.Error("j09, not finished, is a finished ID")
	}
}
