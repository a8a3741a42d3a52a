package mig

import "fmt"

// ShareMode says how a GPU that is not in MIG mode is shared.
type ShareMode uint8

const (
	// Exclusive: the GPU is handed out whole (by the topology model, not by
	// this package); fractional requests do not go there.
	Exclusive ShareMode = iota
	// TimeSlicing: the GPU is advertised as Replicas equal replicas with no
	// memory or fault isolation. A request of Milli thousandths holds
	// ceil(Milli*Replicas/1000) replicas; Replicas=1000 accounts exact milli.
	TimeSlicing
	// MPS: CUDA Multi-Process Service. Each share is one MPS client with an
	// active thread percentage ceil(Milli/10) and a pinned device memory
	// limit; shares are accounted in exact milli (their sum stays <= 1000),
	// in clients (<= Replicas) and, when MemoryMiB is set, in memory.
	MPS
)

// MaxMPSClients is the most MPS clients one GPU serves (Volta and later).
const MaxMPSClients = 48

func (m ShareMode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case TimeSlicing:
		return "time-slicing"
	case MPS:
		return "mps"
	}
	return fmt.Sprintf("ShareMode(%d)", uint8(m))
}

// Sharing configures the sharing of one GPU that is not in MIG mode.
type Sharing struct {
	Mode ShareMode
	// Replicas: for TimeSlicing, the number of replicas (1..1000); for MPS,
	// the most clients (1..MaxMPSClients). Ignored for Exclusive.
	Replicas int
	// MemoryMiB: the device memory shares are accounted in; 0 turns memory
	// accounting off. For MPS it is split by pinned limits (a hard limit
	// per client); for time-slicing each share books its memory against it
	// (the device does not enforce it, but no share is placed where the
	// bookings would pass it, so one tenant cannot over-book a neighbour's
	// memory). Ignored for Exclusive.
	MemoryMiB int
}

// Validate checks the ranges above.
func (s Sharing) Validate() error {
	switch s.Mode {
	case Exclusive:
		return nil
	case TimeSlicing:
		if s.Replicas < 1 || s.Replicas > 1000 {
			return fmt.Errorf("%w: time-slicing replicas %d outside 1..1000", ErrBadConfig, s.Replicas)
		}
		if s.MemoryMiB < 0 || s.MemoryMiB > 1<<31-1 {
			return fmt.Errorf("%w: time-slicing memory %d MiB", ErrBadConfig, s.MemoryMiB)
		}
	case MPS:
		if s.Replicas < 1 || s.Replicas > MaxMPSClients {
			return fmt.Errorf("%w: MPS clients %d outside 1..%d", ErrBadConfig, s.Replicas, MaxMPSClients)
		}
		if s.MemoryMiB < 0 || s.MemoryMiB > 1<<31-1 {
			return fmt.Errorf("%w: MPS memory %d MiB", ErrBadConfig, s.MemoryMiB)
		}
	default:
		return fmt.Errorf("%w: %v", ErrBadConfig, s.Mode)
	}
	return nil
}

// ShareID names one held share. IDs are never reused while held, and an ID
// released once is refused afterwards (ErrNotHeld), even after its slot is
// recycled. The zero ShareID names nothing.
type ShareID uint64

// Share is a slice of a shared GPU held by one consumer.
type Share struct {
	ID  ShareID `json:",omitzero"`
	GPU uint32  `json:",omitzero"`
	// Milli is the compute fraction held, in thousandths: the request's
	// Milli for MPS, Replicas*1000/replicas-per-GPU (rounded down) for
	// time-slicing.
	Milli int `json:",omitzero"`
	// Replicas is the number of time-slicing replicas held (0 for MPS).
	Replicas int `json:",omitzero"`
	// ActiveThreadPercent is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for the
	// client (MPS only).
	ActiveThreadPercent int `json:",omitzero"`
	// PinnedMemoryMiB is CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for the client
	// (MPS only): the request's MemoryMiB, or Milli/1000 of the GPU's MPS
	// memory when the request names none.
	PinnedMemoryMiB int `json:",omitzero"`
	// BookedMemoryMiB is the device memory booked for a time-slicing share
	// when the GPU accounts memory (Sharing.MemoryMiB): the request's
	// MemoryMiB, or Milli/1000 of the GPU's memory when it names none. The
	// backend should pass it to the workload as its memory limit.
	BookedMemoryMiB int `json:",omitzero"`
}

type shareRec struct {
	gpu        uint32
	gen        uint32
	milli      uint16 // asked milli
	units      uint16 // replicas (time-slicing) or milli (MPS) held
	memMiB     uint32
	prev, next int32 // per-GPU list; next also links the free list
	live       bool
}
