package mig

import (
	"errors"
	"testing"
)

// A time-slicing GPU that accounts memory books each share's memory: a
// share whose booking would pass the GPU's memory does not fit, even with
// replicas free; releasing gives the memory back.
func TestTimeSlicingBooksMemory(t *testing.T) {
	p := NewPool(1)
	if err := p.Configure(0, GPUConfig{Sharing: Sharing{Mode: TimeSlicing, Replicas: 4, MemoryMiB: 80 << 10}}); err != nil {
		t.Fatal(err)
	}
	big, err := p.AllocateShare(0, Request{Milli: 250, MemoryMiB: 60 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if big.BookedMemoryMiB != 60<<10 || big.Replicas != 1 {
		t.Fatalf("share %+v: want 1 replica, 61440 MiB booked", big)
	}
	if n := p.FitCount(0, Request{Milli: 250, MemoryMiB: 30 << 10}, ExistingOnly); n != 0 {
		t.Fatalf("FitCount of a 30 GiB share beside 60 of 80 GiB: %d, want 0", n)
	}
	if _, err := p.AllocateShare(0, Request{Milli: 250, MemoryMiB: 30 << 10}); !errors.Is(err, ErrNoFit) {
		t.Fatalf("over-booking: err %v, want ErrNoFit", err)
	}
	if n := p.FitCount(0, Request{Milli: 250, MemoryMiB: 10 << 10}, ExistingOnly); n != 2 {
		t.Fatalf("FitCount of 10 GiB shares with 20 GiB and 3 replicas left: %d, want 2", n)
	}
	// Without a memory ask, a share books its fraction of the memory.
	s, err := p.AllocateShare(0, Request{Milli: 250})
	if err != nil || s.BookedMemoryMiB != 20<<10 {
		t.Fatalf("share %+v, %v: want 20480 MiB booked", s, err)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	if err := p.ReleaseShare(big.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AllocateShare(0, Request{Milli: 250, MemoryMiB: 30 << 10}); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
}
