package fgd

import (
	"cmp"
	"slices"

	"github.com/berthsched/berth/workload"
)

// ModelSeed seeds ConstrainModels' draws.
const ModelSeed = 19

// ConstrainModels returns a copy of t in which a third of the GPU pods ask
// for one GPU model, as openb's gpu_spec column allows (the default pod list
// leaves it empty). The rule, for reproducible runs:
//
//   - pods in name order; pods that ask for no GPU are left alone;
//   - one SplitMix64 stream seeded with ModelSeed; per GPU pod, Draw(3) == 0
//     picks the pod (about a third), otherwise the pod is left alone;
//   - a picked pod asking for k GPUs (k = 1 for a share) gets the model of
//     one GPU drawn uniformly (Draw over their count) among the GPUs of the
//     nodes that have at least k GPUs, nodes in name order: models are asked
//     for in proportion to the GPUs that could serve the pod.
//
// Pods already carrying models keep them. t is not changed.
func ConstrainModels(t *Trace) *Trace {
	nodes := slices.Clone(t.Nodes)
	slices.SortStableFunc(nodes, func(a, b workload.Node) int { return cmp.Compare(a.Name, b.Name) })
	pods := slices.Clone(t.Pods)
	slices.SortStableFunc(pods, func(a, b workload.Job) int { return cmp.Compare(a.ID, b.ID) })
	interned := map[string][]string{}
	rng := workload.NewSplitMix64(ModelSeed)
	for i := range pods {
		p := &pods[i]
		if p.NumGPU == 0 || p.GPUMilli == 0 || p.GPUModels != nil {
			continue
		}
		if rng.Draw(3) != 0 {
			continue
		}
		total := 0
		for _, n := range nodes {
			if n.GPUs >= p.NumGPU {
				total += n.GPUs
			}
		}
		if total == 0 {
			continue
		}
		x := int(rng.Draw(uint64(total)))
		for _, n := range nodes {
			if n.GPUs < p.NumGPU {
				continue
			}
			if x < n.GPUs {
				if interned[n.Model] == nil {
					interned[n.Model] = []string{n.Model}
				}
				p.GPUModels = interned[n.Model]
				break
			}
			x -= n.GPUs
		}
	}
	return &Trace{Nodes: nodes, Pods: pods}
}
