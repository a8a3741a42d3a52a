package fgd

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/workload"
)

// ModelSeed seeds the draws of every model rule (ModelRules).
const ModelSeed = 19

// The GPU-model constraint rules of the experiment (--gpu-models), each a
// seeded, reproducible rewrite of the trace's gpu_spec column (docs/fgd.md).
const (
	// RuleThird: a third of the GPU pods ask for one model
	// (ConstrainModels).
	RuleThird = "third"
	// RuleHalf: half of the GPU pods ask for one model, drawn as for
	// RuleThird.
	RuleHalf = "half"
	// RuleSets: a third of the GPU pods accept a set of 2 or 3 models,
	// each drawn as for RuleThird (by the GPUs that could serve the pod).
	RuleSets = "sets"
)

// ModelRules lists the rules ApplyModelRule accepts.
var ModelRules = []string{RuleThird, RuleHalf, RuleSets}

// ApplyModelRule returns t rewritten by a rule of ModelRules; "" returns t
// as it is. Errors wrap ErrConfig.
func ApplyModelRule(t *Trace, rule string) (*Trace, error) {
	switch rule {
	case "":
		return t, nil
	case RuleThird:
		return ConstrainModels(t), nil
	case RuleHalf:
		return constrain(t, 2, 1, 1), nil
	case RuleSets:
		return constrain(t, 3, 2, 3), nil
	}
	return nil, fmt.Errorf("%w: GPU-model rule %q (want one of %s)", ErrConfig, rule, strings.Join(ModelRules, ", "))
}

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
func ConstrainModels(t *Trace) *Trace { return constrain(t, 3, 1, 1) }

// constrain is the rules' common procedure: a GPU pod is picked when
// Draw(one) == 0; a picked pod gets between lo and hi models: with lo <
// hi, one Draw(hi-lo+1) first says how many more than lo; each model is
// drawn as ConstrainModels draws its one (a model drawn twice is drawn
// again, at most 64 draws a pod, and a pod that k-GPU nodes of fewer
// models can hold gets those models). Sets are in the order drawn.
func constrain(t *Trace, one uint64, lo, hi int) *Trace {
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
		if rng.Draw(one) != 0 {
			continue
		}
		total := 0
		models := map[string]bool{}
		for _, n := range nodes {
			if n.GPUs >= p.NumGPU {
				total += n.GPUs
				models[n.Model] = true
			}
		}
		if total == 0 {
			continue
		}
		want := lo
		if hi > lo {
			want += int(rng.Draw(uint64(hi - lo + 1)))
		}
		want = min(want, len(models))
		var set []string
		for try := 0; len(set) < want && try < 64; try++ {
			x := int(rng.Draw(uint64(total)))
			for _, n := range nodes {
				if n.GPUs < p.NumGPU {
					continue
				}
				if x < n.GPUs {
					if !slices.Contains(set, n.Model) {
						set = append(set, n.Model)
					}
					break
				}
				x -= n.GPUs
			}
		}
		key := strings.Join(set, "|")
		if interned[key] == nil {
			interned[key] = set
		}
		p.GPUModels = interned[key]
	}
	return &Trace{Nodes: nodes, Pods: pods}
}
