package kube

import (
	"slices"
	"strings"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

// Node labels of NVIDIA's GPU feature discovery that carry the driver
// version: the full version where the labeller writes it, else its parts.
const (
	LabelDriverFull  = "nvidia.com/cuda.driver-version.full"
	LabelDriverMajor = "nvidia.com/cuda.driver.major"
	LabelDriverMinor = "nvidia.com/cuda.driver.minor"
	LabelDriverRev   = "nvidia.com/cuda.driver.rev"
)

var _ backends.AttributeReporter = (*Backend)(nil)

// JobAttributes implements backends.AttributeReporter for the audit
// trail: the container images of the job's pods and the driver version of
// its members' nodes (from GPU feature discovery's labels), each list
// comma-joined without repeats. It reads the informers' caches only. The
// API server never says which GPU devices a pod got, so there are no
// UUIDs.
func (b *Backend) JobAttributes(job string, members []engine.Member) backends.JobAttributes {
	b.mu.Lock()
	var refs []podRef
	if j := b.jobs[job]; j != nil {
		refs = slices.Clone(j.pods)
	}
	b.mu.Unlock()
	var images, drivers []string
	add := func(list *[]string, s string) {
		if s != "" && !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	for _, pr := range refs {
		p, err := b.podList.Pods(pr.ns).Get(pr.name)
		if err != nil {
			continue
		}
		for i := range p.Spec.Containers {
			add(&images, p.Spec.Containers[i].Image)
		}
	}
	for _, m := range members {
		n, err := b.nodeLst.Get(m.Node)
		if err != nil {
			continue
		}
		add(&drivers, driverOf(n.Labels))
	}
	return backends.JobAttributes{Image: strings.Join(images, ","), Driver: strings.Join(drivers, ",")}
}

// driverOf reads the driver version from a node's labels; "" if none.
func driverOf(l map[string]string) string {
	if v := l[LabelDriverFull]; v != "" {
		return v
	}
	if l[LabelDriverMajor] == "" {
		return ""
	}
	v := l[LabelDriverMajor]
	for _, k := range []string{LabelDriverMinor, LabelDriverRev} {
		if p := l[k]; p != "" {
			v += "." + p
		}
	}
	return v
}
