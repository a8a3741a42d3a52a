package nvml_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/backends/nvml/nvmlmock"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func TestInventoryDGXBoxes(t *testing.T) {
	for _, tc := range []struct {
		box, model string
		memMiB     int64
	}{
		{"dgxa100", "A100-40GB", 40960},
		{"dgxh100", "H100-80GB", 81920},
		{"dgxh200", "H200-141GB", 144384},
		{"dgxb200", "B200-180GB", 184320},
	} {
		t.Run(tc.box, func(t *testing.T) {
			box := mustBox(t, tc.box)
			f := open(t, box, nil)
			devs := f.b.Devices()
			require.Len(t, devs, 8)
			for i, d := range devs {
				assert.Equal(t, box.Devices[i].(*server.Device).UUID, d.UUID)
				assert.True(t, strings.HasPrefix(d.UUID, "GPU-"))
				assert.Equal(t, tc.model, d.Model)
				assert.Equal(t, tc.memMiB, d.MemoryMiB)
				assert.Equal(t, box.Devices[i].(*server.Device).PciBusID, d.PCIBusID)
				assert.Equal(t, i/4, d.NUMA)
				assert.Len(t, d.NVLinkPeers, 7, "NVSwitch: every GPU in one island")
				assert.False(t, d.MIG)
				assert.NotZero(t, box.Registered(i)&nv.EventTypeXidCriticalError, "XID events registered")
			}
			sp, err := f.b.Cluster(context.Background())
			require.NoError(t, err)
			require.NoError(t, sp.Validate())
			require.Len(t, sp.Nodes, 1)
			n := sp.Nodes[0]
			assert.Equal(t, "box", n.Name)
			assert.Equal(t, 8, n.GPUs)
			assert.Equal(t, tc.model, n.GPUModel)
			assert.Equal(t, tc.memMiB, n.GPUMemoryMiB)
			// One NVLink domain says nothing: NUMA halves and PCIe pairs do.
			assert.Equal(t, []string{nvml.LevelNUMA, nvml.LevelPCIe}, sp.GPULevels)
			assert.Equal(t, [][]int{{0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 1, 1, 2, 2, 3, 3}}, n.GPUDomains)
		})
	}
}

// Two NVLink islands of four: a 4-GPU member stays in the island with
// room even when the lowest free GPUs straddle both.
func TestInventoryIslandsKeepMembersInside(t *testing.T) {
	box := nvmlmock.Wrap(server.NewServerWithGPUs("550.54.15", "12.550.54.15", 12040, gpus.Multiple(8, gpus.A100_PCIE_40GB)...), nvmlmock.Islands())
	f := open(t, box, nil)
	devs := f.b.Devices()
	assert.Equal(t, []int{1, 2, 3}, devs[0].NVLinkPeers)
	assert.Equal(t, []int{4, 5, 6}, devs[7].NVLinkPeers)
	assert.Equal(t, 3, devs[0].NVLinks)
	sp, err := f.b.Cluster(context.Background())
	require.NoError(t, err)
	// NUMA equals the islands here and is dropped as a repeat.
	assert.Equal(t, []string{nvml.LevelNVLink, nvml.LevelPCIe}, sp.GPULevels)

	c, err := topo.New(sp)
	require.NoError(t, err)
	s := c.NewSnapshot()
	require.NoError(t, s.Allocate([]uint32{0, 1}))
	res, err := gang.Place(s, &gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 4}}})
	require.NoError(t, err)
	require.True(t, res.Found)
	assert.Equal(t, []uint32{4, 5, 6, 7}, res.MemberGPUs(0))
}

// Without GetNumaNodeId the NUMA node comes from the common ancestor.
func TestInventoryNUMAFromTopology(t *testing.T) {
	box := mustBox(t, "dgxh100")
	for _, d := range box.Devices {
		d.(*server.Device).GetNumaNodeIdFunc = func() (int, nv.Return) { return 0, nv.ERROR_NOT_SUPPORTED }
	}
	f := open(t, box, nil)
	assert.Equal(t, -1, f.b.Devices()[0].NUMA)
	sp, _ := f.b.Cluster(context.Background())
	assert.Equal(t, []string{nvml.LevelNUMA, nvml.LevelPCIe}, sp.GPULevels)
	assert.Equal(t, []int{0, 0, 0, 0, 1, 1, 1, 1}, sp.Nodes[0].GPUDomains[0])
}

// createGI makes a GPU instance (and its compute instance) through the
// mock's NVML API, as nvidia-smi mig -cgi would.
func createGI(t *testing.T, d nv.Device, enum int, start uint32) {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(enum)
	require.Equal(t, nv.SUCCESS, ret)
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nv.GpuInstancePlacement{Start: start, Size: info.SliceCount})
	require.Equal(t, nv.SUCCESS, ret)
	ci, ret := gi.GetComputeInstanceProfileInfo(nv.COMPUTE_INSTANCE_PROFILE_1_SLICE, nv.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret == nv.SUCCESS {
		_, _ = gi.CreateComputeInstance(&ci)
	}
}

func TestInventoryMIGLayoutAdopted(t *testing.T) {
	box := mustBox(t, "dgxh100")
	box.SetMIGMode(true)
	for _, d := range box.Devices {
		createGI(t, d, nv.GPU_INSTANCE_PROFILE_3_SLICE, 4)
		createGI(t, d, nv.GPU_INSTANCE_PROFILE_1_SLICE, 0)
	}
	f := open(t, box, nil)
	sp, _ := f.b.Cluster(context.Background())
	n := sp.Nodes[0]
	assert.True(t, n.MIG)
	m, _ := mig.LookupModel("H100-80GB")
	want, err := mig.ParseLayout(m, "1g.10gb@0 3g.40gb@4")
	require.NoError(t, err)
	got, err := mig.ParseLayout(m, n.MIGLayout)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, want, f.b.Devices()[5].Layout)
	// The engine accepts it as the node's layout.
	_, err = topo.New(sp)
	require.NoError(t, err)
}

func TestInventoryRefusesWhatBerthCannotModel(t *testing.T) {
	open := func(box *nvmlmock.Box) error {
		_, err := nvml.Open(context.Background(), nvml.Config{NVML: box, NodeName: "box", RunDir: t.TempDir()})
		return err
	}
	t.Run("layouts differ", func(t *testing.T) {
		box := mustBox(t, "dgxh100")
		box.SetMIGMode(true)
		createGI(t, box.Devices[2], nv.GPU_INSTANCE_PROFILE_7_SLICE, 0)
		err := open(box)
		require.ErrorIs(t, err, nvml.ErrUnsupported)
		assert.Contains(t, err.Error(), "GPU 2 has MIG layout")
	})
	t.Run("placement berth knows is impossible", func(t *testing.T) {
		// The mock lists 3g at {0,4} size 3 and accepts anything; a real
		// H100 places 3g at 0 or 4 over 4 memory slices: start 2 is invalid.
		box := mustBox(t, "dgxh100")
		box.SetMIGMode(true)
		for _, d := range box.Devices {
			createGI(t, d, nv.GPU_INSTANCE_PROFILE_3_SLICE, 2)
		}
		err := open(box)
		require.ErrorIs(t, err, nvml.ErrUnsupported)
		assert.Contains(t, err.Error(), "not valid in berth's H100-80GB geometry")
	})
	t.Run("mixed MIG mode", func(t *testing.T) {
		box := mustBox(t, "dgxa100")
		_, _ = box.Devices[0].SetMigMode(nv.DEVICE_MIG_ENABLE)
		require.ErrorIs(t, open(box), nvml.ErrUnsupported)
	})
}

// When Init fails no other NVML call is made: every other method of the
// bare mock panics when called.
func TestOpenInitFailsWithoutFurtherCalls(t *testing.T) {
	for _, tc := range []struct {
		ret  nv.Return
		want error
	}{
		{nv.ERROR_LIBRARY_NOT_FOUND, nvml.ErrNoLibrary},
		{nv.ERROR_DRIVER_NOT_LOADED, nvml.ErrInit},
		{nv.ERROR_NO_PERMISSION, nvml.ErrInit},
	} {
		calls := 0
		lib := &mock.Interface{InitFunc: func() nv.Return { calls++; return tc.ret }}
		_, err := nvml.Open(context.Background(), nvml.Config{NVML: lib, NodeName: "box", RunDir: t.TempDir()})
		require.ErrorIs(t, err, tc.want)
		assert.Equal(t, 1, calls)
		assert.Len(t, lib.InitCalls(), 1)
	}
}

// The real library, pointed at a path that does not exist, fails to load:
// a clear error, and the process lives on.
func TestOpenMissingLibrary(t *testing.T) {
	lib := nv.New(nv.WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	_, err := nvml.Open(context.Background(), nvml.Config{NVML: lib, NodeName: "box", RunDir: t.TempDir()})
	require.ErrorIs(t, err, nvml.ErrNoLibrary)
	assert.Contains(t, err.Error(), "libnvidia-ml.so")
}

// On a machine without the NVIDIA driver the default library fails the
// same way.
func TestOpenDefaultLibraryWithoutDriver(t *testing.T) {
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1"} {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("%s exists: this machine has the driver (hack/nvml-check.sh checks it)", p)
		}
	}
	_, err := nvml.Open(context.Background(), nvml.Config{NVML: nv.New(), NodeName: "box", RunDir: t.TempDir()})
	require.True(t, errors.Is(err, nvml.ErrNoLibrary), "%v", err)
}

func TestOpenValidatesConfig(t *testing.T) {
	_, err := nvml.Open(context.Background(), nvml.Config{RunDir: t.TempDir()})
	require.ErrorIs(t, err, nvml.ErrInvalid)
	_, err = nvml.Open(context.Background(), nvml.Config{NVML: mustBox(t, "dgxh100"), RunDir: t.TempDir(),
		Queues: &queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "team"}}}})
	require.ErrorIs(t, err, nvml.ErrInvalid)
	assert.Contains(t, err.Error(), "HoldQueue")
	_, err = nvml.Open(context.Background(), nvml.Config{NVML: mustBox(t, "dgxh100")})
	require.ErrorIs(t, err, nvml.ErrInvalid)
}
