package backends

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/gang"
)

// ErrModelConstraint: a request's GPU-model constraint (a SLURM
// --constraint, a Kubernetes node affinity over the GPU product label)
// uses a form the backends do not turn into a set of models, or allows no
// model at all. Backends refuse such a job with it (wrapped).
var ErrModelConstraint = errors.New("backends: unsupported GPU-model constraint")

// ParseModelConstraint reads the GPU-model part of a SLURM --constraint
// whose features are GPU models (the GRES types a node offers): "a100"
// (one model), "a100|h100" (any of them, per node: gang.Group.GPUModels)
// or "[a100|h100]" (one of them for every node of the job: SameModel).
// Spaces around names are dropped; the empty string is no constraint (nil,
// false). Other operators (&, *count, parentheses, commas) are
// ErrModelConstraint.
func ParseModelConstraint(s string) (models []string, same bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, false, nil
	}
	if inner, ok := strings.CutPrefix(s, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); !ok {
			return nil, false, fmt.Errorf("%w: --constraint %q: unbalanced [", ErrModelConstraint, s)
		}
		s, same = inner, true
	}
	for name := range strings.SplitSeq(s, "|") {
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, "&*()[],") {
			return nil, false, fmt.Errorf("%w: --constraint %q: want a, a|b or [a|b]", ErrModelConstraint, s)
		}
		if !slices.Contains(models, name) {
			models = append(models, name)
		}
	}
	return models, same && len(models) > 1, nil
}

// SetModels sets g's GPU models from a typed GPU GRES ("gpu:a100:2" gives
// gresType "a100"; "" for an untyped one) and a --constraint (see
// ParseModelConstraint). Both ask the same node, so the allowed set is
// their intersection: the GRES type alone, when it is one of the
// constraint's models (or there is no constraint), else no model
// (ErrModelConstraint). Without a GRES type the constraint's set is taken
// as it is.
func SetModels(g *gang.Group, gresType, constraint string) error {
	models, same, err := ParseModelConstraint(constraint)
	if err != nil {
		return err
	}
	switch {
	case gresType != "" && models != nil && !slices.Contains(models, gresType):
		return fmt.Errorf("%w: GRES type %q is not one of --constraint %q", ErrModelConstraint, gresType, constraint)
	case gresType != "":
		g.GPUModel, g.GPUModels, g.SameModel = gresType, nil, false
	case len(models) == 1:
		g.GPUModel, g.GPUModels, g.SameModel = models[0], nil, false
	default:
		g.GPUModel, g.GPUModels, g.SameModel = "", models, same
	}
	return nil
}

// NodeRequirement is one requirement of a Kubernetes node selector term
// (core/v1 NodeSelectorRequirement) as plain data: Operator is In, NotIn,
// Exists, DoesNotExist, Gt or Lt.
type NodeRequirement struct {
	Key      string
	Operator string
	Values   []string
}

// AffinityModels returns the GPU models that required node-affinity terms
// allow through the label key (e.g. "nvidia.com/gpu.product"): the terms
// are ORed and the requirements of a term ANDed, so a term's models are
// the intersection of its In requirements on key, and the set is the union
// over the terms, in the order first listed. nil means any model: a term
// that does not constrain key (or only asks that it Exists), or no terms.
// NotIn, DoesNotExist, Gt and Lt on key are ErrModelConstraint, and so is
// a set left empty (no node could match). Requirements on other keys are
// not read (they are the selector's).
func AffinityModels(key string, terms [][]NodeRequirement) ([]string, error) {
	var out []string
	for _, term := range terms {
		var set []string
		constrained := false
		for _, r := range term {
			if r.Key != key {
				continue
			}
			switch r.Operator {
			case "Exists":
				continue
			case "In":
			default:
				return nil, fmt.Errorf("%w: node affinity %s %s: only In and Exists name GPU models", ErrModelConstraint, r.Key, r.Operator)
			}
			if !constrained {
				constrained = true
				for _, v := range r.Values {
					if !slices.Contains(set, v) {
						set = append(set, v)
					}
				}
				continue
			}
			set = slices.DeleteFunc(set, func(m string) bool { return !slices.Contains(r.Values, m) })
		}
		if !constrained {
			return nil, nil // this term allows any model
		}
		for _, m := range set {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	if len(terms) > 0 && len(out) == 0 {
		return nil, fmt.Errorf("%w: node affinity over %s allows no model", ErrModelConstraint, key)
	}
	return out, nil
}
