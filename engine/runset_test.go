package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunSetViews checks the running jobs a View froze against a map
// model, after many later changes (compactions included) by the engine.
func TestRunSetViews(t *testing.T) {
	// IDs told apart by their first 8 bytes (compact's keys), and IDs
	// that share them (the keys tie, the IDs decide), of several lengths.
	for _, format := range []string{"j%03d", "job-in-queue-%d"} {
		t.Run(format, func(t *testing.T) { testRunSetViews(t, format) })
	}
}

func testRunSetViews(t *testing.T, format string) {
	rng := rand.New(rand.NewPCG(7, 11))
	var s runSet
	model := map[string]*runRec{}
	type frozen struct {
		v    runView
		want []string
	}
	var views []frozen
	ids := func(m map[string]*runRec) []string { return slices.Sorted(maps.Keys(m)) }
	for step := range 5000 {
		id := fmt.Sprintf(format, rng.IntN(400))
		if rng.IntN(3) == 0 {
			s.set(id, nil)
			delete(model, id)
		} else {
			r := &runRec{RunningJob: RunningJob{Job: id, Members: step}}
			s.set(id, r)
			model[id] = r
		}
		if step%97 == 0 {
			views = append(views, frozen{s.view(), ids(model)})
		}
		if step%501 == 0 {
			for _, f := range views {
				var got []string
				for _, r := range f.v.all() {
					got = append(got, r.Job)
				}
				require.Equal(t, f.want, got, "a View frozen earlier changed")
			}
			var got []*runRec
			got = append(got, s.view().all()...)
			require.Len(t, got, len(model))
			require.Len(t, s.keys, len(s.base))
			for i, r := range s.base {
				require.Equal(t, idKey(r.Job), s.keys[i], "the key of %s", r.Job)
			}
			for _, r := range got {
				require.Same(t, model[r.Job], r, "the last record of %s", r.Job)
			}
		}
	}
}
