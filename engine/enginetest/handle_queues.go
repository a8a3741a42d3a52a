package enginetest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/queue"
)

// handleQueues: queues with the tree in the input (see queues).
func (h *Harness) handleQueues(d *datadriven.TestData) (string, error) {
	return "", h.queues(d.Input)
}

func (h *Harness) queues(input string) error {
	h.trees = true
	quota := func(kv map[string]string) (map[queue.ResourceName]queue.Quota, error) {
		v, ok := kv["gpu"]
		if !ok {
			return nil, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, err
		}
		q := queue.Quota{Nominal: queue.WholeGPUs(int64(n))}
		if b, ok := kv["borrow"]; ok {
			n, err := strconv.Atoi(b)
			if err != nil {
				return nil, err
			}
			q.BorrowingLimit = queue.Cap(queue.WholeGPUs(int64(n)))
		}
		if l, ok := kv["lend"]; ok {
			n, err := strconv.Atoi(l)
			if err != nil {
				return nil, err
			}
			q.LendingLimit = queue.Cap(queue.WholeGPUs(int64(n)))
		}
		return map[queue.ResourceName]queue.Quota{queue.GPUMilli: q}, nil
	}
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kv := kvs(f[2:])
		q, err := quota(kv)
		if err != nil {
			return fmt.Errorf("%s: %v", line, err)
		}
		w, _ := strconv.ParseFloat(kv["weight"], 64)
		switch f[0] {
		case "cohort":
			h.tree.Cohorts = append(h.tree.Cohorts, queue.CohortSpec{Name: f[1], Parent: kv["parent"], Quota: q, Weight: w})
		case "queue":
			h.tree.Queues = append(h.tree.Queues, queue.QueueSpec{Name: f[1], Cohort: kv["cohort"], Quota: q, Weight: w})
		default:
			return fmt.Errorf("unknown line %q", line)
		}
	}
	return nil
}

func kvs(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		m[k] = v
	}
	return m
}
