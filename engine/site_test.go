package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// siteConfig is fuzzConfig (whole GPUs) with partitions and limits.
func siteConfig(rng *rand.Rand) Config {
	cfg := fuzzConfig(rng, false)
	cfg.Site = SiteConfig{
		Partitions: []Partition{
			{Name: "p0", Domains: []DomainRef{{Level: "block", Name: "b0"}}, Default: rng.IntN(2) == 0, MaxNodes: 3},
			{Name: "p1", Nodes: []string{"n3", "n4", "n5", "n6", "n7"}, AllowQueues: []string{"a", "b"}, PriorityTier: 2,
				PreemptMode: PreemptMode(rng.IntN(2)), DefaultRuntime: time.Hour, MaxRuntime: 3 * time.Hour},
		},
		Limits:   Limits{MaxJobsPerUser: rng.IntN(6), MaxGPUsPerUser: rng.IntN(3) * 16, MaxGPUsPerAccount: rng.IntN(2) * 24},
		NeverMet: NeverMetPolicy(rng.IntN(2)),
	}
	return cfg
}

// siteJob makes a random job of a random user, partitions and
// dependencies on jobs the engine tracks.
func siteRandJob(rng *rand.Rand, e *Engine, id string, now time.Time) *queue.Job {
	j := fuzzJob(rng, id, now, false)
	j.User = fmt.Sprintf("u%d", rng.IntN(3))
	j.Name = fmt.Sprintf("n%d", rng.IntN(2))
	switch rng.IntN(5) {
	case 0:
		j.Partitions = []string{"p0"}
	case 1:
		j.Partitions = []string{"p1"}
	case 2:
		j.Partitions = []string{"p0", "p1"}
	}
	if rng.IntN(3) == 0 {
		if dep := pick(rng, e.jobs); dep != "" {
			j.Dependencies = append(j.Dependencies, queue.Dependency{Kind: queue.DependencyKind(1 + rng.IntN(3)), Job: dep})
		}
	}
	if rng.IntN(8) == 0 {
		j.Dependencies = append(j.Dependencies, queue.Dependency{Kind: queue.Singleton})
	}
	return j
}

// siteHistory runs a random history with every site rule in play and
// checks the rules after each cycle. It returns the config, the steps,
// each step's digest, the journal length before each step, and the saved
// state.
func siteHistory(t *testing.T, seed uint64, n int) (Config, []fuzzStep, []string, []int, *State) {
	rng := rand.New(rand.NewPCG(seed, seed^0x517e))
	cfg := siteConfig(rng)
	quiet := seed%3 == 0 // no preemption nor reservations: walks may resume
	if quiet {
		cfg.Preemption.Priority, cfg.Preemption.Reclaim, cfg.Backfill.Window = false, false, 0
	}
	mk := func() Config { c := cfg; c.Policy = fuzzPolicy(seed); return c }
	e, err := New(mk())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnableJournal(); err != nil {
		t.Fatal(err)
	}
	// A twin that never resumes a walk decides the same.
	twin, err := New(mk())
	if err != nil {
		t.Fatal(err)
	}
	twin.noResume = true
	var (
		steps   []fuzzStep
		digests []string
		at      []int
	)
	now := fuzzT0
	do := func(st fuzzStep) {
		at = append(at, len(e.jn.recs))
		d := siteApply(t, e, st)
		if d2 := siteApply(t, twin, st); d2 != d {
			t.Fatalf("seed %d, step %d: the engine that resumes walks differs:\n%s\n%s", seed, len(steps), d, d2)
		}
		digests = append(digests, d)
		steps = append(steps, st)
	}
	arrays := 0
	for i := 0; len(steps) < n; i++ {
		var st fuzzStep
		var ev Event
		switch k := rng.IntN(14); {
		case k < 3:
			ev = Submitted(now, siteRandJob(rng, e, fmt.Sprintf("j%d", i), now))
		case k == 3:
			ev = ArraySubmitted(now, siteRandJob(rng, e, fmt.Sprintf("arr%d", arrays), now), 1+rng.IntN(6), rng.IntN(3))
			arrays++
		case k == 4:
			id := pick(rng, e.activeMap())
			if id == "" {
				continue
			}
			ev = Finished(now, id)
			if rng.IntN(2) == 0 {
				ev = FinishedFailed(now, id)
			}
		case k == 5:
			if rng.IntN(3) == 0 && arrays > 0 {
				ev = Cancelled(now, fmt.Sprintf("arr%d", rng.IntN(arrays)))
			} else if id := pick(rng, e.jobs); id != "" {
				ev = Cancelled(now, id)
			} else {
				continue
			}
		case k == 6:
			now = now.Add(time.Duration(1+rng.IntN(6)) * 10 * time.Minute)
			active := e.activeMap()
			for _, id := range sortedKeys(active) {
				js := active[id]
				if js.j.RuntimeEstimate > 0 && !js.start.Add(js.j.RuntimeEstimate).After(now) && rng.IntN(4) > 0 {
					end := js.start.Add(js.j.RuntimeEstimate)
					if end.Before(e.now) {
						end = e.now
					}
					fe := Finished(end, id)
					if rng.IntN(4) == 0 {
						fe = FinishedFailed(end, id)
					}
					do(fuzzStep{ev: &fe})
				}
			}
			ev = Tick(now)
		case k == 7 && !quiet:
			r := AdvanceReservation{Name: fmt.Sprintf("r%d", rng.IntN(3)), Start: now.Add(time.Duration(rng.IntN(12)) * 10 * time.Minute),
				Duration: time.Duration(1+rng.IntN(6)) * 20 * time.Minute, Accounts: []string{[]string{"a", "b", "c"}[rng.IntN(3)]}}
			if rng.IntN(2) == 0 {
				r.Nodes = []string{fmt.Sprintf("n%d", rng.IntN(8))}
				r.Maintenance = rng.IntN(3) == 0
			} else {
				r.GPUs = 1 + rng.IntN(8)
				r.Domain = DomainRef{Level: "rack", Name: fmt.Sprintf("r%d", rng.IntN(2))}
			}
			ev = ReservationSet(now, r)
		case k == 8 && rng.IntN(3) == 0:
			ev = ReservationDeleted(now, fmt.Sprintf("r%d", rng.IntN(3)))
		case k == 9 && rng.IntN(4) == 0:
			states := []topo.NodeState{topo.Ready, topo.Cordoned, topo.Ready, topo.Down}
			ev = NodeChanged(now, fmt.Sprintf("n%d", rng.IntN(8)), states[rng.IntN(len(states))], nil)
		case k >= 10:
			st.ready = true
			st.refuse = make([]uint8, 32)
			for i := range st.refuse {
				st.refuse[i] = uint8(rng.IntN(10))
			}
		default:
			continue
		}
		if !st.ready {
			st.ev = &ev
		}
		do(st)
	}
	full, err := e.Save()
	if err != nil {
		t.Fatal(err)
	}
	siteResumed += e.resumed
	return mk(), steps, digests, at, full
}

// siteResumed counts the cycles of siteHistory that resumed a walk.
var siteResumed int

// siteApply applies one step and returns its digest; after a cycle it
// checks the site rules.
func siteApply(t *testing.T, e *Engine, st fuzzStep) string {
	t.Helper()
	if st.ev != nil {
		err := e.Step(*st.ev)
		return fmt.Sprintf("%v %s err=%v", st.ev.Kind, st.ev.JobID, err)
	}
	if !e.HasReady() {
		return "idle"
	}
	rd := e.Ready()
	checkSite(t, e, rd)
	out := st.outcome(rd)
	if err := e.Advance(rd, out); err != nil {
		t.Fatalf("Advance: %v", err)
	}
	var b strings.Builder
	b.WriteString(digest(rd))
	for _, x := range rd.Binds {
		fmt.Fprintf(&b, " part(%s)=%s", x.Job, x.Partition)
	}
	for _, id := range sortedKeys(rd.Holds) {
		fmt.Fprintf(&b, " L(%s,%s)", id, rd.Holds[id])
	}
	fmt.Fprintf(&b, " refused=%v", out)
	return b.String()
}

// checkSite checks the site rules on a cycle's decisions and the engine's
// running jobs.
func checkSite(t *testing.T, e *Engine, rd Ready) {
	t.Helper()
	c := e.cluster
	for _, r := range rd.Resizes {
		if p, ok := e.PartitionOf(r.Job); ok {
			for _, m := range r.Add {
				id, _ := c.NodeByName(m.Node)
				if !c.MatchesSelector(id, map[string]string{partitionLabel(p): "true"}) {
					t.Fatalf("%s grew onto %s, outside partition %s", r.Job, m.Node, p)
				}
			}
		}
	}
	for _, b := range rd.Binds {
		js := e.jobs[b.Job]
		if js == nil {
			t.Fatalf("bind of unknown job %s", b.Job)
		}
		if b.Partition != "" {
			p := e.site.parts[e.site.partIdx[b.Partition]]
			for _, m := range b.Members {
				id, _ := c.NodeByName(m.Node)
				if !c.MatchesSelector(id, map[string]string{partitionLabel(p.Name): "true"}) {
					t.Fatalf("%s bound on %s, outside partition %s", b.Job, m.Node, p.Name)
				}
			}
		} else if len(js.j.Partitions) > 0 {
			t.Fatalf("%s names partitions %v but was bound in none", b.Job, js.j.Partitions)
		}
		if sj := js.site; sj != nil {
			for _, d := range sj.deps {
				if !d.met {
					t.Fatalf("%s bound with dependency %v unmet", b.Job, d.Dependency)
				}
			}
		}
		// No bind on the GPUs of an advance reservation the job may not
		// run into.
		if e.site != nil {
			for _, name := range sortedKeys(e.site.adv) {
				a := e.site.adv[name]
				if !advBlocks(a, js, rd.At) {
					continue
				}
				gs := a.gpus(c)
				for _, m := range b.Members {
					id, _ := c.NodeByName(m.Node)
					first, _ := c.NodeGPUs(id)
					for _, g := range m.GPUs {
						if _, in := slices.BinarySearch(gs, first+uint32(g)); in {
							t.Fatalf("%s bound on GPU %s[%d] of reservation %s (%v..%v, now %v, limit %v, acct %s, backfill %v; claims %v)", b.Job, m.Node, g, name, a.start, a.end, rd.At, js.j.RuntimeLimit, js.j.AccountName(), b.Backfill, rd.Reservations)
						}
					}
				}
			}
		}
	}
	if e.site == nil {
		return
	}
	// Limits and throttles hold over the jobs running now (binds of this
	// cycle included). Jobs are never adopted here, so every running job
	// went through the checks.
	l := e.cfg.Site.Limits
	users, accts := map[string]usage{}, map[string]usage{}
	arrays := map[*jobArray]int{}
	for _, js := range e.active {
		u := users[js.j.User]
		u.jobs++
		u.gpus += js.gpuN
		users[js.j.User] = u
		a := accts[js.j.AccountName()]
		a.gpus += js.gpuN
		accts[js.j.AccountName()] = a
		if js.site != nil && js.site.array != nil {
			arrays[js.site.array]++
		}
	}
	for name, u := range users {
		if name == "" {
			continue
		}
		if l.MaxJobsPerUser > 0 && u.jobs > l.MaxJobsPerUser || l.MaxGPUsPerUser > 0 && u.gpus > l.MaxGPUsPerUser {
			t.Fatalf("user %s runs %d jobs on %d GPUs, limits %+v", name, u.jobs, u.gpus, l)
		}
	}
	for name, a := range accts {
		if m := l.accountGPUs(name); m > 0 && a.gpus > m {
			t.Fatalf("account %s holds %d GPUs, limit %d", name, a.gpus, m)
		}
	}
	for a, n := range arrays {
		if a.throttle > 0 && n > a.throttle {
			t.Fatalf("array %s runs %d tasks, throttle %d", a.id, n, a.throttle)
		}
		if n != a.running {
			t.Fatalf("array %s: %d tasks running, counted %d", a.id, n, a.running)
		}
	}
}

// restoreJSON restores an engine from the first n records of full, through
// JSON, with a fresh policy of the seed.
func restoreJSON(t *testing.T, cfg Config, full *State, n int, seed uint64) *Engine {
	t.Helper()
	return restoreStateJSON(t, cfg, &State{Version: full.Version, Cluster: full.Cluster, Start: full.Start, Records: full.Records[:n]}, seed)
}

// restoreStateJSON restores st after a trip through JSON.
func restoreStateJSON(t *testing.T, cfg Config, st *State, seed uint64) *Engine {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	cfg.Policy = fuzzPolicy(seed)
	e, err := Restore(cfg, &back)
	if err != nil {
		t.Fatalf("seed %d, %d records, snapshot %v: Restore: %v", seed, len(st.Records), st.Snapshot != nil, err)
	}
	return e
}

// TestSiteRestoreSameDecisions: with partitions, limits, arrays,
// dependencies (ended OK, failed or cancelled) and advance reservations
// in play, an engine restored from the state saved at a random point (as
// JSON) makes the same decisions from there on as the one that never
// stopped; and every cycle of every history keeps the site rules
// (checkSite).
func TestSiteRestoreSameDecisions(t *testing.T) {
	const histories, points = 12, 6
	checked, compacted := 0, 0
	seen := map[string]int{}
	for seed := uint64(1); seed <= histories; seed++ {
		cfg, steps, digests, at, full := siteHistory(t, seed, 250)
		for _, d := range digests {
			for _, k := range []string{"array-throttled", "limit:", "L(", "dependency", "part(", "reservation-set  err=<nil>", "never met"} {
				if strings.Contains(d, k) {
					seen[k]++
				}
			}
		}
		rng := rand.New(rand.NewPCG(seed, 11))
		for p := 0; p < points; p++ {
			i := rng.IntN(len(steps))
			e2 := restoreJSON(t, cfg, full, at[i], seed)
			twins := []*Engine{e2}
			// The same state compacted (arrays, dependencies, partitions,
			// limits, advance reservations) and restored from its snapshot.
			e3 := restoreJSON(t, cfg, full, at[i], seed)
			switch err := e3.Compact(); {
			case err == nil:
				st, err := e3.Save()
				if err != nil {
					t.Fatal(err)
				}
				twins = append(twins, restoreStateJSON(t, cfg, st, seed))
				compacted++
			case !errors.Is(err, ErrNotCompactable):
				t.Fatalf("seed %d, step %d: Compact: %v", seed, i, err)
			}
			for n, e := range twins {
				for k := i; k < len(steps); k++ {
					if d := siteApply(t, e, steps[k]); d != digests[k] {
						t.Fatalf("seed %d, stopped before step %d (compacted %v): step %d differs:\nnever stopped: %s\nrestored:      %s", seed, i, n == 1, k, digests[k], d)
					}
				}
			}
			checked++
		}
	}
	t.Logf("%d stop points (%d also compacted); digests with: %v; resumed cycles %d", checked, compacted, seen, siteResumed)
	if compacted != checked {
		t.Errorf("%d of %d stop points could not be compacted", checked-compacted, checked)
	}
	if siteResumed == 0 {
		t.Error("no cycle resumed a walk: the twin comparison covers nothing")
	}
	for _, k := range []string{"L(", "part(", "reservation-set  err=<nil>", "dependency"} {
		if seen[k] == 0 {
			t.Errorf("no step with %q: the histories do not cover it", k)
		}
	}
}

// FuzzEngineSite runs random site histories (checkSite after every
// cycle) and checks that the saved state restores to an engine that
// decides the same for one more cycle.
func FuzzEngineSite(f *testing.F) {
	for s := uint64(100); s < 104; s++ {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		cfg, _, _, _, full := siteHistory(t, seed, 150)
		e1, err := Restore(cfg, full)
		if err != nil {
			t.Fatal(err)
		}
		e2 := restoreJSON(t, cfg, full, len(full.Records), seed)
		tick := Tick(e1.now.Add(10 * time.Minute))
		st := fuzzStep{ready: true, refuse: []uint8{0}}
		for _, x := range []*Engine{e1, e2} {
			if err := x.Step(tick); err != nil {
				t.Fatal(err)
			}
		}
		if d1, d2 := siteApply(t, e1, st), siteApply(t, e2, st); d1 != d2 {
			t.Fatalf("restored engine differs:\n%s\n%s", d1, d2)
		}
	})
}

func siteTestEngine(t *testing.T, site SiteConfig) *Engine {
	t.Helper()
	cfg := Config{
		Cluster: topo.Uniform([]string{"rack"}, []int{2}, 2, 8, "H100"),
		Queues:  queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "a"}, {Name: "b"}}},
		Start:   fuzzT0,
		Site:    site,
	}
	cfg.Backfill.Mode = BackfillEASY
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func siteJobOf(id, q string, gpus int) *queue.Job {
	return &queue.Job{ID: id, Queue: q, Submit: fuzzT0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: gpus}}}}
}

func TestSiteConfigErrors(t *testing.T) {
	for name, s := range map[string]SiteConfig{
		"empty name":      {Partitions: []Partition{{Nodes: []string{"n0"}}}},
		"duplicate":       {Partitions: []Partition{{Name: "p", Nodes: []string{"n0"}}, {Name: "p", Nodes: []string{"n1"}}}},
		"no nodes":        {Partitions: []Partition{{Name: "p"}}},
		"two defaults":    {Partitions: []Partition{{Name: "p", Nodes: []string{"n0"}, Default: true}, {Name: "q", Nodes: []string{"n1"}, Default: true}}},
		"negative":        {Partitions: []Partition{{Name: "p", Nodes: []string{"n0"}, MaxGPUsPerJob: -1}}},
		"default > max":   {Partitions: []Partition{{Name: "p", Nodes: []string{"n0"}, MaxRuntime: time.Hour, DefaultRuntime: 2 * time.Hour}}},
		"bad domain":      {Partitions: []Partition{{Name: "p", Domains: []DomainRef{{Level: "rack"}}}}},
		"preempt mode":    {Partitions: []Partition{{Name: "p", Nodes: []string{"n0"}, PreemptMode: 9}}},
		"negative limit":  {Limits: Limits{MaxJobsPerUser: -1}},
		"bad account":     {Limits: Limits{Accounts: map[string]int{"": 1}}},
		"never-met value": {NeverMet: 7},
	} {
		cfg := Config{Start: fuzzT0, Site: s}
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestPartitionErrorsAndPartitionOf(t *testing.T) {
	e := siteTestEngine(t, SiteConfig{Partitions: []Partition{
		{Name: "gpu", Nodes: []string{"n0", "n1"}, AllowAccounts: []string{"a"}},
		{Name: "dev", Domains: []DomainRef{{Level: "rack", Name: "r1"}}, MaxNodes: 1, Default: true},
	}})
	j := siteJobOf("x", "b", 1)
	j.Partitions = []string{"gpu"}
	err := e.Step(Submitted(fuzzT0, j))
	var pe *PartitionError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPartition) || pe.Partition != "gpu" || pe.Rule != "access-account" {
		t.Fatalf("got %v, want a PartitionError for gpu/access-account", err)
	}
	// Refused by one partition, accepted by another: it runs there.
	j = siteJobOf("y", "b", 8)
	j.Partitions = []string{"gpu", "dev"}
	if err := e.Step(Submitted(fuzzT0, j)); err != nil {
		t.Fatal(err)
	}
	big := siteJobOf("big", "a", 8)
	big.Request.Groups[0].Members = 2
	if err := e.Step(Submitted(fuzzT0, big)); err == nil || !strings.Contains(err.Error(), "max-nodes") {
		t.Fatalf("got %v, want a max-nodes refusal from the default partition", err)
	}
	rd := e.Ready()
	if len(rd.Binds) != 1 || rd.Binds[0].Partition != "dev" {
		t.Fatalf("binds %+v, want y in dev", rd.Binds)
	}
	for _, m := range rd.Binds[0].Members {
		if m.Node != "n2" && m.Node != "n3" {
			t.Fatalf("y on %s, outside dev (rack r1)", m.Node)
		}
	}
	if p, ok := e.PartitionOf("y"); !ok || p != "dev" {
		t.Fatalf("PartitionOf(y) = %q, %v", p, ok)
	}
	if _, ok := e.PartitionOf("nope"); ok {
		t.Fatal("PartitionOf of an unknown job")
	}
	// No partitions configured: naming one is refused.
	e2 := siteTestEngine(t, SiteConfig{})
	j = siteJobOf("z", "a", 1)
	j.Partitions = []string{"gpu"}
	if err := e2.Step(Submitted(fuzzT0, j)); !errors.Is(err, ErrPartition) {
		t.Fatalf("got %v, want ErrPartition", err)
	}
}

func TestSiteEventErrors(t *testing.T) {
	e := siteTestEngine(t, SiteConfig{})
	for name, ev := range map[string]Event{
		"no name":        ReservationSet(fuzzT0, AdvanceReservation{Start: fuzzT0, Duration: time.Hour, Nodes: []string{"n0"}}),
		"no start":       ReservationSet(fuzzT0, AdvanceReservation{Name: "r", Duration: time.Hour, Nodes: []string{"n0"}}),
		"empty window":   ReservationSet(fuzzT0, AdvanceReservation{Name: "r", Start: fuzzT0, Nodes: []string{"n0"}}),
		"nodes and gpus": ReservationSet(fuzzT0, AdvanceReservation{Name: "r", Start: fuzzT0, Duration: time.Hour, Nodes: []string{"n0"}, GPUs: 2}),
		"unknown node":   ReservationSet(fuzzT0, AdvanceReservation{Name: "r", Start: fuzzT0, Duration: time.Hour, Nodes: []string{"zz"}}),
		"unknown level":  ReservationSet(fuzzT0, AdvanceReservation{Name: "r", Start: fuzzT0, Duration: time.Hour, GPUs: 1, Domain: DomainRef{Level: "row", Name: "x"}}),
		"too many GPUs":  ReservationSet(fuzzT0, AdvanceReservation{Name: "r", Start: fuzzT0, Duration: time.Hour, GPUs: 33}),
		"delete unknown": ReservationDeleted(fuzzT0, "nope"),
		"array nil":      ArraySubmitted(fuzzT0, nil, 2, 0),
		"array 0 tasks":  ArraySubmitted(fuzzT0, siteJobOf("arr", "a", 1), 0, 0),
		"array throttle": ArraySubmitted(fuzzT0, siteJobOf("arr", "a", 1), 2, -1),
		"bad dependency": Submitted(fuzzT0, &queue.Job{ID: "d", Queue: "a", Submit: fuzzT0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}},
			Dependencies: []queue.Dependency{{Kind: queue.AfterOK, Job: "ghost"}}}),
		"singleton job": Submitted(fuzzT0, &queue.Job{ID: "s", Queue: "a", Submit: fuzzT0, Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 1}}},
			Dependencies: []queue.Dependency{{Kind: queue.Singleton, Job: "x"}}}),
	} {
		if err := e.Step(ev); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, running := e.JobIDs(); len(running) != 0 {
		t.Fatal("a refused event left jobs")
	}
	if p, _ := e.JobIDs(); len(p) != 0 {
		t.Fatalf("a refused event left pending jobs %v", p)
	}
	// An array whose task ID is taken is refused whole.
	if err := e.Step(Submitted(fuzzT0, siteJobOf("arr_2", "a", 1))); err != nil {
		t.Fatal(err)
	}
	if err := e.Step(ArraySubmitted(fuzzT0, siteJobOf("arr", "a", 1), 3, 0)); !errors.Is(err, ErrDuplicateJob) {
		t.Fatalf("got %v, want ErrDuplicateJob", err)
	}
	if p, _ := e.JobIDs(); len(p) != 1 {
		t.Fatalf("pending %v, want only arr_2", p)
	}
}
