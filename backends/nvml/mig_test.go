package nvml_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
)

func h100(t *testing.T) mig.Model {
	m, err := mig.LookupModel("H100-80GB")
	require.NoError(t, err)
	return m
}

func layout(t *testing.T, s string) mig.Layout {
	t.Helper()
	l, err := mig.ParseLayout(h100(t), s)
	require.NoError(t, err)
	return l
}

func inst(t *testing.T, profile string, start uint8) mig.Instance {
	t.Helper()
	p, err := h100(t).Profile(profile)
	require.NoError(t, err)
	return mig.Instance{Profile: p, Start: start}
}

// migBox is a DGX H100 in MIG mode with no instances; creates counts the
// CreateGpuInstanceWithPlacement calls on GPU 0 and fail makes the n-th
// one (1-based) and later ones fail when set.
type migBox struct {
	*fixture
	creates  int
	failAt   int // this create fails
	failFrom int // this create and every later one fail
}

func newMIGBox(t *testing.T) *migBox {
	box := mustBox(t, "dgxh100")
	box.SetMIGMode(true)
	mb := &migBox{}
	d := box.Devices[0].(*server.Device)
	orig := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(info *nv.GpuInstanceProfileInfo, pl *nv.GpuInstancePlacement) (nv.GpuInstance, nv.Return) {
		mb.creates++
		if mb.creates == mb.failAt || mb.failFrom > 0 && mb.creates >= mb.failFrom {
			return nil, nv.ERROR_INSUFFICIENT_RESOURCES
		}
		return orig(info, pl)
	}
	mb.fixture = open(t, box, nil)
	return mb
}

// gis lists GPU 0's GPU instances as the mock holds them: "profileId@start".
func (mb *migBox) gis() []string {
	d := mb.box.Devices[0].(*server.Device)
	d.RLock()
	defer d.RUnlock()
	var out []string
	for gi := range d.GpuInstances {
		out = append(out, strings.Join([]string{itoa(int(gi.Info.ProfileId)), itoa(int(gi.Info.Placement.Start)), itoa(len(gi.ComputeInstances))}, "/"))
	}
	return out
}

func itoa(i int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + string(rune('0'+i))) }

func TestApplyMIG(t *testing.T) {
	mb := newMIGBox(t)
	ctx := context.Background()
	to := layout(t, "3g.40gb@0 2g.20gb@4 1g.10gb@6")
	r := engine.MIGReconfiguration{Node: "box", GPU: 0, From: layout(t, ""), To: to, Create: to.Instances()}
	require.NoError(t, mb.b.ApplyMIG(ctx, r))
	assert.Equal(t, 3, mb.creates)
	// Profile enum / start / compute instances, as NVML holds them.
	assert.ElementsMatch(t, []string{"2/0/1", "1/4/1", "0/6/1"}, mb.gis())
	assert.Equal(t, to, mb.b.Devices()[0].Layout)

	// Back to one 7g: destroy all three, create one.
	to2 := layout(t, "7g.80gb@0")
	r2 := engine.MIGReconfiguration{Node: "box", GPU: 0, From: to, To: to2, Destroy: to.Instances(), Create: to2.Instances()}
	require.NoError(t, mb.b.ApplyMIG(ctx, r2))
	assert.ElementsMatch(t, []string{"4/0/1"}, mb.gis())

	// Stale: the engine thinks the GPU is still at `to`.
	err := mb.b.ApplyMIG(ctx, r2)
	require.ErrorIs(t, err, backends.ErrRefused)
	assert.Contains(t, err.Error(), "the layout is")
}

// MIGLayout reads the GPU's layout from NVML: the Runner's truth after an
// ApplyMIG timed out (To: made; From: not).
func TestMIGLayoutReadsTheGPU(t *testing.T) {
	var _ backends.MIGReporter = (*nvml.Backend)(nil)
	mb := newMIGBox(t)
	ctx := context.Background()
	got, err := mb.b.MIGLayout(ctx, "box", 0)
	require.NoError(t, err)
	assert.Equal(t, layout(t, ""), got)
	to := layout(t, "3g.40gb@0 2g.20gb@4 1g.10gb@6")
	r := engine.MIGReconfiguration{Node: "box", GPU: 0, From: layout(t, ""), To: to, Create: to.Instances()}
	require.NoError(t, mb.b.ApplyMIG(ctx, r))
	got, err = mb.b.MIGLayout(ctx, "box", 0)
	require.NoError(t, err)
	assert.Equal(t, to, got)
	// A second ApplyMIG of the same change is refused (not idempotent):
	// the Runner reads the layout instead of calling it again.
	require.ErrorIs(t, mb.b.ApplyMIG(ctx, r), backends.ErrRefused)
	_, err = mb.b.MIGLayout(ctx, "other", 0)
	assert.ErrorIs(t, err, backends.ErrRefused)
	_, err = mb.b.MIGLayout(ctx, "box", 99)
	assert.ErrorIs(t, err, backends.ErrRefused)
}

// Plans berth's geometry says are invalid never reach NVML (the mock would
// accept them).
func TestApplyMIGCheckedAgainstGeometry(t *testing.T) {
	mb := newMIGBox(t)
	ctx := context.Background()
	empty := layout(t, "")
	for name, r := range map[string]engine.MIGReconfiguration{
		"3g at slice 2":  {Create: []mig.Instance{inst(t, "3g.40gb", 2)}},
		"overlap":        {Create: []mig.Instance{inst(t, "4g.40gb", 0), inst(t, "3g.40gb", 0)}},
		"To mismatch":    {Create: []mig.Instance{inst(t, "1g.10gb", 0)}, To: layout(t, "1g.10gb@1")},
		"destroy absent": {Destroy: []mig.Instance{inst(t, "1g.10gb", 0)}},
		"needs reset":    {NeedsReset: true},
		"wrong node":     {Node: "other"},
		"wrong GPU":      {GPU: 9},
	} {
		if r.Node == "" {
			r.Node = "box"
		}
		r.From = empty
		err := mb.b.ApplyMIG(ctx, r)
		assert.ErrorIs(t, err, backends.ErrRefused, name)
	}
	assert.Zero(t, mb.creates, "no NVML call for an invalid plan")
	assert.Empty(t, mb.gis())
}

// A failed create is undone: the GPU is back at From, the plan refused.
func TestApplyMIGFailureLeavesKnownLayout(t *testing.T) {
	mb := newMIGBox(t)
	ctx := context.Background()
	from := layout(t, "1g.10gb@0")
	require.NoError(t, mb.b.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "box", GPU: 0, From: layout(t, ""), To: from, Create: from.Instances()}))
	mb.failAt = 3 // the second create of the next plan
	to := layout(t, "2g.20gb@0 2g.20gb@2 3g.40gb@4")
	r := engine.MIGReconfiguration{Node: "box", GPU: 0, From: from, To: to, Destroy: from.Instances(), Create: to.Instances()}
	err := mb.b.ApplyMIG(ctx, r)
	require.ErrorIs(t, err, backends.ErrRefused)
	assert.Contains(t, err.Error(), "GPU left at H100-80GB[1g.10gb@0]")
	assert.ElementsMatch(t, []string{"0/0/1"}, mb.gis(), "back at From: 1g.10gb@0")
	assert.Equal(t, from, mb.b.Devices()[0].Layout)
	assert.Empty(t, mb.b.OutOfService())
}

// When the undo fails too, the GPU's layout is re-read and the GPU taken
// out of service: the engine's books no longer match it.
func TestApplyMIGUndoFailureQuarantines(t *testing.T) {
	mb := newMIGBox(t)
	ctx := context.Background()
	from := layout(t, "1g.10gb@0")
	require.NoError(t, mb.b.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "box", GPU: 0, From: layout(t, ""), To: from, Create: from.Instances()}))
	mb.failFrom = 2 // every create from now on
	to := layout(t, "7g.80gb@0")
	err := mb.b.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "box", GPU: 0, From: from, To: to, Destroy: from.Instances(), Create: to.Instances()})
	require.ErrorIs(t, err, backends.ErrRefused)
	assert.Empty(t, mb.gis())
	oos := mb.b.OutOfService()
	require.Len(t, oos, 1)
	assert.Contains(t, oos[mb.b.Devices()[0].UUID], "could not be undone")
	assert.Equal(t, layout(t, ""), mb.b.Devices()[0].Layout, "the layout NVML reports")
}

// A MIG member: its instance created at bind, CUDA_VISIBLE_DEVICES set to
// the MIG device's UUID; an instance in use is not destroyed; a rolled
// back member's created instance is destroyed again.
func TestBindMIGMember(t *testing.T) {
	mb := newMIGBox(t)
	ctx := context.Background()
	j := &queue.Job{ID: "small", Queue: "team", Submit: time.Now(), Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: "1g.10gb"}}}}
	mb.submit(t, j, sh(`echo $CUDA_VISIBLE_DEVICES; sleep 60`))
	in := inst(t, "1g.10gb", 6)
	m := engine.Member{Node: "box", GPUs: []int{0}, Fractional: true, Instance: in, Created: true}
	require.NoError(t, mb.b.BindMember(ctx, "small", m))
	assert.ElementsMatch(t, []string{"0/6/1"}, mb.gis())
	l := layout(t, "1g.10gb@6")
	err := mb.b.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "box", GPU: 0, From: l, To: layout(t, ""), Destroy: []mig.Instance{in}})
	require.ErrorIs(t, err, backends.ErrRefused)
	assert.Contains(t, err.Error(), "in use by \"small\"")
	// Whole GPUs on a MIG box are refused.
	assert.ErrorIs(t, mb.b.BindMember(ctx, "small", member(1)), backends.ErrRefused)
	out := filepath.Join(mb.dir, "small", "run-1", "member-0.out")
	waitFor(t, out+" written", func() bool { return strings.HasSuffix(readFileOr(out), "\n") })
	require.NoError(t, mb.b.UnbindMember(ctx, "small", m))
	e := mb.exits.next(t)
	assert.True(t, strings.HasPrefix(e.Visible, "MIG-"), e.Visible)
	assert.Equal(t, e.Visible+"\n", readFile(t, e.Stdout))
	assert.Empty(t, mb.gis(), "the created instance is destroyed on rollback")
	// An instance that does not exist and is not to be created.
	m.Created = false
	assert.ErrorIs(t, mb.b.BindMember(ctx, "small", m), backends.ErrRefused)
	_ = nvml.ReasonCompleted
}

func readFileOr(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
