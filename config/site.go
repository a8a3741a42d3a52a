package config

import (
	"fmt"
	"strings"

	"github.com/berthsched/berth/engine"
)

// Site is engine.SiteConfig (see docs/site-features.md).
type Site struct {
	Partitions []Partition `json:"partitions,omitempty" yaml:"partitions,omitempty"`
	Limits     *Limits     `json:"limits,omitempty" yaml:"limits,omitempty"`
	// NeverMet: what becomes of a job whose dependency can never be met:
	// cancel (default) or hold.
	NeverMet string `json:"neverMet,omitempty" yaml:"neverMet,omitempty"`
}

// Partition is engine.Partition: a named set of nodes (by name, labels or
// topology domain) with limits, a priority tier, a preemption mode and
// access lists.
type Partition struct {
	Name     string            `json:"name" yaml:"name"`
	Default  bool              `json:"default,omitempty" yaml:"default,omitempty"`
	Nodes    []string          `json:"nodes,omitempty" yaml:"nodes,omitempty,flow"`
	Selector map[string]string `json:"selector,omitempty" yaml:"selector,omitempty"`
	Domains  []Domain          `json:"domains,omitempty" yaml:"domains,omitempty"`
	// Limits; zero: none.
	MaxGPUsPerJob  int      `json:"maxGPUsPerJob,omitempty" yaml:"maxGPUsPerJob,omitempty"`
	MaxRuntime     Duration `json:"maxRuntime,omitzero" yaml:"maxRuntime,omitempty"`
	DefaultRuntime Duration `json:"defaultRuntime,omitzero" yaml:"defaultRuntime,omitempty"`
	MaxNodes       int      `json:"maxNodes,omitempty" yaml:"maxNodes,omitempty"`
	PriorityTier   int      `json:"priorityTier,omitempty" yaml:"priorityTier,omitempty"`
	// PreemptMode: inherit (default: the job's own flag) or off.
	PreemptMode   string   `json:"preemptMode,omitempty" yaml:"preemptMode,omitempty"`
	AllowAccounts []string `json:"allowAccounts,omitempty" yaml:"allowAccounts,omitempty,flow"`
	AllowQueues   []string `json:"allowQueues,omitempty" yaml:"allowQueues,omitempty,flow"`
}

// Domain names a topology domain: the node's domain at Level.
type Domain struct {
	Level string `json:"level" yaml:"level"`
	Name  string `json:"name" yaml:"name"`
}

// Limits is engine.Limits (SLURM QOS: MaxJobsPerUser, MaxTRESPerUser and
// GrpTRES for GPUs). Zero: no limit.
type Limits struct {
	MaxJobsPerUser    int `json:"maxJobsPerUser,omitempty" yaml:"maxJobsPerUser,omitempty"`
	MaxGPUsPerUser    int `json:"maxGPUsPerUser,omitempty" yaml:"maxGPUsPerUser,omitempty"`
	MaxGPUsPerAccount int `json:"maxGPUsPerAccount,omitempty" yaml:"maxGPUsPerAccount,omitempty"`
	// Accounts overrides MaxGPUsPerAccount per account.
	Accounts map[string]int `json:"accounts,omitempty" yaml:"accounts,omitempty"`
}

// Names accepted by the site's enum fields.
var (
	PreemptModes    = []string{"inherit", "off"}
	NeverMetPolicys = []string{"cancel", "hold"}
)

func (f *File) buildSite(cfg *engine.Config) error {
	s := f.Site
	if s == nil {
		return nil
	}
	out := &cfg.Site
	for i, p := range s.Partitions {
		path := fmt.Sprintf("site.partitions[%d]", i)
		ep := engine.Partition{Name: p.Name, Default: p.Default, Nodes: p.Nodes, Selector: p.Selector,
			MaxGPUsPerJob: p.MaxGPUsPerJob, MaxNodes: p.MaxNodes, PriorityTier: p.PriorityTier,
			AllowAccounts: p.AllowAccounts, AllowQueues: p.AllowQueues}
		for _, d := range p.Domains {
			ep.Domains = append(ep.Domains, engine.DomainRef{Level: d.Level, Name: d.Name})
		}
		var err error
		if ep.MaxRuntime, err = f.duration(path+".maxRuntime", p.MaxRuntime); err != nil {
			return err
		}
		if ep.DefaultRuntime, err = f.duration(path+".defaultRuntime", p.DefaultRuntime); err != nil {
			return err
		}
		switch p.PreemptMode {
		case "", "inherit":
		case "off":
			ep.PreemptMode = engine.PreemptOff
		default:
			return f.fail(path+".preemptMode", "unknown mode %q (want one of %s)", p.PreemptMode, strings.Join(PreemptModes, ", "))
		}
		out.Partitions = append(out.Partitions, ep)
	}
	if l := s.Limits; l != nil {
		out.Limits = engine.Limits{MaxJobsPerUser: l.MaxJobsPerUser, MaxGPUsPerUser: l.MaxGPUsPerUser,
			MaxGPUsPerAccount: l.MaxGPUsPerAccount, Accounts: l.Accounts}
	}
	switch s.NeverMet {
	case "", "cancel":
	case "hold":
		out.NeverMet = engine.HoldNeverMet
	default:
		return f.fail("site.neverMet", "unknown policy %q (want one of %s)", s.NeverMet, strings.Join(NeverMetPolicys, ", "))
	}
	if err := out.Validate(); err != nil {
		return f.fail("site", "%v", err)
	}
	return nil
}
