package nvml

import (
	"errors"
	"fmt"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Errors of Open and of the backend's own methods. Actuator refusals wrap
// backends.ErrRefused instead. Match them with errors.Is.
var (
	// ErrNoLibrary: libnvidia-ml.so could not be loaded (no NVIDIA driver
	// on this machine, or not on the loader's path). Open made no other
	// NVML call.
	ErrNoLibrary = errors.New("nvml: libnvidia-ml.so not found (is the NVIDIA driver installed?)")
	// ErrInit: nvmlInit failed for another reason (driver not loaded,
	// permissions). Open made no other NVML call.
	ErrInit = errors.New("nvml: NVML initialisation failed")
	// ErrNVML: an NVML call failed; the wrapped text names the call and
	// NVML's return code.
	ErrNVML = errors.New("nvml: NVML call failed")
	// ErrInvalid: a bad Config, job, command or spool file.
	ErrInvalid = errors.New("nvml: invalid argument")
	// ErrUnsupported: the box is in a state the backend cannot model
	// (GPUs of different models, some GPUs in MIG mode and others not, MIG
	// GPUs with different layouts, a MIG layout berth's geometry says is
	// impossible).
	ErrUnsupported = errors.New("nvml: unsupported GPU configuration")
	// ErrUnknownGPU: Restore of a GPU UUID the box does not have.
	ErrUnknownGPU = errors.New("nvml: unknown GPU")
	// ErrDuplicateJob: a job ID submitted while the backend still knows it.
	ErrDuplicateJob = errors.New("nvml: duplicate job ID")
	// ErrBusy: a bind found its GPU still held by the processes of a job
	// being stopped. It is transient (not a refusal): the Runner retries.
	ErrBusy = errors.New("nvml: GPU still held by a stopping job")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("nvml: backend closed")
)

// callErr wraps a failed NVML return as ErrNVML with the call's name.
func callErr(call string, ret nv.Return) error {
	return fmt.Errorf("%w: %s: %v", ErrNVML, call, ret)
}
