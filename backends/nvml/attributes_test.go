package nvml_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// JobAttributes reports the driver version NVML gives and the UUIDs of a
// job's GPUs: the GPUs' own, or the MIG device's for a MIG member.
func TestJobAttributes(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	assert.Equal(t, "550.54.15", f.b.DriverVersion(), "the mock DGX H100's driver")
	f.submit(t, job("ok", 1, 2), sh(`sleep 0.2`))
	require.NoError(t, f.b.BindMember(context.Background(), "ok", member(2, 3)))
	a := f.b.JobAttributes("ok", []engine.Member{member(2, 3)})
	devs := f.b.Devices()
	assert.Equal(t, []string{devs[2].UUID, devs[3].UUID}, a.UUIDs)
	assert.Equal(t, "550.54.15", a.Driver)
	assert.Empty(t, a.Image, "the NVML backend runs commands, not images")
	f.exits.next(t)

	mb := newMIGBox(t)
	j := &queue.Job{ID: "small", Queue: "team", Submit: time.Now(), Request: gang.Request{Groups: []gang.Group{{Members: 1, MIGProfile: "1g.10gb"}}}}
	mb.submit(t, j, sh(`sleep 60`))
	m := engine.Member{Node: "box", GPUs: []int{0}, Fractional: true, Instance: inst(t, "1g.10gb", 6), Created: true}
	require.NoError(t, mb.b.BindMember(context.Background(), "small", m))
	a = mb.b.JobAttributes("small", []engine.Member{m})
	require.Len(t, a.UUIDs, 1)
	assert.True(t, strings.HasPrefix(a.UUIDs[0], "MIG-"), a.UUIDs[0])
	assert.Equal(t, []string{""}, mb.b.JobAttributes("other", []engine.Member{m}).UUIDs, "a MIG member the job does not run on")
	require.NoError(t, mb.b.UnbindMember(context.Background(), "small", m))
	mb.exits.next(t)
}
