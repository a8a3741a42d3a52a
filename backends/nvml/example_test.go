package nvml_test

import (
	"context"
	"fmt"
	"os"

	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/backends/nvml/nvmlmock"
)

// Open on NVIDIA's mock DGX H100: what the engine will see of the box.
func ExampleOpen() {
	box, _ := nvmlmock.New("dgxh100")
	dir, _ := os.MkdirTemp("", "nvml-example-")
	defer os.RemoveAll(dir)
	b, err := nvml.Open(context.Background(), nvml.Config{NVML: box, NodeName: "dgx-1", RunDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	sp, _ := b.Cluster(context.Background())
	n := sp.Nodes[0]
	fmt.Println(n.Name, n.GPUs, "x", n.GPUModel, n.GPUMemoryMiB, "MiB")
	fmt.Println(sp.GPULevels, n.GPUDomains)
	d := b.Devices()[5]
	fmt.Println(d.PCIBusID, "NUMA", d.NUMA, "NVLink peers", len(d.NVLinkPeers))
	// Output:
	// dgx-1 8 x H100-80GB 81920 MiB
	// [numa pcie] [[0 0 0 0 1 1 1 1] [0 0 1 1 2 2 3 3]]
	// 00000000:AB:00.0 NUMA 1 NVLink peers 7
}
