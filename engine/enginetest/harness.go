package enginetest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
	"github.com/cockroachdb/datadriven"
)

// T0 is the start of every scenario.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Harness holds the state of one scenario file.
type Harness struct {
	spec   topo.Spec
	tree   queue.TreeSpec
	trees  bool
	E      *engine.Engine
	now    time.Time
	last   engine.Ready
	haveRd bool
}

// New returns an empty harness.
func New() *Harness { return &Harness{now: T0} }

// Run runs one scenario file.
func Run(t *testing.T, path string) {
	h := New()
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		return h.Handle(t, d)
	})
}

// Handle runs one command and returns its output.
func (h *Harness) Handle(t testing.TB, d *datadriven.TestData) string {
	out, err := h.handle(d)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return out
}

func arg(d *datadriven.TestData, k string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == k {
			return strings.Join(a.Vals, ","), true
		}
	}
	return "", false
}

func (h *Harness) needEngine() error {
	if h.E == nil {
		return fmt.Errorf("no engine: run \"engine\" first")
	}
	return nil
}

func (h *Harness) handle(d *datadriven.TestData) (string, error) {
	switch d.Cmd {
	case "cluster":
		return "", h.cluster(d)
	case "add-node":
		if h.E == nil {
			// Before the engine: part of the initial inventory.
			n, err := nodeSpec(d)
			if err != nil {
				return "", err
			}
			h.spec.Nodes = append(h.spec.Nodes, n)
			return "", nil
		}
	case "queues":
		return "", h.queues(d.Input)
	case "engine":
		return "", h.engine(d)
	}
	if err := h.needEngine(); err != nil {
		return "", err
	}
	switch d.Cmd {
	case "submit":
		via, _ := arg(d, "via")
		return h.submit(d.Input, via == "intake")
	case "adopt":
		return h.adopt(d.Input)
	case "devices":
		return h.devices(d.Input)
	case "books":
		return h.books(), nil
	case "tick":
		if len(d.CmdArgs) != 1 {
			return "", fmt.Errorf("tick DURATION")
		}
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			return "", err
		}
		h.now = h.now.Add(dur)
		return "", h.E.Step(engine.Tick(h.now))
	case "finish", "cancel", "checkpoint":
		var b strings.Builder
		for _, a := range d.CmdArgs {
			var ev engine.Event
			switch d.Cmd {
			case "finish":
				ev = engine.Finished(h.now, a.Key)
			case "cancel":
				ev = engine.Cancelled(h.now, a.Key)
			default:
				ev = engine.Checkpointed(h.now, a.Key)
			}
			if err := h.E.Step(ev); err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
			}
		}
		return b.String(), nil
	case "add-node":
		n, err := nodeSpec(d)
		if err != nil {
			return "", err
		}
		return "", h.E.Step(engine.NodeAdded(h.now, n))
	case "node":
		name, _ := arg(d, "name")
		st := topo.Ready
		if s, ok := arg(d, "state"); ok {
			var err error
			if st, err = topo.ParseNodeState(s); err != nil {
				return "", err
			}
		}
		labels := parseLabels(d)
		if _, ok := arg(d, "labels"); !ok {
			labels = h.labelsOf(name)
		}
		return "", h.E.Step(engine.NodeChanged(h.now, name, st, labels))
	case "fail-node":
		if len(d.CmdArgs) != 1 {
			return "", fmt.Errorf("fail-node NAME")
		}
		return "", h.E.Step(engine.NodeFailed(h.now, d.CmdArgs[0].Key))
	case "ready":
		rd := h.E.Ready()
		ran := !h.haveRd || rd.Seq != h.last.Seq
		h.last, h.haveRd = rd, true
		if !ran {
			return "no cycle: nothing changed\n", nil
		}
		return Format(h.E, rd), nil
	case "advance":
		if !h.haveRd {
			return "", fmt.Errorf("advance before ready")
		}
		var o engine.Outcome
		if v, ok := arg(d, "refuse"); ok {
			o.RefusedBinds = strings.Split(v, ",")
		}
		if v, ok := arg(d, "refuse-preempt"); ok {
			o.RefusedPreemptions = strings.Split(v, ",")
		}
		if v, ok := arg(d, "refuse-resize"); ok {
			o.RefusedResizes = strings.Split(v, ",")
		}
		if v, ok := arg(d, "refuse-mig"); ok {
			for _, item := range strings.Split(v, ",") {
				node, g, _ := strings.Cut(item, ":")
				gi, err := strconv.Atoi(g)
				if err != nil {
					return "", fmt.Errorf("refuse-mig=node:gpu,...: %v", err)
				}
				o.RefusedMIG = append(o.RefusedMIG, engine.MIGReconfiguration{Node: node, GPU: gi})
			}
		}
		return "", h.E.Advance(h.last, o)
	case "view":
		return FormatView(h.E.View()), nil
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

func (h *Harness) labelsOf(name string) map[string]string {
	c := h.E.Cluster()
	id, ok := c.NodeByName(name)
	if !ok {
		return nil
	}
	return c.Node(id).Labels
}

func (h *Harness) cluster(d *datadriven.TestData) error {
	levels, _ := arg(d, "levels")
	fan, _ := arg(d, "fanout")
	var fanout []int
	for _, f := range strings.Split(fan, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("fanout: %v", err)
		}
		fanout = append(fanout, n)
	}
	nodes, _ := arg(d, "nodes")
	gpus, _ := arg(d, "gpus")
	nn, err1 := strconv.Atoi(nodes)
	ng, err2 := strconv.Atoi(gpus)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("nodes and gpus must be numbers")
	}
	model, ok := arg(d, "model")
	if !ok {
		model = "H100"
	}
	h.spec = topo.Uniform(strings.Split(levels, ","), fanout, nn, ng, model)
	_, h.spec.ShareFreeGPUs = arg(d, "share-free")
	for i := range h.spec.Nodes {
		if err := sharing(d, &h.spec.Nodes[i]); err != nil {
			return err
		}
	}
	return nil
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

func (h *Harness) engine(d *datadriven.TestData) error {
	cfg := engine.Config{Cluster: h.spec, Queues: h.tree, Start: T0}
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
	switch p {
	case "", "drs":
		cfg.Policy = queue.DRS()
	case "priority":
		cfg.Policy = queue.StrictPriority()
	case "fairtree":
		cfg.Policy = queue.FairTree()
	default:
		return fmt.Errorf("unknown policy %q", p)
	}
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
	return err
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
		case "on":
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

func (h *Harness) adopt(input string) (string, error) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		j, err := h.Job(line)
		if err != nil {
			return "", err
		}
		ms, err := parseOn(kvs(strings.Fields(line)[1:])["on"])
		if err != nil {
			return "", err
		}
		j.Request.Groups[0].Members = len(ms)
		if err := h.E.Step(engine.Adopted(h.now, j, ms)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}

// parseOn reads members "node:lo-hi,node:g+g+g,..." (node-local GPUs).
func parseOn(on string) ([]engine.Member, error) {
	var ms []engine.Member
	for _, item := range strings.Split(on, ",") {
		node, rng, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("on=node:lo-hi,...")
		}
		m := engine.Member{Node: node}
		if lo, hi, isRange := strings.Cut(rng, "-"); isRange {
			a, err1 := strconv.Atoi(lo)
			z, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bad range %q", rng)
			}
			for g := a; g <= z; g++ {
				m.GPUs = append(m.GPUs, g)
			}
		} else {
			for _, x := range strings.Split(rng, "+") {
				g, err := strconv.Atoi(x)
				if err != nil {
					return nil, fmt.Errorf("bad GPU %q", x)
				}
				m.GPUs = append(m.GPUs, g)
			}
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// devices steps DevicesReported events, one a line: "JOB on=node:GPUs,...".
func (h *Harness) devices(input string) (string, error) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", fmt.Errorf("devices: JOB on=node:GPUs,...")
		}
		ms, err := parseOn(kvs(f[1:])["on"])
		if err != nil {
			return "", err
		}
		if err := h.E.Step(engine.DevicesReported(h.now, f[0], ms)); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String(), nil
}

// books prints the GPUs every running job holds (Engine.Members), one job
// a line, and any GPU booked by two jobs.
func (h *Harness) books() string {
	var b strings.Builder
	var dups []string
	owner := map[string]string{}
	for _, rj := range h.E.View().Running() {
		ms, ok := h.E.Members(rj.Job)
		if !ok {
			fmt.Fprintf(&b, "%s: no members\n", rj.Job)
			continue
		}
		fmt.Fprintf(&b, "%s:", rj.Job)
		for _, m := range ms {
			fmt.Fprintf(&b, " %s:%v", m.Node, m.GPUs)
			for _, g := range m.GPUs {
				key := fmt.Sprintf("%s/%d", m.Node, g)
				if o, dup := owner[key]; dup {
					dups = append(dups, fmt.Sprintf("double booking: GPU %s held by %s and %s\n", key, o, rj.Job))
				}
				owner[key] = rj.Job
			}
		}
		b.WriteString("\n")
	}
	for _, d := range dups {
		b.WriteString(d)
	}
	return b.String()
}

func nodeSpec(d *datadriven.TestData) (topo.NodeSpec, error) {
	name, _ := arg(d, "name")
	doms, _ := arg(d, "domains")
	g, _ := arg(d, "gpus")
	n, err := strconv.Atoi(g)
	if err != nil {
		return topo.NodeSpec{}, fmt.Errorf("gpus: %v", err)
	}
	model, ok := arg(d, "model")
	if !ok {
		model = "H100"
	}
	ns := topo.NodeSpec{Name: name, Domains: strings.Split(doms, ","), GPUs: n, GPUModel: model, Labels: parseLabels(d)}
	return ns, sharing(d, &ns)
}

// sharing reads the MIG and sharing options of a node: mig (MIG mode),
// layout=3g,2g,1g,1g (its instances), timeslice=REPLICAS, mps=CLIENTS.
func sharing(d *datadriven.TestData, n *topo.NodeSpec) error {
	_, n.MIG = arg(d, "mig")
	if v, ok := arg(d, "layout"); ok {
		n.MIGLayout = strings.ReplaceAll(v, ",", " ")
	}
	for _, k := range []string{"timeslice", "mps"} {
		v, ok := arg(d, k)
		if !ok {
			continue
		}
		r, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s: %v", k, err)
		}
		n.Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: r}
		if k == "mps" {
			n.Sharing = mig.Sharing{Mode: mig.MPS, Replicas: r}
		}
	}
	return nil
}

func parseLabels(d *datadriven.TestData) map[string]string {
	v, ok := arg(d, "labels")
	if !ok || v == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		a, b, _ := strings.Cut(kv, ":")
		m[a] = b
	}
	return m
}

// rel formats a time relative to T0.
func rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + t.Sub(T0).String()
}

func ranges(idx []int) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if i == j {
			fmt.Fprintf(&b, "%d", idx[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", idx[i], idx[j])
		}
		i = j + 1
	}
	return b.String()
}

// members formats members as node[local GPUs], merged per node; a
// fractional member prints alone with what it holds:
// n0[3]{1g.10gb@6 new} (a MIG instance to create) or n1[0]{share 250m}.
func members(ms []engine.Member) string {
	var nodes []string
	per := map[string][]int{}
	var frac []string
	for _, m := range ms {
		if m.Fractional {
			frac = append(frac, fracMember(m))
			continue
		}
		if _, ok := per[m.Node]; !ok {
			nodes = append(nodes, m.Node)
		}
		per[m.Node] = append(per[m.Node], m.GPUs...)
	}
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		g := per[n]
		slices.Sort(g)
		parts[i] = n + "[" + ranges(g) + "]"
	}
	return strings.Join(append(parts, frac...), " ")
}

func fracMember(m engine.Member) string {
	var what string
	switch {
	case m.Share.ID != 0 && m.Share.Replicas == m.Share.Milli:
		what = fmt.Sprintf("share %dm", m.Share.Milli) // share-free GPUs count thousandths
	case m.Share.ID != 0 && m.Share.Replicas > 0:
		what = fmt.Sprintf("share %dm, %d replicas", m.Share.Milli, m.Share.Replicas)
	case m.Share.ID != 0:
		what = fmt.Sprintf("share %dm, mps %d%% %dMiB", m.Share.Milli, m.Share.ActiveThreadPercent, m.Share.PinnedMemoryMiB)
	default:
		what = m.Instance.String()
		if m.Created {
			what += " new"
		}
	}
	return fmt.Sprintf("%s[%d]{%s}", m.Node, m.GPUs[0], what)
}

// gpuSet formats cluster GPU indices as node[local GPUs].
func gpuSet(c *topo.Cluster, b *roaring.Bitmap) string {
	var ms []engine.Member
	var cur *engine.Member
	it := b.Iterator()
	for it.HasNext() {
		g := it.Next()
		id, err := c.NodeOfGPU(g)
		if err != nil {
			return fmt.Sprintf("?%d", g)
		}
		first, _ := c.NodeGPUs(id)
		name := c.NodeName(id)
		if cur == nil || cur.Node != name {
			ms = append(ms, engine.Member{Node: name})
			cur = &ms[len(ms)-1]
		}
		cur.GPUs = append(cur.GPUs, int(g-first))
	}
	return members(ms)
}

// Format renders a Ready for scenario files.
func Format(e *engine.Engine, rd engine.Ready) string {
	var b strings.Builder
	for _, p := range rd.Preemptions {
		fmt.Fprintf(&b, "preempt %s for %s (%v) deadline %s cost %.0f GPU-s\n", p.Victim, p.For, p.Cause, rel(p.Deadline), p.CostGPUSeconds)
	}
	for _, r := range rd.Resizes {
		fmt.Fprintf(&b, "resize %s to %d members", r.Job, r.Members)
		if len(r.Add) > 0 {
			fmt.Fprintf(&b, " add %s", members(r.Add))
		}
		if len(r.Remove) > 0 {
			fmt.Fprintf(&b, " remove %s", members(r.Remove))
		}
		b.WriteByte('\n')
	}
	for _, bd := range rd.Binds {
		bf := ""
		if bd.Backfill {
			bf = " (backfill)"
		}
		fmt.Fprintf(&b, "bind %s: %s%s\n", bd.Job, members(bd.Members), bf)
	}
	for _, r := range rd.MIG {
		fmt.Fprintf(&b, "reconfigure %s[%d]: %v -> %v", r.Node, r.GPU, r.From, r.To)
		if len(r.Destroy) > 0 {
			fmt.Fprintf(&b, " destroy %v", r.Destroy)
		}
		if len(r.Create) > 0 {
			fmt.Fprintf(&b, " create %v", r.Create)
		}
		b.WriteByte('\n')
	}
	for _, r := range rd.Reservations {
		kind := "reserve"
		if r.Preemption {
			kind = "hold"
		}
		fmt.Fprintf(&b, "%s %s at %s: %s\n", kind, r.Job, rel(r.Start), gpuSet(e.Cluster(), r.GPUs))
	}
	for _, p := range rd.Pending {
		fmt.Fprintf(&b, "pending %s: %s", p.Job, p.String())
		if !p.Start.IsZero() {
			fmt.Fprintf(&b, "; start %s", rel(p.Start))
		}
		b.WriteByte('\n')
	}
	if len(rd.Requeued) > 0 {
		fmt.Fprintf(&b, "requeued %s\n", strings.Join(rd.Requeued, ", "))
	}
	for _, f := range rd.Failed {
		fmt.Fprintf(&b, "failed %s (node %s)\n", f.Job, f.Node)
	}
	for _, r := range rd.Rejected {
		fmt.Fprintf(&b, "rejected %s: %v\n", r.Job, r.Err)
	}
	if b.Len() == 0 {
		return "nothing to do\n"
	}
	return b.String()
}

// FormatView renders a View.
func FormatView(v *engine.View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "at %s: %d of %d GPUs free\n", rel(v.At), v.FreeGPUs, v.TotalGPUs)
	for _, r := range v.Running() {
		state := "running"
		if r.Stopping {
			state = "stopping until " + rel(r.Deadline)
		}
		fmt.Fprintf(&b, "%s %s: %d GPUs", state, r.Job, r.GPUs)
		if r.Shared > 0 {
			fmt.Fprintf(&b, " + %d shared", r.Shared)
		}
		fmt.Fprintf(&b, " since %s, ends %s", rel(r.Start), rel(r.ExpectedEnd))
		if r.Backfilled {
			b.WriteString(" (backfilled)")
		}
		b.WriteByte('\n')
	}
	for _, p := range v.Pending {
		fmt.Fprintf(&b, "pending %s: %v\n", p.Job, p.Reason)
	}
	for _, q := range v.Queues() {
		fmt.Fprintf(&b, "queue %s: usage %v\n", q.Name, q.Usage)
	}
	return b.String()
}
