package score_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/gang/score"
	"github.com/berthsched/berth/topo"
)

func TestStateBookThroughTopoAndPool(t *testing.T) {
	st := handState(t)
	snap, pool := st.Snapshot(), st.Pool()
	// b's GPU 0 holds a share: booked in topo, 500 free in the pool.
	assert.False(t, snap.IsFree(2))
	info, err := pool.GPU(2)
	require.NoError(t, err)
	assert.Equal(t, 500, info.FreeMilli)
	assert.Equal(t, 1, info.Shares)
	assert.Equal(t, 500, st.GPUFree(1, 0))
	assert.Equal(t, 3500, st.NodeFreeGPUMilli(1))
	assert.Equal(t, 3, st.NodeWholeFree(1))
	assert.Equal(t, int64(56000), st.FreeCPU(1))
	assert.Equal(t, int64(1500), st.Allocated())
	assert.Equal(t, int64(14000), st.Capacity())

	// A second share on the same GPU, then release both: the GPU goes
	// back to topo when its last share leaves.
	b2, err := st.Bind(score.Placement{Node: 1, GPUs: []int{0}}, score.Request{GPUs: 1, Milli: 500, MemoryMiB: 100})
	require.NoError(t, err)
	assert.Equal(t, 0, st.GPUFree(1, 0))
	assert.Equal(t, 2, st.Pods(1))
	assert.Equal(t, 2, st.KindCount(1, score.KindShared))
	require.NoError(t, st.Check())
	v := st.Version(1)
	require.NoError(t, st.Unbind(b2))
	assert.NotEqual(t, v, st.Version(1))
	assert.ErrorIs(t, st.Unbind(b2), score.ErrNotBound)
	assert.Equal(t, 500, st.GPUFree(1, 0))
	assert.False(t, snap.IsFree(2), "one share still there")
	require.NoError(t, st.Check())

	// Whole GPUs never take a shared GPU; Fits and DefaultGPUs agree.
	four := score.Request{GPUs: 4, Milli: 1000}
	assert.False(t, st.Fits(1, four))
	assert.Nil(t, st.DefaultGPUs(1, four))
	assert.Equal(t, []int{1, 2, 3}, st.DefaultGPUs(1, score.Request{GPUs: 3, Milli: 1000}))
	// Several GPUs of a fraction each: the lowest-index GPUs with room.
	multi := score.Request{GPUs: 2, Milli: 400}
	assert.Equal(t, []int{0, 1}, st.DefaultGPUs(1, multi))
	mb, err := st.Bind(score.Placement{Node: 1, GPUs: []int{0, 1}}, multi)
	require.NoError(t, err)
	assert.Equal(t, 100, st.GPUFree(1, 0))
	assert.Equal(t, 600, st.GPUFree(1, 1))
	require.NoError(t, st.Check())
	require.NoError(t, st.Unbind(mb))
	require.NoError(t, st.Check())
}

func TestStateBindErrors(t *testing.T) {
	st := handState(t)
	before := st.Allocated()
	cases := []struct {
		name string
		p    score.Placement
		r    score.Request
		err  error
	}{
		{"bad request", score.Placement{Node: 0, GPUs: []int{0}}, score.Request{GPUs: 1, Milli: 1001}, score.ErrBadRequest},
		{"negative cpu", score.Placement{Node: 0}, score.Request{CPUMilli: -1}, score.ErrBadRequest},
		{"unknown node", score.Placement{Node: 9}, score.Request{}, score.ErrUnknownNode},
		{"negative node", score.Placement{Node: -1}, score.Request{}, score.ErrUnknownNode},
		{"no cpu", score.Placement{Node: 0}, score.Request{CPUMilli: 40000}, score.ErrNoFit},
		{"no memory", score.Placement{Node: 0}, score.Request{MemoryMiB: 1 << 20}, score.ErrNoFit},
		{"full GPU", score.Placement{Node: 2, GPUs: []int{0}}, score.Request{GPUs: 1, Milli: 100}, score.ErrNoFit},
		{"shared GPU for whole", score.Placement{Node: 1, GPUs: []int{0}}, score.Request{GPUs: 1, Milli: 1000}, score.ErrNoFit},
		{"GPU out of node", score.Placement{Node: 0, GPUs: []int{2}}, score.Request{GPUs: 1, Milli: 100}, score.ErrNoFit},
		{"GPU twice", score.Placement{Node: 0, GPUs: []int{0, 0}}, score.Request{GPUs: 2, Milli: 100}, score.ErrNoFit},
		{"GPU count", score.Placement{Node: 0, GPUs: []int{0}}, score.Request{GPUs: 2, Milli: 100}, score.ErrNoFit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.Bind(tc.p, tc.r)
			assert.ErrorIs(t, err, tc.err)
			assert.Equal(t, before, st.Allocated())
			require.NoError(t, st.Check())
		})
	}
}

func TestStateMaxPodsAndReadiness(t *testing.T) {
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "up", GPUs: 1}, {Name: "down", GPUs: 1, State: topo.Down},
	}})
	require.NoError(t, err)
	st, err := score.NewState(c, score.Options{MaxPods: 2})
	require.NoError(t, err)
	r := score.Request{CPUMilli: 5} // CPU untracked on these nodes: always fits
	assert.False(t, st.Fits(1, r), "a down node takes nothing")
	for range 2 {
		_, err := st.Bind(score.Placement{Node: 0}, r)
		require.NoError(t, err)
	}
	assert.False(t, st.Fits(0, r), "pod limit")
	_, err = st.Bind(score.Placement{Node: 0}, r)
	assert.ErrorIs(t, err, score.ErrNoFit)
}

func TestRequestKinds(t *testing.T) {
	k, ok := score.Request{GPUs: 1, Milli: 300}.Kind()
	assert.True(t, ok)
	assert.Equal(t, score.KindShared, k)
	k, _ = score.Request{GPUs: 8, Milli: 1000}.Kind()
	assert.Equal(t, score.Kind(8), k)
	_, ok = score.Request{GPUs: 1}.Kind()
	assert.False(t, ok, "no milli: CPU-only")
	assert.Equal(t, int64(0), score.Request{GPUs: 2}.Demand())
	assert.Equal(t, int64(8000), score.Request{GPUs: 8, Milli: 1000}.Demand())
	assert.True(t, score.Request{GPUs: 1, Milli: 999}.Shared())
	assert.False(t, score.Request{GPUs: 2, Milli: 500}.Shared())
}

// FuzzState books and releases random requests through random policies
// and checks, after every step, that the mirrors agree with topo and the
// pool (State.Check) and that the allocated milli equals the demand held.
func FuzzState(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{200, 17, 3, 99, 250, 1, 1, 1, 7, 7, 7, 64, 128, 255, 0, 0, 33})
	f.Fuzz(func(t *testing.T, ops []byte) {
		c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
			{Name: "a", GPUs: 2, GPUModel: "T4", CPUMilli: 16000, MemoryMiB: 4096},
			{Name: "b", GPUs: 4, CPUMilli: 32000, MemoryMiB: 8192},
			{Name: "c", GPUs: 8, CPUMilli: 64000, MemoryMiB: 16384},
		}})
		require.NoError(t, err)
		st, err := score.NewState(c, score.Options{MaxPods: 6})
		require.NoError(t, err)
		target := fgdTarget()
		policies := []score.Policy{score.DotProd{}, score.GpuClustering{}, score.GpuPacking{},
			score.BestFit{}, score.NewFGD(target), score.NewBerth(target)}
		sc := &score.Scheduler{State: st}
		var live []*score.Binding
		var held int64
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], int(ops[i+1]), int(ops[i+2])
			if op%4 == 3 && len(live) > 0 {
				j := a % len(live)
				held -= live[j].Request.Demand()
				require.NoError(t, st.Unbind(live[j]))
				live = append(live[:j], live[j+1:]...)
			} else {
				r := score.Request{CPUMilli: int64(a%8) * 1000, MemoryMiB: int64(b%4) * 512}
				switch b % 4 {
				case 1:
					r.GPUs, r.Milli = 1, 50+(a*37)%950
				case 2:
					r.GPUs, r.Milli = 1+a%4, 1000
				case 3:
					r.GPUs, r.Milli = 2, 100+a%400
				}
				if op%8 == 5 {
					r.Models = []string{"T4"}
				}
				sc.Policy = policies[int(op)%len(policies)]
				fits := 0
				for id := range topo.NodeID(st.NumNodes()) {
					if st.Fits(id, r) {
						fits++
					}
				}
				d, bd, err := sc.Schedule(r)
				require.NoError(t, err)
				require.Equal(t, fits, d.Feasible, "the scheduler's filter is Fits")
				if d.Placed {
					live = append(live, bd)
					held += r.Demand()
				}
			}
			require.NoError(t, st.Check())
			require.Equal(t, held, st.Allocated())
		}
	})
}
