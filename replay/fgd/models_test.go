package fgd

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/workload"
)

// ConstrainModels picks about a third of the GPU pods, gives each a model
// of a node that can hold it, leaves CPU-only pods and the input alone, and
// draws the same models every time.
func TestConstrainModels(t *testing.T) {
	tr := &Trace{Nodes: []workload.Node{
		{Name: "n0", GPUs: 2, Model: "P100"},
		{Name: "n1", GPUs: 8, Model: "G2"},
		{Name: "n2", GPUs: 4, Model: "T4"},
	}}
	for i := range 3000 {
		j := workload.Job{ID: fmt.Sprintf("p%04d", i), NumGPU: 1 + i%8, GPUMilli: 1000}
		switch i % 5 {
		case 0:
			j.NumGPU, j.GPUMilli = 0, 0 // CPU only
		case 1:
			j.NumGPU, j.GPUMilli = 1, 300 // a share
		}
		tr.Pods = append(tr.Pods, j)
	}
	a, b := ConstrainModels(tr), ConstrainModels(tr)
	gpuOf := map[string]int{"P100": 2, "G2": 8, "T4": 4}
	picked, gpuPods := 0, 0
	for i, p := range a.Pods {
		require.Nil(t, tr.Pods[i].GPUModels, "input unchanged")
		assert.Equal(t, p.GPUModels, b.Pods[i].GPUModels, "same draws")
		if p.NumGPU == 0 {
			assert.Nil(t, p.GPUModels, "CPU-only pods are left alone")
			continue
		}
		gpuPods++
		if p.GPUModels == nil {
			continue
		}
		picked++
		require.Len(t, p.GPUModels, 1)
		assert.GreaterOrEqual(t, gpuOf[p.GPUModels[0]], p.NumGPU, "a node of the model holds the pod")
	}
	assert.InDelta(t, 1.0/3, float64(picked)/float64(gpuPods), 0.03, "%d of %d", picked, gpuPods)
}
