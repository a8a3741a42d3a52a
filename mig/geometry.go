package mig

import (
	"fmt"
	"strconv"
	"strings"
)

// maxProfiles bounds the number of GPU-instance profiles of one model
// (7 on the 8-memory-slice GPUs); per-profile arrays use it.
const maxProfiles = 8

type modelData struct {
	name          string
	aliases       []string
	pciDeviceIDs  []uint32
	computeSlices uint8
	memorySlices  uint8
	resetToToggle bool
	minDriver     string
	profiles      []profileData
}

type profileData struct {
	name                 string
	computeSlices        uint8
	memSlices            uint8
	memoryGiB            uint16
	maxCount             uint8
	starts               []uint8
	nvmlProfile          string
	driverProfileID      int // -1: unknown
	mediaExtensions      bool
	placementsConfidence string
}

// Model is a MIG-capable GPU model of the geometry tables. The zero Model
// (NoModel) stands for a GPU that is not MIG-capable; it can still be shared
// by time-slicing or MPS. Models are small values, safe to copy and compare.
type Model uint8

// NoModel is the zero Model: no MIG geometry.
const NoModel Model = 0

// Models returns every model of the tables, in table order.
func Models() []Model {
	out := make([]Model, 0, len(modelTable)-1)
	for i := 1; i < len(modelTable); i++ {
		out = append(out, Model(i))
	}
	return out
}

// LookupModel finds a model by its name ("H100-80GB") or an alias
// ("H100-SXM5-80GB"), ignoring case and surrounding space. An "NVIDIA "
// prefix, as NVML device names carry, is ignored too.
func LookupModel(name string) (Model, error) {
	n := strings.TrimSpace(name)
	if len(n) > 7 && strings.EqualFold(n[:7], "NVIDIA ") {
		n = strings.TrimSpace(n[7:])
	}
	for i := 1; i < len(modelTable); i++ {
		d := &modelTable[i]
		if strings.EqualFold(d.name, n) {
			return Model(i), nil
		}
		for _, a := range d.aliases {
			if strings.EqualFold(a, n) {
				return Model(i), nil
			}
		}
	}
	return NoModel, fmt.Errorf("%w: %q", ErrUnknownModel, name)
}

// ModelByPCIDeviceID finds a model by its PCI device id as NVML reports it
// (device << 16 | vendor, e.g. 0x233010DE for H100 SXM5).
func ModelByPCIDeviceID(id uint32) (Model, error) {
	for i := 1; i < len(modelTable); i++ {
		for _, x := range modelTable[i].pciDeviceIDs {
			if x == id {
				return Model(i), nil
			}
		}
	}
	return NoModel, fmt.Errorf("%w: PCI device id %#x", ErrUnknownModel, id)
}

// Valid reports whether m is a model of the tables (not NoModel).
func (m Model) Valid() bool { return m > 0 && int(m) < len(modelTable) }

func (m Model) data() *modelData {
	if int(m) >= len(modelTable) {
		return &modelTable[0]
	}
	return &modelTable[m]
}

// String returns the model's name, "none" for NoModel.
func (m Model) String() string {
	if m == NoModel {
		return "none"
	}
	if !m.Valid() {
		return fmt.Sprintf("Model(%d)", uint8(m))
	}
	return m.data().name
}

// Aliases returns the other names of the model (a fresh slice).
func (m Model) Aliases() []string { return append([]string(nil), m.data().aliases...) }

// PCIDeviceIDs returns the model's PCI device ids (a fresh slice).
func (m Model) PCIDeviceIDs() []uint32 { return append([]uint32(nil), m.data().pciDeviceIDs...) }

// ComputeSlices is the number of compute (SM) slices: 7, or 4 on A30.
func (m Model) ComputeSlices() int { return int(m.data().computeSlices) }

// MemorySlices is the number of memory slices: 8, or 4 on A30. A Layout's
// bitset has this many bits.
func (m Model) MemorySlices() int { return int(m.data().memorySlices) }

// ResetToToggle reports whether enabling or disabling MIG mode needs a GPU
// reset (A100, A30). Hopper and later switch without one.
func (m Model) ResetToToggle() bool { return m.data().resetToToggle }

// MinDriver is the minimum driver for MIG on this model, as text.
func (m Model) MinDriver() string { return m.data().minDriver }

// MemoryGiB is the nominal memory of the whole GPU: that of its largest
// profile (e.g. 80 for H100-80GB's 7g.80gb).
func (m Model) MemoryGiB() int {
	best := 0
	for _, p := range m.data().profiles {
		best = max(best, int(p.memoryGiB))
	}
	return best
}

// Profiles returns the model's GPU-instance profiles in table order
// (smallest first). The index of a profile in this slice is its Index.
func (m Model) Profiles() []Profile {
	ps := m.data().profiles
	out := make([]Profile, len(ps))
	for i := range ps {
		out[i] = Profile{model: m, idx: uint8(i)}
	}
	return out
}

// NumProfiles is len(m.Profiles()) without the allocation.
func (m Model) NumProfiles() int { return len(m.data().profiles) }

// Profile finds a profile by its full name ("1g.10gb", "1g.10gb+me") or by
// its compute part alone ("1g", "1g+me"), which names the smallest profile
// with that many compute slices (on H100, "1g" is 1g.10gb, not 1g.20gb).
func (m Model) Profile(name string) (Profile, error) {
	if !m.Valid() {
		return Profile{}, fmt.Errorf("%w: %v", ErrUnknownModel, m)
	}
	n := strings.ToLower(strings.TrimSpace(name))
	ps := m.data().profiles
	for i := range ps {
		if ps[i].name == n {
			return Profile{model: m, idx: uint8(i)}, nil
		}
	}
	// Short form: "<c>g" or "<c>g+me".
	me := strings.HasSuffix(n, "+me")
	short := strings.TrimSuffix(n, "+me")
	c, err := strconv.Atoi(strings.TrimSuffix(short, "g"))
	if err != nil || !strings.HasSuffix(short, "g") {
		return Profile{}, fmt.Errorf("%w: %q on %v", ErrUnknownProfile, name, m)
	}
	best := -1
	for i := range ps {
		p := &ps[i]
		if p.mediaExtensions != me || int(p.computeSlices) != c {
			continue
		}
		if best < 0 || smaller(p, &ps[best]) {
			best = i
		}
	}
	if best < 0 {
		return Profile{}, fmt.Errorf("%w: %q on %v", ErrUnknownProfile, name, m)
	}
	return Profile{model: m, idx: uint8(best)}, nil
}

// smaller orders profiles by size: memory slices, then compute slices, then
// plain before +me. Table order breaks the remaining ties.
func smaller(a, b *profileData) bool {
	if a.memSlices != b.memSlices {
		return a.memSlices < b.memSlices
	}
	if a.computeSlices != b.computeSlices {
		return a.computeSlices < b.computeSlices
	}
	return !a.mediaExtensions && b.mediaExtensions
}

// Profile is one GPU-instance profile of one model, such as H100-80GB's
// 3g.40gb. The zero Profile is invalid. Profiles are small values, safe to
// copy and compare.
type Profile struct {
	model Model
	idx   uint8
}

// Valid reports whether p names a profile of a known model.
func (p Profile) Valid() bool {
	return p.model.Valid() && int(p.idx) < len(p.model.data().profiles)
}

func (p Profile) data() *profileData {
	if !p.Valid() {
		return &profileData{name: "invalid", driverProfileID: -1}
	}
	return &p.model.data().profiles[p.idx]
}

// Model is the GPU model the profile belongs to.
func (p Profile) Model() Model { return p.model }

// Index is the profile's position in Model().Profiles().
func (p Profile) Index() int { return int(p.idx) }

// Name is the profile name, e.g. "1g.10gb+me".
func (p Profile) Name() string { return p.data().name }

// String is Name.
func (p Profile) String() string { return p.Name() }

// ComputeSlices is the number of compute (SM) slices ("g" in the name).
func (p Profile) ComputeSlices() int { return int(p.data().computeSlices) }

// MemorySlices is the number of memory slices an instance occupies.
func (p Profile) MemorySlices() int { return int(p.data().memSlices) }

// MemoryGiB is the nominal memory from the name; NVML reports somewhat less.
func (p Profile) MemoryGiB() int { return int(p.data().memoryGiB) }

// MaxCount is the most instances of this profile one GPU can hold.
func (p Profile) MaxCount() int { return int(p.data().maxCount) }

// Starts returns the memory slices at which an instance may start (a fresh
// slice, ascending).
func (p Profile) Starts() []int {
	s := p.data().starts
	out := make([]int, len(s))
	for i, x := range s {
		out[i] = int(x)
	}
	return out
}

// MediaExtensions reports a +me profile (media engines; one per GPU).
func (p Profile) MediaExtensions() bool { return p.data().mediaExtensions }

// NVMLProfile is the GPU_INSTANCE_PROFILE_* enum name passed to
// GetGpuInstanceProfileInfo.
func (p Profile) NVMLProfile() string { return p.data().nvmlProfile }

// DriverProfileID is the id nvidia-smi prints; ok is false where it is not
// known (B200). It differs between GPU families: look it up at run time.
func (p Profile) DriverProfileID() (id int, ok bool) {
	d := p.data().driverProfileID
	return d, d >= 0
}

// PlacementsConfidence is "high" or "medium" (H200 and B200 placements are
// inferred from geometry, see the data README).
func (p Profile) PlacementsConfidence() string { return p.data().placementsConfidence }

// fitsMilli reports whether the profile holds milli thousandths of the GPU's
// compute: computeSlices/modelComputeSlices >= milli/1000.
func (p Profile) fitsMilli(milli int) bool {
	return p.ComputeSlices()*1000 >= milli*p.model.ComputeSlices()
}
