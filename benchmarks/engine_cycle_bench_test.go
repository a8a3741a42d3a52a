package benchmarks

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// BenchmarkCycle times one full engine cycle (Step, Ready, Advance) on B2K
// after the standard random60 fill, represented as running jobs (one per
// used node, on the node's lowest GPUs, as the fill books them), with
// 10,000 seeded pending jobs of 1-256 GPUs across 20 queues, DRS fair share
// and EASY backfill. The first cycle (which binds what fits into the 40%
// left free) runs before the timer; each timed cycle follows one running
// job finishing and the clock moving one second, so it binds a little,
// reserves for the first blocked job, backfills, and stops its walk once
// nothing more can start (engine.Config.LazyPending; walked/cycle reports
// how many pending jobs a cycle reached). BERTH_FULL_WALK=1 runs it
// without LazyPending: every cycle then explains the ~7,500 jobs still
// pending.
//
// cluster=B12K/pending=100000 is the same on B12K with 100,000 pending
// jobs across 200 queues (issue 17).
func BenchmarkCycle(b *testing.B) {
	b.Run("cluster=B2K/pending=10000", func(b *testing.B) { engineCycleBench(b, B2K(), 10000, 20) })
	b.Run("cluster=B12K/pending=100000", func(b *testing.B) { engineCycleBench(b, B12K(), 100000, 200) })
}

// BenchmarkCycleSite is BenchmarkCycle with site rules in use
// (docs/site-features.md): three partitions (two halves of the cluster by
// block, and a default one over all of it), a third of the pending jobs in
// one half, a third in either half, a third in the default; and a per-user
// job limit over 50 users.
func BenchmarkCycleSite(b *testing.B) {
	b.Run("cluster=B2K/pending=10000", func(b *testing.B) {
		engineCycleBenchOpts(b, B2K(), engineBenchOpts{pending: 10000, queues: 20, site: true})
	})
}

func engineCycleBench(b *testing.B, sh ClusterShape, pending, queues int) {
	engineCycleBenchOpts(b, sh, engineBenchOpts{pending: pending, queues: queues, lazy: os.Getenv("BERTH_FULL_WALK") == ""})
}

func engineCycleBenchOpts(b *testing.B, sh ClusterShape, o engineBenchOpts) {
	e, stats, jobs := engineBenchSetup(b, sh, o)
	// ends tracks running jobs by expected end, so that the job expected
	// to end first can finish before each timed cycle.
	var ends []engineBenchEnd
	track := func(rd engine.Ready) {
		for _, bd := range rd.Binds {
			j := jobs[bd.Job]
			ends = append(ends, engineBenchEnd{rd.At.Add(j.RuntimeEstimate), bd.Job})
		}
		sortEnds(ends)
	}
	for id, j := range jobs {
		if strings.HasPrefix(id, "run-") {
			ends = append(ends, engineBenchEnd{j.Submit.Add(j.RuntimeEstimate), id})
		}
	}
	rd := e.Ready()
	if err := e.Advance(rd, engine.Outcome{}); err != nil {
		b.Fatal(err)
	}
	track(rd)
	firstBinds := len(rd.Binds)
	now := e.Now()
	binds, reserved, walked := 0, 0, 0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		if len(ends) > 0 {
			if err := e.Step(engine.Finished(now, ends[0].id)); err != nil {
				b.Fatal(err)
			}
			ends = ends[1:]
		} else if err := e.Step(engine.Tick(now)); err != nil {
			b.Fatal(err)
		}
		rd := e.Ready()
		if err := e.Advance(rd, engine.Outcome{}); err != nil {
			b.Fatal(err)
		}
		binds += len(rd.Binds)
		reserved += len(rd.Reservations)
		walked += len(rd.Pending)
		if len(rd.Binds) > 0 {
			b.StopTimer()
			track(rd)
			b.StartTimer()
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/n, "ms/cycle")
	b.ReportMetric(float64(binds)/n, "binds/cycle")
	b.ReportMetric(float64(reserved)/n, "reservations/cycle")
	b.ReportMetric(float64(len(e.View().Pending)+e.View().Unwalked), "pending")
	b.ReportMetric(float64(walked)/n, "walked/cycle")
	b.ReportMetric(float64(firstBinds), "first-cycle-binds")
	b.ReportMetric(float64(stats.Jobs), "fill-jobs")
}

// sortEnds sorts by end, then job.
func sortEnds(ends []engineBenchEnd) {
	slices.SortFunc(ends, func(a, b engineBenchEnd) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
}

type engineBenchEnd struct {
	at time.Time
	id string
}

// engineBenchOpts varies engineBenchSetup: pending jobs, queues, and
// for BenchmarkReserve the backfill mode and the job sizes.
type engineBenchOpts struct {
	pending, queues int
	backfill        engine.BackfillConfig // zero: EASY
	policy          queue.Policy          // nil: DRS
	noCaches        bool                  // engine.Config.DisableCaches
	lazy            bool                  // engine.Config.EagerPending off
	// full: every node's GPUs left free by the fill are booked too, by
	// one more running job per node (with its own estimate), so every
	// pending job is blocked and the cohort lends three times the cluster
	// (GPUs, not quota, block them).
	full bool
	// site: BenchmarkCycleSite's partitions and per-user limit.
	site bool
}

// engineBenchSetup builds the engine: cluster, quota tree, the fill as
// running jobs, and the pending jobs.
func engineBenchSetup(b testing.TB, sh ClusterShape, o engineBenchOpts) (*engine.Engine, FillStats, map[string]*queue.Job) {
	pending, queues := o.pending, o.queues
	jobs := map[string]*queue.Job{}
	b.Helper()
	spec := topo.Uniform(sh.Levels, sh.Fanout, sh.NodesPerLeaf, sh.GPUsPerNode, "H100")
	c, err := topo.New(spec)
	if err != nil {
		b.Fatal(err)
	}
	s := c.NewSnapshot()
	st, err := ApplyFill(s, sh, Random60)
	if err != nil {
		b.Fatal(err)
	}
	if sh.Name == B2K().Name && st.Checksum != 0x7faf8a5b6c63b8e1 {
		b.Fatalf("random60 checksum %x: not the standard work", st.Checksum)
	}
	// Each queue owns a share of the cluster and the cohort as much again
	// to lend, so queues borrow (fair share orders them) and GPUs, not
	// quota, are what runs out.
	lend := int64(c.NumGPUs())
	if o.full {
		lend *= 3
	}
	tree := queue.TreeSpec{Cohorts: []queue.CohortSpec{{Name: "all", Quota: map[queue.ResourceName]queue.Quota{
		queue.GPUMilli: {Nominal: queue.WholeGPUs(lend)}}}}}
	per := queue.WholeGPUs(int64(c.NumGPUs() / queues))
	for q := range queues {
		tree.Queues = append(tree.Queues, queue.QueueSpec{
			Name: engineBenchQueue(q), Cohort: "all",
			Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: per}},
		})
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if o.backfill.Mode == engine.BackfillNone {
		o.backfill.Mode = engine.BackfillEASY
	}
	if o.policy == nil {
		o.policy = queue.DRS()
	}
	cfg := engine.Config{
		Cluster: spec, Queues: tree, Policy: o.policy, Start: t0,
		Backfill:       o.backfill,
		IntakeCapacity: 1 << 17,
		DisableCaches:  o.noCaches,
		EagerPending:   !o.lazy,
	}
	if o.site {
		cfg.Site = engineBenchSite(sh)
	}
	e, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := NewSplitMix64(4242)
	duration := func() (est, limit time.Duration) {
		est = time.Duration(10+rng.Draw(24*60-10)) * time.Minute
		return est, est + time.Duration(rng.Draw(uint64(est/time.Minute)+1))*time.Minute
	}
	// adopt books GPUs lo..lo+n-1 of node id for a running job.
	adopt := func(name string, id topo.NodeID, lo, n int) {
		gpus := make([]int, n)
		for i := range gpus {
			gpus[i] = lo + i
		}
		est, limit := duration()
		j := &queue.Job{
			ID: name, Queue: engineBenchQueue(int(rng.Draw(uint64(queues)))), Submit: t0,
			Request:         gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: n}}},
			RuntimeEstimate: est, RuntimeLimit: limit,
		}
		jobs[j.ID] = j
		if err := e.Step(engine.Adopted(t0, j, []engine.Member{{Node: c.NodeName(id), GPUs: gpus}})); err != nil {
			b.Fatal(err)
		}
	}
	for id := range topo.NodeID(c.NumNodes()) {
		used := c.Node(id).GPUs - s.NodeAvailable(id)
		if free := c.Node(id).GPUs - used; o.full && free > 0 {
			adopt(fmt.Sprintf("top-%05d", id), id, used, free)
		}
		if used > 0 {
			adopt(fmt.Sprintf("run-%04d", id), id, 0, used)
		}
	}
	for i := range pending {
		size := 1 << rng.Draw(9) // 1..256 GPUs
		perMember := min(size, 8)
		req := gang.Request{Groups: []gang.Group{{Members: size / perMember, GPUsPerMember: perMember}}, Preferred: "rack"}
		if size >= 64 {
			req.Required = "block"
		}
		est, limit := duration()
		j := &queue.Job{
			ID: fmt.Sprintf("job-%05d", i), Queue: engineBenchQueue(int(rng.Draw(uint64(queues)))),
			Priority: int32(rng.Draw(4)), Submit: t0.Add(time.Duration(i) * time.Millisecond),
			Request: req, RuntimeEstimate: est, RuntimeLimit: limit,
		}
		if o.site {
			j.User = fmt.Sprintf("u%02d", i%50)
			j.Partitions = [][]string{{"half0"}, {"half0", "half1"}, nil}[i%3]
		}
		jobs[j.ID] = j
		if err := e.Intake().Submit(j); err != nil {
			b.Fatal(err)
		}
	}
	return e, st, jobs
}

func engineBenchQueue(q int) string { return fmt.Sprintf("q%02d", q) }

// engineBenchSite is BenchmarkCycleSite's site: the blocks split in two
// halves, a default partition over all of them, 200 jobs per user.
func engineBenchSite(sh ClusterShape) engine.SiteConfig {
	var halves [2][]engine.DomainRef
	for blk := range sh.Fanout[0] {
		d := engine.DomainRef{Level: sh.Levels[0], Name: fmt.Sprintf("%s%d", sh.Levels[0][:1], blk)}
		halves[2*blk/sh.Fanout[0]] = append(halves[2*blk/sh.Fanout[0]], d)
	}
	return engine.SiteConfig{
		Partitions: []engine.Partition{
			{Name: "half0", Domains: halves[0], PriorityTier: 1},
			{Name: "half1", Domains: halves[1]},
			{Name: "all", Domains: append(slices.Clone(halves[0]), halves[1]...), Default: true},
		},
		Limits: engine.Limits{MaxJobsPerUser: 200},
	}
}
