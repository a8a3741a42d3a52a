package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// ErrInvalid is wrapped by every *FieldError.
var ErrInvalid = errors.New("config: invalid")

// FieldError names the field at fault, as a path in the file's own names
// ("queues.queues[1].quota.gpu.borrowingLimit"), and its line when the
// File came from Read (0 otherwise).
type FieldError struct {
	Path string
	Line int
	Msg  string
	Err  error // the underlying error, if any
}

func (e *FieldError) Error() string {
	s := e.Path + ": " + e.Msg
	if e.Line > 0 {
		s = fmt.Sprintf("line %d: %s", e.Line, s)
	}
	return "config: " + s
}

// Unwrap gives ErrInvalid and the underlying error.
func (e *FieldError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// Names accepted by the enum fields.
var (
	NodeStates      = []string{"ready", "cordoned", "draining", "down"}
	ShareModes      = []string{"exclusive", "time-slicing", "mps"}
	PolicyNames     = []string{"drs", "priority", "fairtree", "multifactor"}
	BackfillModes   = []string{"none", "easy", "conservative"}
	NodeFailures    = []string{"requeue", "fail"}
	defaultPolicy   = "drs"
	defaultBackfill = "none"
)

// Validate checks f and returns the first fault as a *FieldError. It
// checks what the engine checks (engine.Config.Validate) as well, with
// the field named in the file's terms.
func (f *File) Validate() error {
	_, err := f.build()
	return err
}

// Build validates f and returns the engine.Config it declares (Start is
// left zero).
func (f *File) Build() (engine.Config, error) { return f.build() }

func (f *File) fail(path, format string, args ...any) *FieldError {
	var under error
	for _, a := range args {
		if e, ok := a.(error); ok {
			under = e
		}
	}
	return &FieldError{Path: path, Line: f.lines.line(path), Msg: fmt.Sprintf(format, args...), Err: under}
}

func oneOf(s string, names []string) bool { return slices.Contains(names, s) }

func (f *File) build() (engine.Config, error) {
	var cfg engine.Config
	if err := f.checkLimits(); err != nil {
		return cfg, err
	}
	if err := f.checkFloats(); err != nil {
		return cfg, err
	}
	spec, err := f.buildCluster()
	if err != nil {
		return cfg, err
	}
	tree, err := f.buildQueues()
	if err != nil {
		return cfg, err
	}
	cfg.Cluster, cfg.Queues = spec, tree
	if err := f.buildEngine(&cfg); err != nil {
		return cfg, err
	}
	if err := f.buildSite(&cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, f.fail("engine", "%v", err)
	}
	return cfg, nil
}

func (f *File) buildCluster() (topo.Spec, error) {
	c := &f.Cluster
	spec := topo.Spec{Levels: slices.Clone(c.Levels), GPULevels: slices.Clone(c.GPULevels), ShareFreeGPUs: c.ShareFreeGPUs}
	total := 0 // at most MaxNodes: checkLimits ran first
	for _, n := range c.Nodes {
		total += max(n.Count, 1)
	}
	spec.Nodes = make([]topo.NodeSpec, 0, total)
	from := make([]int, 0, total) // node entry of each spec node
	names := make(map[string]string, total)
	for i := range c.Nodes {
		n := &c.Nodes[i]
		p := fmt.Sprintf("cluster.nodes[%d]", i)
		if n.Name == "" {
			return spec, f.fail(p+".name", "required")
		}
		if n.Count < 0 {
			return spec, f.fail(p+".count", "must not be negative, got %d", n.Count)
		}
		if n.GPUs < 1 || n.GPUs > topo.MaxGPUsPerNode {
			return spec, f.fail(p+".gpus", "want 1..%d GPUs, got %d", topo.MaxGPUsPerNode, n.GPUs)
		}
		ns := topo.NodeSpec{
			Domains: slices.Clone(n.Domains), GPUs: n.GPUs, GPUModel: n.GPUModel, GPUMemoryMiB: n.GPUMemoryMiB,
			CPUMilli: n.CPUs.Milli(), MemoryMiB: n.MemoryMiB, MIG: n.MIG, MIGLayout: n.MIGLayout,
		}
		if len(n.Labels) > 0 {
			ns.Labels = make(map[string]string, len(n.Labels))
			for k, v := range n.Labels {
				ns.Labels[k] = v
			}
		}
		if n.State != "" {
			if !oneOf(n.State, NodeStates) {
				return spec, f.fail(p+".state", "unknown state %q (want one of %s)", n.State, strings.Join(NodeStates, ", "))
			}
			ns.State, _ = topo.ParseNodeState(n.State)
		}
		if n.Sharing != nil {
			k := slices.Index(ShareModes, n.Sharing.Mode)
			if k < 0 {
				return spec, f.fail(p+".sharing.mode", "unknown mode %q (want one of %s)", n.Sharing.Mode, strings.Join(ShareModes, ", "))
			}
			ns.Sharing = mig.Sharing{Mode: mig.ShareMode(k), Replicas: n.Sharing.Replicas, MemoryMiB: n.Sharing.MemoryMiB}
		}
		for _, d := range n.GPUDomains {
			ns.GPUDomains = append(ns.GPUDomains, slices.Clone(d))
		}
		count := max(n.Count, 1)
		for k := range count {
			m := ns
			m.Name = n.Name
			if n.Count > 0 {
				m.Name = fmt.Sprintf("%s-%d", n.Name, k)
			}
			if prev, dup := names[m.Name]; dup {
				return spec, f.fail(p+".name", "node %q is also declared by %s", m.Name, prev)
			}
			names[m.Name] = p
			spec.Nodes = append(spec.Nodes, m)
			from = append(from, i)
		}
	}
	if err := spec.Validate(); err != nil {
		var se *topo.SpecError
		if errors.As(err, &se) && se.Node >= 0 && se.Node < len(from) {
			return spec, f.fail(fmt.Sprintf("cluster.nodes[%d].%s", from[se.Node], lowerFirst(se.Field)), "%v", err)
		}
		return spec, f.fail("cluster", "%v", err)
	}
	return spec, nil
}

func lowerFirst(s string) string {
	switch s {
	case "GPUs":
		return "gpus"
	case "MIG":
		return "mig"
	case "GPUDomains":
		return "gpuDomains"
	case "GPUMemoryMiB":
		return "gpuMemoryMiB"
	case "CPUMilli":
		return "cpus"
	}
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// resource checks a quota key and returns whether its amounts may have
// decimals (GPU and CPU resources, counted in thousandths).
func resource(name string) (queue.ResourceName, bool, error) {
	r := queue.ResourceName(name)
	switch {
	case r.IsGPU() && name != "gpu/":
		return r, true, nil
	case r == queue.CPUMilli:
		return r, true, nil
	case r == queue.MemoryMiB:
		return r, false, nil
	case strings.HasPrefix(name, "mig/") && len(name) > 4:
		return r, false, nil
	}
	return "", false, fmt.Errorf("unknown resource %q (want gpu, gpu/<model>, cpu, memory or mig/<profile>)", name)
}

func (f *File) buildQuota(p string, in map[string]Quota) (map[queue.ResourceName]queue.Quota, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[queue.ResourceName]queue.Quota, len(in))
	for _, name := range sortedKeys(in) {
		q := in[name]
		qp := p + ".quota." + name
		r, frac, err := resource(name)
		if err != nil {
			return nil, f.fail(qp, "%v", err)
		}
		amount := func(field string, v Quantity) (queue.Amount, error) {
			if frac {
				return queue.Amount(v.Milli()), nil
			}
			if v.Milli()%1000 != 0 {
				return 0, f.fail(qp+"."+field, "%s is counted in whole units, got %s", name, v)
			}
			return queue.Amount(v.Milli() / 1000), nil
		}
		limit := func(field string, l Limit) (queue.Limit, error) {
			if !l.IsSet() {
				return queue.Limit{}, f.fail(qp+"."+field, "required: an amount, or %q (unlimited is written, never implied)", Unlimited)
			}
			v, ok := l.Get()
			if !ok {
				return queue.NoLimit(), nil
			}
			a, err := amount(field, v)
			return queue.Cap(a), err
		}
		var qq queue.Quota
		if qq.Nominal, err = amount("nominal", q.Nominal); err != nil {
			return nil, err
		}
		if qq.BorrowingLimit, err = limit("borrowingLimit", q.BorrowingLimit); err != nil {
			return nil, err
		}
		if qq.LendingLimit, err = limit("lendingLimit", q.LendingLimit); err != nil {
			return nil, err
		}
		out[r] = qq
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func badWeight(w float64) bool { return math.IsNaN(w) || math.IsInf(w, 0) || w < 0 }

func (f *File) buildQueues() (queue.TreeSpec, error) {
	q := &f.Queues
	t := queue.TreeSpec{HalfLife: time.Duration(q.HalfLife)}
	if q.HalfLife < 0 {
		return t, f.fail("queues.halfLife", "must not be negative, got %v", q.HalfLife)
	}
	where := map[string]string{}
	name := func(p, n string) error {
		if n == "" {
			return f.fail(p+".name", "required")
		}
		if prev, dup := where[n]; dup {
			return f.fail(p+".name", "%q is also declared by %s", n, prev)
		}
		where[n] = p
		return nil
	}
	for i, c := range q.Cohorts {
		p := fmt.Sprintf("queues.cohorts[%d]", i)
		if err := name(p, c.Name); err != nil {
			return t, err
		}
		if badWeight(c.Weight) {
			return t, f.fail(p+".weight", "must be finite and not negative, got %v", c.Weight)
		}
		quota, err := f.buildQuota(p, c.Quota)
		if err != nil {
			return t, err
		}
		t.Cohorts = append(t.Cohorts, queue.CohortSpec{Name: c.Name, Parent: c.Parent, Weight: c.Weight, Quota: quota})
	}
	if len(q.Queues) == 0 {
		return t, f.fail("queues.queues", "at least one queue is required (jobs are submitted to queues)")
	}
	for i, qu := range q.Queues {
		p := fmt.Sprintf("queues.queues[%d]", i)
		if err := name(p, qu.Name); err != nil {
			return t, err
		}
		if badWeight(qu.Weight) {
			return t, f.fail(p+".weight", "must be finite and not negative, got %v", qu.Weight)
		}
		if qu.Cohort != "" && !slices.ContainsFunc(q.Cohorts, func(c Cohort) bool { return c.Name == qu.Cohort }) {
			return t, f.fail(p+".cohort", "no cohort %q is declared", qu.Cohort)
		}
		quota, err := f.buildQuota(p, qu.Quota)
		if err != nil {
			return t, err
		}
		t.Queues = append(t.Queues, queue.QueueSpec{Name: qu.Name, Cohort: qu.Cohort, Weight: qu.Weight, Quota: quota})
	}
	for i, c := range q.Cohorts {
		if c.Parent != "" && !slices.ContainsFunc(q.Cohorts, func(d Cohort) bool { return d.Name == c.Parent }) {
			return t, f.fail(fmt.Sprintf("queues.cohorts[%d].parent", i), "no cohort %q is declared", c.Parent)
		}
	}
	for i, a := range q.Accounts {
		p := fmt.Sprintf("queues.accounts[%d]", i)
		if err := name(p, a.Name); err != nil {
			return t, err
		}
		if badWeight(a.Shares) {
			return t, f.fail(p+".shares", "must be finite and not negative, got %v", a.Shares)
		}
		t.Accounts = append(t.Accounts, queue.AccountSpec{Name: a.Name, Parent: a.Parent, Shares: a.Shares})
	}
	if _, err := queue.NewTree(t); err != nil {
		var se *queue.SpecError
		if errors.As(err, &se) {
			if p, ok := where[se.Node]; ok {
				return t, f.fail(p+quotaPath(se.Field), "%v", err)
			}
		}
		return t, f.fail("queues", "%v", err)
	}
	return t, nil
}

// quotaPath turns a queue.SpecError field ("Quota[gpu].LendingLimit") into
// the file's path (".quota.gpu.lendingLimit").
func quotaPath(field string) string {
	rest, ok := strings.CutPrefix(field, "Quota[")
	if !ok {
		if field == "" {
			return ""
		}
		return "." + lowerFirst(field)
	}
	r, sub, _ := strings.Cut(rest, "]")
	return ".quota." + r + strings.ToLower(sub[:min(len(sub), 2)]) + sub[min(len(sub), 2):]
}

func (f *File) duration(path string, d Duration) (time.Duration, error) {
	if d < 0 {
		return 0, f.fail(path, "must not be negative, got %v", d)
	}
	return time.Duration(d), nil
}

func (f *File) buildEngine(cfg *engine.Config) error {
	e := &f.Engine
	var err error
	nonNeg := func(path string, v int) error {
		if v < 0 {
			return f.fail(path, "must not be negative, got %d", v)
		}
		return nil
	}
	// Policy.
	switch e.Policy.Name {
	case "", "drs":
		cfg.Policy = queue.DRS()
	case "priority":
		cfg.Policy = queue.StrictPriority()
	case "fairtree":
		cfg.Policy = queue.FairTree()
	case "multifactor":
		var w queue.Weights
		if e.Policy.Weights != nil {
			ww := e.Policy.Weights
			w = queue.Weights{Age: ww.Age, MaxAge: time.Duration(ww.MaxAge), Size: ww.Size, FavorSmall: ww.FavorSmall,
				FairShare: ww.FairShare, QueueWeight: ww.QueueWeight, Priority: ww.Priority}
		}
		if cfg.Policy, err = queue.Multifactor(w); err != nil {
			return f.fail("engine.policy.weights", "%v", err)
		}
	default:
		return f.fail("engine.policy.name", "unknown policy %q (want one of %s)", e.Policy.Name, strings.Join(PolicyNames, ", "))
	}
	if e.Policy.Weights != nil && e.Policy.Name != "multifactor" {
		return f.fail("engine.policy.weights", "weights are for the multifactor policy, not %q", e.Policy.Name)
	}
	if cfg.Pending.AgingPeriod, err = f.duration("engine.agingPeriod", e.AgingPeriod); err != nil {
		return err
	}
	if e.IntakeCapacity < 0 {
		return f.fail("engine.intakeCapacity", "must not be negative, got %d", e.IntakeCapacity)
	}
	cfg.IntakeCapacity = e.IntakeCapacity
	// Backfill.
	switch k := slices.Index(BackfillModes, e.Backfill.Mode); {
	case e.Backfill.Mode == "":
	case k < 0:
		return f.fail("engine.backfill.mode", "unknown mode %q (want one of %s)", e.Backfill.Mode, strings.Join(BackfillModes, ", "))
	default:
		cfg.Backfill.Mode = engine.BackfillMode(k)
	}
	if err := nonNeg("engine.backfill.depth", e.Backfill.Depth); err != nil {
		return err
	}
	if err := nonNeg("engine.backfill.maxProbes", e.Backfill.MaxProbes); err != nil {
		return err
	}
	cfg.Backfill.Depth, cfg.Backfill.MaxProbes = e.Backfill.Depth, e.Backfill.MaxProbes
	if cfg.Backfill.Window, err = f.duration("engine.backfill.window", e.Backfill.Window); err != nil {
		return err
	}
	// Preemption.
	if err := nonNeg("engine.preemption.maxVictimsPerCycle", e.Preemption.MaxVictimsPerCycle); err != nil {
		return err
	}
	if err := nonNeg("engine.preemption.maxPreemptorsPerCycle", e.Preemption.MaxPreemptorsPerCycle); err != nil {
		return err
	}
	cfg.Preemption = engine.PreemptionConfig{Priority: e.Preemption.Priority, Reclaim: e.Preemption.Reclaim,
		MaxVictimsPerCycle: e.Preemption.MaxVictimsPerCycle, MaxPreemptorsPerCycle: e.Preemption.MaxPreemptorsPerCycle}
	switch e.NodeFailure {
	case "", "requeue":
		cfg.NodeFailure = engine.RequeueOnFailure
	case "fail":
		cfg.NodeFailure = engine.FailOnFailure
	default:
		return f.fail("engine.nodeFailure", "unknown policy %q (want one of %s)", e.NodeFailure, strings.Join(NodeFailures, ", "))
	}
	if cfg.BindRetryBackoff, err = f.duration("engine.bindRetryBackoff", e.BindRetryBackoff); err != nil {
		return err
	}
	cfg.EagerPending = e.LazyPending != nil && !*e.LazyPending
	// MIG.
	m := &e.MIG
	if badWeight(m.WaitFactor) {
		return f.fail("engine.mig.waitFactor", "must be finite and not negative, got %v", m.WaitFactor)
	}
	if err := nonNeg("engine.mig.maxGPUs", m.MaxGPUs); err != nil {
		return err
	}
	cfg.MIG = engine.MIGConfig{Disabled: m.Disabled, WaitFactor: m.WaitFactor, MaxGPUs: m.MaxGPUs}
	for _, d := range []struct {
		path string
		in   Duration
		out  *time.Duration
	}{
		{"engine.mig.createCost", m.CreateCost, &cfg.MIG.Costs.Create},
		{"engine.mig.destroyCost", m.DestroyCost, &cfg.MIG.Costs.Destroy},
		{"engine.mig.resetCost", m.ResetCost, &cfg.MIG.Costs.Reset},
		{"engine.mig.retryBackoff", m.RetryBackoff, &cfg.MIG.RetryBackoff},
	} {
		if *d.out, err = f.duration(d.path, d.in); err != nil {
			return err
		}
	}
	// Scorer.
	s := &e.Scorer
	cfg.Scorer = gang.ScorerSpec{Name: s.Name, Seed: s.Seed}
	for _, sh := range s.Target {
		cfg.Scorer.Target = append(cfg.Scorer.Target, gang.Shape{GPUs: sh.GPUs, Milli: sh.Milli, CPUMilli: sh.CPUMilli,
			MemoryMiB: sh.MemoryMiB, Model: sh.Model, Count: sh.Count, Weight: sh.Weight})
	}
	if s.Name == gang.ScorerClustering {
		return f.fail("engine.scorer.name", "%q needs bind reports the engine does not give; use another scorer", s.Name)
	}
	if _, err := gang.NewScorer(cfg.Scorer); err != nil {
		return f.fail("engine.scorer", "%v", err)
	}
	return nil
}

// Effective returns a copy of f with every default the engine would take
// written out (policy drs, backfill none, depth 16, ...), so that what is
// printed is what runs. Effective(f) builds the same engine as f.
func (f *File) Effective() *File {
	g := f.clone()
	e := &g.Engine
	if e.Policy.Name == "" {
		e.Policy.Name = defaultPolicy
	}
	d := engine.Config{}.WithDefaults() // the engine's own defaults, not copies
	if e.IntakeCapacity == 0 {
		e.IntakeCapacity = d.IntakeCapacity
	}
	if e.Backfill.Mode == "" {
		e.Backfill.Mode = defaultBackfill
	}
	if e.Backfill.Depth == 0 {
		e.Backfill.Depth = d.Backfill.Depth
	}
	if e.Backfill.MaxProbes == 0 {
		e.Backfill.MaxProbes = d.Backfill.MaxProbes
	}
	if e.Preemption.MaxVictimsPerCycle == 0 {
		e.Preemption.MaxVictimsPerCycle = d.Preemption.MaxVictimsPerCycle
	}
	if e.Preemption.MaxPreemptorsPerCycle == 0 {
		e.Preemption.MaxPreemptorsPerCycle = d.Preemption.MaxPreemptorsPerCycle
	}
	if e.NodeFailure == "" {
		e.NodeFailure = "requeue"
	}
	if e.LazyPending == nil {
		lazy := !d.EagerPending
		e.LazyPending = &lazy
	}
	m := &e.MIG
	if m.WaitFactor == 0 {
		m.WaitFactor = d.MIG.WaitFactor
	}
	if m.MaxGPUs == 0 {
		m.MaxGPUs = d.MIG.MaxGPUs
	}
	if m.RetryBackoff == 0 {
		m.RetryBackoff = Duration(d.MIG.RetryBackoff)
	}
	dc := mig.DefaultCosts()
	if m.CreateCost == 0 {
		m.CreateCost = Duration(dc.Create)
	}
	if m.DestroyCost == 0 {
		m.DestroyCost = Duration(dc.Destroy)
	}
	if m.ResetCost == 0 {
		m.ResetCost = Duration(dc.Reset)
	}
	return g
}

func deepEqual(a, b File) bool { return reflect.DeepEqual(a, b) }
