package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// Services.
//
// SetService, ScaleService and DeleteService schedule service events
// (engine.ServiceSet, ServiceScaled, ServiceDeleted) at a time, delivered
// by Next like submissions (after them, at one instant). The engine turns
// a service into replica jobs "<service>/<n>"; the simulator learns of a
// replica when the engine binds it, and runs it until the engine stops it
// (StopReplica, from engine.Ready.Stops) or preempts it: replicas have no
// runtime and are never reported finished. Replicas are not in Outcomes
// or Pending (the engine re-creates them from the service); Running lists
// them; Replicas gives their outcomes. Replicas do not keep the event
// stream open: Next closes when every submitted job has finished, whatever
// replicas still run.

// SetService schedules the creation (or replacement) of service svc at
// time at. The simulator owns svc afterwards. Errors: ErrInvalid (nil, no
// name, a time before the clock).
func (s *Sim) SetService(at time.Time, svc *engine.Service) error {
	if svc == nil || svc.Name == "" {
		return fmt.Errorf("%w: service without a name", ErrInvalid)
	}
	return s.serviceEvent(at, engine.ServiceSet(at, svc))
}

// ScaleService schedules a new desired replica count of service name at
// time at.
func (s *Sim) ScaleService(at time.Time, name string, desired int) error {
	return s.serviceEvent(at, engine.ServiceScaled(at, name, desired))
}

// DeleteService schedules the deletion of service name at time at.
func (s *Sim) DeleteService(at time.Time, name string) error {
	return s.serviceEvent(at, engine.ServiceDeleted(at, name))
}

func (s *Sim) serviceEvent(at time.Time, ev engine.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.Before(s.now) {
		return fmt.Errorf("%w: service event at %v, clock at %v", ErrInvalid, at, s.now)
	}
	s.push(event{at: at, kind: evService, svc: &ev})
	return nil
}

// fireService records a service event's spec and returns the event.
func (s *Sim) fireService(ev engine.Event) engine.Event {
	ev.Time = s.now
	if s.svcs == nil {
		s.svcs = map[string]*engine.Service{}
	}
	switch ev.Kind {
	case engine.EventServiceSet:
		s.svcs[ev.Service.Name] = ev.Service
	case engine.EventServiceDeleted:
		// Its replicas are stopped by the engine's Stops; the spec stays
		// known until they are, so binds still in flight find it.
	}
	return ev
}

// replicaJob returns the simulator's record of replica id, creating it on
// its first bind; nil when id names no replica of a known service.
func (s *Sim) replicaJob(id string) *job {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 || s.svcs == nil {
		return nil
	}
	svc := s.svcs[id[:i]]
	if svc == nil {
		return nil
	}
	j := svc.Replica
	j.ID, j.Queue, j.Submit = id, svc.Queue, s.now
	j.Class = queue.ClassInference
	js := &job{j: &j, replica: true, submitted: true, out: &Outcome{ID: id, Submit: s.now}}
	s.jobs[id] = js
	s.replicas = append(s.replicas, js)
	return js
}

// StopReplica stops a replica the engine removed (backends.ReplicaStopper):
// its GPUs are free at once and it is not reported finished. A replica
// that is not running is a no-op.
func (s *Sim) StopReplica(ctx context.Context, st engine.Stop) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[st.Job]
	if js == nil || !js.replica {
		return nil
	}
	if len(js.members) > 0 {
		s.release(js)
		js.out.Finished, js.out.End = true, s.now
		js.gen++
	}
	delete(s.jobs, st.Job)
	return nil
}

// Replicas returns the outcomes of every replica the engine bound, in
// order of their first bind: Finished and End say when it was stopped.
func (s *Sim) Replicas() []Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Outcome, len(s.replicas))
	for i, js := range s.replicas {
		out[i] = *js.out
	}
	return out
}
