package benchmarks

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
)

// TestCycleLongSkipMatchesFullWalk runs BenchmarkCycleLong's cycles
// (B12K, 100,000 pending, DRS, EASY) on two engines, one that stops and
// skips its walks (the default) and one that walks every job
// (EagerPending), and checks that every cycle binds the same jobs on the
// same GPUs and holds the same reservations, and, every tenth cycle,
// that PendingAll of the first gives every status the second listed, in
// its order. It takes minutes (the full walk costs what 100,000 jobs
// cost, each cycle): it runs only with BERTH_CYCLELONG_CHECK set to the
// number of cycles. The first skips come after cycle 150 (up to there
// the walks cut: no class can start, by the free GPUs of nodes with room
// for a member); 300 cycles pass 168,579 jobs by skips.
//
//	BERTH_CYCLELONG_CHECK=300 go test ./benchmarks -run TestCycleLongSkipMatchesFullWalk -v
func TestCycleLongSkipMatchesFullWalk(t *testing.T) {
	cycles, _ := strconv.Atoi(os.Getenv("BERTH_CYCLELONG_CHECK"))
	if cycles <= 0 {
		t.Skip("BERTH_CYCLELONG_CHECK is not set (hack/test.sh runs this check with 300 cycles, outside its race run)")
	}
	o := engineBenchOpts{pending: 100000, queues: 200, lazy: true}
	lazy, _, jobs := engineBenchSetup(t, B12K(), o)
	o.lazy = false
	full, _, _ := engineBenchSetup(t, B12K(), o)
	ends, track := cycleLongEnds(jobs)
	decisions := func(rd engine.Ready) string {
		var b strings.Builder
		for _, bd := range rd.Binds {
			fmt.Fprintf(&b, "bind %s %v %v;", bd.Job, bd.Members, bd.Backfill)
		}
		for _, r := range rd.Reservations {
			fmt.Fprintf(&b, "res %s %v %v;", r.Job, r.Start, r.GPUs.ToArray())
		}
		return b.String()
	}
	status := func(st engine.PendingStatus) string {
		return fmt.Sprintf("%s %s %v %v %v %+v", st.Job, st.Queue, st.Reason, st.Start, st.Place, st.Quota)
	}
	arrivals := cycleLongArrivals(o.queues)
	now := lazy.Now()
	skipped, binds := 0, 0
	for c := range cycles + 1 {
		if c > 0 {
			now = now.Add(time.Second)
			for first := true; len(*ends) > 0 && (first || !(*ends)[0].at.After(now)); first = false {
				for _, e := range []*engine.Engine{lazy, full} {
					if err := e.Step(engine.Finished(now, (*ends)[0].id)); err != nil {
						t.Fatal(err)
					}
				}
				*ends = (*ends)[1:]
			}
			j := arrivals(now)
			jobs[j.ID] = j
			cp := *j
			if err := lazy.Intake().Submit(j); err != nil {
				t.Fatal(err)
			}
			if err := full.Intake().Submit(&cp); err != nil {
				t.Fatal(err)
			}
		}
		rl, rf := lazy.Ready(), full.Ready()
		if dl, df := decisions(rl), decisions(rf); dl != df {
			t.Fatalf("cycle %d: decisions differ:\nskipping: %s\nfull:     %s", c, dl, df)
		}
		binds += len(rl.Binds)
		// The walk's statuses: those of the full walk, in its order, less
		// the jobs passed and those after a cut.
		k := 0
		for _, st := range rf.Pending {
			if k < len(rl.Pending) && rl.Pending[k].Job == st.Job {
				if status(rl.Pending[k]) != status(st) {
					t.Fatalf("cycle %d: %s differs from the full walk's %s", c, status(rl.Pending[k]), status(st))
				}
				k++
			} else if k < len(rl.Pending) {
				skipped++
			}
		}
		if k != len(rl.Pending) {
			t.Fatalf("cycle %d: the skipping walk's statuses are not in the full walk's order", c)
		}
		if c%10 == 0 {
			all, ok := lazy.PendingAll()
			if !ok || len(all) != len(rf.Pending) {
				t.Fatalf("cycle %d: PendingAll gives %d statuses (ok %v), the full walk %d", c, len(all), ok, len(rf.Pending))
			}
			for i := range all {
				if status(all[i]) != status(rf.Pending[i]) {
					t.Fatalf("cycle %d: PendingAll[%d] = %s, the full walk's %s", c, i, status(all[i]), status(rf.Pending[i]))
				}
			}
		}
		for _, e := range []*engine.Engine{lazy, full} {
			rd := rl
			if e == full {
				rd = rf
			}
			if err := e.Advance(rd, engine.Outcome{}); err != nil {
				t.Fatal(err)
			}
		}
		track(rl)
	}
	t.Logf("%d cycles, %d binds; jobs passed by skips before a walked job: %d", cycles, binds, skipped)
	if skipped == 0 {
		t.Errorf("no walk skipped: nothing was compared")
	}
}
