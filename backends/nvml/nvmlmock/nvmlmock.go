// Package nvmlmock builds NVIDIA's go-nvml mock servers (pkg/nvml/mock:
// dgxa100, dgxh100, dgxh200, dgxb200) into whole boxes for berth's NVML
// backend: the mocks answer device count, names, memory, MIG profiles and
// instances, but not PCI bus ids, NUMA nodes, topology, NVLink, MIG device
// handles or events. This package fills those in through the mocks'
// function fields, with DGX-like values, deterministic UUIDs, and an event
// set into which tests and the example inject XID and ECC events.
//
// The MIG geometry of the mocks is kept as NVIDIA ships it (its H100 /
// H200 / B200 placements are not the real ones): the backend checks every
// step against berth's mig package, so the mocks' leniency does not leak.
package nvmlmock

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// ErrUnknownBox is returned by New for a box name it does not know.
var ErrUnknownBox = errors.New("nvmlmock: unknown box")

// Boxes are the names New accepts.
func Boxes() []string { return []string{"dgxa100", "dgxb200", "dgxh100", "dgxh200"} }

// Topology says how a box's GPUs are connected. Every slice has one entry
// per GPU.
type Topology struct {
	// NUMA is each GPU's NUMA node.
	NUMA []int
	// PCIeSwitch groups GPUs behind one PCIe switch (common ancestor
	// TOPOLOGY_MULTIPLE); GPUs on different switches of one NUMA node meet
	// at TOPOLOGY_NODE, across NUMA nodes at TOPOLOGY_SYSTEM.
	PCIeSwitch []int
	// NVLink lists, per GPU, the remote end of each active link: a GPU
	// index (>= 0), or an NVSwitch as -1 - switch number.
	NVLink [][]int
}

// DGX is the topology of an 8-GPU DGX / HGX board: two NUMA nodes of four
// GPUs, a PCIe switch per pair, and every GPU linked to each of nvswitches
// NVSwitches (one NVLink domain).
func DGX(nvswitches int) Topology {
	t := Topology{}
	for g := range 8 {
		t.NUMA = append(t.NUMA, g/4)
		t.PCIeSwitch = append(t.PCIeSwitch, g/2)
		var links []int
		for s := range nvswitches {
			links = append(links, -1-s)
		}
		t.NVLink = append(t.NVLink, links)
	}
	return t
}

// Islands is the topology of an 8-GPU PCIe box with NVLink bridges: GPUs
// 0-3 and 4-7 are two islands (each GPU linked directly to the three others
// of its island), one NUMA node per island, a PCIe switch per pair.
func Islands() Topology {
	t := Topology{}
	for g := range 8 {
		t.NUMA = append(t.NUMA, g/4)
		t.PCIeSwitch = append(t.PCIeSwitch, g/2)
		var links []int
		for p := (g / 4) * 4; p < (g/4)*4+4; p++ {
			if p != g {
				links = append(links, p)
			}
		}
		t.NVLink = append(t.NVLink, links)
	}
	return t
}

// Box is a mock server with its topology and event plumbing filled in.
type Box struct {
	*server.Server
	Topology Topology

	mu     sync.Mutex
	events chan nvml.EventData
	reg    map[int]uint64 // GPU -> event types registered
}

// New returns the named box ("dgxh100", ...) with DGX topology. Every
// call gives fresh devices with the same UUIDs and bus ids.
func New(name string) (*Box, error) {
	var s *server.Server
	nsw := 4
	switch name {
	case "dgxa100":
		s, nsw = dgxa100.New(), 6
	case "dgxh100":
		s = dgxh100.New()
	case "dgxh200":
		s = dgxh200.New()
	case "dgxb200":
		s, nsw = dgxb200.New(), 2
	default:
		return nil, fmt.Errorf("%w: %q (have %v)", ErrUnknownBox, name, Boxes())
	}
	return Wrap(s, DGX(nsw)), nil
}

// Wrap fills in s (every device a *server.Device) with topology t and
// deterministic identities. t must have an entry per device.
func Wrap(s *server.Server, t Topology) *Box {
	b := &Box{Server: s, Topology: t, events: make(chan nvml.EventData, 64), reg: map[int]uint64{}}
	for i, d := range s.Devices {
		b.fillDevice(i, d.(*server.Device))
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return b.eventSet(), nvml.SUCCESS }
	return b
}

// busID is a DGX-like PCI bus id: the pairs behind one switch are
// adjacent buses.
func busID(i int) string {
	buses := []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}
	bus := 0x100 + i
	if i < len(buses) {
		bus = buses[i]
	}
	return fmt.Sprintf("00000000:%02X:00.0", bus)
}

func uuidOf(parts ...any) string {
	h := sha256.Sum256(fmt.Append(nil, parts...))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func cString32(s string) (out [32]int8) {
	for i := 0; i < len(s) && i < 31; i++ {
		out[i] = int8(s[i])
	}
	return out
}

func (b *Box) fillDevice(i int, d *server.Device) {
	d.UUID = "GPU-" + uuidOf("gpu", i, d.Config.Name)
	d.PciBusID = busID(i)
	cfg := d.Config
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		return nvml.PciInfo{PciDeviceId: cfg.PciDeviceId, BusId: cString32(busID(i)), Bus: uint32(i)}, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if i >= len(b.Topology.NUMA) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return b.Topology.NUMA[i], nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j := b.index(other)
		t := b.Topology
		switch {
		case j < 0 || i >= len(t.NUMA) || j >= len(t.NUMA):
			return 0, nvml.ERROR_INVALID_ARGUMENT
		case i == j:
			return nvml.TOPOLOGY_INTERNAL, nvml.SUCCESS
		case t.PCIeSwitch[i] == t.PCIeSwitch[j]:
			return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
		case t.NUMA[i] == t.NUMA[j]:
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if link < 0 || link >= nvml.NVLINK_MAX_LINKS {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if i >= len(b.Topology.NVLink) || link >= len(b.Topology.NVLink[i]) {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		if i >= len(b.Topology.NVLink) || link < 0 || link >= len(b.Topology.NVLink[i]) {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		r := b.Topology.NVLink[i][link]
		if r >= 0 {
			return nvml.PciInfo{BusId: cString32(busID(r))}, nvml.SUCCESS
		}
		return nvml.PciInfo{BusId: cString32(fmt.Sprintf("00000000:%02X:00.0", 0xF0+(-1-r)))}, nvml.SUCCESS
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(k int) (nvml.Device, nvml.Return) {
		ms := b.migDevices(i, d)
		if k < 0 || k >= len(ms) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return ms[k], nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.reg[i] |= types
		return nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
}

// index finds a device of the box; -1 when it is not one.
func (b *Box) index(d nvml.Device) int {
	for i, x := range b.Devices {
		if x == d {
			return i
		}
	}
	return -1
}

// migDevices lists the MIG devices (one per compute instance) of GPU i,
// ordered by GPU instance id then compute instance id.
func (b *Box) migDevices(i int, d *server.Device) []nvml.Device {
	d.RLock()
	gis := make([]*server.GpuInstance, 0, len(d.GpuInstances))
	for gi := range d.GpuInstances {
		gis = append(gis, gi)
	}
	d.RUnlock()
	slices.SortFunc(gis, func(a, c *server.GpuInstance) int { return int(a.Info.Id) - int(c.Info.Id) })
	var out []nvml.Device
	for _, gi := range gis {
		gi.RLock()
		cis := make([]*server.ComputeInstance, 0, len(gi.ComputeInstances))
		for ci := range gi.ComputeInstances {
			cis = append(cis, ci)
		}
		gi.RUnlock()
		slices.SortFunc(cis, func(a, c *server.ComputeInstance) int { return int(a.Info.Id) - int(c.Info.Id) })
		for _, ci := range cis {
			giID, ciID := int(gi.Info.Id), int(ci.Info.Id)
			uuid := "MIG-" + uuidOf("mig", d.UUID, giID, ciID)
			out = append(out, &mock.Device{
				GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return giID, nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
				IsMigDeviceHandleFunc:    func() (bool, nvml.Return) { return true, nvml.SUCCESS },
			})
		}
	}
	return out
}

// eventSet is an event set that waits on the box's injected events.
func (b *Box) eventSet() nvml.EventSet {
	return &mock.EventSet{
		WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
			t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
			defer t.Stop()
			select {
			case e := <-b.events:
				return e, nvml.SUCCESS
			case <-t.C:
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
}

// Registered returns the event types registered for GPU i.
func (b *Box) Registered(i int) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reg[i]
}

// InjectXID delivers an XID event of GPU i to the event set, as the driver
// does when it logs "NVRM: Xid". It blocks when 64 events are queued.
func (b *Box) InjectXID(i int, xid uint64) {
	b.events <- nvml.EventData{Device: b.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
}

// InjectECC delivers an ECC error event of GPU i: double-bit
// (uncorrectable) or single-bit.
func (b *Box) InjectECC(i int, double bool) {
	typ := uint64(nvml.EventTypeSingleBitEccError)
	if double {
		typ = nvml.EventTypeDoubleBitEccError
	}
	b.events <- nvml.EventData{Device: b.Devices[i], EventType: typ}
}

// SetMIGMode switches MIG mode of every GPU (no reset needed on a mock).
func (b *Box) SetMIGMode(on bool) {
	mode := nvml.DEVICE_MIG_DISABLE
	if on {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	for _, d := range b.Devices {
		_, _ = d.SetMigMode(mode)
	}
}
