package enginetest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// The site rules' commands (docs/site-features.md), registered here to
// keep them in one place.
func init() {
	handlers["site"] = handler{false, (*Harness).handleSite}
	handlers["reservation"] = handler{true, (*Harness).handleReservation}
	handlers["array"] = handler{true, (*Harness).handleArray}
	handlers["finish-failed"] = handler{true, (*Harness).handleJobEvent}
}

// handleSite: site with the site rules for the next "engine", one a line:
//
//	partition NAME [default] [nodes=n0,n1] [selector=k:v,...] [domains=level:name,...]
//	  [accounts=a,b] [queues=q,r] [max-gpus=N] [max-runtime=D]
//	  [default-runtime=D] [max-nodes=N] [tier=N] [preempt=off]
//	limits [max-jobs-per-user=N] [max-gpus-per-user=N] [max-gpus-per-account=N] [account.NAME=N]
//	never-met cancel|hold
func (h *Harness) handleSite(d *datadriven.TestData) (string, error) {
	h.site = engine.SiteConfig{}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "partition":
			err = h.partition(f[1:])
		case "limits":
			err = h.limits(f[1:])
		case "never-met":
			if len(f) == 2 && f[1] == "hold" {
				h.site.NeverMet = engine.HoldNeverMet
			}
		default:
			err = fmt.Errorf("unknown site line %q", f[0])
		}
		if err != nil {
			return "", err
		}
	}
	return "", nil
}

func (h *Harness) partition(f []string) error {
	if len(f) == 0 {
		return fmt.Errorf("partition NAME ...")
	}
	p := engine.Partition{Name: f[0]}
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "default":
			p.Default = true
		case "nodes":
			p.Nodes = strings.Split(v, ",")
		case "selector":
			p.Selector = map[string]string{}
			for _, kv := range strings.Split(v, ",") {
				a, b, _ := strings.Cut(kv, ":")
				p.Selector[a] = b
			}
		case "domains":
			for _, kv := range strings.Split(v, ",") {
				a, b, _ := strings.Cut(kv, ":")
				p.Domains = append(p.Domains, engine.DomainRef{Level: a, Name: b})
			}
		case "accounts":
			p.AllowAccounts = strings.Split(v, ",")
		case "queues":
			p.AllowQueues = strings.Split(v, ",")
		case "max-gpus":
			p.MaxGPUsPerJob, err = strconv.Atoi(v)
		case "max-nodes":
			p.MaxNodes, err = strconv.Atoi(v)
		case "tier":
			p.PriorityTier, err = strconv.Atoi(v)
		case "max-runtime":
			p.MaxRuntime, err = time.ParseDuration(v)
		case "default-runtime":
			p.DefaultRuntime, err = time.ParseDuration(v)
		case "preempt":
			if v == "off" {
				p.PreemptMode = engine.PreemptOff
			}
		default:
			return fmt.Errorf("partition %s: unknown key %q", p.Name, k)
		}
		if err != nil {
			return fmt.Errorf("partition %s: %s: %v", p.Name, k, err)
		}
	}
	h.site.Partitions = append(h.site.Partitions, p)
	return nil
}

func (h *Harness) limits(f []string) error {
	l := &h.site.Limits
	for _, a := range f {
		k, v, _ := strings.Cut(a, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("limits: %s: %v", k, err)
		}
		switch {
		case k == "max-jobs-per-user":
			l.MaxJobsPerUser = n
		case k == "max-gpus-per-user":
			l.MaxGPUsPerUser = n
		case k == "max-gpus-per-account":
			l.MaxGPUsPerAccount = n
		case strings.HasPrefix(k, "account."):
			if l.Accounts == nil {
				l.Accounts = map[string]int{}
			}
			l.Accounts[strings.TrimPrefix(k, "account.")] = n
		default:
			return fmt.Errorf("limits: unknown key %q", k)
		}
	}
	return nil
}

// dependencies parses kind:job,... (singleton alone).
func dependencies(v string) ([]queue.Dependency, error) {
	var out []queue.Dependency
	for _, s := range strings.Split(v, ",") {
		k, id, _ := strings.Cut(s, ":")
		d := queue.Dependency{Job: id}
		switch k {
		case "afterok":
			d.Kind = queue.AfterOK
		case "afterany":
			d.Kind = queue.AfterAny
		case "afternotok":
			d.Kind = queue.AfterNotOK
		case "singleton":
			d.Kind = queue.Singleton
		default:
			return nil, fmt.Errorf("unknown dependency %q", k)
		}
		out = append(out, d)
	}
	return out, nil
}
