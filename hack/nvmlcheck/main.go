// Command nvmlcheck lists what berth's NVML backend discovers on this
// machine and compares it with `nvidia-smi -q -x`; it exits 1 on a
// mismatch and 3 when there is no NVIDIA driver. It only reads: NVML Init,
// device queries and Shutdown (nvml.Discover), and nvidia-smi's query
// mode. It never changes MIG mode or any GPU setting. Run it through
// hack/nvml-check.sh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/backends/nvml"
)

func main() {
	smi := flag.String("nvidia-smi", "nvidia-smi", "the nvidia-smi program")
	timeout := flag.Duration("timeout", time.Minute, "limit for nvidia-smi")
	flag.Parse()
	os.Exit(run(*smi, *timeout))
}

func run(smi string, timeout time.Duration) int {
	devs, spec, err := nvml.Discover(context.Background(), nv.New(), "")
	if errors.Is(err, nvml.ErrNoLibrary) || errors.Is(err, nvml.ErrInit) {
		fmt.Fprintln(os.Stderr, "nvmlcheck:", err)
		return 3
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmlcheck: discovery:", err)
		return 1
	}
	fmt.Printf("berth's NVML backend sees %d GPUs\n", len(devs))
	for _, d := range devs {
		mig := "MIG off"
		if d.MIG {
			mig = fmt.Sprintf("MIG on %v", d.Layout)
		}
		fmt.Printf("  GPU %d %s %q (%s) %d MiB bus %s NUMA %d NVLinks %d peers %v %s\n",
			d.Index, d.UUID, d.Name, d.Model, d.MemoryMiB, d.PCIBusID, d.NUMA, d.NVLinks, d.NVLinkPeers, mig)
	}
	n := spec.Nodes[0]
	fmt.Printf("topology: node %s, model %s, GPU levels %v, domains %v, MIG %v %q\n", n.Name, n.GPUModel, spec.GPULevels, n.GPUDomains, n.MIG, n.MIGLayout)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "-q", "-x").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvmlcheck: %s -q -x: %v\n", smi, err)
		return 1
	}
	diff, err := nvml.CompareSMI(devs, out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmlcheck:", err)
		return 1
	}
	if len(diff) > 0 {
		fmt.Println("MISMATCH with nvidia-smi -q -x:")
		for _, d := range diff {
			fmt.Println("  " + d)
		}
		return 1
	}
	fmt.Println("matches nvidia-smi -q -x (count, UUID, name, PCI bus id, memory, MIG mode, GPU instances)")
	return 0
}
