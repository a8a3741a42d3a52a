package engine

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// fuzzCuts and fuzzCycles count, over runFuzz calls, the cycles whose walk
// stopped early under LazyPending and all cycles checked.
var fuzzCuts, fuzzCycles int

// fuzzAsked counts the statuses after a cut that PendingStatuses
// computed and pendingAll compared with the full list.
var fuzzAsked int

// fuzzSkipCycles counts the cycles checked whose walk skipped (skip.go),
// fuzzAskedSkipped the statuses of jobs a skip passed that
// PendingStatuses computed and pendingAll compared.
var fuzzSkipCycles, fuzzAskedSkipped int

// TestLazyPendingMatchesFullWalk runs FuzzEngine's body on random inputs
// whose seeds allow the walk's cut (no preemption, ample quota; every
// policy): each step's decisions, NextWake and full pending statuses
// (PendingAll, before or after Advance) must equal those of an engine
// that walks every job with every cache off, and so must the View's
// explanations and estimates of every job once they are computed; the
// statuses of a third of the jobs asked first one by one, out of order
// (PendingStatuses), and their View.Explain and View.Estimate then, must
// be those of the full list. It fails if too few walks
// were cut for the comparison to mean anything.
func TestLazyPendingMatchesFullWalk(t *testing.T) {
	n := 400
	if v := os.Getenv("BERTH_LAZY_RUNS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	if testing.Short() {
		n = 60
	}
	r := rand.New(rand.NewPCG(17, 17))
	asked0 := fuzzAsked
	defer func() {
		asked := fuzzAsked - asked0
		t.Logf("statuses after the cut computed on demand (PendingStatuses) and compared: %d", asked)
		if asked < 100 {
			t.Errorf("only %d statuses computed on demand were compared", asked)
		}
	}()
	for policy := range uint64(3) {
		cuts0, cycles0 := fuzzCuts, fuzzCycles
		for range n / 3 {
			// Bit 32: the cut may happen; bits 33-35: deep conservative
			// backfill; seed % 3 picks the policy.
			seed := 1<<32 | uint64(r.IntN(8))<<33 | 3 + uint64(r.IntN(1<<20))*3
			seed += policy - seed%3
			ops := make([]byte, 120+r.IntN(120))
			for k := range ops {
				ops[k] = byte(r.IntN(232)) // no service events: services turn the cut off
			}
			runFuzz(t, seed, ops, false)
		}
		cuts, cycles := fuzzCuts-cuts0, fuzzCycles-cycles0
		t.Logf("policy %s: %d of %d cycles stopped their walk early", fuzzPolicy(policy).Name(), cuts, cycles)
		if cuts < cycles/50 {
			t.Errorf("policy %s: only %d of %d cycles cut: the comparison checks little", fuzzPolicy(policy).Name(), cuts, cycles)
		}
	}
}

// TestSkipMatchesFullWalk runs FuzzEngine's body on inputs that make the
// walk skip (skip.go): DRS over one cohort and StrictPriority in turns, no
// preemption, ample quota, backfill, jobs reshaped by skipWorldJob, a
// backlog first and then submissions, ends, ticks and cycles. Each step's
// decisions and full pending statuses must equal those of an engine that
// walks every job with every cache off (as in
// TestLazyPendingMatchesFullWalk), and the statuses of jobs a skip
// passed, asked one by one, those of the full list. It fails if too few
// walks skipped under either policy.
func TestSkipMatchesFullWalk(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 30
	}
	r := rand.New(rand.NewPCG(33, 37))
	asked0 := fuzzAskedSkipped
	var skips [2]int
	for i := range n {
		// seed % 3: 0 DRS, 1 StrictPriority (fuzzPolicy).
		pol := i % 2
		seed := 1<<32 | 1<<37 | uint64(pol)<<38 | uint64(r.IntN(1<<20))*3
		ops := make([]byte, 0, 240)
		for range 12 + r.IntN(20) {
			ops = append(ops, 0)
		}
		for len(ops) < 120+r.IntN(120) {
			ops = append(ops, []byte{0, 1, 0, 2, 4, 9, 10, 9}[r.IntN(8)])
		}
		skip0 := fuzzSkipCycles
		runFuzz(t, seed, ops, false)
		skips[pol] += fuzzSkipCycles - skip0
	}
	asked := fuzzAskedSkipped - asked0
	t.Logf("cycles whose walk skipped: %d under DRS, %d under StrictPriority; statuses of jobs passed computed on demand and compared: %d",
		skips[0], skips[1], asked)
	if skips[0] < n/8 || skips[1] < n/8 || asked < n/2 {
		t.Errorf("only %v cycles skipped and %d statuses of jobs passed were compared", skips, asked)
	}
}
