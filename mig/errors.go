package mig

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w and details; match them with
// errors.Is.
var (
	// ErrUnknownModel: the GPU model name, alias or PCI id is not in the
	// geometry tables, or a Model value is out of range.
	ErrUnknownModel = errors.New("mig: unknown GPU model")
	// ErrUnknownProfile: the profile name does not exist on this model.
	ErrUnknownProfile = errors.New("mig: unknown profile")
	// ErrBadRequest: a Request is malformed (no ask, a fraction out of
	// range, a profile mixed with a fraction).
	ErrBadRequest = errors.New("mig: invalid request")
	// ErrNoProfile: no profile of the model is large enough for the request.
	ErrNoProfile = errors.New("mig: no profile fits the request")
	// ErrModelMismatch: a profile, instance or layout of one model was used
	// with another model.
	ErrModelMismatch = errors.New("mig: model mismatch")
	// ErrBadPlacement: the start is not a listed placement of the profile.
	ErrBadPlacement = errors.New("mig: placement not allowed")
	// ErrOverlap: the instance overlaps memory slices already taken.
	ErrOverlap = errors.New("mig: memory slices overlap")
	// ErrMaxCount: the profile's maxCount would be exceeded (in practice the
	// +me profiles, one per GPU).
	ErrMaxCount = errors.New("mig: profile max count exceeded")
	// ErrNoInstance: no such instance in the layout.
	ErrNoInstance = errors.New("mig: no such instance")
	// ErrBadGPU: the GPU index is outside the pool.
	ErrBadGPU = errors.New("mig: GPU index out of range")
	// ErrBadConfig: a GPUConfig or Sharing is invalid.
	ErrBadConfig = errors.New("mig: invalid GPU configuration")
	// ErrBusy: the GPU holds in-use instances or shares, so the operation
	// (reconfigure, mode change, destroy) is refused.
	ErrBusy = errors.New("mig: GPU busy")
	// ErrNoFit: no capacity for the request on the GPUs asked. This is the
	// ordinary "not now" answer, not a fault.
	ErrNoFit = errors.New("mig: no capacity for the request")
	// ErrNotHeld: the grant or share is not held (already released, or
	// never granted).
	ErrNotHeld = errors.New("mig: not held")
	// ErrStalePlan: the pool changed since the plan was made; nothing was
	// applied.
	ErrStalePlan = errors.New("mig: plan is stale")
)

// PlacementError says which instance broke which rule.
type PlacementError struct {
	Instance Instance
	Err      error // ErrBadPlacement, ErrOverlap, ErrMaxCount, ErrModelMismatch or ErrNoInstance
}

func (e *PlacementError) Error() string {
	return fmt.Sprintf("%v: %v", e.Err, e.Instance)
}

func (e *PlacementError) Unwrap() error { return e.Err }
