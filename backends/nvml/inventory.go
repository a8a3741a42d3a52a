package nvml

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// GPU levels the backend may put under the node (topo.Spec.GPULevels).
const (
	LevelNUMA   = "numa"   // GPUs of one NUMA node
	LevelNVLink = "nvlink" // an NVLink island: GPUs joined by NVLink, directly or through NVSwitches
	LevelPCIe   = "pcie"   // GPUs behind one PCIe switch (common ancestor SINGLE or MULTIPLE)
)

// Device is what the backend discovered about one GPU.
type Device struct {
	Index     int
	UUID      string
	Name      string // NVML's name, e.g. "NVIDIA H100 80GB HBM3"
	Model     string // berth's MIG model ("H100-80GB") where known, else Name
	MemoryMiB int64
	PCIBusID  string // e.g. "00000000:18:00.0"
	// NUMA is the NUMA node, -1 when NVML does not say.
	NUMA int
	// NVLinkPeers are the other GPUs (indices) in this GPU's NVLink
	// island; NVLinks counts its active links.
	NVLinkPeers []int
	NVLinks     int
	// MIG reports MIG mode (current); Layout the GPU instances present, in
	// berth's geometry, when in MIG mode.
	MIG    bool
	Layout mig.Layout

	dev nv.Device
}

// discover reads every GPU of lib (initialised) and builds the node spec.
func discover(lib nv.Interface, cfg *Config) ([]Device, topo.Spec, mig.Model, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nv.SUCCESS {
		return nil, topo.Spec{}, 0, callErr("DeviceGetCount", ret)
	}
	if n == 0 || n > topo.MaxGPUsPerNode {
		return nil, topo.Spec{}, 0, fmt.Errorf("%w: %d GPUs (want 1..%d)", ErrUnsupported, n, topo.MaxGPUsPerNode)
	}
	devs := make([]Device, n)
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nv.SUCCESS {
			return nil, topo.Spec{}, 0, callErr(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret)
		}
		if err := readDevice(i, d, &devs[i]); err != nil {
			return nil, topo.Spec{}, 0, err
		}
	}
	linkTopology(devs)
	model := mig.NoModel
	for i := range devs {
		if devs[i].Model != devs[0].Model {
			return nil, topo.Spec{}, 0, fmt.Errorf("%w: GPU %d is %s, GPU 0 is %s (one model per box)", ErrUnsupported, i, devs[i].Model, devs[0].Model)
		}
		if devs[i].MIG != devs[0].MIG {
			return nil, topo.Spec{}, 0, fmt.Errorf("%w: GPU %d has MIG mode %v, GPU 0 %v (berth's node model puts all GPUs of a node in MIG mode or none)", ErrUnsupported, i, devs[i].MIG, devs[0].MIG)
		}
	}
	if devs[0].MIG {
		m, err := mig.LookupModel(devs[0].Model)
		if err != nil {
			return nil, topo.Spec{}, 0, fmt.Errorf("%w: MIG mode on %s, which berth's MIG geometry does not know: %w", ErrUnsupported, devs[0].Name, err)
		}
		model = m
		for i := range devs {
			l, err := readLayout(devs[i].dev, m)
			if err != nil {
				return nil, topo.Spec{}, 0, fmt.Errorf("GPU %d: %w", i, err)
			}
			devs[i].Layout = l
		}
		for i := range devs {
			if devs[i].Layout != devs[0].Layout {
				return nil, topo.Spec{}, 0, fmt.Errorf("%w: GPU %d has MIG layout %q, GPU 0 %q (berth adopts one layout per node: make them equal, e.g. with nvidia-smi mig, before starting)",
					ErrUnsupported, i, devs[i].Layout, devs[0].Layout)
			}
		}
	}
	ns := topo.NodeSpec{
		Name: cfg.NodeName, GPUs: n, GPUModel: devs[0].Model, GPUMemoryMiB: devs[0].MemoryMiB,
		CPUMilli: cfg.CPUMilli, MemoryMiB: cfg.MemoryMiB, Labels: cfg.Labels, MIG: devs[0].MIG,
	}
	for i := range devs {
		ns.GPUMemoryMiB = min(ns.GPUMemoryMiB, devs[i].MemoryMiB)
	}
	if devs[0].MIG && !devs[0].Layout.IsEmpty() {
		ns.MIGLayout = layoutSpec(devs[0].Layout)
	}
	spec := topo.Spec{Nodes: []topo.NodeSpec{ns}}
	spec.GPULevels, spec.Nodes[0].GPUDomains = gpuLevels(devs)
	if err := spec.Validate(); err != nil {
		return nil, topo.Spec{}, 0, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return devs, spec, model, nil
}

func readDevice(i int, d nv.Device, out *Device) error {
	*out = Device{Index: i, NUMA: -1, dev: d}
	var ret nv.Return
	if out.UUID, ret = d.GetUUID(); ret != nv.SUCCESS {
		return callErr(fmt.Sprintf("GPU %d GetUUID", i), ret)
	}
	if out.Name, ret = d.GetName(); ret != nv.SUCCESS {
		return callErr(fmt.Sprintf("GPU %d GetName", i), ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nv.SUCCESS {
		return callErr(fmt.Sprintf("GPU %d GetMemoryInfo", i), ret)
	}
	out.MemoryMiB = int64(mem.Total >> 20)
	pci, ret := d.GetPciInfo()
	if ret != nv.SUCCESS {
		return callErr(fmt.Sprintf("GPU %d GetPciInfo", i), ret)
	}
	out.PCIBusID = cString(pci.BusId[:])
	if numa, ret := d.GetNumaNodeId(); ret == nv.SUCCESS {
		out.NUMA = numa
	}
	out.Model = modelName(pci.PciDeviceId, out.Name)
	switch cur, _, ret := d.GetMigMode(); ret {
	case nv.SUCCESS:
		out.MIG = cur == nv.DEVICE_MIG_ENABLE
	case nv.ERROR_NOT_SUPPORTED:
	default:
		return callErr(fmt.Sprintf("GPU %d GetMigMode", i), ret)
	}
	return nil
}

func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

var memRE = regexp.MustCompile(`(?i)\b(\d+)\s*GB\b`)

// modelName names the GPU as berth's MIG geometry does where it can: by
// PCI device id, by name, by family and memory in the name ("NVIDIA H200
// 141GB HBM3e" -> "H200-141GB"); else NVML's name.
func modelName(pciID uint32, name string) string {
	if m, err := mig.ModelByPCIDeviceID(pciID); err == nil {
		return m.String()
	}
	if m, err := mig.LookupModel(name); err == nil {
		return m.String()
	}
	if mm := memRE.FindStringSubmatch(name); mm != nil {
		for _, m := range mig.Models() {
			fam, _, _ := strings.Cut(m.String(), "-")
			if strings.Contains(strings.ToUpper(name), fam) && strings.HasSuffix(m.String(), "-"+mm[1]+"GB") {
				return m.String()
			}
		}
	}
	return name
}

// linkTopology fills NVLinkPeers from the NVLink remote ends: GPUs linked
// to each other, or to the same NVSwitch, are one island.
func linkTopology(devs []Device) {
	parent := make([]int, len(devs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) { parent[find(a)] = find(b) }
	byBus := map[string]int{}
	for i := range devs {
		byBus[strings.ToLower(devs[i].PCIBusID)] = i
	}
	remote := map[string]int{} // non-GPU remote end (NVSwitch) -> first GPU on it
	for i := range devs {
		for link := range nv.NVLINK_MAX_LINKS {
			st, ret := devs[i].dev.GetNvLinkState(link)
			if ret != nv.SUCCESS {
				break // no more links (INVALID_ARGUMENT) or no NVLink (NOT_SUPPORTED)
			}
			if st != nv.FEATURE_ENABLED {
				continue
			}
			pci, ret := devs[i].dev.GetNvLinkRemotePciInfo(link)
			if ret != nv.SUCCESS {
				continue
			}
			devs[i].NVLinks++
			bus := strings.ToLower(cString(pci.BusId[:]))
			if j, ok := byBus[bus]; ok {
				union(i, j)
			} else if j, ok := remote[bus]; ok {
				union(i, j)
			} else {
				remote[bus] = i
			}
		}
	}
	for i := range devs {
		for j := range devs {
			if j != i && find(i) == find(j) {
				devs[i].NVLinkPeers = append(devs[i].NVLinkPeers, j)
			}
		}
	}
}

// gpuLevels turns NUMA nodes, NVLink islands and PCIe switches into GPU
// levels. A level that does not split the GPUs (one domain, or one GPU per
// domain) or repeats a finer-ranked one says nothing and is left out. The
// levels are ordered coarsest first (fewest domains); on a tie NVLink
// comes last, so that placement, which tries the finest level first,
// prefers an NVLink island.
func gpuLevels(devs []Device) ([]string, [][]int) {
	n := len(devs)
	numa := make([]int, n)
	nvl := make([]int, n)
	pcie := make([]int, n)
	for i := range devs {
		numa[i] = devs[i].NUMA
		nvl[i] = i
		if len(devs[i].NVLinkPeers) > 0 {
			nvl[i] = min(i, slices.Min(devs[i].NVLinkPeers))
		}
		pcie[i] = i
		for j := range i {
			if lvl, ret := devs[i].dev.GetTopologyCommonAncestor(devs[j].dev); ret == nv.SUCCESS && lvl <= nv.TOPOLOGY_MULTIPLE {
				pcie[i] = pcie[j]
				break
			}
		}
	}
	if slices.Contains(numa, -1) {
		// NVML does not say: GPUs meeting below the CPU interconnect share a node.
		for i := range devs {
			numa[i] = i
			for j := range i {
				if lvl, ret := devs[i].dev.GetTopologyCommonAncestor(devs[j].dev); ret == nv.SUCCESS && lvl <= nv.TOPOLOGY_NODE {
					numa[i] = numa[j]
					break
				}
			}
		}
	}
	type level struct {
		name string
		dom  []int
		k    int
		rank int
	}
	var kept []level
	for rank, c := range []struct {
		name string
		dom  []int
	}{{LevelNVLink, nvl}, {LevelPCIe, pcie}, {LevelNUMA, numa}} {
		dom, k := renumber(c.dom)
		if k <= 1 || k == n || slices.ContainsFunc(kept, func(l level) bool { return slices.Equal(l.dom, dom) }) {
			continue
		}
		kept = append(kept, level{c.name, dom, k, rank})
	}
	slices.SortStableFunc(kept, func(a, b level) int {
		if c := cmp.Compare(a.k, b.k); c != 0 {
			return c
		}
		return cmp.Compare(b.rank, a.rank)
	})
	var names []string
	var doms [][]int
	for _, l := range kept {
		names = append(names, l.name)
		doms = append(doms, l.dom)
	}
	return names, doms
}

// renumber maps group labels to 0..k-1 in order of first appearance.
func renumber(g []int) ([]int, int) {
	ids := map[int]int{}
	out := make([]int, len(g))
	for i, x := range g {
		id, ok := ids[x]
		if !ok {
			id = len(ids)
			ids[x] = id
		}
		out[i] = id
	}
	return out, len(ids)
}

// layoutSpec writes l in mig.ParseLayout syntax ("3g.40gb@0 1g.10gb@6"),
// as topo.NodeSpec.MIGLayout takes it.
func layoutSpec(l mig.Layout) string {
	var parts []string
	for in := range l.All() {
		parts = append(parts, in.String())
	}
	return strings.Join(parts, " ")
}

// Discover reads the box once and returns what Open would discover: the
// devices and the one-node topology. It only reads (Init, device queries,
// Shutdown): no event registration, no MIG or mode change. When Init
// fails no other NVML call is made (ErrNoLibrary, ErrInit).
func Discover(ctx context.Context, lib nv.Interface, nodeName string) ([]Device, topo.Spec, error) {
	if err := ctx.Err(); err != nil {
		return nil, topo.Spec{}, err
	}
	if lib == nil {
		return nil, topo.Spec{}, fmt.Errorf("%w: nil NVML", ErrInvalid)
	}
	switch ret := lib.Init(); ret {
	case nv.SUCCESS:
	case nv.ERROR_LIBRARY_NOT_FOUND:
		return nil, topo.Spec{}, ErrNoLibrary
	default:
		return nil, topo.Spec{}, fmt.Errorf("%w: %v", ErrInit, ret)
	}
	defer lib.Shutdown()
	if nodeName == "" {
		nodeName = "node"
	}
	devs, spec, _, err := discover(lib, &Config{NodeName: nodeName})
	return devs, spec, err
}
