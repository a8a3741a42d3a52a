package nvml

import (
	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

var _ backends.AttributeReporter = (*Backend)(nil)

// driverVersion reads the driver version, "" when NVML does not give it.
func driverVersion(lib nv.Interface) string {
	v, ret := lib.SystemGetDriverVersion()
	if ret != nv.SUCCESS {
		return ""
	}
	return v
}

// DriverVersion is the GPU driver version NVML reported at Open; empty
// when it did not.
func (b *Backend) DriverVersion() string { return b.driver }

// JobAttributes implements backends.AttributeReporter for the audit
// trail: the UUID of every GPU of members (of the MIG device, for a MIG
// member the job runs on; empty for one it does not) and the driver
// version. It answers from what Open and the binds recorded: no NVML call.
func (b *Backend) JobAttributes(job string, members []engine.Member) backends.JobAttributes {
	a := backends.JobAttributes{Driver: b.driver}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.runs[job]
	for _, m := range members {
		if m.Fractional {
			u := ""
			if r != nil {
				for _, p := range r.procs {
					if sameMember(p.m, m) {
						u = p.visible
						break
					}
				}
			}
			a.UUIDs = append(a.UUIDs, u)
			continue
		}
		for _, g := range m.GPUs {
			u := ""
			if g >= 0 && g < len(b.devs) {
				u = b.devs[g].UUID
			}
			a.UUIDs = append(a.UUIDs, u)
		}
	}
	return a
}
