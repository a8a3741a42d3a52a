package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// describe is what the bridge prints at start: the SLURM cluster, the
// partitions it manages, their nodes and GPUs, and berth's queues.
func describe(cluster, conf string, spec topo.Spec, parts map[string]slurm.Partition, queues []string, poll time.Duration) string {
	var b strings.Builder
	if cluster == "" {
		cluster = "(name unknown)"
	}
	fmt.Fprintf(&b, "slurm-bridge: SLURM cluster %s", cluster)
	if conf != "" {
		fmt.Fprintf(&b, " (%s)", conf)
	}
	b.WriteString("\nslurm-bridge: managed partitions: ")
	var ps []string
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		p := parts[name]
		s := fmt.Sprintf("%s (priority %d", name, p.Priority)
		if p.Preemptible {
			s += ", preemptible"
			if p.MinRuntime > 0 {
				s += fmt.Sprintf(" after %v", p.MinRuntime)
			}
			if p.GracePeriod > 0 {
				s += fmt.Sprintf(", grace %v", p.GracePeriod)
			}
		}
		ps = append(ps, s+")")
	}
	b.WriteString(strings.Join(ps, ", "))
	ready, gpus := 0, 0
	models := map[string]int{}
	for _, n := range spec.Nodes {
		if n.State == topo.Ready {
			ready++
		}
		gpus += n.GPUs
		models[cmp.Or(n.GPUModel, "unnamed")] += n.GPUs
	}
	var ms []string
	for _, m := range slices.Sorted(maps.Keys(models)) {
		ms = append(ms, fmt.Sprintf("%d %s", models[m], m))
	}
	fmt.Fprintf(&b, "\nslurm-bridge: their nodes: %d (%d ready), %d GPUs", len(spec.Nodes), ready, gpus)
	if len(ms) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(ms, ", "))
	}
	if len(spec.Levels) > 0 {
		fmt.Fprintf(&b, "; topology levels %s", strings.Join(spec.Levels, ", "))
	}
	fmt.Fprintf(&b, "\nslurm-bridge: berth's queues (SLURM accounts): %s; squeue and sinfo read every %v",
		strings.Join(queues, ", "), poll)
	return b.String()
}

// skipLine is the log line of an event the engine refused (the bridge
// skips it and goes on): which job or node, and why in a user's words.
func skipLine(ev engine.Event, err error, queues []string) string {
	why := err.Error()
	var fe *queue.FieldError
	switch {
	case errors.Is(err, queue.ErrUnknownQueue), errors.Is(err, queue.ErrUnknownAccount):
		q := ""
		if ev.Job != nil {
			q = ev.Job.Queue
		}
		why = fmt.Sprintf("its account %q is not one of berth's queues (%s; -queues sets them)", q, strings.Join(queues, ", "))
	case errors.As(err, &fe) && errors.Is(err, queue.ErrInvalidJob):
		why = fmt.Sprintf("berth cannot run what it asks (%s: %s)", fe.Field, fe.Msg)
	case errors.Is(err, engine.ErrDuplicateJob), errors.Is(err, queue.ErrDuplicateJob):
		why = "berth already has a job with this ID"
	}
	switch ev.Kind {
	case engine.EventJobSubmitted:
		id, q := ev.JobID, ""
		if ev.Job != nil {
			id, q = ev.Job.ID, ev.Job.Queue
		}
		return fmt.Sprintf("job %s (account %q) not taken by berth: %s", id, q, why)
	case engine.EventNodeAdded, engine.EventNodeChanged:
		return fmt.Sprintf("report about node %s (%v) skipped: %s", ev.Node.Name, ev.Kind, why)
	case engine.EventNodeFailed:
		return fmt.Sprintf("failure of node %s skipped: %s", ev.NodeName, why)
	}
	id := ev.JobID
	if id == "" && ev.Job != nil {
		id = ev.Job.ID
	}
	return fmt.Sprintf("report about job %s (%v) skipped: %s", id, ev.Kind, why)
}
