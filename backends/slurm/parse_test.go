package slurm

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/topo"
)

func TestExpandHostlist(t *testing.T) {
	got, err := expandHostlist("node[01-03,07],gpu5,r[1-2]n[1]")
	require.NoError(t, err)
	assert.Equal(t, []string{"node01", "node02", "node03", "node07", "gpu5"}, got[:5])
	for _, bad := range []string{"node[03-01]", "node[a-b]", "node]x["} {
		_, err := expandHostlist(bad)
		assert.ErrorIs(t, err, ErrParse, bad)
	}
}

func TestParseGPUGres(t *testing.T) {
	g, ok, err := parseGPUGres("gpu:h100:4(IDX:0-1,6-7)")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, gres{Type: "h100", Count: 4, IDX: []int{0, 1, 6, 7}}, g)
	g, ok, err = parseGPUGres("nic:1,gpu:8(S:0-1)")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, gres{Count: 8}, g)
	_, ok, err = parseGPUGres("gpu:h100:0(IDX:N/A)")
	require.NoError(t, err)
	assert.True(t, ok)
	_, ok, err = parseGPUGres("")
	require.NoError(t, err)
	assert.False(t, ok)
	_, _, err = parseGPUGres("gpu:h100:x")
	assert.ErrorIs(t, err, ErrParse)
}

func TestParseComment(t *testing.T) {
	r, err := parseComment("nightly run berth:required=block,preferred=rack")
	require.NoError(t, err)
	assert.Equal(t, commentRequest{Required: "block", Preferred: "rack"}, r)
	_, err = parseComment("berth:spread=rack")
	assert.ErrorIs(t, err, ErrBadJob)
	_, err = parseComment("berth:required=a;b")
	assert.ErrorIs(t, err, ErrBadJob)
}

func TestParseTopologyAndTasks(t *testing.T) {
	sw, err := parseTopology([]byte("SwitchName=rack1 Level=0 LinkSpeed=1 Nodes=node[01-02]\nSwitchName=spine Level=1 LinkSpeed=1 Nodes=node[01-02] Switches=rack1\n"))
	require.NoError(t, err)
	assert.Equal(t, []switchRec{{"rack1", 0, []string{"node01", "node02"}}, {"spine", 1, []string{"node01", "node02"}}}, sw)
	ids, err := taskIDs("0-6:3,9%2")
	require.NoError(t, err)
	assert.Equal(t, []int{0, 3, 6, 9}, ids)
}

func TestNodeState(t *testing.T) {
	assert.Equal(t, topo.Ready, nodeState(nodeRec{State: "mixed"}))
	assert.Equal(t, topo.Draining, nodeState(nodeRec{State: "idle", StateFlags: []string{"DRAIN"}}))
	assert.Equal(t, topo.Down, nodeState(nodeRec{State: "down", StateFlags: []string{"DRAIN"}}))
	assert.Equal(t, topo.Down, nodeState(nodeRec{State: "idle", StateFlags: []string{"NOT_RESPONDING"}}))
}

func TestMembersFromGresDetail(t *testing.T) {
	r := jobRec{JobID: 7, Nodes: "node[03-04]", GresDetail: []string{"gpu:h100:2(IDX:4-5)", "gpu:h100:2(IDX:0,7)"}}
	ms, err := members(&r)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	assert.Equal(t, "node03", ms[0].Node)
	assert.Equal(t, []int{4, 5}, ms[0].GPUs)
	assert.Equal(t, []int{0, 7}, ms[1].GPUs)
	r.GresDetail = r.GresDetail[:1]
	_, err = members(&r)
	assert.ErrorIs(t, err, ErrParse)
}

func TestToJob(t *testing.T) {
	c, err := (&Config{Partitions: map[string]Partition{"p": {Priority: 5, Preemptible: true}}, AccountQueues: map[string]string{"a1": "q1"}}).withDefaults()
	require.NoError(t, err)
	b := &Backend{cfg: c}
	r := jobRec{JobID: 9, Account: "a1", NodeCount: 2, TresPerNode: "gres:gpu:h100:8", TimeLimit: 90, SubmitTime: 1000, Comment: "berth:preferred=rack"}
	j, err := b.toJob("9", &r, "p", 0)
	require.NoError(t, err)
	assert.Equal(t, "q1", j.Queue)
	assert.Equal(t, int32(5), j.Priority)
	assert.True(t, j.Preemptible)
	assert.Equal(t, 90*time.Minute, j.RuntimeLimit)
	assert.Equal(t, 2, j.Request.Groups[0].Members)
	assert.Equal(t, 8, j.Request.Groups[0].GPUsPerMember)
	assert.Equal(t, "rack", j.Request.Preferred)
	r.TresPerJob = "gres:gpu:16"
	_, err = b.toJob("9", &r, "p", 0)
	assert.ErrorIs(t, err, ErrBadJob)
	r.TresPerJob, r.TresPerNode = "", ""
	_, err = b.toJob("9", &r, "p", 0)
	assert.ErrorIs(t, err, ErrBadJob)
}

func TestConfigAndArguments(t *testing.T) {
	_, err := New(Config{RunPartition: "berth"})
	assert.ErrorIs(t, err, ErrInvalidConfig, "the run partition cannot be managed")
	_, err = New(Config{Partitions: map[string]Partition{"bad name": {}}})
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = New(Config{Bin: t.TempDir()})
	assert.ErrorIs(t, err, ErrMissingCommand)
	assert.ErrorIs(t, checkJobID("12;rm -rf"), ErrBadArgument)
	assert.NoError(t, checkJobID("12_3"))
	assert.ErrorIs(t, checkNode("-n"), ErrBadArgument)
	// Refusals: SLURM's answers about the job are final, the rest transient.
	assert.True(t, errors.Is(refusal(errors.Join(ErrCommand, errors.New("Invalid job id specified"))), backends.ErrRefused))
	assert.False(t, errors.Is(refusal(errors.New("timeout")), backends.ErrRefused))
}
