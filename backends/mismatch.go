package backends

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// ErrStateMismatch: the saved state (RunnerConfig.Store) cannot be the
// state of the backend's cluster: it has no cluster, or its topology
// differs from the backend's inventory, or the engine rejected one of the
// backend's nodes while the Runner reconciled it. Run returns it before
// any cycle, and leaves the store as it was: nothing is lost, and nothing
// runs on an engine that does not see the cluster. The error is a
// *StateMismatchError, which names the difference.
var ErrStateMismatch = errors.New("backends: saved state does not match the backend")

// StateMismatchError is the error Run returns for a saved state that does
// not match the backend (errors.Is(err, ErrStateMismatch); errors.As for
// the details). Each field lists one kind of difference; empty: none of
// that kind.
type StateMismatchError struct {
	// Empty: the state has no node or no start time (a state never saved
	// by an engine, or one written by hand).
	Empty bool
	// Levels and GPULevels: the state's levels and the backend's, when
	// they differ (a level renamed, added or removed).
	Levels, BackendLevels       []string
	GPULevels, BackendGPULevels []string
	// Missing: the state's nodes, when the backend lists none of them (a
	// state of another cluster). A few nodes gone are not a mismatch:
	// they are failed in the engine (Reconciled.Removed).
	Missing []string
	// Changed: nodes both list whose GPU count, GPU model, MIG mode or
	// domains differ, one "node: what" each.
	Changed []string
	// Rejected: backend nodes the engine refused to add or change while
	// the Runner reconciled it, one "node: error" each.
	Rejected []string
}

func (e *StateMismatchError) Error() string {
	var parts []string
	if e.Empty {
		parts = append(parts, "the state has no cluster")
	}
	if e.Levels != nil || e.BackendLevels != nil {
		parts = append(parts, fmt.Sprintf("levels %q, the backend's %q", e.Levels, e.BackendLevels))
	}
	if e.GPULevels != nil || e.BackendGPULevels != nil {
		parts = append(parts, fmt.Sprintf("GPU levels %q, the backend's %q", e.GPULevels, e.BackendGPULevels))
	}
	if len(e.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("the backend lists none of the state's nodes %s", list(e.Missing)))
	}
	if len(e.Changed) > 0 {
		parts = append(parts, "nodes changed: "+list(e.Changed))
	}
	if len(e.Rejected) > 0 {
		parts = append(parts, "nodes rejected by the engine: "+list(e.Rejected))
	}
	return ErrStateMismatch.Error() + ": " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrStateMismatch) true.
func (e *StateMismatchError) Is(target error) bool { return target == ErrStateMismatch }

func (e *StateMismatchError) any() bool {
	return e.Empty || e.Levels != nil || e.BackendLevels != nil || e.GPULevels != nil || e.BackendGPULevels != nil ||
		len(e.Missing) > 0 || len(e.Changed) > 0 || len(e.Rejected) > 0
}

// list prints names, at most 10 of them.
func list(names []string) string {
	if len(names) <= 10 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:10], ", "), len(names)-10)
}

// checkState rejects a saved state with no cluster before it is restored.
func checkState(st *engine.State) error {
	if len(st.Cluster.Nodes) == 0 || st.Start.IsZero() {
		return &StateMismatchError{Empty: true}
	}
	return nil
}

// checkTopology compares a restored engine's cluster with the backend's
// inventory: levels, GPU levels, and the nodes both list (GPU count and
// model, MIG mode, domains); and whether the backend lists any of the
// engine's nodes at all. Labels and node states are not compared: the
// reconciliation takes the backend's.
func checkTopology(c *topo.Cluster, spec topo.Spec) *StateMismatchError {
	var m StateMismatchError
	levels := c.Levels()[1:] // without topo.LevelCluster
	if !slices.Equal(levels, spec.Levels) {
		m.Levels, m.BackendLevels = nonNil(levels), nonNil(spec.Levels)
	}
	if !slices.Equal(c.GPULevels(), spec.GPULevels) {
		m.GPULevels, m.BackendGPULevels = nonNil(c.GPULevels()), nonNil(spec.GPULevels)
	}
	listed := 0
	for _, n := range spec.Nodes {
		id, ok := c.NodeByName(n.Name)
		if !ok {
			continue
		}
		listed++
		info := c.Node(id)
		var what []string
		if info.GPUs != n.GPUs {
			what = append(what, fmt.Sprintf("%d GPUs, the backend's %d", info.GPUs, n.GPUs))
		}
		if info.GPUModel != n.GPUModel {
			what = append(what, fmt.Sprintf("GPU model %q, the backend's %q", info.GPUModel, n.GPUModel))
		}
		if g, _ := c.NodeGPUConfig(id); g.MIG != n.MIG {
			what = append(what, fmt.Sprintf("MIG %v, the backend's %v", g.MIG, n.MIG))
		}
		if m.Levels == nil {
			for l := range levels {
				got := c.Domain(l+1, c.DomainOf(id, l+1)).Name
				if want := strings.Join(n.Domains[:min(l+1, len(n.Domains))], "/"); got != want {
					what = append(what, fmt.Sprintf("%s %q, the backend's %q", levels[l], got, want))
					break
				}
			}
		}
		if len(what) > 0 {
			m.Changed = append(m.Changed, n.Name+": "+strings.Join(what, ", "))
		}
	}
	if listed == 0 && c.NumNodes() > 0 && len(spec.Nodes) > 0 {
		for i := range c.NumNodes() {
			m.Missing = append(m.Missing, c.NodeName(topo.NodeID(i)))
		}
	}
	if !m.any() {
		return nil
	}
	return &m
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
