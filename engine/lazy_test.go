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
