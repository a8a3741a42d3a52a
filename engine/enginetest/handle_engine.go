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

// handleEngine: engine policy=... backfill=... (see engine).
func (h *Harness) handleEngine(d *datadriven.TestData) (string, error) {
	return "", h.engine(d)
}

func (h *Harness) engine(d *datadriven.TestData) error {
	cfg := engine.Config{Cluster: h.spec, Queues: h.tree, Start: T0(), Site: h.site}
	if !h.trees {
		cfg.Queues = queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}
	}
	dur := func(k string) (time.Duration, error) {
		v, ok := arg(d, k)
		if !ok {
			return 0, nil
		}
		return time.ParseDuration(v)
	}
	num := func(k string) (int, error) {
		v, ok := arg(d, k)
		if !ok {
			return 0, nil
		}
		return strconv.Atoi(v)
	}
	p, _ := arg(d, "policy")
	if cfg.Policy = newPolicy(p); cfg.Policy == nil {
		return fmt.Errorf("unknown policy %q", p)
	}
	h.policyName = p
	b, _ := arg(d, "backfill")
	switch b {
	case "", "easy":
		cfg.Backfill.Mode = engine.BackfillEASY
	case "none":
		cfg.Backfill.Mode = engine.BackfillNone
	case "conservative":
		cfg.Backfill.Mode = engine.BackfillConservative
	default:
		return fmt.Errorf("unknown backfill %q", b)
	}
	var err error
	if cfg.Backfill.Depth, err = num("depth"); err != nil {
		return err
	}
	if cfg.Backfill.Window, err = dur("window"); err != nil {
		return err
	}
	if v, ok := arg(d, "preempt"); ok {
		for _, s := range strings.Split(v, ",") {
			switch s {
			case "priority":
				cfg.Preemption.Priority = true
			case "reclaim":
				cfg.Preemption.Reclaim = true
			default:
				return fmt.Errorf("unknown preempt %q", s)
			}
		}
	}
	if cfg.Preemption.MaxVictimsPerCycle, err = num("max-victims"); err != nil {
		return err
	}
	if v, _ := arg(d, "on-failure"); v == "fail" {
		cfg.NodeFailure = engine.FailOnFailure
	}
	if cfg.BindRetryBackoff, err = dur("backoff"); err != nil {
		return err
	}
	if cfg.BindRetryMax, err = dur("backoff-max"); err != nil {
		return err
	}
	if cfg.Pending.AgingPeriod, err = dur("aging"); err != nil {
		return err
	}
	_, cfg.MIG.Disabled = arg(d, "mig-off")
	if v, ok := arg(d, "mig-factor"); ok {
		if cfg.MIG.WaitFactor, err = strconv.ParseFloat(v, 64); err != nil {
			return err
		}
	}
	if cfg.MIG.RetryBackoff, err = dur("mig-backoff"); err != nil {
		return err
	}
	h.E, err = engine.New(cfg)
	if err != nil {
		return err
	}
	h.cfg = cfg
	if _, ok := arg(d, "journal"); ok {
		return h.E.EnableJournal()
	}
	return nil
}

// newPolicy returns the policy named p; nil if unknown.
func newPolicy(p string) queue.Policy {
	switch p {
	case "", "drs":
		return queue.DRS()
	case "priority":
		return queue.StrictPriority()
	case "fairtree":
		return queue.FairTree()
	}
	return nil
}
