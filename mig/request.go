package mig

import "fmt"

// Request asks for one slot: a MIG instance, or a share of a shared GPU.
// Exactly one of Profile and the fractions is set.
type Request struct {
	// Profile names a MIG profile: a full name ("1g.10gb") or a compute
	// short form ("1g", "1g+me"), see Model.Profile. MIG GPUs only.
	Profile string
	// Milli is a fraction of one GPU's compute in thousandths (openb's
	// gpu_milli), 1..1000. On a MIG GPU it resolves to the smallest profile
	// with ComputeSlices/ModelComputeSlices >= Milli/1000; on a shared GPU it
	// is the share held.
	Milli int
	// MemoryMiB is device memory needed, 0 for none. On a MIG GPU the
	// profile's nominal memory must hold it; on an MPS GPU it becomes the
	// share's pinned memory limit.
	MemoryMiB int
}

// Validate checks the request on its own, without a GPU.
func (r Request) Validate() error {
	switch {
	case r.Milli < 0 || r.Milli > 1000:
		return fmt.Errorf("%w: Milli %d outside 0..1000", ErrBadRequest, r.Milli)
	case r.MemoryMiB < 0:
		return fmt.Errorf("%w: MemoryMiB %d < 0", ErrBadRequest, r.MemoryMiB)
	case r.Profile != "" && (r.Milli != 0 || r.MemoryMiB != 0):
		return fmt.Errorf("%w: a profile (%q) and a fraction are both set", ErrBadRequest, r.Profile)
	case r.Profile == "" && r.Milli == 0 && r.MemoryMiB == 0:
		return fmt.Errorf("%w: nothing asked", ErrBadRequest)
	}
	return nil
}

// String renders the request compactly: "1g.10gb", "milli=250", "milli=250,mem=4096MiB".
func (r Request) String() string {
	switch {
	case r.Profile != "":
		return r.Profile
	case r.MemoryMiB == 0:
		return fmt.Sprintf("milli=%d", r.Milli)
	default:
		return fmt.Sprintf("milli=%d,mem=%dMiB", r.Milli, r.MemoryMiB)
	}
}

// Resolve returns the profile of model m that serves r: the named profile,
// or the smallest profile (fewest memory slices, then compute slices, plain
// before +me) whose compute fraction and nominal memory hold the fractional
// ask. +me profiles are chosen only by name.
func (m Model) Resolve(r Request) (Profile, error) {
	if err := r.Validate(); err != nil {
		return Profile{}, err
	}
	if !m.Valid() {
		return Profile{}, fmt.Errorf("%w: %v", ErrUnknownModel, m)
	}
	if r.Profile != "" {
		return m.Profile(r.Profile)
	}
	ps := m.data().profiles
	best := -1
	for i := range ps {
		p := Profile{model: m, idx: uint8(i)}
		if ps[i].mediaExtensions || !p.fitsMilli(r.Milli) || int(ps[i].memoryGiB)*1024 < r.MemoryMiB {
			continue
		}
		if best < 0 || smaller(&ps[i], &ps[best]) {
			best = i
		}
	}
	if best < 0 {
		return Profile{}, fmt.Errorf("%w: %v on %v", ErrNoProfile, r, m)
	}
	return Profile{model: m, idx: uint8(best)}, nil
}
