package nvml

import (
	"fmt"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/mig"
)

// giProfiles maps the GPU_INSTANCE_PROFILE_* names of berth's geometry to
// NVML's enum values (the argument of GetGpuInstanceProfileInfo). The id
// NVML returns in GpuInstanceProfileInfo.Id differs between GPU families
// and is looked up at run time, never hard-coded.
var giProfiles = map[string]int{
	"GPU_INSTANCE_PROFILE_1_SLICE":      nv.GPU_INSTANCE_PROFILE_1_SLICE,
	"GPU_INSTANCE_PROFILE_1_SLICE_REV1": nv.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
	"GPU_INSTANCE_PROFILE_1_SLICE_REV2": nv.GPU_INSTANCE_PROFILE_1_SLICE_REV2,
	"GPU_INSTANCE_PROFILE_2_SLICE":      nv.GPU_INSTANCE_PROFILE_2_SLICE,
	"GPU_INSTANCE_PROFILE_2_SLICE_REV1": nv.GPU_INSTANCE_PROFILE_2_SLICE_REV1,
	"GPU_INSTANCE_PROFILE_3_SLICE":      nv.GPU_INSTANCE_PROFILE_3_SLICE,
	"GPU_INSTANCE_PROFILE_4_SLICE":      nv.GPU_INSTANCE_PROFILE_4_SLICE,
	"GPU_INSTANCE_PROFILE_6_SLICE":      nv.GPU_INSTANCE_PROFILE_6_SLICE,
	"GPU_INSTANCE_PROFILE_7_SLICE":      nv.GPU_INSTANCE_PROFILE_7_SLICE,
	"GPU_INSTANCE_PROFILE_8_SLICE":      nv.GPU_INSTANCE_PROFILE_8_SLICE,
}

// ciProfiles maps a GPU instance's compute slices to the compute-instance
// profile that takes them all (one CI per GI, as berth's mig package
// assumes).
var ciProfiles = map[int]int{
	1: nv.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nv.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nv.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nv.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nv.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nv.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nv.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// profileInfo returns NVML's description of berth profile p on d; ok is
// false when the GPU does not offer the profile.
func profileInfo(d nv.Device, p mig.Profile) (nv.GpuInstanceProfileInfo, bool, error) {
	enum, ok := giProfiles[p.NVMLProfile()]
	if !ok {
		return nv.GpuInstanceProfileInfo{}, false, fmt.Errorf("%w: profile %s has no NVML enum %q", ErrUnsupported, p, p.NVMLProfile())
	}
	info, ret := d.GetGpuInstanceProfileInfo(enum)
	switch ret {
	case nv.SUCCESS:
		return info, true, nil
	case nv.ERROR_NOT_SUPPORTED, nv.ERROR_INVALID_ARGUMENT:
		return info, false, nil
	}
	return info, false, callErr("GetGpuInstanceProfileInfo("+p.NVMLProfile()+")", ret)
}

// readLayout reads the GPU instances of d into berth's geometry. An
// instance at a placement berth does not list (the mocks create any), or
// one that overlaps another, is ErrUnsupported: berth would plan on a
// layout that is not there.
func readLayout(d nv.Device, m mig.Model) (mig.Layout, error) {
	l := mig.EmptyLayout(m)
	for _, p := range m.Profiles() {
		info, ok, err := profileInfo(d, p)
		if err != nil {
			return l, err
		}
		if !ok {
			continue
		}
		gis, ret := d.GetGpuInstances(&info)
		if ret != nv.SUCCESS {
			return l, callErr("GetGpuInstances("+p.Name()+")", ret)
		}
		for _, gi := range gis {
			gin, ret := gi.GetInfo()
			if ret != nv.SUCCESS {
				return l, callErr("GpuInstance.GetInfo", ret)
			}
			in := mig.Instance{Profile: p, Start: uint8(gin.Placement.Start)}
			if gin.Placement.Start > 7 {
				return l, fmt.Errorf("%w: %s at memory slice %d", ErrUnsupported, p, gin.Placement.Start)
			}
			nl, err := l.Place(in)
			if err != nil {
				return l, fmt.Errorf("%w: GPU instance %s (NVML id %d) is not valid in berth's %s geometry next to %v: %w", ErrUnsupported, in, gin.Id, m, l, err)
			}
			l = nl
		}
	}
	return l, nil
}

// findGI returns the GPU instance of d that is in.
func findGI(d nv.Device, in mig.Instance) (nv.GpuInstance, error) {
	info, ok, err := profileInfo(d, in.Profile)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: GPU does not offer %s", ErrUnsupported, in.Profile)
	}
	gis, ret := d.GetGpuInstances(&info)
	if ret != nv.SUCCESS {
		return nil, callErr("GetGpuInstances", ret)
	}
	for _, gi := range gis {
		if gin, ret := gi.GetInfo(); ret == nv.SUCCESS && gin.Placement.Start == uint32(in.Start) {
			return gi, nil
		}
	}
	return nil, fmt.Errorf("%w: no GPU instance %s", ErrNVML, in)
}

// createInstance creates GPU instance in at its placement and one compute
// instance spanning it. When the compute instance cannot be made, the GPU
// instance is destroyed again.
func createInstance(d nv.Device, in mig.Instance) error {
	info, ok, err := profileInfo(d, in.Profile)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: GPU does not offer %s", ErrUnsupported, in.Profile)
	}
	pl := nv.GpuInstancePlacement{Start: uint32(in.Start), Size: uint32(in.Profile.MemorySlices())}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &pl)
	if ret != nv.SUCCESS {
		return callErr(fmt.Sprintf("CreateGpuInstanceWithPlacement(%s)", in), ret)
	}
	if err := createCI(gi, in.Profile); err != nil {
		_ = gi.Destroy()
		return err
	}
	return nil
}

func createCI(gi nv.GpuInstance, p mig.Profile) error {
	cp, ok := ciProfiles[p.ComputeSlices()]
	if !ok {
		return fmt.Errorf("%w: no compute-instance profile of %d slices", ErrUnsupported, p.ComputeSlices())
	}
	ci, ret := gi.GetComputeInstanceProfileInfo(cp, nv.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nv.SUCCESS {
		return callErr("GetComputeInstanceProfileInfo", ret)
	}
	if _, ret := gi.CreateComputeInstance(&ci); ret != nv.SUCCESS {
		return callErr("CreateComputeInstance", ret)
	}
	return nil
}

// destroyInstance destroys the compute instances of GPU instance in, then
// the GPU instance.
func destroyInstance(d nv.Device, in mig.Instance) error {
	gi, err := findGI(d, in)
	if err != nil {
		return err
	}
	for _, cp := range ciProfiles {
		ci, ret := gi.GetComputeInstanceProfileInfo(cp, nv.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nv.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&ci)
		if ret != nv.SUCCESS {
			continue
		}
		for _, c := range cis {
			if ret := c.Destroy(); ret != nv.SUCCESS {
				return callErr(fmt.Sprintf("ComputeInstance.Destroy(%s)", in), ret)
			}
		}
	}
	if ret := gi.Destroy(); ret != nv.SUCCESS {
		return callErr(fmt.Sprintf("GpuInstance.Destroy(%s)", in), ret)
	}
	return nil
}

// migUUID returns the MIG device UUID of instance in (what
// CUDA_VISIBLE_DEVICES takes), creating its compute instance when the GPU
// instance has none.
func migUUID(d nv.Device, in mig.Instance) (string, error) {
	gi, err := findGI(d, in)
	if err != nil {
		return "", err
	}
	gin, ret := gi.GetInfo()
	if ret != nv.SUCCESS {
		return "", callErr("GpuInstance.GetInfo", ret)
	}
	for attempt := range 2 {
		n, ret := d.GetMaxMigDeviceCount()
		if ret != nv.SUCCESS {
			return "", callErr("GetMaxMigDeviceCount", ret)
		}
		for k := range n {
			md, ret := d.GetMigDeviceHandleByIndex(k)
			if ret != nv.SUCCESS {
				continue // NOT_FOUND: an unused index
			}
			if id, ret := md.GetGpuInstanceId(); ret == nv.SUCCESS && uint32(id) == gin.Id {
				u, ret := md.GetUUID()
				if ret != nv.SUCCESS {
					return "", callErr("MIG device GetUUID", ret)
				}
				return u, nil
			}
		}
		if attempt == 0 {
			if err := createCI(gi, in.Profile); err != nil {
				return "", err
			}
		}
	}
	return "", fmt.Errorf("%w: no MIG device for %s", ErrNVML, in)
}
