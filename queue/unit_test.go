package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAmountSaturates(t *testing.T) {
	assert.Equal(t, MaxAmount, MaxAmount.Add(1))
	assert.Equal(t, MinAmount, MinAmount.Sub(1))
	assert.Equal(t, MaxAmount, Amount(1).Sub(MinAmount))
	assert.Equal(t, MaxAmount, Amount(1<<40).Mul(1<<40))
	assert.Equal(t, MinAmount, Amount(-1<<40).Mul(1<<40))
	assert.Equal(t, Amount(-6), Amount(2).Mul(-3))
	assert.Equal(t, Amount(5), Amount(2).Add(3))
	assert.Equal(t, MinAmount, MinAmount.Mul(1))
	assert.Equal(t, MaxAmount, MinAmount.Mul(-1))
}

func TestResources(t *testing.T) {
	var rs Resources
	rs = rs.With(GPUMilli, 1000).With(CPUMilli, 5).With(GPUMilli, 500)
	assert.Equal(t, "cpu=5,gpu=1500", rs.String())
	assert.Equal(t, Amount(1500), rs.Get(GPUMilli))
	assert.Equal(t, Amount(0), rs.Get(MemoryMiB))
	assert.True(t, GPUModel("H100").IsGPU())
	assert.False(t, MIG("1g.10gb").IsGPU())
	assert.InDelta(t, 3000.0/7, MIG("3g.40gb").gpuMilliWeight(), 1e-9)
}

func TestJobDemandAndGPUTime(t *testing.T) {
	j := &Job{ID: "j", Queue: "q", Submit: t0, Request: gang.Request{Groups: []gang.Group{
		{Members: 2, GPUsPerMember: 4, GPUModel: "H100", CPUMilli: 1000},
		{Members: 3, GPUMilli: 250, MemoryMiB: 10},
		{Members: 7, MIGProfile: "1g.10gb"},
	}}}
	require.NoError(t, j.Validate())
	assert.Equal(t, "cpu=2000,gpu=750,gpu/H100=8000,memory=30,mig/1g.10gb=7", j.Demand().String())
	assert.InDelta(t, 8000+750+1000, j.GPUMilliTotal(), 1e-6)
	assert.Equal(t, "q", j.AccountName())
}

func TestValidateNamesField(t *testing.T) {
	ok := func() *Job { return oneGPUJob("j", "q", 1, 0, t0) }
	for _, tc := range []struct {
		field string
		mod   func(j *Job)
	}{
		{"ID", func(j *Job) { j.ID = "" }},
		{"Queue", func(j *Job) { j.Queue = "" }},
		{"Class", func(j *Job) { j.Class = 9 }},
		{"Request.Groups", func(j *Job) { j.Request.Groups = nil }},
		{"Request.Groups[0].Members", func(j *Job) { j.Request.Groups[0].Members = 0 }},
		{"Request.Groups[0].Members", func(j *Job) { j.Request.Groups[0].Members = -3 }},
		{"Request.Groups[0].GPUsPerMember", func(j *Job) { j.Request.Groups[0].GPUsPerMember = -1 }},
		{"RuntimeEstimate", func(j *Job) { j.RuntimeEstimate = -1 }},
		{"RuntimeLimit", func(j *Job) { j.RuntimeLimit = -1 }},
		{"RuntimeEstimate", func(j *Job) { j.RuntimeEstimate, j.RuntimeLimit = 2*time.Hour, time.Hour }},
		{"MinRuntime", func(j *Job) { j.MinRuntime = -1 }},
		{"MinRuntime", func(j *Job) { j.MinRuntime, j.RuntimeLimit = 2*time.Hour, time.Hour }},
		{"GracePeriod", func(j *Job) { j.GracePeriod = -time.Second }},
		{"ArrayIndex", func(j *Job) { j.ArrayIndex = -1 }},
		{"Submit", func(j *Job) { j.Submit = time.Time{} }},
		{"Elastic.MinMembers", func(j *Job) { j.Elastic = Elastic{MinMembers: 0, MaxMembers: 2} }},
		{"Elastic.MinMembers", func(j *Job) { j.Elastic = Elastic{MinMembers: 3, MaxMembers: 2} }},
		{"Request.Groups[0].Members", func(j *Job) { j.Elastic = Elastic{MinMembers: 2, MaxMembers: 4} }},
		{"Request", func(j *Job) { j.Request.Groups[0].GPUsPerMember = 1 << 45 }},
	} {
		j := ok()
		tc.mod(j)
		err := j.Validate()
		var fe *FieldError
		require.ErrorAs(t, err, &fe, tc.field)
		assert.Equal(t, tc.field, fe.Field)
		assert.ErrorIs(t, err, ErrInvalidJob)
	}
	j := ok()
	j.Request.Groups[0].Members = 0
	assert.ErrorIs(t, j.Validate(), gang.ErrBadGroup, "the gang cause is kept")
	require.NoError(t, ok().Validate())
	e := ok()
	e.Elastic = Elastic{MinMembers: 1, MaxMembers: 4}
	require.NoError(t, e.Validate())
}

func TestTreeSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		spec  TreeSpec
	}{
		{"Name", TreeSpec{Queues: []QueueSpec{{Name: ""}}}},
		{"Name", TreeSpec{Queues: []QueueSpec{{Name: "a"}, {Name: "a"}}}},
		{"Cohort", TreeSpec{Queues: []QueueSpec{{Name: "a", Cohort: "x"}}}},
		{"Cohort", TreeSpec{Queues: []QueueSpec{{Name: "a", Cohort: "b"}, {Name: "b"}}}},
		{"Parent", TreeSpec{Cohorts: []CohortSpec{{Name: "x", Parent: "y"}, {Name: "y", Parent: "x"}}}},
		{"Weight", TreeSpec{Queues: []QueueSpec{{Name: "a", Weight: -1}}}},
		{"Quota[gpu].Nominal", TreeSpec{Queues: []QueueSpec{{Name: "a", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: -1}}}}}},
		{"Quota[gpu].LendingLimit", TreeSpec{Queues: []QueueSpec{{Name: "a", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: 1, LendingLimit: Cap(2)}}}}}},
		{"Quota[gpu].BorrowingLimit", TreeSpec{Queues: []QueueSpec{{Name: "a", Quota: map[ResourceName]Quota{GPUMilli: {BorrowingLimit: Cap(-1)}}}}}},
		{"Parent", TreeSpec{Accounts: []AccountSpec{{Name: "u", Parent: "nope"}}}},
		{"Name", TreeSpec{Queues: []QueueSpec{{Name: "a"}}, Accounts: []AccountSpec{{Name: "a"}}}},
		{"HalfLife", TreeSpec{HalfLife: -1}},
	} {
		_, err := NewTree(tc.spec)
		var se *SpecError
		require.ErrorAs(t, err, &se, tc.field)
		assert.Equal(t, tc.field, se.Field)
		assert.ErrorIs(t, err, ErrInvalidTree)
	}
}

func TestPendingErrorsAndChargeTwice(t *testing.T) {
	tr, err := NewTree(TreeSpec{Queues: []QueueSpec{{Name: "q", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(4)}}}}})
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{})
	require.NoError(t, err)
	j := oneGPUJob("j", "q", 1, 0, t0)
	require.NoError(t, p.Add(j))
	require.ErrorIs(t, p.Add(oneGPUJob("j", "q", 1, 0, t0)), ErrDuplicateJob)
	require.ErrorIs(t, p.Add(oneGPUJob("k", "nope", 1, 0, t0)), ErrUnknownQueue)
	u := oneGPUJob("u", "q", 1, 0, t0)
	u.Account = "nobody"
	require.ErrorIs(t, p.Add(u), ErrUnknownAccount)
	require.NoError(t, tr.Charge(j, t0))
	require.ErrorIs(t, tr.Charge(j, t0), ErrAlreadyCharged)
	require.ErrorIs(t, tr.Adopt(j, t0), ErrAlreadyCharged)
	require.NoError(t, tr.Release(j, t0))
	require.ErrorIs(t, tr.Release(j, t0), ErrNotCharged)
	big := oneGPUJob("big", "q", 5, 0, t0)
	var qe *QuotaError
	require.ErrorAs(t, tr.Charge(big, t0), &qe)
	assert.Equal(t, GPUMilli, qe.Resource)
	require.NoError(t, tr.Adopt(big, t0), "adopt ignores quota")
	assert.Equal(t, WholeGPUs(5), tr.Usage("q", GPUMilli))
}

// A published snapshot does not change when the owner goes on.
func TestSnapshotIsolation(t *testing.T) {
	tr, err := NewTree(TreeSpec{Queues: []QueueSpec{{Name: "q", Quota: map[ResourceName]Quota{GPUMilli: {Nominal: WholeGPUs(100)}}}}})
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{})
	require.NoError(t, err)
	for i := range 200 {
		require.NoError(t, p.Add(oneGPUJob(string(rune('a'+i%26))+string(rune('0'+i/26)), "q", 1, int32(i%7), t0)))
	}
	s := p.Publish(t0)
	list := func(s *Snapshot) []string {
		var ids []string
		s.Pending("q", func(j *Job) bool { ids = append(ids, j.ID); return true })
		return ids
	}
	before := list(s)
	require.Len(t, before, 200)
	cur := StrictPriority().Order(p, t0)
	for range 50 {
		j, ok := cur.Next()
		require.True(t, ok)
		require.NoError(t, tr.Charge(j, t0))
		p.Remove(j.ID)
	}
	require.NoError(t, p.Add(oneGPUJob("zz", "q", 1, 99, t0)))
	assert.Equal(t, before, list(s), "old snapshot changed")
	q, _ := s.Queue("q")
	assert.Empty(t, q.Usage)
	s2 := p.Publish(t0)
	assert.Len(t, list(s2), 151)
	q2, _ := s2.Queue("q")
	assert.Equal(t, WholeGPUs(50), q2.Usage.Get(GPUMilli))
	assert.Same(t, s2, p.Snapshot())
	assert.False(t, s.Pending("nope", func(*Job) bool { return true }))
}

func TestAgingKeyNoOverflow(t *testing.T) {
	tr, err := NewTree(TreeSpec{Queues: []QueueSpec{{Name: "q"}}})
	require.NoError(t, err)
	p, err := NewPending(tr, PendingConfig{AgingPeriod: 1000 * time.Hour})
	require.NoError(t, err)
	hi := oneGPUJob("hi", "q", 1, 1<<31-1, maxSubmit)
	lo := oneGPUJob("lo", "q", 1, -1<<31, minSubmit)
	require.NoError(t, p.Add(hi))
	require.NoError(t, p.Add(lo))
	var ids []string
	p.Ascend("q", func(j *Job) bool { ids = append(ids, j.ID); return true })
	assert.Equal(t, []string{"hi", "lo"}, ids)
	assert.True(t, errors.Is(p.Add(nil), ErrNilJob))
}
