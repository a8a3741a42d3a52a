package queue

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// snapState is everything a Snapshot shows, for comparisons.
type snapState struct {
	At     time.Time
	Len    int
	Queues []QueueStatus
	Jobs   []string
	MinAsk int
}

func stateOf(s *Snapshot) snapState {
	st := snapState{At: s.At(), Len: s.Len(), Queues: s.Queues()}
	st.MinAsk, _ = s.MinPerMember()
	s.Each(func(j *Job) bool { st.Jobs = append(st.Jobs, j.ID); return true })
	return st
}

// TestRecycleSnapshots: with PendingConfig.RecycleSnapshots each Publish
// shows what a Pending without it shows, through the same adds, removes,
// charges, releases and time, while it writes into the storage of the
// snapshot published two calls before (and a snapshot without it stays as
// published). One tree of several queues in a cohort, one of a single
// queue (the snapshot's inline arrays).
func TestRecycleSnapshots(t *testing.T) {
	specs := map[string]TreeSpec{
		"cohort": {HalfLife: time.Hour, Cohorts: []CohortSpec{{Name: "c"}}, Queues: []QueueSpec{
			{Name: "a", Cohort: "c", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(8)}}},
			{Name: "b", Cohort: "c", Weight: 2, Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(4)}}},
			{Name: "d", Cohort: "c", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(2)}}},
		}},
		"one": {Queues: []QueueSpec{{Name: "a", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(16)}}}}},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			var names []string
			for _, q := range spec.Queues {
				names = append(names, q.Name)
			}
			mk := func(recycle bool) (*Tree, *Pending) {
				tr, err := NewTree(spec)
				require.NoError(t, err)
				p, err := NewPending(tr, PendingConfig{RecycleSnapshots: recycle})
				require.NoError(t, err)
				return tr, p
			}
			trA, plain := mk(false)
			trB, rec := mk(true)
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			now := t0
			var pendingIDs, charged []*Job
			var kept []*Snapshot // the plain Pending's snapshots
			var keptState []snapState
			var published []*Snapshot // the recycling one's
			for i := range 400 {
				switch op := rng.IntN(6); {
				case op <= 1:
					j := oneGPUJob(fmt.Sprintf("j%d", i), names[rng.IntN(len(names))], 1+rng.IntN(3), int32(rng.IntN(3)), now)
					require.NoError(t, plain.Add(j))
					require.NoError(t, rec.Add(j))
					pendingIDs = append(pendingIDs, j)
				case op == 2 && len(pendingIDs) > 0:
					k := rng.IntN(len(pendingIDs))
					j := pendingIDs[k]
					pendingIDs = append(pendingIDs[:k], pendingIDs[k+1:]...)
					_, ok1 := plain.Remove(j.ID)
					_, ok2 := rec.Remove(j.ID)
					require.True(t, ok1 && ok2)
					if trA.Charge(j, now) == nil {
						require.NoError(t, trB.Charge(j, now))
						charged = append(charged, j)
					}
				case op == 3 && len(charged) > 0:
					k := rng.IntN(len(charged))
					j := charged[k]
					charged = append(charged[:k], charged[k+1:]...)
					require.NoError(t, trA.Release(j, now))
					require.NoError(t, trB.Release(j, now))
				case op == 4:
					now = now.Add(time.Duration(rng.IntN(600)) * time.Second)
					trA.Advance(now)
					trB.Advance(now)
				default:
					a, b := plain.Publish(now), rec.Publish(now)
					require.Equal(t, stateOf(a), stateOf(b), "op %d", i)
					// MinPerMember: the least member ask of the jobs pending.
					want := -1
					for _, j := range pendingIDs {
						if k, _ := askOf(j); want < 0 || int(k) < want {
							want = int(k)
						}
					}
					got, ok := a.MinPerMember()
					require.Equal(t, want >= 0, ok, "op %d", i)
					require.Equal(t, want, got, "op %d: MinPerMember", i)
					kept, keptState = append(kept, a), append(keptState, stateOf(a))
					published = append(published, b)
				}
			}
			require.Greater(t, len(published), 20)
			for k, s := range kept {
				require.Equal(t, keptState[k], stateOf(s), "a snapshot without RecycleSnapshots changed (%d)", k)
			}
			// Storage reused: at most three distinct snapshots (the one
			// NewPending published and two in turn), where every Publish
			// that saw a change made a new one without it.
			distinct := map[*Snapshot]bool{}
			for _, s := range published {
				distinct[s] = true
			}
			require.LessOrEqual(t, len(distinct), 3)
			plainDistinct := map[*Snapshot]bool{}
			for _, s := range kept {
				plainDistinct[s] = true
			}
			require.Greater(t, len(plainDistinct), 3)
		})
	}
}
