package score_test

import (
	"fmt"

	"github.com/berthsched/berth/gang/score"
	"github.com/berthsched/berth/topo"
)

func exampleCluster() *topo.Cluster {
	c, err := topo.New(topo.Spec{ShareFreeGPUs: true, Nodes: []topo.NodeSpec{
		{Name: "a", GPUs: 2, GPUModel: "T4", CPUMilli: 32000, MemoryMiB: 65536},
		{Name: "b", GPUs: 4, GPUModel: "V100", CPUMilli: 64000, MemoryMiB: 131072},
	}})
	if err != nil {
		panic(err)
	}
	return c
}

// A share goes onto a GPU that already holds one (best fit); a whole GPU
// then takes the lowest-index completely free GPU.
func Example() {
	st, _ := score.NewState(exampleCluster(), score.Options{})
	sc := &score.Scheduler{State: st, Policy: score.BestFit{}}
	for _, r := range []score.Request{
		{GPUs: 1, Milli: 500, CPUMilli: 4000},
		{GPUs: 1, Milli: 300, CPUMilli: 4000},
		{GPUs: 1, Milli: 1000, CPUMilli: 8000},
	} {
		d, _, err := sc.Schedule(r)
		if err != nil {
			panic(err)
		}
		fmt.Println(st.Cluster().NodeName(d.Placement.Node), d.Placement.GPUs)
	}
	fmt.Println("allocated milli:", st.Allocated(), "check:", st.Check())
	// Output:
	// a [0]
	// a [0]
	// a [1]
	// allocated milli: 1800 check: <nil>
}

// FGD scores by how much a placement grows the node's fragmentation
// against a target workload.
func ExampleFGD() {
	workload := []score.Request{
		{GPUs: 1, Milli: 500, CPUMilli: 4000}, {GPUs: 1, Milli: 500, CPUMilli: 4000},
		{GPUs: 1, Milli: 500, CPUMilli: 4000}, {GPUs: 1, Milli: 1000, CPUMilli: 8000},
	}
	target := score.NewTarget(workload, 1)
	fmt.Println("frag of [500 1000]:", target.Frag([]int16{500, 1000}, 32000, "T4"))

	st, _ := score.NewState(exampleCluster(), score.Options{})
	sc := &score.Scheduler{State: st, Policy: score.NewFGD(target)}
	_, _, _ = sc.Schedule(score.Request{GPUs: 1, Milli: 500, CPUMilli: 4000})
	d, _, _ := sc.Schedule(score.Request{GPUs: 1, Milli: 500, CPUMilli: 4000})
	fmt.Println("second half GPU:", st.Cluster().NodeName(d.Placement.Node), d.Placement.GPUs)
	// Output:
	// frag of [500 1000]: 125
	// second half GPU: a [0]
}
