package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/berthsched/berth/replay/metrics"
)

func ExampleCompute() {
	const s = time.Second
	outcomes := []metrics.Outcome{
		{ID: "a", Submit: 0, Start: 0, End: 100 * s, GPUMilli: 2000, Started: true, Finished: true},
		{ID: "b", Submit: 10 * s, Start: 100 * s, End: 300 * s, GPUMilli: 4000, Started: true, Finished: true},
	}
	res, err := metrics.Compute(metrics.Input{Policy: "fifo", ClusterGPUs: 4, Jobs: outcomes})
	if err != nil {
		panic(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(res); err != nil {
		panic(err)
	}
	// Output:
	// {
	//  "policy": "fifo",
	//  "utilization": 0.8333333333333334,
	//  "avg_wait_s": 45,
	//  "p95_wait_s": 90,
	//  "avg_jct_s": 195,
	//  "avg_bsld": 1.225,
	//  "makespan_s": 300,
	//  "preemptions": 0,
	//  "jobs": 2,
	//  "finished": 2,
	//  "frag_free_gpus": 0,
	//  "largest_placeable_gang": 0
	// }
}

func ExampleSeries() {
	const s = time.Second
	outcomes := []metrics.Outcome{
		{Submit: 0, Start: 0, End: 100 * s, GPUMilli: 2000, Started: true, Finished: true},
		{Submit: 10 * s, Start: 100 * s, End: 200 * s, GPUMilli: 4000, Started: true, Finished: true},
	}
	samples, err := metrics.Series(metrics.Input{ClusterGPUs: 4, Jobs: outcomes}, 50*s)
	if err != nil {
		panic(err)
	}
	for _, p := range samples {
		fmt.Printf("%v util %.2f queued %.1f\n", p.At, p.Utilization, p.Queued)
	}
	// Output:
	// 0s util 0.50 queued 0.8
	// 50s util 0.50 queued 1.0
	// 1m40s util 1.00 queued 0.0
	// 2m30s util 1.00 queued 0.0
}
