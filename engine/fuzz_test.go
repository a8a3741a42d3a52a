package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// fuzzT0 is the start of every fuzzed history.
var fuzzT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzConfig derives a small engine configuration from the seed. With
// shared, some nodes have MIG GPUs (an empty A100-40GB, an H100-80GB split
// into seven 1g instances), one is time-sliced, one uses MPS, and free
// plain GPUs may be shared (ShareFreeGPUs).
func fuzzConfig(rng *rand.Rand, shared bool) Config {
	spec := topo.Uniform([]string{"block", "rack"}, []int{2, 2}, 2, []int{4, 8}[rng.IntN(2)], "H100")
	if shared {
		spec.ShareFreeGPUs = true
		spec.Nodes[0].GPUModel, spec.Nodes[0].MIG = "A100-40GB", true
		spec.Nodes[0].MIGLayout = []string{"", "1g 1g 1g 1g 1g 1g 1g", "3g 2g 1g 1g", "4g 3g"}[rng.IntN(4)]
		spec.Nodes[3].GPUModel, spec.Nodes[3].MIG, spec.Nodes[3].MIGLayout = "H100-80GB", true, "1g 1g 1g 1g 1g 1g 1g"
		spec.Nodes[5].Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: 4}
		spec.Nodes[6].Sharing = mig.Sharing{Mode: mig.MPS, Replicas: 8}
	}
	quota := func(n int64, borrow int64) map[queue.ResourceName]queue.Quota {
		q := queue.Quota{Nominal: queue.WholeGPUs(n)}
		if borrow >= 0 {
			q.BorrowingLimit = queue.Cap(queue.WholeGPUs(borrow))
		}
		return map[queue.ResourceName]queue.Quota{queue.GPUMilli: q}
	}
	cfg := Config{
		Cluster: spec,
		Queues: queue.TreeSpec{
			Cohorts: []queue.CohortSpec{{Name: "org"}},
			Queues: []queue.QueueSpec{
				{Name: "a", Cohort: "org", Quota: quota(int64(8+rng.IntN(24)), int64(rng.IntN(3)*8-1))},
				{Name: "b", Cohort: "org", Quota: quota(int64(8+rng.IntN(24)), -1)},
				{Name: "c", Cohort: "org", Quota: quota(int64(rng.IntN(16)), int64(rng.IntN(2)*16-1))},
			},
		},
		Start: fuzzT0,
	}
	cfg.Backfill.Mode = BackfillMode(rng.IntN(3))
	cfg.Backfill.Depth = 1 + rng.IntN(4)
	if rng.IntN(3) == 0 {
		cfg.Backfill.Window = time.Duration(1+rng.IntN(6)) * time.Hour
	}
	cfg.Preemption.Priority = rng.IntN(2) == 0
	cfg.Preemption.Reclaim = rng.IntN(2) == 0
	cfg.Preemption.MaxVictimsPerCycle = 1 + rng.IntN(4)
	cfg.NodeFailure = NodeFailurePolicy(rng.IntN(2))
	cfg.BindRetryBackoff = time.Duration(rng.IntN(3)) * time.Minute
	if shared {
		cfg.MIG.WaitFactor = []float64{0.01, 1, 100}[rng.IntN(3)]
		cfg.MIG.MaxGPUs = 1 + rng.IntN(3)
		cfg.MIG.RetryBackoff = time.Duration(rng.IntN(3)) * 10 * time.Minute
	}
	return cfg
}

// fuzzSeedConfig is fuzzConfig with the seed's policy. Seeds with bit 32
// set get no preemption and quotas too large to hold a job back, so that
// the walk's cut under LazyPending can happen (lazy.go) and FuzzEngine
// compares it with a full walk; with bit 33 too, conservative backfill
// may hold more reservations than the cut reads one by one (maxCutRes).
func fuzzSeedConfig(rng *rand.Rand, seed uint64, shared bool) Config {
	cfg := fuzzConfig(rng, shared)
	cfg.MaxBindTries = int(seed>>40) % 4 // 0: retried for ever
	cfg.Policy = fuzzPolicy(seed)
	if seed>>32&1 == 1 {
		cfg.Preemption.Priority, cfg.Preemption.Reclaim = false, false
		for i := range cfg.Queues.Queues {
			cfg.Queues.Queues[i].Quota = map[queue.ResourceName]queue.Quota{queue.GPUMilli: {Nominal: queue.WholeGPUs(1000)}}
		}
		if seed>>33&1 == 1 {
			cfg.Backfill.Depth = maxCutRes + 1 + int(seed>>34&3)
		}
		if seed>>37&1 == 1 {
			// Skips (skip.go): backfill, and jobs that skipWorldJob
			// makes.
			cfg.Backfill.Mode = BackfillEASY + BackfillMode(seed>>38&1)
		}
	}
	return cfg
}

func fuzzPolicy(seed uint64) queue.Policy {
	switch seed % 3 {
	case 0:
		return queue.DRS()
	case 1:
		return queue.StrictPriority()
	}
	return queue.FairTree()
}

// fuzzStep is one recorded input: an event, or a Ready with the refusals
// given to Advance.
type fuzzStep struct {
	ev      *Event
	ready   bool
	refuse  []uint8 // per decision, refused when odd
	comment string
}

// fuzzJob makes a random job; with shared, half of them have
// fractional or MIG members.
func fuzzJob(rng *rand.Rand, id string, now time.Time, shared bool) *queue.Job {
	per := []int{1, 2, 4, 8}[rng.IntN(4)]
	members := 1 + rng.IntN(3)
	j := &queue.Job{
		ID: id, Queue: []string{"a", "b", "c"}[rng.IntN(3)], Submit: now,
		Priority: int32(rng.IntN(4)),
		Request:  gang.Request{Groups: []gang.Group{{Members: members, GPUsPerMember: per}}},
	}
	switch rng.IntN(4) {
	case 0:
		j.Request.Required = "block"
		if (members+per)%2 == 1 {
			j.Request.Preferred = "rack"
		}
	case 1:
		j.Request.Required = "rack"
	default:
		if members == 3 {
			j.Request.Preferred = "rack"
		}
	}
	// (Preferred levels come from the draws above, not from new ones, so
	// that the corpus's inputs keep their jobs otherwise.)
	if rng.IntN(5) > 0 {
		j.RuntimeEstimate = time.Duration(1+rng.IntN(12)) * 10 * time.Minute
		if rng.IntN(4) > 0 {
			j.RuntimeLimit = j.RuntimeEstimate + time.Duration(rng.IntN(4))*10*time.Minute
		}
	}
	if rng.IntN(2) == 0 {
		j.Preemptible = true
		j.MinRuntime = time.Duration(rng.IntN(4)) * 10 * time.Minute
		if j.RuntimeLimit > 0 && j.MinRuntime > j.RuntimeLimit {
			j.MinRuntime = j.RuntimeLimit
		}
		j.GracePeriod = time.Duration(rng.IntN(3)) * 5 * time.Minute
	}
	if rng.IntN(6) == 0 {
		j.Elastic = queue.Elastic{MinMembers: 1, MaxMembers: members + rng.IntN(2)}
	}
	if shared && rng.IntN(2) == 0 {
		g := &j.Request.Groups[0]
		g.GPUsPerMember = 0
		if rng.IntN(3) == 0 {
			g.GPUMilli = []int{100, 250, 300, 500, 700}[rng.IntN(5)]
		} else {
			g.MIGProfile = []string{"1g", "2g", "3g", "1g.10gb", "4g", "7g"}[rng.IntN(6)]
			g.Members = 1 + rng.IntN(6)
		}
	}
	return j
}

// skipWorldJob reshapes j for the walk's skips (seed bits 32 and 37): a
// skip needs a full cluster where only the jobs whose limit ends before
// the reservation may start. So no elastic job (they turn the skip off),
// whole GPUs, four or eight a member, and a runtime limit on most jobs,
// a few of them short.
func skipWorldJob(rng *rand.Rand, j *queue.Job) {
	j.Elastic = queue.Elastic{}
	g := &j.Request.Groups[0]
	g.GPUMilli, g.MIGProfile = 0, ""
	g.GPUsPerMember = []int{4, 8, 8}[rng.IntN(3)]
	g.Members = 1 + rng.IntN(3)
	j.RuntimeEstimate = time.Duration(2+rng.IntN(20)) * 10 * time.Minute
	j.RuntimeLimit = j.RuntimeEstimate + time.Duration(rng.IntN(8))*10*time.Minute
	switch rng.IntN(8) {
	case 0:
		j.RuntimeLimit = 0
	case 1:
		j.RuntimeEstimate, j.RuntimeLimit = 5*time.Minute, 10*time.Minute
	}
	if j.MinRuntime > j.RuntimeLimit {
		j.MinRuntime = j.RuntimeLimit
	}
}

// FuzzEngine runs random event sequences (submissions, ends, cancels,
// checkpoints, ticks, node failures, state changes and additions, cycles
// with random refusals) and checks after every step: no GPU booked twice
// and the snapshot's counters consistent; gangs whole; quota held (within
// borrowing limits); every job in exactly one state; no backfilled job
// overlapping a reservation it would delay; no job preempted within its
// minimum runtime; and, at the end, the same sequence replayed on a fresh
// engine gives the same decisions, and the engine saved (Save), encoded as
// JSON and restored (Restore) decides as the original for one more cycle.
func FuzzEngine(f *testing.F) {
	f.Add(uint64(1), []byte{0, 0, 0, 9, 9, 1, 9, 2, 9, 3, 0, 0, 9, 4, 9})
	f.Add(uint64(2), []byte{0, 0, 0, 0, 0, 0, 9, 5, 9, 0, 0, 9, 6, 9, 7, 9, 8, 9})
	f.Add(uint64(3), []byte{0, 9, 0, 9, 0, 9, 4, 4, 9, 0, 0, 0, 9, 1, 1, 9, 5, 9, 10, 9})
	f.Add(uint64(42), []byte{0, 0, 0, 0, 9, 4, 0, 0, 9, 4, 9, 3, 9, 6, 9, 0, 0, 9, 4, 4, 9, 1, 9})
	f.Add(uint64(7), []byte{0, 0, 0, 0, 0, 9, 250, 250, 9, 7, 250, 9, 2, 250, 0, 0, 9, 250, 6, 250, 9})
	// services (232..249): set, scale, delete amid jobs, failures, refusals
	f.Add(uint64(11), []byte{232, 233, 9, 0, 0, 240, 9, 4, 241, 9, 2, 3, 9, 6, 9, 235, 236, 9, 4, 9, 245, 9, 0, 9})
	f.Add(uint64(12), []byte{232, 9, 234, 9, 0, 0, 0, 9, 238, 9, 4, 4, 9, 239, 237, 9, 3, 9, 7, 9, 248, 9, 4, 9})
	// no preemption, ample quota, StrictPriority: walks stop early
	// (LazyPending), with refusals, ends, failures and backoffs
	f.Add(uint64(1<<32), []byte{0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 9, 2, 9, 4, 9, 0, 0, 9, 2, 2, 9, 6, 9, 7, 9, 4, 9, 3, 9, 4, 4, 9})
	f.Add(uint64(1<<32|3), []byte{0, 1, 0, 1, 0, 1, 0, 1, 0, 9, 9, 2, 9, 2, 0, 0, 9, 4, 9, 8, 9, 0, 0, 0, 9, 5, 9, 4, 9, 2, 2, 9, 10, 9})
	// the same, DRS, jobs reshaped for the walk's skips (skipWorldJob):
	// a backlog, then ends, ticks and cycles
	f.Add(uint64(1<<32|1<<37|3), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 2, 9, 4, 9, 0, 1, 9, 2, 9, 4, 9, 0, 9, 4, 4, 9, 2, 9, 0, 0, 9, 4, 9, 2, 2, 9, 4, 9})
	f.Fuzz(runFuzzBody)
}

// FUZZDBG=1 logs every event and cycle of a failing input (with -run on
// its corpus file) for debugging a finding.
//
// FuzzEngineShared is FuzzEngine on a cluster with MIG, time-sliced, MPS
// and share-on-demand GPUs, with fractional and MIG jobs and MIG
// reconfigurations (some refused). On top of FuzzEngine's invariants it
// checks after every step that the snapshot's pool is consistent
// (mig.Pool.Check) and that every MIG instance or share in use is held by
// exactly one running job.
func FuzzEngineShared(f *testing.F) {
	f.Add(uint64(1), []byte{0, 0, 0, 9, 9, 1, 9, 2, 9, 3, 0, 0, 9, 4, 9})
	f.Add(uint64(5), []byte{0, 0, 0, 0, 0, 0, 9, 4, 9, 4, 9, 6, 9, 8, 9, 8, 9, 2, 9})
	f.Add(uint64(13), []byte{232, 233, 9, 0, 0, 240, 9, 4, 241, 9, 2, 3, 9, 6, 9, 235, 236, 9, 4, 9, 245, 9, 0, 9})
	f.Add(uint64(14), []byte{232, 9, 234, 9, 0, 0, 0, 9, 238, 9, 4, 4, 9, 239, 237, 9, 3, 9, 7, 9, 248, 9, 4, 9})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) { runFuzz(t, seed, ops, true) })
}

func runFuzzBody(t *testing.T, seed uint64, ops []byte) { runFuzz(t, seed, ops, false) }

// fuzzResSkipped counts the reservation probes the memos spared in the
// first engine of every input run (resmemo.go; the second engine has
// every cache off).
var fuzzResSkipped atomic.Uint64

// TestFuzzReachesResMemo runs random FuzzEngine inputs and requires the
// reservation memos to spare probes in some of them: FuzzEngine's
// comparison with every cache off then covers them.
func TestFuzzReachesResMemo(t *testing.T) {
	before := fuzzResSkipped.Load()
	rng := rand.New(rand.NewPCG(41, 43))
	for range 400 {
		ops := make([]byte, 20+rng.IntN(120))
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		runFuzzBody(t, rng.Uint64(), ops)
	}
	n := fuzzResSkipped.Load() - before
	t.Logf("probes spared by the reservation memos: %d", n)
	if n == 0 {
		t.Fatal("no probe spared: FuzzEngine does not reach the reservation memos")
	}
}

func runFuzz(t *testing.T, seed uint64, ops []byte, shared bool) {
	{
		if len(ops) > 300 {
			ops = ops[:300]
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
		cfg := fuzzSeedConfig(rng, seed, shared)
		// The first engine stops its walks early where it may (lazy
		// pending statuses, the default); apply compares its
		// PendingStatuses, PendingAll and View (explanations, estimates)
		// with the second engine's full walk below.
		e, err := New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := e.EnableJournal(); err != nil {
			t.Fatal(err)
		}
		var steps []fuzzStep
		var digests []string
		m := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
		now := fuzzT0
		nextID := 0
		extra := 0
		for _, op := range ops {
			var st fuzzStep
			kind := int(op % 11)
			if op >= 250 { // the backend reports other GPUs than booked
				kind = -1
				if ev, ok := fuzzDevices(rng, e, now); ok {
					st.ev = &ev
				}
			} else if op >= 220 && op < 232 { // an asynchronous bind's outcome, or a release
				kind = -1
				if ev, ok := fuzzBindOutcome(rng, e, now); ok {
					st.ev = &ev
				}
			} else if op >= 232 { // a service is set, scaled or deleted
				kind = -1
				ev := fuzzService(rng, e, now, shared)
				st.ev = &ev
			}
			switch kind {
			case -1:
			case 0, 1: // submit
				j := fuzzJob(rng, fmt.Sprintf("j%d", nextID), now, shared)
				if seed>>32&1 == 1 && seed>>37&1 == 1 {
					skipWorldJob(rng, j)
				}
				nextID++
				ev := Submitted(now, j)
				st.ev = &ev
			case 2: // finish a running job
				if id := pick(rng, e.activeMap()); id != "" {
					ev := Finished(now, id)
					st.ev = &ev
				}
			case 3: // cancel any job
				if id := pick(rng, e.jobs); id != "" {
					ev := Cancelled(now, id)
					st.ev = &ev
				}
			case 4: // time passes; jobs whose estimate ends finish on time
				now = now.Add(time.Duration(1+rng.IntN(12)) * 10 * time.Minute)
				ev := Tick(now)
				st.ev = &ev
			case 5: // checkpoint
				if id := pick(rng, e.activeMap()); id != "" {
					ev := Checkpointed(now, id)
					st.ev = &ev
				}
			case 6: // a node fails
				ev := NodeFailed(now, fmt.Sprintf("n%d", rng.IntN(8)))
				st.ev = &ev
			case 7: // a node changes state
				states := []topo.NodeState{topo.Ready, topo.Cordoned, topo.Draining, topo.Ready}
				ev := NodeChanged(now, fmt.Sprintf("n%d", rng.IntN(8)), states[rng.IntN(len(states))], nil)
				st.ev = &ev
			case 8: // a node joins
				if extra < 3 {
					n := topo.NodeSpec{Name: fmt.Sprintf("x%d", extra), Domains: []string{"b1", "r1"}, GPUs: 4, GPUModel: "H100"}
					if shared && extra%2 == 0 {
						n.GPUModel, n.MIG = "A100-40GB", true
					}
					ev := NodeAdded(now, n)
					extra++
					st.ev = &ev
				}
			default: // a cycle
				st.ready = true
				st.refuse = make([]uint8, 32)
				for i := range st.refuse {
					st.refuse[i] = uint8(rng.IntN(8))
				}
			}
			if st.ev == nil && !st.ready {
				continue
			}
			// Jobs whose estimate has passed finish before the tick lands.
			if st.ev != nil && st.ev.Kind == EventTick {
				active := e.activeMap()
				for _, id := range sortedKeys(active) {
					js := active[id]
					if js.j.RuntimeEstimate > 0 && !js.start.Add(js.j.RuntimeEstimate).After(now) && rng.IntN(4) > 0 {
						ev := Finished(js.start.Add(js.j.RuntimeEstimate).Add(0), id)
						if ev.Time.Before(e.now) {
							ev.Time = e.now
						}
						fs := fuzzStep{ev: &ev}
						d := apply(t, e, fs, m) + wakeDigest(e)
						steps = append(steps, fs)
						digests = append(digests, d)
						check(t, e, m)
					}
				}
			}
			d := apply(t, e, st, m) + wakeDigest(e)
			steps = append(steps, st)
			digests = append(digests, d)
			check(t, e, m)
		}
		fuzzResSkipped.Add(e.resSkipped)
		if os.Getenv("FUZZDBG") != "" {
			t.Logf("cycles cut (LazyPending): %d", m.cuts)
		}
		// Restore: the saved state, through JSON, gives an engine that
		// decides as this one does from here (a tick, then a cycle).
		checkRestore(t, e, seed, shared)
		// Replay: the same inputs give the same decisions, also with every
		// cycle a full one and every cache off (Config.DisableCaches).
		replaySteps(t, seed, shared, steps, func(c *Config) { c.DisableCaches = true }, func(i int, e2 *Engine, d string) {
			if d += wakeDigest(e2); d != digests[i] {
				t.Fatalf("replay differs at step %d:\nfirst:  %s\nreplay: %s", i, digests[i], d)
			}
		})
		// Bare Views (Config.BareViews): each cycle books on the engine's
		// snapshot in place. The same decisions and statuses; the Views'
		// explanations, which read no bookings, are left out.
		replaySteps(t, seed, shared, steps, func(c *Config) { c.BareViews = true }, func(i int, e3 *Engine, d string) {
			w := wakeDigest(e3)
			if v := e3.View(); v != nil && v.x.snap != nil {
				t.Fatalf("step %d: a bare View holds a snapshot", i)
			}
			want, ok := strings.CutSuffix(digests[i], w)
			want, _, _ = strings.Cut(want, " X(")
			got, _, _ := strings.Cut(d, " X(")
			if !ok || got != want {
				t.Fatalf("bare Views: replay differs at step %d:\nfirst:  %s\nreplay: %s%s", i, digests[i], got, w)
			}
		})
	}
}

// replaySteps applies steps to a new engine of the fuzz input's config
// changed by set, and hands check each step's digest (apply's).
func replaySteps(t *testing.T, seed uint64, shared bool, steps []fuzzStep, set func(*Config), check func(i int, e *Engine, d string)) {
	t.Helper()
	cfg := fuzzSeedConfig(rand.New(rand.NewPCG(seed, seed^0x5eed)), seed, shared)
	set(&cfg)
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
	for i, st := range steps {
		if st.ev != nil && st.ev.Job != nil {
			cp := *st.ev.Job
			ev := *st.ev
			ev.Job = &cp
			st.ev = &ev
		}
		check(i, e, apply(t, e, st, m))
	}
}

// fuzzModel is what the checker remembers between steps.
type fuzzModel struct {
	known       map[string]bool // submitted, not yet ended
	preemptedAt map[string]time.Time
	lastSeq     uint64
	prevClaims  map[string]*claim // the engine's claims before the Ready being checked
	cuts        int               // cycles whose walk stopped early (LazyPending)
}

func pick[V any](rng *rand.Rand, m map[string]V) string {
	if len(m) == 0 {
		return ""
	}
	keys := sortedKeys(m)
	return keys[rng.IntN(len(keys))]
}

// apply runs one step and returns a digest of what it produced.
func apply(t *testing.T, e *Engine, st fuzzStep, m *fuzzModel) string {
	if st.ev != nil {
		ev := *st.ev
		err := e.Step(ev)
		if os.Getenv("FUZZDBG") != "" {
			if ev.Job != nil {
				t.Logf("EV %v %s %+v err=%v", ev.Kind, ev.Job.ID, *ev.Job, err)
			} else {
				t.Logf("EV %v %s %v err=%v", ev.Kind, ev.JobID, ev.Time.Sub(fuzzT0), err)
			}
		}
		if err == nil {
			switch ev.Kind {
			case EventBindApplied, EventBindUnknown:
				e.Publish() // they run no cycle (their owner publishes)
			case EventJobSubmitted:
				m.known[ev.Job.ID] = true
			case EventJobFinished, EventJobCancelled:
				delete(m.known, ev.JobID)
			}
			for _, f := range e.failed {
				delete(m.known, f.Job)
			}
		}
		syncReplicas(e, m)
		return fmt.Sprintf("%v %s%s err=%v", ev.Kind, ev.JobID, ev.ServiceName, err)
	}
	m.prevClaims = maps.Clone(e.claims)
	cycles := e.HasReady()
	lazy := !e.cfg.EagerPending && !e.cfg.DisableCaches && cycles // a cycle runs
	rd := e.Ready()
	if os.Getenv("FUZZDBG") != "" {
		t.Logf("READY %s", digest(rd))
	}
	// Under LazyPending, the statuses after the walk's cut, computed
	// before Advance or after it (which must not change them).
	lazyAfter := len(st.refuse) > 1 && st.refuse[1]%2 == 1
	skip := st.skipsAll()
	if lazy && !lazyAfter && !skip {
		pendingAll(t, e, &rd, m)
	}
	for _, f := range rd.Failed {
		delete(m.known, f.Job)
	}
	syncReplicas(e, m)
	checkReady(t, e, rd, m)
	out := st.outcome(rd)
	if err := e.Advance(rd, out); err != nil {
		t.Fatalf("Advance: %v", err)
	}
	if lazy && lazyAfter && !skip {
		pendingAll(t, e, &rd, m)
	}
	checkView(t, e)
	if skip {
		rd.Pending, rd.Unwalked = nil, 0 // neither engine's statuses are compared
	}
	vd := ""
	if cycles && !skip {
		// What the View's readers answer, after the cycle's statuses were
		// completed on demand (PendingAll published them): the same as
		// the full walk's View.
		vd = viewDigest(e.View())
	}
	return digest(rd) + fmt.Sprintf(" refused=%v", out) + vd
}

// viewDigest is every estimate and explanation a View gives, with its
// pending count.
func viewDigest(v *View) string {
	var b strings.Builder
	fmt.Fprintf(&b, " view(%d,%d)", len(v.Pending), v.Unwalked)
	for _, x := range v.Estimates() {
		fmt.Fprintf(&b, " E(%s,%v,%v,%v)", x.Job, x.Start.Sub(fuzzT0), x.Why, x.Behind)
	}
	// Explanations last: those of bare Views (Config.BareViews) differ,
	// and the replay with them compares what comes before.
	for _, x := range v.Explanations() {
		fmt.Fprintf(&b, " X(%s,%s,%s)", x.Job, x.Kind, x)
	}
	return b.String()
}

// skipsAll reports whether the step asks no PendingAll (a quarter of the
// cycles): the walk that stops must decide the same whether or not its
// full statuses are ever computed, so both engines' digests then leave
// the statuses out and compare the decisions alone.
func (st fuzzStep) skipsAll() bool { return len(st.refuse) > 2 && st.refuse[2] >= 6 }

// pendingAll sets rd.Pending to e.PendingAll, checked against rd. First
// it asks PendingStatuses for some jobs (after the cut and before it,
// out of the walk's order) and checks, once PendingAll has them all,
// that each status and the View's explanation and estimate of each job
// asked were those of the full list.
func pendingAll(t *testing.T, e *Engine, rd *Ready, m *fuzzModel) {
	t.Helper()
	var ask []string
	k := 0
	e.View().EachPending(func(j *queue.Job) bool {
		if k%3 == 0 {
			ask = append(ask, j.ID)
		}
		k++
		return true
	})
	slices.Reverse(ask)
	ask = append(ask, "no-such-job")
	skipped := 0 // jobs a skip passed (skip.go)
	if t := e.tail; t != nil && (len(t.skips) > 0 || t.passedN > 0) {
		skipped = t.passedN // PendingAll ran (Advance's freezeTail)
		for _, s := range t.skips {
			skipped += s.passed.Len()
		}
		fuzzSkipCycles++
		for _, id := range ask {
			if js := e.jobs[id]; js != nil && js.st == statePending && t.segOf(js) != nil {
				fuzzAskedSkipped++
			}
		}
	}
	one, ok := e.PendingStatuses(ask...)
	if !ok {
		t.Fatalf("PendingStatuses: stale right after cycle %d", rd.Seq)
	}
	type said struct {
		x   Explanation
		est Estimate
	}
	views := map[string]said{}
	v := e.View()
	for _, st := range one {
		x, okx := v.Explain(st.Job)
		est, oke := v.Estimate(st.Job)
		if !okx || !oke {
			t.Fatalf("cycle %d: View.Explain/Estimate(%s) unknown after PendingStatuses", rd.Seq, st.Job)
		}
		views[st.Job] = said{x, est}
	}
	all, ok := e.PendingAll()
	if !ok {
		t.Fatalf("PendingAll: stale right after cycle %d", rd.Seq)
	}
	if len(all) != len(rd.Pending)+rd.Unwalked {
		t.Fatalf("PendingAll: %d statuses, Ready has %d and %d unwalked", len(all), len(rd.Pending), rd.Unwalked)
	}
	// Ready's statuses are those of PendingAll, in its order, less the
	// jobs skips passed (within the list) and those after the cut (after
	// it): without a skip, its head.
	k, holes := 0, 0
	for _, st := range all {
		if k < len(rd.Pending) && st.Job == rd.Pending[k].Job {
			if st != rd.Pending[k] {
				t.Fatalf("PendingAll's status of %s differs from Ready's", st.Job)
			}
			k++
		} else if k < len(rd.Pending) {
			holes++
		}
	}
	if k != len(rd.Pending) || holes > skipped {
		t.Fatalf("PendingAll: Ready's %d statuses are not in its order (%d found), or %d jobs before the last walked one are not walked (%d passed by skips)",
			len(rd.Pending), k, holes, skipped)
	}
	byJob := map[string]PendingStatus{}
	for _, st := range all {
		byJob[st.Job] = st
	}
	for _, st := range e.View().Pending {
		if _, in := byJob[st.Job]; !in {
			byJob[st.Job] = st // put back or binding: not the cycle's
		}
	}
	v = e.View()
	for _, st := range one {
		full, in := byJob[st.Job]
		if !in || fmt.Sprintf("%v %v %v %+v %v", st.Reason, st.Start, st.Place, st.Quota, st.plan) !=
			fmt.Sprintf("%v %v %v %+v %v", full.Reason, full.Start, full.Place, full.Quota, full.plan) {
			t.Fatalf("cycle %d: PendingStatuses(%s) = %+v, PendingAll has %+v", rd.Seq, st.Job, st, full)
		}
		x, _ := v.Explain(st.Job)
		est, _ := v.Estimate(st.Job)
		if got := views[st.Job]; got.x != x || !reflect.DeepEqual(got.est, est) {
			t.Fatalf("cycle %d: job %s explained on demand as %v / %v, with every status as %v / %v", rd.Seq, st.Job, got.x, got.est, x, est)
		}
		if !slices.ContainsFunc(rd.Pending, func(p PendingStatus) bool { return p.Job == st.Job }) {
			fuzzAsked++ // after the cut: computed on demand
		}
	}
	fuzzCycles++
	if rd.Unwalked > 0 {
		m.cuts++
		fuzzCuts++
	}
	rd.Pending, rd.Unwalked = all, 0
}

// outcome refuses the decisions of rd that st's refusals pick.
func (st fuzzStep) outcome(rd Ready) Outcome {
	// Half the cycles bind asynchronously: the binds not refused are
	// assumed, and later steps report their outcomes (fuzzBindOutcome).
	// MIG changes are assumed in the same cycles (their outcome events:
	// fuzzBindOutcome).
	async := st.refuse[len(st.refuse)-1] >= 4
	out := Outcome{AssumeBinds: async, AssumeMIG: async}
	k := 0
	next := func() bool { r := st.refuse[k%len(st.refuse)]; k++; return r == 1 }
	for _, b := range rd.Binds {
		if next() {
			out.RefusedBinds = append(out.RefusedBinds, b.Job)
		}
	}
	for _, p := range rd.Preemptions {
		if next() {
			out.RefusedPreemptions = append(out.RefusedPreemptions, p.Victim)
		}
	}
	for _, r := range rd.Resizes {
		if len(r.Add) > 0 && next() {
			out.RefusedResizes = append(out.RefusedResizes, r.Job)
		}
	}
	for _, r := range rd.MIG {
		if next() {
			out.RefusedMIG = append(out.RefusedMIG, r)
		}
	}
	return out
}

// wakeDigest is NextWake after a step: the caches may not change it
// either.
func wakeDigest(e *Engine) string {
	w, ok := e.NextWake()
	return fmt.Sprintf(" wake=%v,%v", w.Sub(fuzzT0), ok)
}

func digest(rd Ready) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq=%d at=%v", rd.Seq, rd.At.Sub(fuzzT0))
	for _, x := range rd.Preemptions {
		fmt.Fprintf(&b, " P(%s,%s,%v,%v,%.0f)", x.Victim, x.For, x.Cause, x.Deadline.Sub(fuzzT0), x.CostGPUSeconds)
	}
	for _, x := range rd.Resizes {
		fmt.Fprintf(&b, " R(%s,%d,%v,%v)", x.Job, x.Members, x.Add, x.Remove)
	}
	for _, x := range rd.Binds {
		fmt.Fprintf(&b, " B(%s,%v,%v)", x.Job, x.Members, x.Backfill)
	}
	for _, x := range rd.MIG {
		fmt.Fprintf(&b, " M(%s,%d,%v,%v)", x.Node, x.GPU, x.From, x.To)
	}
	for _, x := range rd.Reservations {
		fmt.Fprintf(&b, " V(%s,%v,%v,%v)", x.Job, x.Start.Sub(fuzzT0), x.GPUs.ToArray(), x.Preemption)
	}
	for _, x := range rd.Pending {
		fmt.Fprintf(&b, " W(%s,%v,%v,%v,%+v)", x.Job, x.Reason, x.Start, x.Place, x.Quota)
	}
	fmt.Fprintf(&b, " Q%v F%v X%d S%v", rd.Requeued, rd.Failed, len(rd.Rejected), rd.Stops)
	return b.String()
}

// checkReady checks the decisions of one Ready.
func checkReady(t *testing.T, e *Engine, rd Ready, m *fuzzModel) {
	t.Helper()
	for _, p := range rd.Preemptions {
		js := e.jobs[p.Victim]
		if js == nil {
			t.Fatalf("preempted unknown job %q", p.Victim)
		}
		if rd.At.Sub(js.start) < js.j.MinRuntime {
			t.Fatalf("%q preempted %v after its start, within its minimum runtime %v", p.Victim, rd.At.Sub(js.start), js.j.MinRuntime)
		}
		if last, ok := m.preemptedAt[p.Victim]; ok && rd.At.Sub(last) < js.j.MinRuntime {
			t.Fatalf("%q preempted twice within its minimum runtime (%v, %v)", p.Victim, last, rd.At)
		}
		if !js.j.Preemptible {
			t.Fatalf("%q preempted but not preemptible", p.Victim)
		}
		m.preemptedAt[p.Victim] = rd.At
	}
	// Claims made by this cycle's step 7 were planned after its walk, on
	// the plan with the walk's binds booked: a shared preemptor may put its
	// instances or shares beside a share bound this cycle (on a GPU of its
	// claim). Such a claim must be one that can be booked once its victims
	// are gone; binds are checked against it for whole GPUs only. (A claim
	// may have no victims: every victim chosen turned out not to be needed
	// once added back, and the preemptor waits for the next cycle.)
	newClaim := map[string]bool{}
	for id, c := range e.claims {
		if m.prevClaims[id] != c {
			newClaim[id] = true
		}
	}
	for id := range newClaim {
		checkClaimFits(t, e, id)
	}
	// A backfilled job ends (by its limit) before every reservation whose
	// GPUs it uses.
	for _, b := range rd.Binds {
		js := e.jobs[b.Job]
		if js == nil || js.place == nil {
			t.Fatalf("bound job %q has no placement", b.Job)
		}
		for _, r := range rd.Reservations {
			if r.Job == b.Job {
				t.Fatalf("job %q both bound and reserved", b.Job)
			}
			used := false
			for _, g := range js.place.gpus {
				if r.GPUs.Contains(g) {
					used = true
					break
				}
			}
			sharedOnly := !used
			for _, m := range js.place.members {
				if m.shared && r.GPUs.Contains(m.gpus[0]) {
					used = true // a share keeps the GPU from the reservation
				}
			}
			if !used {
				continue
			}
			if r.Preemption {
				if sharedOnly && newClaim[r.Job] {
					continue // planned around this bind (checkClaimFits)
				}
				t.Fatalf("bind %q uses GPUs held for preemptor %q", b.Job, r.Job)
			}
			// It ends by its limit before the reservation starts (the
			// backfill rule), or the reservation was planned after it,
			// around its expected end: then it is delayed only if the
			// job overruns its estimate.
			l := js.j.RuntimeLimit
			byLimit := l > 0 && !rd.At.Add(l).After(r.Start)
			end, known := js.expectedEnd(rd.At)
			if !byLimit && (!known || end.After(r.Start)) {
				t.Fatalf("bound %q (limit %v, expected end %v) uses GPUs reserved for %q at %v", b.Job, l, end.Sub(rd.At), r.Job, r.Start.Sub(rd.At))
			}
		}
	}
	checkClaimsVsReservations(t, e, rd)
	if rd.Seq == m.lastSeq {
		return // no cycle ran
	}
	m.lastSeq = rd.Seq
	seen := map[string]bool{}
	for _, p := range rd.Pending {
		if seen[p.Job] {
			t.Fatalf("job %q listed twice as pending", p.Job)
		}
		seen[p.Job] = true
		if js := e.jobs[p.Job]; js == nil || js.st != statePending {
			t.Fatalf("job %q listed as pending but is not", p.Job)
		}
	}
	if len(seen)+rd.Unwalked != e.pending.Len() {
		t.Fatalf("%d pending statuses and %d unwalked for %d pending jobs", len(seen), rd.Unwalked, e.pending.Len())
	}
}

// checkClaimsVsReservations: a preemptor's claim and a backfill
// reservation never share a GPU while both would hold it. Step 7 plans a
// claim off the GPUs reserved for jobs ahead of the preemptor (aheadGPUs,
// onHeld) and drops the reservations behind it on the claimed GPUs
// (dropConflicting); later walks plan reservations around the claims. So
// a reservation on a claimed GPU must start after the preemptor, from its
// claim's start, has run out its limit.
func checkClaimsVsReservations(t *testing.T, e *Engine, rd Ready) {
	t.Helper()
	for _, c := range rd.Reservations {
		if !c.Preemption {
			continue
		}
		var limit time.Duration
		if js := e.jobs[c.Job]; js != nil {
			limit = js.j.RuntimeLimit
		}
		for _, r := range rd.Reservations {
			if r.Preemption || r.Job == c.Job || !r.GPUs.Intersects(c.GPUs) {
				continue
			}
			if limit > 0 && !c.Start.Add(limit).After(r.Start) {
				continue // the preemptor ends by its limit before r starts
			}
			t.Fatalf("preemptor %q's claim (from %v, limit %v) and %q's reservation (at %v) share GPUs %v",
				c.Job, c.Start.Sub(rd.At), limit, r.Job, r.Start.Sub(rd.At), roaring.And(r.GPUs, c.GPUs).ToArray())
		}
	}
}

// check verifies the engine's invariants after any step.
func check(t *testing.T, e *Engine, m *fuzzModel) {
	t.Helper()
	if err := e.snap.Verify(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// No GPU booked twice; the snapshot books exactly the jobs' GPUs.
	owner := map[uint32]string{}
	booked := 0
	active := e.activeMap()
	for _, id := range sortedKeys(active) {
		js := active[id]
		if js.place == nil {
			t.Fatalf("active job %q without placement", id)
		}
		for _, g := range js.place.gpus {
			if o, dup := owner[g]; dup {
				t.Fatalf("GPU %d booked by %q and %q", g, o, id)
			}
			owner[g] = id
			if e.snap.IsFree(g) {
				t.Fatalf("GPU %d of %q is free in the snapshot", g, id)
			}
		}
		booked += len(js.place.gpus)
		// Gangs whole.
		if err := checkWhole(js, js.place); err != nil {
			t.Fatalf("gang: %v", err)
		}
		if n := countGroup(js.place, 0); n != js.members {
			t.Fatalf("%q has %d members of group 0, records %d", id, n, js.members)
		}
		if !slices.IsSorted(js.place.gpus) {
			t.Fatalf("%q: GPU list not sorted", id)
		}
	}
	// GPUs in MIG mode or shared are booked as a whole by the snapshot.
	for g := range uint32(e.cluster.NumGPUs()) {
		if e.snap.IsSharedGPU(g) {
			if o, ok := owner[g]; ok {
				t.Fatalf("GPU %d of %q is shared", g, o)
			}
			booked++
		}
	}
	if booked != e.snap.Allocated() {
		t.Fatalf("jobs hold %d GPUs, snapshot has %d allocated", booked, e.snap.Allocated())
	}
	checkGrants(t, e)
	// Every job in exactly one state.
	activeNow := e.activeMap()
	for id, js := range e.jobs {
		if !m.known[id] {
			t.Fatalf("engine tracks %q, which ended", id)
		}
		_, pend := e.pending.Get(id)
		_, act := activeNow[id]
		charged := e.tree.Charged(id)
		switch js.st {
		case statePending:
			if !pend || act || charged {
				t.Fatalf("%q pending: in pending set %v, active %v, charged %v", id, pend, act, charged)
			}
			if e.byPtr[js.j] != js {
				t.Fatalf("%q pending, not in byPtr", id)
			}
		case stateRunning, stateStopping:
			if pend || !act || !charged {
				t.Fatalf("%q %v: in pending set %v, active %v, charged %v", id, js.st, pend, act, charged)
			}
		default:
			t.Fatalf("%q in state %v", id, js.st)
		}
	}
	for id := range m.known {
		if e.jobs[id] == nil {
			t.Fatalf("job %q lost", id)
		}
	}
	checkServices(t, e)
	// byPtr holds the pending jobs and nothing else (the walk reads it).
	if len(e.byPtr) != e.pending.Len() {
		t.Fatalf("byPtr holds %d jobs, %d pending", len(e.byPtr), e.pending.Len())
	}
	if len(e.jobs) != e.pending.Len()+len(e.active) {
		t.Fatalf("%d jobs, %d pending + %d active", len(e.jobs), e.pending.Len(), len(e.active))
	}
	// Quota held: the cohort never hands out more than it has, and no
	// queue borrows beyond its limit.
	for _, r := range e.tree.Resources() {
		if u, q := e.tree.Usage("org", r), e.tree.SubtreeQuota("org", r); u > q {
			t.Fatalf("cohort uses %d of %s, has %d", u, r, q)
		}
		for _, qs := range e.cfg.Queues.Queues {
			lim, ok := qs.Quota[r].BorrowingLimit.Get()
			if !ok {
				continue
			}
			if u, q := e.tree.Usage(qs.Name, r), e.tree.SubtreeQuota(qs.Name, r); u > q.Add(lim) {
				t.Fatalf("queue %s uses %d of %s, quota %d + borrowing %d", qs.Name, u, r, q, lim)
			}
		}
	}
}

// checkGrants checks the snapshot's pool, and that every MIG instance and
// share in use is held by exactly one running job (and nothing else is in
// use).
func checkGrants(t *testing.T, e *Engine) {
	t.Helper()
	pool := e.snap.Pool()
	if pool == nil {
		return
	}
	if err := pool.Check(); err != nil {
		t.Fatalf("pool: %v", err)
	}
	type key struct {
		gpu   uint32
		start uint8
		share mig.ShareID
	}
	held := map[key]string{}
	active := e.activeMap()
	for _, id := range sortedKeys(active) {
		js := active[id]
		for _, m := range js.place.members {
			if !m.shared {
				continue
			}
			gr := m.grant
			if gr.GPU != m.gpus[0] {
				t.Fatalf("%q: grant on GPU %d, member on GPU %d", id, gr.GPU, m.gpus[0])
			}
			k := key{gpu: gr.GPU, start: gr.Instance.Start, share: gr.Share.ID}
			if gr.IsShare() {
				k.start = 0
				if !slices.ContainsFunc(pool.Shares(gr.GPU), func(s mig.Share) bool { return s.ID == gr.Share.ID }) {
					t.Fatalf("%q holds share %#x of GPU %d, which the pool does not", id, gr.Share.ID, gr.GPU)
				}
			} else {
				info, err := pool.GPU(gr.GPU)
				if err != nil || !info.InUse.Has(gr.Instance) {
					t.Fatalf("%q holds %v on GPU %d, not in use in the pool (%v)", id, gr.Instance, gr.GPU, err)
				}
			}
			if o, dup := held[k]; dup {
				t.Fatalf("grant %+v held by %q and %q", gr, o, id)
			}
			held[k] = id
		}
	}
	inUse := 0
	for g := range uint32(pool.Len()) {
		info, err := pool.GPU(g)
		if err != nil {
			t.Fatal(err)
		}
		inUse += info.InUse.Len() + info.Shares
	}
	if inUse != len(held) {
		t.Fatalf("the pool has %d instances and shares in use, jobs hold %d", inUse, len(held))
	}
}

// TestFuzzEngineSharedSeeds runs random histories on the shared cluster.
func TestFuzzEngineSharedSeeds(t *testing.T) {
	for seed := uint64(0); seed < 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		ops := make([]byte, 150)
		for i := range ops {
			ops[i] = byte(rng.IntN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runFuzz(t, seed, ops, true) })
	}
}

// TestFuzzEngineSeeds runs longer random histories than the seed corpus.
func TestFuzzEngineSeeds(t *testing.T) {
	for seed := uint64(0); seed < 120; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		ops := make([]byte, 150)
		for i := range ops {
			ops[i] = byte(rng.IntN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			// Reuse the fuzz body through a one-entry corpus.
			runFuzzBody(t, seed, ops)
		})
	}
}

// fuzzDevices makes a DevicesReported event for a random running job: on
// one of its nodes, its GPUs are replaced by random ones of that node
// (free, or another job's); sometimes the report is malformed (a GPU
// dropped). The engine must take it or refuse it with nothing changed.
func fuzzDevices(rng *rand.Rand, e *Engine, now time.Time) (Event, bool) {
	id := pick(rng, e.activeMap())
	if id == "" {
		return Event{}, false
	}
	ms, ok := e.Members(id)
	if !ok {
		return Event{}, false
	}
	m := &ms[rng.IntN(len(ms))]
	nid, _ := e.cluster.NodeByName(m.Node)
	_, n := e.cluster.NodeGPUs(nid)
	perm := rng.Perm(n)
	for i := range ms {
		if ms[i].Node != m.Node || ms[i].Fractional {
			continue
		}
		k := len(ms[i].GPUs)
		ms[i].GPUs, perm = slices.Clone(perm[:min(k, len(perm))]), perm[min(k, len(perm)):]
	}
	if rng.IntN(8) == 0 && len(m.GPUs) > 0 {
		m.GPUs = m.GPUs[1:]
	}
	return DevicesReported(now, id, ms), true
}

// checkRestore saves e, restores it through JSON and checks that both
// engines give the same decisions for a tick and a cycle.
func checkRestore(t *testing.T, e *Engine, seed uint64, shared bool) {
	t.Helper()
	st, err := e.Save()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	cfg := fuzzSeedConfig(rng, seed, shared)
	e2, err := Restore(cfg, &back)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	tick := Tick(e.now.Add(10 * time.Minute))
	for _, x := range []*Engine{e, e2} {
		if err := x.Step(tick); err != nil {
			t.Fatal(err)
		}
	}
	m1 := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
	m2 := &fuzzModel{known: map[string]bool{}, preemptedAt: map[string]time.Time{}}
	for id := range e.jobs {
		m1.known[id], m2.known[id] = true, true
	}
	m1.lastSeq, m2.lastSeq = e.seq, e2.seq
	st1 := fuzzStep{ready: true, refuse: []uint8{0}}
	if d1, d2 := apply(t, e, st1, m1), apply(t, e2, st1, m2); d1 != d2 {
		t.Fatalf("restored engine differs:\noriginal: %s\nrestored: %s", d1, d2)
	}
}

// checkClaimFits checks that the claim of preemptor id can be booked on the
// engine's snapshot once its victims' placements are released.
func checkClaimFits(t *testing.T, e *Engine, id string) {
	t.Helper()
	c := e.claims[id]
	if c == nil {
		return // bound or dropped within the cycle
	}
	s := e.snap.Clone()
	for _, v := range c.victims {
		vs := e.jobs[v]
		if vs == nil || vs.place == nil {
			continue
		}
		vs.place.whatIf().unbook(s)
	}
	if err := c.place.whatIf().book(s); err != nil {
		t.Fatalf("claim of %q cannot be booked once its victims %v are gone: %v", id, c.victims, err)
	}
}

// fuzzService returns a service event: a new or replaced spec (QoS,
// shape, bounds at random; fractional and MIG replicas with shared), a
// scale (sometimes out of range: an error), or a delete.
func fuzzService(rng *rand.Rand, e *Engine, now time.Time, shared bool) Event {
	name := []string{"s0", "s1"}[rng.IntN(2)]
	sv := e.svcs[name]
	switch r := rng.IntN(8); {
	case sv == nil || r == 0:
		g := gang.Group{Members: 1, GPUsPerMember: []int{1, 1, 2}[rng.IntN(3)]}
		if shared && rng.IntN(2) == 0 {
			g = []gang.Group{{Members: 1, GPUMilli: 250}, {Members: 1, MIGProfile: "1g"}, {Members: 1, GPUMilli: 500, GPUMemoryMiB: 8192}}[rng.IntN(3)]
		}
		mx := 1 + rng.IntN(6)
		s := &Service{
			Name: name, Queue: []string{"a", "b", "c"}[rng.IntN(3)], QoS: QoS(rng.IntN(3)),
			Replica: queue.Job{Request: gang.Request{Groups: []gang.Group{g}}, MinRuntime: time.Duration(rng.IntN(2)) * 10 * time.Minute},
			Min:     rng.IntN(2), Max: mx, Desired: rng.IntN(mx + 1),
			Priority: int32(rng.IntN(4)), GracePeriod: time.Duration(rng.IntN(3)) * 5 * time.Minute,
		}
		return ServiceSet(now, s)
	case r == 1:
		return ServiceDeleted(now, name)
	default:
		return ServiceScaled(now, name, rng.IntN(sv.spec.Max+2))
	}
}

// syncReplicas adds the live replicas to the model's known jobs and drops
// the removed ones (the engine creates and removes them itself).
func syncReplicas(e *Engine, m *fuzzModel) {
	for _, s := range e.stops {
		delete(m.known, s.Job)
	}
	for _, sv := range e.svcs {
		for id := range sv.reps {
			m.known[id] = true
		}
	}
	for id := range m.known {
		if js := e.jobs[id]; js == nil && strings.Contains(id, "/") {
			delete(m.known, id) // a replica removed and reported in an earlier Ready
		}
	}
}

// checkServices: every service has its desired count of live replicas,
// each a tracked job pointing back to it; no other job claims a service.
func checkServices(t *testing.T, e *Engine) {
	t.Helper()
	n := 0
	for name, sv := range e.svcs {
		if len(sv.reps) != sv.spec.Desired {
			t.Fatalf("service %s: %d replicas, desired %d", name, len(sv.reps), sv.spec.Desired)
		}
		for id, js := range sv.reps {
			if e.jobs[id] != js || js.svc != sv {
				t.Fatalf("service %s: replica %q not tracked as its replica", name, id)
			}
		}
		n += len(sv.reps)
	}
	for id, js := range e.jobs {
		if js.svc != nil {
			n--
			if js.svc.reps[id] != js {
				t.Fatalf("job %q claims a service that does not list it", id)
			}
		}
	}
	if n != 0 {
		t.Fatalf("replica count mismatch %d", n)
	}
	for _, s := range e.stops {
		if js := e.jobs[s.Job]; js != nil && js.svc == nil {
			t.Fatalf("stopped replica %q still tracked", s.Job)
		}
	}
}

// fuzzBindOutcome reports the outcome of an assumed or unknown bind
// (applied, failed, unknown; now and then about an earlier run, which must
// change nothing), or releases a held job.
func fuzzBindOutcome(rng *rand.Rand, e *Engine, now time.Time) (Event, bool) {
	if e.held > 0 && rng.IntN(3) == 0 {
		var held []string
		for _, id := range sortedKeys(e.jobs) {
			if e.jobs[id].held {
				held = append(held, id)
			}
		}
		return Released(now, held[rng.IntN(len(held))]), true
	}
	if len(e.migFlight) > 0 && rng.IntN(3) > 0 {
		// A MIG change's outcome (now and then about an earlier change of
		// the GPU, which must change nothing).
		chs := e.MIGChanges()
		r := chs[rng.IntN(len(chs))]
		if rng.IntN(5) == 0 {
			r.Seq--
		}
		var ev Event
		switch rng.IntN(3) {
		case 0:
			ev = MIGApplied(now, r)
		case 1:
			ev = MIGFailed(now, r, "fuzz: MIG change failed")
		default:
			ev = MIGUnknown(now, r)
		}
		fuzzMIGSeen[ev.Kind].Add(1)
		return ev, true
	}
	id := pick(rng, e.binding)
	if id == "" {
		return Event{}, false
	}
	run := e.binding[id].run
	if rng.IntN(5) == 0 {
		run-- // a late answer about an earlier run
	}
	switch rng.IntN(3) {
	case 0:
		return BindApplied(now, id, run), true
	case 1:
		return BindFailed(now, id, run, "fuzz: bind failed"), true
	}
	return BindUnknown(now, id, run), true
}

// fuzzBindSeen counts the pending statuses of each asynchronous bind
// state that checkView saw.
var fuzzBindSeen = map[ReasonCode]*atomic.Uint64{ReasonBinding: {}, ReasonBindingUnknown: {}, ReasonHeld: {}}

// fuzzMIGSeen counts the MIG outcome events FuzzEngine stepped, by kind.
var fuzzMIGSeen = map[EventKind]*atomic.Uint64{EventMIGApplied: {}, EventMIGFailed: {}, EventMIGUnknown: {}}

// TestFuzzReachesMIGOutcomes runs random FuzzEngine inputs (with MIG
// nodes) and requires each MIG outcome event to have been stepped, so
// that FuzzEngine covers assumed MIG changes.
func TestFuzzReachesMIGOutcomes(t *testing.T) {
	rng := rand.New(rand.NewPCG(59, 61))
	before := map[EventKind]uint64{}
	for k, c := range fuzzMIGSeen {
		before[k] = c.Load()
	}
	for range 300 {
		ops := make([]byte, 40+rng.IntN(160))
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		runFuzz(t, rng.Uint64(), ops, true) // FuzzEngineShared's body: MIG nodes
	}
	for k, c := range fuzzMIGSeen {
		n := c.Load() - before[k]
		t.Logf("%v stepped %d times", k, n)
		if n == 0 {
			t.Errorf("no %v: FuzzEngine does not reach it", k)
		}
	}
}

// TestFuzzReachesBindStates runs random FuzzEngine inputs and requires
// checkView to have seen jobs binding, binding-unknown and held, so that
// FuzzEngine covers them.
func TestFuzzReachesBindStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 53))
	before := map[ReasonCode]uint64{}
	for r, c := range fuzzBindSeen {
		before[r] = c.Load()
	}
	for range 100 {
		ops := make([]byte, 40+rng.IntN(120))
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		runFuzzBody(t, rng.Uint64(), ops)
	}
	for r, c := range fuzzBindSeen {
		n := c.Load() - before[r]
		t.Logf("%v seen %d times", r, n)
		if n == 0 {
			t.Errorf("no job seen %v: FuzzEngine does not reach it", r)
		}
	}
}

// checkView checks, after a cycle and its Advance, that every job the
// engine knows is in exactly one place of its View: Pending (or, after a
// LazyPending cut, only in EachPending), or Running; that jobs whose binds
// are assumed or unknown are pending with ReasonBinding or
// ReasonBindingUnknown; held ones with ReasonHeld and a Holds entry; and
// that the View lists no job the engine does not know.
func checkView(t *testing.T, e *Engine) {
	t.Helper()
	v := e.View()
	where := map[string]string{}
	put := func(id, place string) {
		if w, ok := where[id]; ok {
			t.Fatalf("job %q is in the View twice: %s and %s", id, w, place)
		}
		where[id] = place
	}
	for _, p := range v.Pending {
		put(p.Job, "pending")
		js := e.jobs[p.Job]
		if js == nil {
			t.Fatalf("View lists %q pending, which the engine does not know", p.Job)
		}
		switch {
		case js.bindSt == bindAssumed && p.Reason != ReasonBinding,
			js.bindSt == bindUnknown && p.Reason != ReasonBindingUnknown,
			js.held && p.Reason != ReasonHeld:
			t.Fatalf("%q listed pending with %v, bind state %d, held %v", p.Job, p.Reason, js.bindSt, js.held)
		}
		if js.held && v.Holds[p.Job] == "" {
			t.Fatalf("held %q has no Holds entry", p.Job)
		}
		switch p.Reason {
		case ReasonBinding, ReasonBindingUnknown, ReasonHeld:
			fuzzBindSeen[p.Reason].Add(1)
		}
	}
	for _, r := range v.Running() {
		put(r.Job, "running")
		if js := e.jobs[r.Job]; js == nil || js.st == statePending || js.bindSt != bindNone {
			t.Fatalf("View lists %q running, which the engine does not run (or binds still)", r.Job)
		}
	}
	if v.Unwalked > 0 {
		v.EachPending(func(j *queue.Job) bool {
			if _, ok := where[j.ID]; !ok {
				put(j.ID, "unwalked")
			}
			return true
		})
	}
	for id := range e.jobs {
		if _, ok := where[id]; !ok {
			t.Fatalf("job %q (%v, bind state %d, held %v) is invisible: in neither View.Pending nor Running", id, e.jobs[id].st, e.jobs[id].bindSt, e.jobs[id].held)
		}
	}
}

// activeMap is the active jobs by ID (Engine.active is a slice in no
// order), checking that each knows its index.
func (e *Engine) activeMap() map[string]*job {
	m := make(map[string]*job, len(e.active))
	for i, js := range e.active {
		if int(js.activeAt) != i+1 {
			panic(fmt.Sprintf("active job %q at %d says %d", js.j.ID, i, js.activeAt))
		}
		m[js.j.ID] = js
	}
	return m
}
