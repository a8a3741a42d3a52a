package enginetest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleServiceSet: service-set NAME [queue=Q] [qos=guaranteed|burstable|best-effort]
// [min=N] [max=N] desired=N [prio=N] [grace=D] followed by replica keys of
// a job line (per, milli, profile, members, model, selector, required,
// preferred, min-runtime, ...). Errors are printed.
func (h *Harness) handleServiceSet(d *datadriven.TestData) (string, error) {
	if len(d.CmdArgs) == 0 {
		return "", fmt.Errorf("service-set: no name")
	}
	s := &engine.Service{Name: d.CmdArgs[0].Key, Queue: "q"}
	var rest []string
	for _, a := range d.CmdArgs[1:] {
		v := strings.Join(a.Vals, ",")
		var err error
		switch a.Key {
		case "queue":
			s.Queue = v
		case "qos":
			err = s.QoS.UnmarshalText([]byte(v))
		case "min":
			s.Min, err = strconv.Atoi(v)
		case "max":
			s.Max, err = strconv.Atoi(v)
		case "desired":
			s.Desired, err = strconv.Atoi(v)
		case "prio":
			var p int
			p, err = strconv.Atoi(v)
			s.Priority = int32(p)
		case "grace":
			s.GracePeriod, err = time.ParseDuration(v)
		default:
			if len(a.Vals) == 0 {
				rest = append(rest, a.Key)
			} else {
				rest = append(rest, a.Key+"="+v)
			}
		}
		if err != nil {
			return "", fmt.Errorf("service-set %s: %s: %v", s.Name, a.Key, err)
		}
	}
	if s.Max == 0 {
		s.Max = max(s.Desired, s.Min)
	}
	j, err := h.Job("replica " + strings.Join(rest, " "))
	if err != nil {
		return "", err
	}
	j.ID, j.Queue = "", ""
	s.Replica = *j
	if err := h.E.Step(engine.ServiceSet(h.now, s)); err != nil {
		return fmt.Sprintf("error: %v\n", err), nil
	}
	return "", nil
}

// handleServiceScale: service-scale NAME=N... steps one ServiceScaled each.
func (h *Harness) handleServiceScale(d *datadriven.TestData) (string, error) {
	var b strings.Builder
	for _, a := range d.CmdArgs {
		n, err := strconv.Atoi(strings.Join(a.Vals, ","))
		if err != nil {
			return "", fmt.Errorf("service-scale %s: %v", a.Key, err)
		}
		if err := h.E.Step(engine.ServiceScaled(h.now, a.Key, n)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}

// handleServiceDelete: service-delete NAME... steps one ServiceDeleted each.
func (h *Harness) handleServiceDelete(d *datadriven.TestData) (string, error) {
	var b strings.Builder
	for _, a := range d.CmdArgs {
		if err := h.E.Step(engine.ServiceDeleted(h.now, a.Key)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}

// handleServices prints the View's services.
func (h *Harness) handleServices(*datadriven.TestData) (string, error) {
	var b strings.Builder
	for _, s := range h.E.View().Services {
		fmt.Fprintf(&b, "service %s (%v, queue %s): desired %d [%d..%d], running %d, stopping %d, pending %d",
			s.Name, s.QoS, s.Queue, s.Desired, s.Min, s.Max, s.Running, s.Stopping, s.Pending)
		if s.Reason != engine.ReasonNone {
			fmt.Fprintf(&b, ": %s", s.Detail)
		}
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "no services\n", nil
	}
	return b.String(), nil
}

// handleRestart saves the engine (it must have been created with
// "engine journal"), encodes the state as JSON, restores it with the same
// Config and goes on with the restored engine; it prints the pending and
// running job IDs before and after, which must match.
func (h *Harness) handleRestart(*datadriven.TestData) (string, error) {
	st, err := h.E.Save()
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	var back engine.State
	if err := json.Unmarshal(data, &back); err != nil {
		return "", err
	}
	cfg := h.cfg
	cfg.Policy = newPolicy(h.policyName)
	e2, err := engine.Restore(cfg, &back)
	if err != nil {
		return "", err
	}
	p1, r1 := h.E.JobIDs()
	p2, r2 := e2.JobIDs()
	h.E, h.haveRd = e2, false
	return fmt.Sprintf("before: pending %v running %v\nafter:  pending %v running %v\n", p1, r1, p2, r2), nil
}
