package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/berthsched/berth/topo"
)

// rebuild makes the cluster from e.spec and re-books every running job by
// node name and GPU offset.
func (e *Engine) rebuild() error {
	e.fitsSeen = nil // the nodes may change (scalecache.go)
	// Build with every node ready, book the running jobs, then set the
	// states: Allocate books only on ready nodes, and cordoned or draining
	// nodes keep their jobs.
	ready := e.spec
	ready.Nodes = slices.Clone(e.spec.Nodes)
	for i := range ready.Nodes {
		ready.Nodes[i].State = topo.Ready
	}
	e.labelPartitions(&ready)
	c, err := topo.New(ready)
	if err != nil {
		return err
	}
	s := c.NewSnapshot()
	old := e.cluster
	if err := carryLayouts(old, e.snap, c, s); err != nil {
		return err
	}
	moved := map[string]*placement{}
	for _, id := range sortedKeys(e.jobs) {
		js := e.jobs[id]
		if js.place == nil {
			continue
		}
		p, err := remap(old, c, js.place)
		if err != nil {
			return err
		}
		moved[id] = p
	}
	claims := map[string]*placement{}
	for _, id := range sortedKeys(e.claims) {
		p, err := remap(old, c, e.claims[id].place)
		if err != nil {
			return err
		}
		claims[id] = p
	}
	// Book on ready nodes first, then set states: Allocate needs ready nodes.
	for _, id := range sortedKeys(moved) {
		if err := moved[id].rebook(s); err != nil {
			return fmt.Errorf("re-booking %q: %w", id, err)
		}
	}
	for i := range e.spec.Nodes {
		if st := e.spec.Nodes[i].State; st != topo.Ready {
			id, _ := c.NodeByName(e.spec.Nodes[i].Name)
			if err := s.SetNodeState(id, st); err != nil {
				return err
			}
		}
	}
	e.cluster, e.snap = c, s
	for id, p := range moved {
		e.jobs[id].place = p
	}
	for id, p := range claims {
		e.claims[id].place = p
	}
	e.specIdx = make(map[string]int, len(e.spec.Nodes))
	for i := range e.spec.Nodes {
		e.specIdx[e.spec.Nodes[i].Name] = i
	}
	for _, js := range e.jobs {
		if js.badOf != errFractional {
			js.badOf, js.badC = nil, nil // placement errors depend on the cluster
		}
	}
	clear(e.lastRes)
	e.dropResMemos()
	return nil
}

func (e *Engine) addNode(n topo.NodeSpec) error {
	if _, dup := e.specIdx[n.Name]; dup {
		return fmt.Errorf("%w: node %q: %w", ErrInvalidEvent, n.Name, topo.ErrDuplicateNode)
	}
	saved := e.spec.Nodes
	e.spec.Nodes = append(slices.Clip(saved), n)
	if err := e.spec.Validate(); err != nil {
		e.spec.Nodes = saved
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if err := e.rebuildOrRestore(saved); err != nil {
		return err
	}
	return nil
}

// rebuildOrRestore rebuilds from e.spec; on failure it restores the old
// node list (the engine is unchanged).
func (e *Engine) rebuildOrRestore(saved []topo.NodeSpec) error {
	// A rebuild is all or nothing: it only assigns at the end.
	if err := e.rebuild(); err != nil {
		e.spec.Nodes = saved
		e.specIdx = make(map[string]int, len(saved))
		for i := range saved {
			e.specIdx[saved[i].Name] = i
		}
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return nil
}

func (e *Engine) changeNode(n topo.NodeSpec, at time.Time) error {
	i, ok := e.specIdx[n.Name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, n.Name)
	}
	if n.State > topo.Down {
		return fmt.Errorf("%w: node %q: %w", ErrInvalidEvent, n.Name, topo.ErrBadState)
	}
	cur := e.spec.Nodes[i]
	if !mapsEqual(cur.Labels, n.Labels) {
		saved := e.spec.Nodes
		e.spec.Nodes = slices.Clone(saved)
		e.spec.Nodes[i].Labels = cloneLabels(n.Labels)
		if err := e.rebuildOrRestore(saved); err != nil {
			return err
		}
	}
	if n.State == topo.Down {
		return e.failNode(n.Name, at)
	}
	e.spec.Nodes[i].State = n.State
	id, _ := e.cluster.NodeByName(n.Name)
	return e.snap.SetNodeState(id, n.State)
}

func (e *Engine) failNode(name string, at time.Time) error {
	i, ok := e.specIdx[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	id, _ := e.cluster.NodeByName(name)
	e.spec.Nodes[i].State = topo.Down
	if err := e.snap.SetNodeState(id, topo.Down); err != nil {
		return err
	}
	for _, jid := range sortedKeys(e.jobs) {
		js := e.jobs[jid]
		if js == nil || js.place == nil || !js.place.onNode(id) { // nil: ended with a job it depended on
			continue
		}
		if e.cfg.NodeFailure == FailOnFailure {
			e.stopRunning(js, at)
			e.forget(js)
			e.failed = append(e.failed, JobFailure{Job: jid, Node: name})
			continue
		}
		e.requeue(js, at)
	}
	return nil
}
