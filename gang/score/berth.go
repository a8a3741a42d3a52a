package score

// NewBerth returns berth's own policy (placeholder: FGD).
func NewBerth(t Target) *FGD { return NewFGD(t) }
