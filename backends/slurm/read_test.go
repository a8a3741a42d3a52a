package slurm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseList(t *testing.T) {
	out := "45|RUNNING|berth-run|2|0|None|node[01-02]|1796523355|1796523360|\n" +
		"302_3|PENDING|berth|1|1|PartitionDown||1796523418|N/A|node07\n" +
		"310_[4-7%2]|PENDING|berth|1|0|PartitionDown||1796523418|N/A|(null)\n"
	recs, err := parseList([]byte(out))
	require.NoError(t, err)
	require.Len(t, recs, 3)
	assert.Equal(t, "45", recID(&recs[0]))
	assert.Equal(t, "node[01-02]", recs[0].Nodes)
	assert.Equal(t, int64(1796523360), recs[0].StartTime)
	assert.Equal(t, "302_3", recID(&recs[1]))
	assert.Equal(t, 1, recs[1].RestartCnt)
	assert.Zero(t, recs[1].StartTime)
	assert.True(t, arrayMeta(&recs[2]))
	assert.Equal(t, "4-7%2", recs[2].ArrayTaskString)
	assert.False(t, recs[0].detail || recs[0].devs)

	assert.Empty(t, recs[0].ReqNodes)
	assert.Equal(t, "node07", recs[1].ReqNodes, "sbatch -w")
	assert.Empty(t, recs[2].ReqNodes)
	_, err = parseList([]byte("45|RUNNING|berth-run|2|0|None|node01|1|2||extra\n"))
	assert.ErrorIs(t, err, ErrParse)
	_, err = parseList([]byte("4x5|RUNNING|berth-run|2|0|None|node01|1|2|\n"))
	assert.ErrorIs(t, err, ErrParse)
}

func TestParseDetail(t *testing.T) {
	a, b := &jobRec{JobID: 7}, &jobRec{JobID: 8}
	want := map[string]*jobRec{"7": a, "8": b}
	out := "7|1:00:00|gres:gpu:h100:8|N/A|[a100|h100]\x1fml|berth:required=rack|x\nsecond line\n" +
		"8|UNLIMITED|gres:gpu:2|N/A|(null)\x1f(null)|(null)\n"
	require.True(t, parseDetail([]byte(out), want))
	assert.Equal(t, int64(60), a.TimeLimit)
	assert.Equal(t, "gres:gpu:h100:8", a.TresPerNode)
	assert.Equal(t, "ml", a.Account)
	assert.Equal(t, "[a100|h100]", a.Features, "the constraint keeps its |")
	assert.Equal(t, "berth:required=rack|x\nsecond line", a.Comment, "the comment keeps its separators and newlines")
	assert.True(t, a.detail)
	assert.Empty(t, b.Account)
	assert.Empty(t, b.Comment)
	assert.Empty(t, b.Features)
	assert.Zero(t, b.TimeLimit)
}

// A comment (the last field) that holds a newline and a forged record of
// another job cannot change that job's fields: two records for one job
// make the read fail (the caller reads JSON), and a forged record of a job
// not asked for is part of the comment.
func TestParseDetailForgedRecord(t *testing.T) {
	a, b := &jobRec{JobID: 7}, &jobRec{JobID: 8}
	forged := "7|1:00|gres:gpu:1|N/A|(null)\x1fml|hi\n8|1:00|gres:gpu:h100:8|N/A|(null)\x1fevil|berth:required=zone\n" +
		"8|1:00|gres:gpu:1|N/A|(null)\x1fml|real\n"
	assert.False(t, parseDetail([]byte(forged), map[string]*jobRec{"7": a, "8": b}))
	assert.False(t, a.detail || b.detail, "nothing filled")

	c := &jobRec{JobID: 9}
	other := "9|1:00|gres:gpu:1|N/A|(null)\x1fml|hi\n12|1:00|gres:gpu:h100:8|N/A|(null)\x1fevil|x\n"
	require.True(t, parseDetail([]byte(other), map[string]*jobRec{"9": c}))
	assert.Equal(t, "hi\n12|1:00|gres:gpu:h100:8|N/A|(null)\x1fevil|x", c.Comment)

	d := &jobRec{JobID: 10}
	assert.False(t, parseDetail([]byte(""), map[string]*jobRec{"10": d}), "a job without a record")
	assert.False(t, parseDetail([]byte("10|1:00|gres:gpu:1\n"), map[string]*jobRec{"10": d}), "too few fields")
	assert.False(t, parseDetail([]byte("10|1:00|gres:gpu:1|N/A|(null)|ml|x\n"), map[string]*jobRec{"10": d}), "no feature separator")
}

func TestParseTimeLimit(t *testing.T) {
	for in, want := range map[string]int64{"1:00": 1, "0:30": 1, "2:00:00": 120, "1-00:00:00": 1440, "UNLIMITED": 0, "5": 5} {
		got, ok := parseTimeLimit(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	_, ok := parseTimeLimit("1:x")
	assert.False(t, ok)
}

const showJob45 = `JobId=45 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=node[01-02]
   JOB_GRES=gpu:h100:8
     Nodes=node01 CPU_IDs=0 Mem=1000 GRES=gpu:h100:4(IDX:0-3)
     Nodes=node02 CPU_IDs=0 Mem=1000 GRES=gpu:h100:4(IDX:4-7)
   Comment=(null)
`

const showJob46 = `JobId=47 ArrayJobId=46 ArrayTaskId=2 JobName=wrap
   JobState=RUNNING Reason=None Dependency=(null)
     Nodes=node[03-04] CPU_IDs=0 Mem=1000 GRES=gpu:h100:1(IDX:0)
`

func TestParseDevices(t *testing.T) {
	task := int64(2)
	a := &jobRec{JobID: 45, Nodes: "node[01-02]"}
	b := &jobRec{JobID: 46, ArrayJobID: 46, ArrayTaskID: &task, Nodes: "node[03-04]"}
	require.True(t, parseDevices([]byte(showJob45+showJob46), []*jobRec{a, b}))
	assert.Equal(t, []string{"gpu:h100:4(IDX:0-3)", "gpu:h100:4(IDX:4-7)"}, a.GresDetail)
	assert.Equal(t, []string{"gpu:h100:1(IDX:0)", "gpu:h100:1(IDX:0)"}, b.GresDetail)
	ms, err := members(a)
	require.NoError(t, err)
	assert.Equal(t, []int{4, 5, 6, 7}, ms[1].GPUs)
	assert.True(t, a.devs && b.devs)

	// Ended meanwhile: no detail lines, left unread (not an error).
	c := &jobRec{JobID: 45, Nodes: "node[01-02]"}
	require.True(t, parseDevices([]byte("JobId=45 JobName=wrap\n   JobState=COMPLETED\n"), []*jobRec{c}))
	assert.False(t, c.devs)
}

// A job name or comment that forges an allocation line or a job block
// makes the read fail (the caller reads JSON) instead of giving a job GPUs
// SLURM did not give it.
func TestParseDevicesForged(t *testing.T) {
	forgedLine := `JobId=45 JobName=x
     Nodes=node01 CPU_IDs=0 Mem=1 GRES=gpu:h100:4(IDX:4-7)
   JobState=RUNNING
     Nodes=node01 CPU_IDs=0 Mem=1000 GRES=gpu:h100:4(IDX:0-3)
     Nodes=node02 CPU_IDs=0 Mem=1000 GRES=gpu:h100:4(IDX:4-7)
`
	a := &jobRec{JobID: 45, Nodes: "node[01-02]"}
	assert.False(t, parseDevices([]byte(forgedLine), []*jobRec{a}))
	assert.False(t, a.devs)

	forgedForeign := "JobId=45 JobName=x\n     Nodes=node09 CPU_IDs=0 Mem=1 GRES=gpu:h100:4(IDX:0-3)\n" + showJob45[len("JobId=45 JobName=wrap\n"):]
	assert.False(t, parseDevices([]byte(forgedForeign), []*jobRec{a}), "a node the job does not have")

	forgedBlock := "JobId=45 JobName=x\nJobId=46 JobName=y\n" + showJob45
	assert.False(t, parseDevices([]byte(forgedBlock), []*jobRec{a}), "one block too many")

	b := &jobRec{JobID: 46, Nodes: "node[01-02]"}
	assert.False(t, parseDevices([]byte(showJob45), []*jobRec{b}), "the block of another job")
}

func TestReasonText(t *testing.T) {
	assert.Equal(t, "capacity: at most 2 of 4 members fit", reasonText("capacity: at most 2 of 4 members fit"))
	assert.Equal(t, "a b c", reasonText("a\n\tb\"c"), "one line, no quotes")
	assert.Equal(t, "x berthstopping", reasonText("x berth:stopping"), "no berth: tag of its own")
	assert.Len(t, reasonText(strings.Repeat("y", 500)), 200)
}

func TestCheckLevels(t *testing.T) {
	b := &Backend{}
	require.NoError(t, b.checkLevels("galaxy", ""), "levels not read yet")
	b.levels, b.levelsKnown = []string{"block", "rack"}, true
	require.NoError(t, b.checkLevels("rack", "block"))
	assert.ErrorIs(t, b.checkLevels("galaxy", ""), ErrBadJob)
	assert.ErrorIs(t, b.checkLevels("", "zone"), ErrBadJob)
}

// The GPU indices of a started job are read from the second poll that
// sees it running (a short job has ended by then: no read), and again
// after a restart.
func TestNeedsDevicesFromSecondPoll(t *testing.T) {
	c, err := (&Config{}).withDefaults()
	require.NoError(t, err)
	b := &Backend{cfg: c, jobs: map[string]*tracked{"5": {state: inRunning, nodes: 1}}}
	rec := func(restarts int) []jobRec {
		return []jobRec{{JobID: 5, State: "RUNNING", Partition: c.RunPartition, Nodes: "node01", RestartCnt: restarts, detail: true}}
	}
	_, devs, useJSON := b.needsLocked(rec(0))
	require.False(t, useJSON)
	assert.Empty(t, devs, "first poll that sees it running: not read yet")
	_, devs, _ = b.needsLocked(rec(0))
	assert.Len(t, devs, 1, "second poll: read")
	_, devs, _ = b.needsLocked(rec(1))
	assert.Empty(t, devs, "restarted: its new run waits a poll again")
	_, devs, _ = b.needsLocked(rec(1))
	assert.Len(t, devs, 1)
}

func TestCompressHostlist(t *testing.T) {
	assert.Equal(t, "node[02-04,07]", compressHostlist([]string{"node03", "node02", "node07", "node04"}))
	assert.Equal(t, "node05", compressHostlist([]string{"node05"}))
	assert.Equal(t, "login,gpu[1-2],node[08-09]", compressHostlist([]string{"gpu1", "node08", "login", "gpu2", "node09"}))
	got, err := expandHostlist(compressHostlist([]string{"a9", "a10", "b001", "b003"}))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a9", "a10", "b001", "b003"}, got)
}

// A bind excludes every node of the run partition but its own; it names
// NodeList when a node is not in the run partition as sinfo showed it.
func TestExcludeFor(t *testing.T) {
	b := &Backend{cfg: Config{RunPartition: "berth-run"}}
	b.setRunNodesLocked([]nodeRec{
		{Name: "node01", Partitions: []string{"gpu", "berth-run"}},
		{Name: "node02", Partitions: []string{"berth-run"}},
		{Name: "node03", Partitions: []string{"berth-run"}},
		{Name: "node04", Partitions: []string{"gpu"}},
	})
	assert.Equal(t, "node[01,03]", b.excludeFor([]string{"node02"}))
	assert.Equal(t, "node03", b.excludeFor([]string{"node02", "node01"}))
	assert.Empty(t, b.excludeFor([]string{"node04"}), "not in the run partition")
	assert.Empty(t, b.excludeFor([]string{"node01", "node02", "node03"}), "nothing to exclude")
	assert.Empty(t, (&Backend{}).excludeFor([]string{"node01"}), "nodes not read yet")
}
