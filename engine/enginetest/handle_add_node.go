package enginetest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
)

// handleAddNode: add-node name=... gpus=... Before "engine" the node is
// part of the initial inventory; after it, a NodeAdded event.
func (h *Harness) handleAddNode(d *datadriven.TestData) (string, error) {
	n, err := nodeSpec(d)
	if err != nil {
		return "", err
	}
	if h.E == nil {
		h.spec.Nodes = append(h.spec.Nodes, n)
		return "", nil
	}
	return "", h.E.Step(engine.NodeAdded(h.now, n))
}

func nodeSpec(d *datadriven.TestData) (topo.NodeSpec, error) {
	name, _ := arg(d, "name")
	doms, _ := arg(d, "domains")
	g, _ := arg(d, "gpus")
	n, err := strconv.Atoi(g)
	if err != nil {
		return topo.NodeSpec{}, fmt.Errorf("gpus: %v", err)
	}
	model, ok := arg(d, "model")
	if !ok {
		model = "H100"
	}
	ns := topo.NodeSpec{Name: name, Domains: strings.Split(doms, ","), GPUs: n, GPUModel: model, Labels: parseLabels(d)}
	return ns, sharing(d, &ns)
}

// sharing reads the MIG and sharing options of a node: mig (MIG mode),
// layout=3g,2g,1g,1g (its instances), timeslice=REPLICAS, mps=CLIENTS.
func sharing(d *datadriven.TestData, n *topo.NodeSpec) error {
	_, n.MIG = arg(d, "mig")
	if v, ok := arg(d, "layout"); ok {
		n.MIGLayout = strings.ReplaceAll(v, ",", " ")
	}
	for _, k := range []string{"timeslice", "mps"} {
		v, ok := arg(d, k)
		if !ok {
			continue
		}
		r, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s: %v", k, err)
		}
		n.Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: r}
		if k == "mps" {
			n.Sharing = mig.Sharing{Mode: mig.MPS, Replicas: r}
		}
	}
	if v, ok := arg(d, "gpumem"); ok {
		m, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("gpumem: %v", err)
		}
		n.Sharing.MemoryMiB = m
	}
	return nil
}

func parseLabels(d *datadriven.TestData) map[string]string {
	v, ok := arg(d, "labels")
	if !ok || v == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		a, b, _ := strings.Cut(kv, ":")
		m[a] = b
	}
	return m
}
