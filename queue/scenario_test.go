package queue

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0).UTC()

// TestScenarios runs the scenario files in testdata/. Commands:
//
//	tree [aging=<dur>] [halflife=<dur>]   lines: cohort|queue|account NAME k=v...
//	    quotas: gpu=4 (whole GPUs), gpu:H100=8, cpu=..., mem=..., mig:1g.10gb=...;
//	    a quota may end in /b<borrow> and /l<lend>, e.g. gpu=4/b2/l1
//	submit                                 lines: ID queue=Q [prio=] [gpus=MxG]
//	    [milli=MxM] [mig=MxPROFILE] [model=] [cpu=] [mem=] [at=<sec>] [account=]
//	fits ID | lenders ID | remove ID
//	charge ID [at=] | release ID [at=] | adopt ID [at=]
//	advance at=<sec>
//	usage | ranks | snapshot
//	order policy=priority|drs|fairtree|multifactor [at=] [admit] [w=age:1,...]
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &scenario{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.run(t, d)
		})
	})
}

type scenario struct {
	tree *Tree
	p    *Pending
	jobs map[string]*Job
}

func at(t *testing.T, d *datadriven.TestData) time.Time {
	var sec float64
	if d.HasArg("at") {
		d.ScanArgs(t, "at", &sec)
	}
	return t0.Add(time.Duration(sec * float64(time.Second)))
}

func parseRes(key string) (ResourceName, int64, bool) {
	switch {
	case key == "gpu":
		return GPUMilli, 1000, true
	case strings.HasPrefix(key, "gpu:"):
		return GPUModel(key[4:]), 1000, true
	case key == "cpu":
		return CPUMilli, 1, true
	case key == "mem":
		return MemoryMiB, 1, true
	case strings.HasPrefix(key, "mig:"):
		return MIG(key[4:]), 1, true
	}
	return "", 0, false
}

func fmtAmount(r ResourceName, a Amount) string {
	if r.IsGPU() {
		if a%1000 == 0 {
			return strconv.FormatInt(int64(a/1000), 10)
		}
		return strconv.FormatFloat(float64(a)/1000, 'f', 3, 64)
	}
	return strconv.FormatInt(int64(a), 10)
}

func kv(t *testing.T, fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("bad field %q", f)
		}
		m[k] = v
	}
	return m
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "tree":
		return s.buildTree(t, d)
	case "submit":
		var out strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			j := parseJob(t, line)
			s.jobs[j.ID] = j
			if err := s.p.Add(j); err != nil {
				fmt.Fprintf(&out, "%s: %v\n", j.ID, err)
			}
		}
		if out.Len() == 0 {
			return fmt.Sprintf("pending: %d", s.p.Len())
		}
		return out.String()
	case "fits":
		j := s.job(t, d)
		f, err := s.tree.Fits(j)
		if err != nil {
			return err.Error()
		}
		return fmtFit(f)
	case "lenders":
		loans, err := s.tree.Lenders(s.job(t, d))
		if err != nil {
			return err.Error()
		}
		if len(loans) == 0 {
			return "none"
		}
		var b strings.Builder
		for _, l := range loans {
			fmt.Fprintf(&b, "%s lends %s %s\n", l.From, fmtAmount(l.Resource, l.Amount), l.Resource)
		}
		return b.String()
	case "charge", "adopt", "release":
		j := s.job(t, d)
		var err error
		switch d.Cmd {
		case "charge":
			err = s.tree.Charge(j, at(t, d))
			if err == nil {
				s.p.Remove(j.ID)
			}
		case "adopt":
			err = s.tree.Adopt(j, at(t, d))
			if err == nil {
				s.p.Remove(j.ID)
			}
		default:
			err = s.tree.Release(j, at(t, d))
		}
		if err != nil {
			return err.Error()
		}
		return s.usage()
	case "remove":
		_, ok := s.p.Remove(d.CmdArgs[0].Key)
		return fmt.Sprintf("removed: %v", ok)
	case "advance":
		s.tree.Advance(at(t, d))
		return s.usage()
	case "usage":
		return s.usage()
	case "ranks":
		return strings.Join(s.tree.FairTreeRanks(), " ")
	case "snapshot":
		snap := s.p.Publish(at(t, d))
		var b strings.Builder
		fmt.Fprintf(&b, "pending %d\n", snap.Len())
		for _, q := range snap.Queues() {
			var ids []string
			snap.Pending(q.Name, func(j *Job) bool { ids = append(ids, j.ID); return true })
			fmt.Fprintf(&b, "%s cohort=%q usage=[%s] nominal=[%s] jobs=%v\n", q.Name, q.Cohort, q.Usage, q.Nominal, ids)
		}
		return b.String()
	case "order":
		return s.order(t, d)
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func fmtFit(f Fit) string {
	switch {
	case !f.OK:
		return fmt.Sprintf("no: %s need %s, available %s", f.Resource, fmtAmount(f.Resource, f.Need), fmtAmount(f.Resource, f.Available))
	case f.Borrowing:
		return "yes, borrowing"
	}
	return "yes"
}

func (s *scenario) job(t *testing.T, d *datadriven.TestData) *Job {
	require.NotEmpty(t, d.CmdArgs)
	j, ok := s.jobs[d.CmdArgs[0].Key]
	require.True(t, ok, "unknown job %s", d.CmdArgs[0].Key)
	return j
}

func (s *scenario) buildTree(t *testing.T, d *datadriven.TestData) string {
	var spec TreeSpec
	var cfg PendingConfig
	if d.HasArg("halflife") {
		var v string
		d.ScanArgs(t, "halflife", &v)
		spec.HalfLife, _ = time.ParseDuration(v)
	}
	if d.HasArg("aging") {
		var v string
		d.ScanArgs(t, "aging", &v)
		cfg.AgingPeriod, _ = time.ParseDuration(v)
	}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		kind, name, m := f[0], f[1], kv(t, f[2:])
		quota := map[ResourceName]Quota{}
		var weight float64
		parent := ""
		for k, v := range m {
			switch k {
			case "weight", "shares":
				weight, _ = strconv.ParseFloat(v, 64)
				continue
			case "parent", "cohort":
				parent = v
				continue
			}
			r, unit, ok := parseRes(k)
			require.True(t, ok, "bad key %q", k)
			parts := strings.Split(v, "/")
			var q Quota
			n, err := strconv.ParseFloat(parts[0], 64)
			require.NoError(t, err)
			q.Nominal = Amount(n * float64(unit))
			for _, p := range parts[1:] {
				n, err := strconv.ParseFloat(p[1:], 64)
				require.NoError(t, err)
				switch p[0] {
				case 'b':
					q.BorrowingLimit = Cap(Amount(n * float64(unit)))
				case 'l':
					q.LendingLimit = Cap(Amount(n * float64(unit)))
				}
			}
			quota[r] = q
		}
		switch kind {
		case "cohort":
			spec.Cohorts = append(spec.Cohorts, CohortSpec{Name: name, Parent: parent, Weight: weight, Quota: quota})
		case "queue":
			spec.Queues = append(spec.Queues, QueueSpec{Name: name, Cohort: parent, Weight: weight, Quota: quota})
		case "account":
			spec.Accounts = append(spec.Accounts, AccountSpec{Name: name, Parent: parent, Shares: weight})
		default:
			t.Fatalf("bad kind %q", kind)
		}
	}
	tree, err := NewTree(spec)
	if err != nil {
		return err.Error()
	}
	s.tree = tree
	s.p, err = NewPending(tree, cfg)
	require.NoError(t, err)
	s.jobs = map[string]*Job{}
	return s.usage()
}

func parseJob(t *testing.T, line string) *Job {
	f := strings.Fields(line)
	m := kv(t, f[1:])
	j := &Job{ID: f[0], Submit: t0}
	g := gang.Group{Members: 1}
	for k, v := range m {
		switch k {
		case "queue":
			j.Queue = v
		case "account":
			j.Account = v
		case "prio":
			p, _ := strconv.Atoi(v)
			j.Priority = int32(p)
		case "at":
			sec, _ := strconv.ParseFloat(v, 64)
			j.Submit = t0.Add(time.Duration(sec * float64(time.Second)))
		case "gpus", "milli", "mig":
			a, b, ok := strings.Cut(v, "x")
			require.True(t, ok, "want MxN in %q", v)
			g.Members, _ = strconv.Atoi(a)
			switch k {
			case "gpus":
				g.GPUsPerMember, _ = strconv.Atoi(b)
			case "milli":
				g.GPUMilli, _ = strconv.Atoi(b)
			default:
				g.MIGProfile = b
			}
		case "model":
			g.GPUModel = v
		case "cpu":
			g.CPUMilli, _ = strconv.ParseInt(v, 10, 64)
		case "mem":
			g.MemoryMiB, _ = strconv.ParseInt(v, 10, 64)
		case "limit":
			j.RuntimeLimit, _ = time.ParseDuration(v)
		case "estimate":
			j.RuntimeEstimate, _ = time.ParseDuration(v)
		default:
			t.Fatalf("bad job key %q", k)
		}
	}
	j.Request.Groups = []gang.Group{g}
	return j
}

func (s *scenario) usage() string {
	t := s.tree
	var b strings.Builder
	names := make([]string, 0, len(t.nodes))
	for i := range t.nodes {
		names = append(names, t.nodes[i].name)
	}
	slices.Sort(names)
	for _, n := range names {
		i := t.nodeIdx[n]
		nd := &t.nodes[i]
		kind := "queue "
		if nd.kind == kindCohort {
			kind = "cohort"
		}
		fmt.Fprintf(&b, "%s %s:", kind, n)
		for k, r := range t.res {
			fmt.Fprintf(&b, " %s[nom=%s sub=%s use=%s", r, fmtAmount(r, nd.nominal[k]), fmtAmount(r, nd.subtree[k]), fmtAmount(r, nd.usage[k]))
			if nd.kind == kindQueue {
				fmt.Fprintf(&b, " avail=%s", fmtAmount(r, t.Available(n, r)))
			}
			b.WriteString("]")
		}
		if sh := t.share(i, nil); sh != 0 {
			fmt.Fprintf(&b, " share=%.3f", sh)
		}
		if nd.decayed != 0 {
			fmt.Fprintf(&b, " gpu-s=%.1f", nd.decayed)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (s *scenario) order(t *testing.T, d *datadriven.TestData) string {
	var name string
	d.ScanArgs(t, "policy", &name)
	now := at(t, d)
	var pol Policy
	switch name {
	case "priority":
		pol = StrictPriority()
	case "drs":
		pol = DRS()
	case "fairtree":
		pol = FairTree()
	case "multifactor":
		w := Weights{}
		if d.HasArg("w") {
			var v string
			d.ScanArgs(t, "w", &v)
			for _, kvp := range strings.Split(v, ",") {
				k, val, _ := strings.Cut(kvp, ":")
				x, _ := strconv.ParseFloat(val, 64)
				switch k {
				case "age":
					w.Age = x
				case "size":
					w.Size = x
				case "small":
					w.FavorSmall = x != 0
				case "fs":
					w.FairShare = x
				case "queue":
					w.QueueWeight = x
				case "prio":
					w.Priority = x
				case "maxage":
					w.MaxAge = time.Duration(x * float64(time.Second))
				}
			}
		}
		var err error
		pol, err = Multifactor(w)
		require.NoError(t, err)
	default:
		t.Fatalf("unknown policy %q", name)
	}
	s.tree.Advance(now)
	admit := d.HasArg("admit")
	var b strings.Builder
	cur := pol.Order(s.p, now)
	for j, ok := cur.Next(); ok; j, ok = cur.Next() {
		if !admit {
			fmt.Fprintf(&b, "%s ", j.ID)
			continue
		}
		f, err := s.tree.Fits(j)
		require.NoError(t, err)
		if !f.OK {
			fmt.Fprintf(&b, "skip %s (%s)\n", j.ID, fmtFit(f))
			continue
		}
		require.NoError(t, s.tree.Charge(j, now))
		s.p.Remove(j.ID)
		fmt.Fprintf(&b, "run %s\n", j.ID)
	}
	return strings.TrimSpace(b.String())
}
