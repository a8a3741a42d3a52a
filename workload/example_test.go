package workload_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/berthsched/berth/workload"
)

func ExampleReadITP() {
	csv := `job_id,submission_time,duration,num_gpu
a,5810,288476,16
b,5813,7949,1
`
	tr, err := workload.ReadITP(strings.NewReader(csv), "itp.csv")
	if err != nil {
		panic(err)
	}
	for _, j := range tr.Jobs {
		fmt.Println(j.ID, j.Submit, j.Runtime, j.GPUs)
	}
	// Output:
	// a 1h36m50s 80h7m56s 16
	// b 1h36m53s 2h12m29s 1
}

func ExampleParseError() {
	csv := "job_id,submission_time,duration,num_gpu\na,5810,288476,sixteen\n"
	_, err := workload.ReadITP(strings.NewReader(csv), "itp.csv")
	var pe *workload.ParseError
	if errors.As(err, &pe) {
		fmt.Println(pe.File, pe.Line, pe.Field, errors.Is(err, workload.ErrSyntax))
	}
	fmt.Println(err)
	// Output:
	// itp.csv 2 num_gpu true
	// itp.csv:2: field num_gpu: workload: syntax error: not an integer: "sixteen"
}

func ExampleReadOpenbPods() {
	csv := `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
whole,12000,16384,8,1000,,LS,Running,0,100,0
share,6000,12288,1,460,V100M16|V100M32,BE,Running,10,100,10
`
	tr, err := workload.ReadOpenbPods(strings.NewReader(csv), "pods.csv")
	if err != nil {
		panic(err)
	}
	for _, p := range tr.Jobs {
		fmt.Println(p.ID, p.GPUs, p.NumGPU, p.GPUMilli, p.Shared(), p.DemandMilli(), p.GPUModels)
	}
	// Output:
	// whole 8 8 1000 false 8000 []
	// share 0 1 460 true 460 [V100M16 V100M32]
}

func ExampleSynthetic() {
	cfg := workload.DefaultSynthetic()
	cfg.Jobs = 5
	cfg.EstimateFactor = 2 // estimates up to twice the runtime
	jobs, err := workload.Synthetic(cfg)
	if err != nil {
		panic(err)
	}
	for _, j := range jobs {
		fmt.Println(j.ID, j.Queue, j.GPUs, j.Submit, j.Runtime, j.Estimate)
	}
	// Output:
	// j0 q0 1 3m28s 57m26s 1h20m40s
	// j1 q0 1 7m35s 2h12m4s 4h17m22s
	// j2 q0 8 7m42s 6h36m1s 9h33m54s
	// j3 q5 8 9m33s 3h38m20s 6h55m54s
	// j4 q2 1 11m7s 20h17m33s 35h28m27s
}

func ExampleTracesDir() {
	dir, err := workload.TracesDir() // $BERTH_TRACES, else ../shared/traces found upwards
	if err != nil {
		fmt.Println(errors.Is(err, workload.ErrNoTraces))
		return
	}
	tr, err := workload.OpenSWF(filepath.Join(dir, workload.SWFNASA))
	if err != nil {
		panic(err)
	}
	procs, _ := tr.HeaderInt("MaxProcs")
	fmt.Println(len(tr.Jobs), len(tr.Dropped), procs)
}
