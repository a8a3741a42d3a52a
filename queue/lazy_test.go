package queue

import (
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/stretchr/testify/require"
)

// TestPendingAggregates: what the engine's walk cut reads of the pending
// set (AskClasses, QuotaIdle) and Snapshot.Each follow additions, removals and
// charges.
func TestPendingAggregates(t *testing.T) {
	tr, err := NewTree(TreeSpec{Queues: []QueueSpec{
		{Name: "a", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(16)}}},
		{Name: "b", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(8)}}},
	}})
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{})
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id, q string, groups []gang.Group, limit time.Duration) *Job {
		return &Job{ID: id, Queue: q, Submit: t0, RuntimeLimit: limit, Request: gang.Request{Groups: groups}}
	}
	g := func(members, per int) gang.Group { return gang.Group{Members: members, GPUsPerMember: per} }
	classes := func(maxPer int) []AskClass {
		var out []AskClass
		p.AskClasses(maxPer, func(c AskClass) bool { out = append(out, c); return true })
		return out
	}
	require.Empty(t, classes(64))
	require.True(t, p.QuotaIdle())

	require.NoError(t, p.Add(job("big", "a", []gang.Group{g(2, 4)}, 0)))
	require.Equal(t, []AskClass{{PerMember: 4, MinTotal: 5, Jobs: 1, Unlimited: 1}}, classes(64), "8 GPUs: the class 5..8")
	require.Empty(t, classes(3))
	require.True(t, p.QuotaIdle(), "8 GPUs fit both queues")
	run := job("run", "b", []gang.Group{g(1, 4)}, 0)
	require.NoError(t, tr.Charge(run, t0))
	require.False(t, p.QuotaIdle(), "b has 4 left, 8 asked")
	require.NoError(t, tr.Release(run, t0))
	require.True(t, p.QuotaIdle())

	require.NoError(t, p.Add(job("two", "a", []gang.Group{g(1, 4), g(2, 2)}, 3*time.Hour)))
	require.NoError(t, p.Add(job("one", "b", []gang.Group{g(3, 2)}, 2*time.Hour)))
	require.NoError(t, p.Add(job("solo", "b", []gang.Group{g(1, 1)}, 0)))
	require.NoError(t, p.Add(job("huge", "a", []gang.Group{g(1, 100)}, time.Hour)))
	el := job("elastic", "a", []gang.Group{g(6, 2)}, 4*time.Hour)
	el.Elastic = Elastic{MinMembers: 1, MaxMembers: 6}
	require.NoError(t, p.Add(el))
	require.Equal(t, []AskClass{
		{PerMember: 1, MinTotal: 1, Jobs: 1, Unlimited: 1},
		{PerMember: 2, MinTotal: 2, Jobs: 1, ShortestLimit: 4 * time.Hour}, // elastic: 1 member
		{PerMember: 2, MinTotal: 5, Jobs: 2, ShortestLimit: 2 * time.Hour}, // 6 and 8 GPUs
		{PerMember: 4, MinTotal: 5, Jobs: 1, Unlimited: 1},
		{PerMember: 64, MinTotal: 65, Jobs: 1, ShortestLimit: time.Hour}, // 64 or more
	}, classes(64))
	require.False(t, p.QuotaIdle(), "100 GPUs fit no queue")

	_, ok := p.Remove("one")
	require.True(t, ok)
	for _, id := range []string{"huge", "solo", "elastic"} {
		_, ok = p.Remove(id)
		require.True(t, ok)
	}
	require.Equal(t, []AskClass{
		{PerMember: 2, MinTotal: 5, Jobs: 1, ShortestLimit: 3 * time.Hour},
		{PerMember: 4, MinTotal: 5, Jobs: 1, Unlimited: 1},
	}, classes(64))
	require.False(t, p.QuotaIdle(), "the largest demand ever added still counts")

	frac := job("frac", "b", []gang.Group{{Members: 1, GPUMilli: 500}}, 0)
	require.NoError(t, p.Add(frac))
	require.Equal(t, AskClass{Jobs: 1, Unlimited: 1}, classes(0)[0], "a fractional member")

	var ids []string
	p.Publish(t0).Each(func(j *Job) bool { ids = append(ids, j.ID); return true })
	require.Equal(t, []string{"big", "two", "frac"}, ids)
	ids = ids[:0]
	p.Publish(t0).Each(func(j *Job) bool { ids = append(ids, j.ID); return false })
	require.Equal(t, []string{"big"}, ids)
}
