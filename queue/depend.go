package queue

import "fmt"

// DependencyKind says when a dependency is met (SLURM's --dependency
// types).
type DependencyKind uint8

// Dependency kinds.
const (
	// AfterOK: the job named by Dependency.Job ended successfully.
	AfterOK DependencyKind = iota + 1
	// AfterAny: the job named ended, however.
	AfterAny
	// AfterNotOK: the job named failed or was cancelled.
	AfterNotOK
	// Singleton: no other job of the same User and Name is running
	// (Dependency.Job is empty).
	Singleton
)

func (k DependencyKind) String() string {
	switch k {
	case AfterOK:
		return "afterok"
	case AfterAny:
		return "afterany"
	case AfterNotOK:
		return "afternotok"
	case Singleton:
		return "singleton"
	}
	return fmt.Sprintf("DependencyKind(%d)", uint8(k))
}

// Dependency is one condition a job waits on before it may start.
type Dependency struct {
	Kind DependencyKind
	// Job is the ID of the job depended on (empty for Singleton).
	Job string
}

func (d Dependency) String() string {
	if d.Kind == Singleton {
		return d.Kind.String()
	}
	return d.Kind.String() + ":" + d.Job
}

// MarshalText writes the kind by name (afterok, afterany, afternotok,
// singleton), so that saved jobs read as SLURM writes dependencies.
func (k DependencyKind) MarshalText() ([]byte, error) {
	if k < AfterOK || k > Singleton {
		return nil, fmt.Errorf("%w: unknown dependency kind %d", ErrInvalidJob, uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind by name.
func (k *DependencyKind) UnmarshalText(b []byte) error {
	for v := AfterOK; v <= Singleton; v++ {
		if v.String() == string(b) {
			*k = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown dependency kind %q (want afterok, afterany, afternotok or singleton)", ErrInvalidJob, b)
}
