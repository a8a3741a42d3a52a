package mig

import "fmt"

// MarshalText writes the mode by name (exclusive, time-slicing, mps).
func (m ShareMode) MarshalText() ([]byte, error) {
	if m > MPS {
		return nil, fmt.Errorf("mig: unknown share mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads a mode by name.
func (m *ShareMode) UnmarshalText(b []byte) error {
	for v := Exclusive; v <= MPS; v++ {
		if v.String() == string(b) {
			*m = v
			return nil
		}
	}
	return fmt.Errorf("mig: unknown share mode %q (want exclusive, time-slicing or mps)", b)
}
