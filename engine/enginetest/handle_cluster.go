package enginetest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/topo"
)

// handleCluster: cluster levels=... fanout=... (see cluster).
func (h *Harness) handleCluster(d *datadriven.TestData) (string, error) {
	return "", h.cluster(d)
}

func (h *Harness) cluster(d *datadriven.TestData) error {
	levels, _ := arg(d, "levels")
	fan, _ := arg(d, "fanout")
	var fanout []int
	for _, f := range strings.Split(fan, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("fanout: %v", err)
		}
		fanout = append(fanout, n)
	}
	nodes, _ := arg(d, "nodes")
	gpus, _ := arg(d, "gpus")
	nn, err1 := strconv.Atoi(nodes)
	ng, err2 := strconv.Atoi(gpus)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("nodes and gpus must be numbers")
	}
	model, ok := arg(d, "model")
	if !ok {
		model = "H100"
	}
	h.spec = topo.Uniform(strings.Split(levels, ","), fanout, nn, ng, model)
	_, h.spec.ShareFreeGPUs = arg(d, "share-free")
	for i := range h.spec.Nodes {
		if err := sharing(d, &h.spec.Nodes[i]); err != nil {
			return err
		}
	}
	return nil
}
