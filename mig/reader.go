package mig

// PoolReader is the read side of a Pool: what its owner lends to readers
// that must not change it (topo.Snapshot.Pool returns one). Plan and
// FitCount only read; Clone gives an independent, writable copy.
type PoolReader interface {
	Len() int
	GPU(g uint32) (GPUInfo, error)
	Layout(g uint32) Layout
	Idle(g uint32) bool
	Shares(g uint32) []Share
	FitCount(g uint32, r Request, mode AllocMode) int
	Plan(demand []Demand, o PlanOptions) (Plan, error)
	Check() error
	Clone() *Pool
}

// readOnly hides a Pool's writing methods; a type assertion cannot get
// the *Pool back.
type readOnly struct{ p *Pool }

// ReadOnly returns p as a PoolReader; nil for a nil p.
func (p *Pool) ReadOnly() PoolReader {
	if p == nil {
		return nil
	}
	return readOnly{p}
}

func (r readOnly) Len() int                                         { return r.p.Len() }
func (r readOnly) GPU(g uint32) (GPUInfo, error)                    { return r.p.GPU(g) }
func (r readOnly) Layout(g uint32) Layout                           { return r.p.Layout(g) }
func (r readOnly) Idle(g uint32) bool                               { return r.p.Idle(g) }
func (r readOnly) Shares(g uint32) []Share                          { return r.p.Shares(g) }
func (r readOnly) FitCount(g uint32, q Request, mode AllocMode) int { return r.p.FitCount(g, q, mode) }
func (r readOnly) Plan(d []Demand, o PlanOptions) (Plan, error)     { return r.p.Plan(d, o) }
func (r readOnly) Check() error                                     { return r.p.Check() }
func (r readOnly) Clone() *Pool                                     { return r.p.Clone() }
