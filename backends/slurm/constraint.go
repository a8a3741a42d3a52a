package slurm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/gang"
)

// How a job's --constraint reaches berth. SLURM accepts a constraint only
// over the nodes' features; a site whose nodes carry their GPU model as a
// feature (Features=a100 beside Gres=gpu:a100:8) lets users ask for models
// with it. berth reads two forms, and holds a job in any other (the
// reason in its admin comment, as for every job it can never run):
//
//   - Model sets: "a100|h100" (any of them, per node) or "[a100|h100]"
//     (one model for every node of the job), where every name is a GPU
//     model of the cluster (a GRES type of a managed node): the group's
//     allowed models (backends.ParseModelConstraint). A typed GRES
//     (--gres=gpu:a100:2) narrows the set to its type.
//   - Plain features joined with &: "ib&rack1". A name that is a GPU model
//     is the group's model (two models joined with & match no node); the
//     others become the group's selector (every node feature is a node
//     label, value "true"), so berth chooses only nodes SLURM would accept
//     (a node without the feature leaves a moved job pending for ever,
//     "BadConstraints").
//
// Counts (a100*2), parentheses, commas, node-count brackets ([a*2&b*2]),
// and | or [...] over names that are not GPU models are held: berth would
// choose nodes SLURM refuses.

// setConstraint sets g's GPU models and selector from the job's typed GRES
// (gresType, "" for none) and its --constraint. Errors wrap
// backends.ErrModelConstraint.
func (b *Backend) setConstraint(g *gang.Group, gresType, constraint string) error {
	c := strings.TrimSpace(constraint)
	if c == "" || c == "(null)" {
		return backends.SetModels(g, gresType, "")
	}
	isModel := func(name string) bool {
		m := b.gpuModels.Load()
		return m != nil && (*m)[name]
	}
	if strings.ContainsAny(c, "|[]") {
		names := strings.FieldsFunc(c, func(r rune) bool { return strings.ContainsRune("|[]&*(), ", r) })
		for _, n := range names {
			if !isModel(n) {
				return fmt.Errorf("%w: --constraint %q: %s is not a GPU model of this cluster (models %s); only GPU models may be ORed", backends.ErrModelConstraint, constraint, n, strings.Join(b.modelNames(), ", "))
			}
		}
		return backends.SetModels(g, gresType, c)
	}
	var model string
	for n := range strings.SplitSeq(c, "&") {
		n = strings.TrimSpace(n)
		switch {
		case n == "" || strings.ContainsAny(n, "*(),: "):
			return fmt.Errorf("%w: --constraint %q: berth reads features ANDed (a&b) or GPU models ORed (a|b, [a|b]), without counts or parentheses", backends.ErrModelConstraint, constraint)
		case isModel(n) && model != "" && n != model:
			return fmt.Errorf("%w: --constraint %q asks two GPU models at once (%s&%s)", backends.ErrModelConstraint, constraint, model, n)
		case isModel(n):
			model = n
		default:
			if g.Selector == nil {
				g.Selector = map[string]string{}
			}
			g.Selector[n] = "true"
		}
	}
	return backends.SetModels(g, gresType, model)
}

// modelNames lists the cluster's GPU models, sorted (for messages).
func (b *Backend) modelNames() []string {
	m := b.gpuModels.Load()
	if m == nil {
		return nil
	}
	var out []string
	for k := range *m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
