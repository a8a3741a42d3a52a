package nvml

import (
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// smiLog is the part of `nvidia-smi -q -x` that CompareSMI reads.
type smiLog struct {
	XMLName      xml.Name `xml:"nvidia_smi_log"`
	AttachedGPUs int      `xml:"attached_gpus"`
	GPUs         []smiGPU `xml:"gpu"`
}

type smiGPU struct {
	ID          string `xml:"id,attr"`
	ProductName string `xml:"product_name"`
	UUID        string `xml:"uuid"`
	MinorNumber string `xml:"minor_number"`
	PCI         struct {
		BusID string `xml:"pci_bus_id"`
	} `xml:"pci"`
	MIGMode struct {
		Current string `xml:"current_mig"`
	} `xml:"mig_mode"`
	MIGDevices struct {
		Devices []struct {
			GPUInstanceID string `xml:"gpu_instance_id"`
		} `xml:"mig_device"`
	} `xml:"mig_devices"`
	FBMemory struct {
		Total string `xml:"total"`
	} `xml:"fb_memory_usage"`
}

// CompareSMI checks devices (as Discover returns them) against the XML
// of `nvidia-smi -q -x` and returns every difference, one line each: GPU
// count, and per UUID the name, PCI bus id, memory (within 2 %: the two
// may count reserved memory differently), MIG mode and the number of GPU
// instances. Nothing is a match; an error is XML it cannot read.
func CompareSMI(devs []Device, smiXML []byte) ([]string, error) {
	var log smiLog
	if err := xml.Unmarshal(smiXML, &log); err != nil {
		return nil, fmt.Errorf("%w: nvidia-smi XML: %v", ErrInvalid, err)
	}
	var diff []string
	if len(log.GPUs) != len(devs) {
		diff = append(diff, fmt.Sprintf("GPU count: backend %d, nvidia-smi %d", len(devs), len(log.GPUs)))
	}
	byUUID := map[string]*smiGPU{}
	for i := range log.GPUs {
		byUUID[strings.TrimSpace(log.GPUs[i].UUID)] = &log.GPUs[i]
	}
	for _, d := range devs {
		g := byUUID[d.UUID]
		if g == nil {
			diff = append(diff, fmt.Sprintf("GPU %d %s: not in nvidia-smi", d.Index, d.UUID))
			continue
		}
		if name := strings.TrimSpace(g.ProductName); name != d.Name {
			diff = append(diff, fmt.Sprintf("GPU %d %s: name %q, nvidia-smi %q", d.Index, d.UUID, d.Name, name))
		}
		if bus := strings.TrimSpace(g.PCI.BusID); !strings.EqualFold(normBus(bus), normBus(d.PCIBusID)) {
			diff = append(diff, fmt.Sprintf("GPU %d %s: PCI bus id %s, nvidia-smi %s", d.Index, d.UUID, d.PCIBusID, bus))
		}
		if mib, ok := parseMiB(g.FBMemory.Total); !ok {
			diff = append(diff, fmt.Sprintf("GPU %d %s: nvidia-smi memory %q unreadable", d.Index, d.UUID, g.FBMemory.Total))
		} else if math.Abs(float64(mib-d.MemoryMiB)) > 0.02*float64(max(mib, d.MemoryMiB)) {
			diff = append(diff, fmt.Sprintf("GPU %d %s: memory %d MiB, nvidia-smi %d MiB", d.Index, d.UUID, d.MemoryMiB, mib))
		}
		smiMIG := strings.EqualFold(strings.TrimSpace(g.MIGMode.Current), "Enabled")
		if smiMIG != d.MIG {
			diff = append(diff, fmt.Sprintf("GPU %d %s: MIG mode %v, nvidia-smi %q", d.Index, d.UUID, d.MIG, g.MIGMode.Current))
		}
		if d.MIG {
			gis := map[string]bool{}
			for _, m := range g.MIGDevices.Devices {
				gis[strings.TrimSpace(m.GPUInstanceID)] = true
			}
			if len(gis) != d.Layout.Len() {
				diff = append(diff, fmt.Sprintf("GPU %d %s: %d GPU instances (%v), nvidia-smi %d", d.Index, d.UUID, d.Layout.Len(), d.Layout, len(gis)))
			}
		}
	}
	return diff, nil
}

// normBus drops the domain's leading zeros: NVML gives 8 hex digits
// ("00000000:18:00.0"), some tools 4.
func normBus(s string) string {
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	return strings.TrimLeft(dom, "0") + ":" + rest
}

func parseMiB(s string) (int64, bool) {
	f := strings.Fields(s)
	if len(f) != 2 || f[1] != "MiB" {
		return 0, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	return n, err == nil
}
