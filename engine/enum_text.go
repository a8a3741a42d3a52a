package engine

import "fmt"

// MarshalText writes the mode by name (none, easy, conservative).
func (m BackfillMode) MarshalText() ([]byte, error) {
	if m > BackfillConservative {
		return nil, fmt.Errorf("%w: unknown backfill mode %d", ErrInvalidConfig, uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads a mode by name.
func (m *BackfillMode) UnmarshalText(b []byte) error {
	for v := BackfillNone; v <= BackfillConservative; v++ {
		if v.String() == string(b) {
			*m = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown backfill mode %q (want none, easy or conservative)", ErrInvalidConfig, b)
}

func (p NodeFailurePolicy) String() string {
	switch p {
	case RequeueOnFailure:
		return "requeue"
	case FailOnFailure:
		return "fail"
	}
	return fmt.Sprintf("NodeFailurePolicy(%d)", uint8(p))
}

// MarshalText writes the policy by name (requeue, fail).
func (p NodeFailurePolicy) MarshalText() ([]byte, error) {
	if p > FailOnFailure {
		return nil, fmt.Errorf("%w: unknown node failure policy %d", ErrInvalidConfig, uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a policy by name.
func (p *NodeFailurePolicy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "requeue":
		*p = RequeueOnFailure
	case "fail":
		*p = FailOnFailure
	default:
		return fmt.Errorf("%w: unknown node failure policy %q (want requeue or fail)", ErrInvalidConfig, b)
	}
	return nil
}
