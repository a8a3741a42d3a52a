package backends_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestFileStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := backends.FileStore{Path: filepath.Join(dir, "state.json")}
	st, err := fs.Load(ctx)
	require.NoError(t, err)
	assert.Nil(t, st, "no file: no state")

	e, err := engine.New(engine.Config{Cluster: topo.Uniform(nil, nil, 1, 8, "H100"), Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}, Start: t0})
	require.NoError(t, err)
	require.NoError(t, e.EnableJournal())
	require.NoError(t, e.Step(engine.Submitted(t0, job("a", 1, 4))))
	saved, err := e.Save()
	require.NoError(t, err)
	require.NoError(t, fs.Save(ctx, saved))
	require.NoError(t, fs.Save(ctx, saved), "overwrites")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary file left behind")

	back, err := fs.Load(ctx)
	require.NoError(t, err)
	e2, err := engine.Restore(engine.Config{Queues: queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}}}, back)
	require.NoError(t, err)
	pending, _ := e2.JobIDs()
	assert.Equal(t, []string{"a"}, pending)

	require.NoError(t, os.WriteFile(fs.Path, []byte("{not json"), 0o600))
	_, err = fs.Load(ctx)
	assert.Error(t, err, "a corrupt file is an error, not an empty state")

	bad := backends.FileStore{Path: filepath.Join(dir, "missing-dir", "state.json")}
	assert.Error(t, bad.Save(ctx, saved))
}
