package topo

import "fmt"

// MarshalText writes the state by name (ready, cordoned, draining, down).
func (s NodeState) MarshalText() ([]byte, error) {
	if s >= numStates {
		return nil, fmt.Errorf("%w: %d", ErrBadState, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a state by name (ParseNodeState).
func (s *NodeState) UnmarshalText(b []byte) error {
	v, err := ParseNodeState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
