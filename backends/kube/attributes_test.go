package kube_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
)

// The start records of a Runner on the Kubernetes backend carry the
// pod's container image and the node's driver version (GPU feature
// discovery labels).
func TestJobAttributesForAudit(t *testing.T) {
	w := newWorld(t)
	w.node("a", 8, withLabels(kube.LabelDriverMajor, "550", kube.LabelDriverMinor, "54", kube.LabelDriverRev, "15"))
	b, err := kube.New(cs, dyn, w.config())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, b.Start(ctx))
	var mu sync.Mutex
	var starts []backends.JobRecord
	rc := b.RunnerConfig(engine.Config{})
	rc.Recorder = backends.RecorderFunc(func(r backends.JobRecord) {
		if r.Kind == backends.RecordStart {
			mu.Lock()
			starts = append(starts, r)
			mu.Unlock()
		}
	})
	runner, err := backends.NewRunner(rc)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; b.Close() })

	w.pod("train", 2, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nvcr.io/nvidia/pytorch:24.01-py3" })
	w.waitBound(30*time.Second, "train")
	eventually(t, 10*time.Second, "a start record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	st := starts[0]
	require.Equal(t, "nvcr.io/nvidia/pytorch:24.01-py3", st.Image)
	require.Equal(t, "550.54.15", st.Driver)
	require.Len(t, st.GPUs, 2)
	require.Equal(t, w.pool+"-a", st.GPUs[0].Node)
	require.Empty(t, st.GPUs[0].UUID, "the API server does not say which devices a pod got")
	require.Equal(t, st.Image, b.JobAttributes(st.Job, nil).Image)
}
