package fgd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/berthsched/berth/replay/fgd"
	"github.com/berthsched/berth/workload"
)

// Run on a toy trace (16 nodes of 8 GPUs, 120 pods of five shapes) with
// two seeds. The real experiment loads the openb trace with
// fgd.LoadDefaultTrace and uses seeds 42..51.
func ExampleRun() {
	tr := &fgd.Trace{}
	for i := range 16 {
		tr.Nodes = append(tr.Nodes, workload.Node{
			Name: fmt.Sprintf("node-%02d", i), CPUMilli: 96000, MemoryMiB: 393216, GPUs: 8, Model: "G2",
		})
	}
	shapes := []workload.Job{
		{NumGPU: 1, GPUMilli: 1000, GPUs: 1, CPUMilli: 12000, MemoryMiB: 24576},
		{NumGPU: 1, GPUMilli: 810, CPUMilli: 3152, MemoryMiB: 8192},
		{NumGPU: 1, GPUMilli: 470, CPUMilli: 8000, MemoryMiB: 12288},
		{NumGPU: 1, GPUMilli: 320, CPUMilli: 4000, MemoryMiB: 8192},
		{CPUMilli: 16000, MemoryMiB: 32768},
	}
	for i := range 120 {
		p := shapes[i%len(shapes)]
		p.ID = fmt.Sprintf("pod-%03d", i)
		tr.Pods = append(tr.Pods, p)
	}
	rows, err := fgd.Run(context.Background(), fgd.Config{
		Trace: tr, Policies: []string{"bestfit", "fgd", "berth"}, Seeds: []int64{42, 43},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	enc := json.NewEncoder(os.Stdout)
	for _, r := range rows {
		_ = enc.Encode(r)
	}
	// Output:
	// {"policy":"bestfit","alloc_pct_at_100":69.41,"alloc_pct_at_130":69.41,"alloc_pct_std_at_130":1.94,"model_violations":0}
	// {"policy":"fgd","alloc_pct_at_100":71.86,"alloc_pct_at_130":71.86,"alloc_pct_std_at_130":2.38,"model_violations":0}
	// {"policy":"berth","alloc_pct_at_100":73.15,"alloc_pct_at_130":73.15,"alloc_pct_std_at_130":2.23,"model_violations":0}
}
