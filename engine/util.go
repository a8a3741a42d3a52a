package engine

import (
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/berthsched/berth/topo"
)

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func cloneLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// carryLayouts gives the MIG GPUs of a rebuilt cluster c (snapshot s,
// nothing booked yet) the layouts their GPUs had in the old cluster
// (instances created by placements and reconfigurations stay), by node
// name and GPU offset.
func carryLayouts(old *topo.Cluster, os *topo.Snapshot, c *topo.Cluster, s *topo.Snapshot) error {
	if old == nil || os == nil || os.Pool() == nil || s.Pool() == nil {
		return nil
	}
	for n := range c.NumNodes() {
		id := topo.NodeID(n)
		if cfg, ok := c.NodeGPUConfig(id); !ok || !cfg.MIG {
			continue
		}
		oid, ok := old.NodeByName(c.NodeName(id))
		if !ok {
			continue
		}
		if cfg, ok := old.NodeGPUConfig(oid); !ok || !cfg.MIG {
			continue
		}
		first, k := c.NodeGPUs(id)
		ofirst, _ := old.NodeGPUs(oid)
		for i := range uint32(k) {
			if l := os.Pool().Layout(ofirst + i); l != s.Pool().Layout(first+i) {
				if err := s.SetMIGLayout(first+i, l); err != nil {
					return fmt.Errorf("carrying the MIG layout of %s GPU %d: %w", c.NodeName(id), i, err)
				}
			}
		}
	}
	return nil
}

// bitmapOf returns the GPUs of a placement as a bitmap.
func bitmapOf(gpus []uint32) *roaring.Bitmap { return roaring.BitmapOf(gpus...) }
