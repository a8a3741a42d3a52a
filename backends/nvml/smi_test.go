package nvml_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/nvml"
)

// smiXML writes the nvidia-smi -q -x a box with devs would print.
func smiXML(devs []nvml.Device, edit func(i int, name, bus, mem, mig *string)) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<driver_version>550.54.15</driver_version>\n<attached_gpus>%d</attached_gpus>\n", len(devs))
	for i, d := range devs {
		name, bus, mem, mig := d.Name, d.PCIBusID, fmt.Sprintf("%d MiB", d.MemoryMiB-400), "Disabled"
		if d.MIG {
			mig = "Enabled"
		}
		if edit != nil {
			edit(i, &name, &bus, &mem, &mig)
		}
		fmt.Fprintf(&b, "<gpu id=\"%s\">\n<product_name>%s</product_name>\n<mig_mode><current_mig>%s</current_mig><pending_mig>%s</pending_mig></mig_mode>\n<mig_devices>None</mig_devices>\n<uuid>%s</uuid>\n<pci><pci_bus>%02X</pci_bus><pci_bus_id>%s</pci_bus_id></pci>\n<fb_memory_usage><total>%s</total><reserved>400 MiB</reserved><used>1 MiB</used></fb_memory_usage>\n</gpu>\n",
			bus, name, mig, mig, d.UUID, i, bus, mem)
	}
	b.WriteString("</nvidia_smi_log>\n")
	return []byte(b.String())
}

func TestCompareSMI(t *testing.T) {
	box := mustBox(t, "dgxh100")
	devs, spec, err := nvml.Discover(context.Background(), box, "box")
	require.NoError(t, err)
	require.Len(t, devs, 8)
	assert.Equal(t, 8, spec.Nodes[0].GPUs)

	diff, err := nvml.CompareSMI(devs, smiXML(devs, nil))
	require.NoError(t, err)
	assert.Empty(t, diff)

	diff, err = nvml.CompareSMI(devs, smiXML(devs, func(i int, name, bus, mem, mig *string) {
		if i == 3 {
			*name, *bus, *mem, *mig = "NVIDIA H200", "00000000:99:00.0", "40000 MiB", "Enabled"
		}
	}))
	require.NoError(t, err)
	assert.Len(t, diff, 4)
	for _, d := range diff {
		assert.Contains(t, d, "GPU 3 ")
	}
	diff, err = nvml.CompareSMI(devs[:7], smiXML(devs, nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"GPU count: backend 7, nvidia-smi 8"}, diff)

	_, err = nvml.CompareSMI(devs, []byte("<nope"))
	require.ErrorIs(t, err, nvml.ErrInvalid)
}

// Discover (what hack/nvml-check.sh runs on real GPUs) only reads: every
// call that changes a GPU or subscribes to it fails the test.
func TestDiscoverIsReadOnly(t *testing.T) {
	box := mustBox(t, "dgxh100")
	box.SetMIGMode(true)
	fail := func(what string) { t.Errorf("Discover called %s", what) }
	box.EventSetCreateFunc = func() (nv.EventSet, nv.Return) { fail("EventSetCreate"); return nil, nv.ERROR_UNKNOWN }
	for _, d := range box.Devices {
		sd := d.(*server.Device)
		sd.SetMigModeFunc = func(int) (nv.Return, nv.Return) { fail("SetMigMode"); return nv.ERROR_UNKNOWN, nv.ERROR_UNKNOWN }
		sd.CreateGpuInstanceFunc = func(*nv.GpuInstanceProfileInfo) (nv.GpuInstance, nv.Return) {
			fail("CreateGpuInstance")
			return nil, nv.ERROR_UNKNOWN
		}
		sd.CreateGpuInstanceWithPlacementFunc = func(*nv.GpuInstanceProfileInfo, *nv.GpuInstancePlacement) (nv.GpuInstance, nv.Return) {
			fail("CreateGpuInstanceWithPlacement")
			return nil, nv.ERROR_UNKNOWN
		}
		sd.RegisterEventsFunc = func(uint64, nv.EventSet) nv.Return { fail("RegisterEvents"); return nv.ERROR_UNKNOWN }
	}
	shutdowns := 0
	box.ShutdownFunc = func() nv.Return { shutdowns++; return nv.SUCCESS }
	devs, _, err := nvml.Discover(context.Background(), box, "")
	require.NoError(t, err)
	assert.True(t, devs[0].MIG)
	assert.Equal(t, 1, shutdowns)
}
