package serving

import (
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/engine"
)

// Autoscaler holds a Scaler per service and the desired count it last
// set, and turns signals into engine.ServiceScaled events. The services'
// [Min, Max] in the engine must hold every count the Scaler returns (an
// HPA's own [Min, Max]), or the engine rejects the event.
type Autoscaler struct {
	svcs map[string]*scaled
}

type scaled struct {
	s       Scaler
	desired int
}

// NewAutoscaler returns an Autoscaler without services.
func NewAutoscaler() *Autoscaler { return &Autoscaler{svcs: map[string]*scaled{}} }

// Add starts scaling service name with s from desired replicas (the
// service's current desired count). Errors wrap ErrInvalid: an empty
// name or one with '/', a nil Scaler, a count outside [0,
// engine.MaxReplicas], a service already held.
func (a *Autoscaler) Add(name string, s Scaler, desired int) error {
	switch {
	case name == "" || strings.ContainsRune(name, '/'):
		return fmt.Errorf("%w: service name %q", ErrInvalid, name)
	case s == nil:
		return fmt.Errorf("%w: service %q: nil Scaler", ErrInvalid, name)
	case desired < 0 || desired > engine.MaxReplicas:
		return fmt.Errorf("%w: service %q: desired %d", ErrInvalid, name, desired)
	case a.svcs[name] != nil:
		return fmt.Errorf("%w: service %q added twice", ErrInvalid, name)
	}
	a.svcs[name] = &scaled{s: s, desired: desired}
	return nil
}

// Remove stops scaling service name (no-op when it is not held).
func (a *Autoscaler) Remove(name string) { delete(a.svcs, name) }

// Services lists the services held, sorted.
func (a *Autoscaler) Services() []string {
	out := make([]string, 0, len(a.svcs))
	for n := range a.svcs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Desired returns the desired count of service name.
func (a *Autoscaler) Desired(name string) (int, bool) {
	s := a.svcs[name]
	if s == nil {
		return 0, false
	}
	return s.desired, true
}

// SetDesired records a count set elsewhere (an operator's scale): the
// next signal starts from it.
func (a *Autoscaler) SetDesired(name string, desired int) error {
	s := a.svcs[name]
	switch {
	case s == nil:
		return fmt.Errorf("%w: %q", ErrUnknownService, name)
	case desired < 0 || desired > engine.MaxReplicas:
		return fmt.Errorf("%w: service %q: desired %d", ErrInvalid, name, desired)
	}
	s.desired = desired
	return nil
}

// Observe feeds one signal to its service's Scaler. When the desired
// count changes it returns engine.ServiceScaled(sig.At, service, count)
// and true. A bad signal or an unknown service is an error and changes
// nothing.
func (a *Autoscaler) Observe(sig Signal) (engine.Event, bool, error) {
	s := a.svcs[sig.Service]
	if s == nil {
		return engine.Event{}, false, fmt.Errorf("%w: %q", ErrUnknownService, sig.Service)
	}
	n, err := s.s.Recommend(sig, s.desired)
	if err != nil {
		return engine.Event{}, false, fmt.Errorf("service %q: %w", sig.Service, err)
	}
	if n < 0 || n > engine.MaxReplicas {
		return engine.Event{}, false, fmt.Errorf("%w: service %q: the Scaler returned %d", ErrInvalid, sig.Service, n)
	}
	if n == s.desired {
		return engine.Event{}, false, nil
	}
	s.desired = n
	return engine.ServiceScaled(sig.At, sig.Service, n), true, nil
}
