package enginetest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// handleSubmit: submit [via=intake] with one job a line (see Job).
func (h *Harness) handleSubmit(d *datadriven.TestData) (string, error) {
	via, _ := arg(d, "via")
	return h.submit(d.Input, via == "intake")
}

func (h *Harness) submit(input string, intake bool) (string, error) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		j, err := h.Job(line)
		if err != nil {
			return "", err
		}
		if intake {
			err = h.E.Intake().Submit(j)
		} else {
			err = h.E.Step(engine.Submitted(h.now, j))
		}
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}

// Job parses one job line: ID key=value...
func (h *Harness) Job(line string) (*queue.Job, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil, fmt.Errorf("empty job line")
	}
	kv := kvs(f[1:])
	j := &queue.Job{ID: f[0], Queue: "q", Submit: h.now}
	g := gang.Group{Members: 1, GPUsPerMember: 1}
	for k, v := range kv {
		var err error
		switch k {
		case "queue":
			j.Queue = v
		case "members":
			g.Members, err = strconv.Atoi(v)
		case "per":
			g.GPUsPerMember, err = strconv.Atoi(v)
		case "milli":
			g.GPUMilli, err = strconv.Atoi(v)
			g.GPUsPerMember = 0
		case "gpumem":
			g.GPUMemoryMiB, err = strconv.Atoi(v)
		case "profile":
			g.MIGProfile = v
			g.GPUsPerMember = 0
		case "model":
			g.GPUModel = v
		case "selector":
			g.Selector = map[string]string{}
			for _, kv := range strings.Split(v, ",") {
				a, b, _ := strings.Cut(kv, ":")
				g.Selector[a] = b
			}
		case "prio":
			var p int
			p, err = strconv.Atoi(v)
			j.Priority = int32(p)
		case "est":
			j.RuntimeEstimate, err = time.ParseDuration(v)
		case "limit":
			j.RuntimeLimit, err = time.ParseDuration(v)
		case "required":
			j.Request.Required = v
		case "preferred":
			j.Request.Preferred = v
		case "preemptible":
			j.Preemptible = true
		case "min-runtime":
			j.MinRuntime, err = time.ParseDuration(v)
		case "grace":
			j.GracePeriod, err = time.ParseDuration(v)
		case "elastic":
			lo, hi, _ := strings.Cut(v, "-")
			j.Elastic.MinMembers, err = strconv.Atoi(lo)
			if err == nil {
				j.Elastic.MaxMembers, err = strconv.Atoi(hi)
			}
		case "user":
			j.User = v
		case "account":
			j.Account = v
		case "name":
			j.Name = v
		case "partitions":
			j.Partitions = strings.Split(v, ",")
		case "after":
			j.Dependencies, err = dependencies(v)
		case "on", "since": // adopt's
		default:
			return nil, fmt.Errorf("job %s: unknown key %q", j.ID, k)
		}
		if err != nil {
			return nil, fmt.Errorf("job %s: %s: %v", j.ID, k, err)
		}
	}
	j.Request.Groups = []gang.Group{g}
	return j, nil
}
