package accounting

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/workload"
)

// TestReplayTotals: a replay's records, written through a Writer, charge
// exactly the GPU usage the replay measured itself (from the simulator's
// outcomes), in total and summed over every --by key; every job has a
// submission, a start and an end.
func TestReplayTotals(t *testing.T) {
	c := workload.DefaultSynthetic()
	c.Jobs, c.ClusterGPUs = 150, 32
	jobs, err := workload.Synthetic(c)
	require.NoError(t, err)
	for i := range jobs {
		jobs[i].User = []string{"ann", "ben", "cid"}[i%3]
	}
	engines(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w, err := db.NewWriter(WriterConfig{})
		require.NoError(t, err)
		var kinds [backends.RecordEnd + 1]int
		rec := backends.RecorderFunc(func(r backends.JobRecord) {
			kinds[r.Kind]++
			w.Record(r)
		})
		res, err := replay.Run(ctx, replay.Config{Workload: "syn", Jobs: jobs, Cluster: replay.Cluster{Nodes: 4, GPUsPerNode: 8},
			Policy: "easy", EstimateFactor: 1, Recorder: rec})
		require.NoError(t, err)
		require.NoError(t, w.Close())
		st := w.Stats()
		require.Zero(t, st.Dropped+st.Failed)
		n := res.Result.Jobs
		require.Equal(t, n, res.Result.Finished)
		require.Equal(t, n, kinds[backends.RecordSubmit])
		require.Equal(t, n, kinds[backends.RecordStart])
		require.Equal(t, n, kinds[backends.RecordEnd])
		require.Positive(t, res.GPUMicroseconds)

		total, err := db.TotalGPUMicroseconds(ctx)
		require.NoError(t, err)
		require.Equal(t, res.GPUMicroseconds, total, "accounting charges exactly the replay's GPU usage")
		for _, by := range UsageKeys() {
			rows, err := db.Usage(ctx, UsageQuery{By: by})
			require.NoError(t, err)
			var sum int64
			for _, r := range rows {
				sum += r.GPUMicroseconds
			}
			require.Equal(t, res.GPUMicroseconds, sum, "by %s", by)
		}
		rows, err := db.Usage(ctx, UsageQuery{By: "queue"})
		require.NoError(t, err)
		require.Len(t, rows, 3, "one queue per user")
	})
}
