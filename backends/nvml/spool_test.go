package nvml_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

func TestParseSpoolJob(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j, cmd, err := nvml.ParseSpoolJob([]byte(`{"id":"train-1","queue":"team","members":2,"gpus":4,
		"command":["python","train.py"],"env":["A=1"],"runtimeLimit":"2h","runtimeEstimate":"90m",
		"preemptible":true,"gracePeriod":"30s","class":"inference","priority":5}`), now)
	require.NoError(t, err)
	assert.Equal(t, "train-1", j.ID)
	assert.Equal(t, 2, j.Request.Groups[0].Members)
	assert.Equal(t, 4, j.Request.Groups[0].GPUsPerMember)
	assert.Equal(t, 2*time.Hour, j.RuntimeLimit)
	assert.Equal(t, 90*time.Minute, j.RuntimeEstimate)
	assert.Equal(t, 30*time.Second, j.GracePeriod)
	assert.Equal(t, queue.ClassInference, j.Class)
	assert.Equal(t, int32(5), j.Priority)
	assert.True(t, j.Preemptible)
	assert.Equal(t, now, j.Submit)
	assert.Equal(t, []string{"python", "train.py"}, cmd.Args)
	assert.Equal(t, []string{"A=1"}, cmd.Env)

	j, _, err = nvml.ParseSpoolJob([]byte(`{"id":"inf","queue":"team","migProfile":"1g.10gb","command":["serve"]}`), now)
	require.NoError(t, err)
	assert.Equal(t, "1g.10gb", j.Request.Groups[0].MIGProfile)

	for name, bad := range map[string]string{
		"not json":      `{`,
		"unknown field": `{"id":"x","queue":"q","gpus":1,"command":["a"],"gpu":1}`,
		"no id":         `{"queue":"q","gpus":1,"command":["a"]}`,
		"bad id":        `{"id":"a/b","queue":"q","gpus":1,"command":["a"]}`,
		"no command":    `{"id":"x","queue":"q","gpus":1}`,
		"no gpus":       `{"id":"x","queue":"q","command":["a"]}`,
		"both":          `{"id":"x","queue":"q","gpus":1,"migProfile":"1g","command":["a"]}`,
		"bad duration":  `{"id":"x","queue":"q","gpus":1,"command":["a"],"runtimeLimit":"soon"}`,
		"negative":      `{"id":"x","queue":"q","gpus":1,"command":["a"],"runtimeLimit":"-1h"}`,
		"bad class":     `{"id":"x","queue":"q","gpus":1,"command":["a"],"class":"vip"}`,
		"no queue":      `{"id":"x","gpus":1,"command":["a"]}`,
		"too many gpus": `{"id":"x","queue":"q","gpus":65,"command":["a"]}`,
	} {
		_, _, err := nvml.ParseSpoolJob([]byte(bad), now)
		assert.ErrorIs(t, err, nvml.ErrInvalid, name)
	}
}

func FuzzParseSpoolJob(f *testing.F) {
	f.Add([]byte(`{"id":"x","queue":"q","gpus":1,"command":["a"]}`))
	f.Add([]byte(`{"id":"inf","queue":"team","migProfile":"1g.10gb","command":["serve"],"runtimeLimit":"1h"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, cmd, err := nvml.ParseSpoolJob(data, time.Time{})
		if err != nil {
			return
		}
		require.NoError(t, j.Validate())
		require.NotEmpty(t, cmd.Args)
	})
}

func TestScanSpool(t *testing.T) {
	f := open(t, mustBox(t, "dgxh100"), nil)
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("a.json", `{"id":"a","queue":"team","gpus":1,"command":["true"]}`)
	write("b.json", `{"id":"b","queue":"team","gpus":1}`)
	write("c.json", `{"id":"a","queue":"team","gpus":1,"command":["true"]}`)
	write("notes.txt", `ignored`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.b.WatchSpool(ctx, dir, 50*time.Millisecond) }()
	evs := f.eventsUntil(t, engine.EventJobSubmitted, "a")
	assert.Equal(t, []string{"job-submitted:a"}, kinds(evs))
	waitFor(t, "c.json rejected (moved after its .error is written)", func() bool {
		_, err := os.Stat(filepath.Join(dir, "rejected", "c.json"))
		return err == nil
	})
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.FileExists(t, filepath.Join(dir, "accepted", "a.json"))
	assert.FileExists(t, filepath.Join(dir, "rejected", "b.json"))
	assert.Contains(t, readFile(t, filepath.Join(dir, "rejected", "b.json.error")), "no command")
	assert.FileExists(t, filepath.Join(dir, "rejected", "c.json"))
	assert.Contains(t, readFile(t, filepath.Join(dir, "rejected", "c.json.error")), "duplicate job ID")
	assert.FileExists(t, filepath.Join(dir, "notes.txt"))
}
