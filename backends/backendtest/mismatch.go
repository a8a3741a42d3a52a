package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// restoreMismatched is the "restore from an empty or mismatched state"
// scenario's first part: before the scenario's Runners run, Runners are
// started on states that cannot be the backend's cluster (no cluster at
// all; the levels renamed; none of the backend's nodes; a node with
// another GPU count and model). Each must return a
// backends.StateMismatchError naming that difference, promptly, without
// starting anything on the backend and without writing the state file.
// The scenario then runs as the others on an empty store: every job
// finishes exactly once, so the refused restores lost nothing.
func restoreMismatched(t *testing.T, be Backend, backend backends.Backend, sh Shape, queues []queue.QueueSpec) {
	t.Helper()
	ctx := context.Background()
	spec, err := be.Cluster(ctx)
	if err != nil {
		t.Fatalf("Cluster: %v", err)
	}
	before := runningIDs(t, be)
	path := t.TempDir() + "/mismatched.state"
	ecfg := engine.Config{Queues: queue.TreeSpec{Queues: queues}}
	for _, c := range mismatches(spec) {
		var data []byte
		if c.spec == nil {
			data = []byte(fmt.Sprintf(`{"Version":%d}`, engine.StateVersion))
		} else {
			cfg := ecfg
			cfg.Cluster, cfg.Start = *c.spec, be.Now()
			e, err := engine.New(cfg)
			if err != nil {
				t.Fatalf("%s: the saved engine: %v", c.name, err)
			}
			if err := e.EnableJournal(); err != nil {
				t.Fatal(err)
			}
			j := &queue.Job{ID: "saved-job", Queue: "q", Submit: be.Now()}
			j.Request.Groups = []gang.Group{{Members: 1, GPUsPerMember: 1}}
			if err := e.Step(engine.Submitted(be.Now(), j)); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			st, err := e.Save()
			if err != nil {
				t.Fatal(err)
			}
			if err := (backends.FileStore{Path: path}).Save(ctx, st); err != nil {
				t.Fatal(err)
			}
			if data, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := backends.NewRunner(backends.RunnerConfig{
			Engine: ecfg, Backend: backend, Clock: be, Store: backends.FileStore{Path: path},
			// Inventory calls only (nothing is bound): a timeout long
			// enough for a loaded machine.
			CallTimeout: max(sh.CallTimeout, 30*time.Second), Retry: backends.Retry{Attempts: 2},
			Observe: func(backends.Cycle) { t.Errorf("%s: a cycle ran on a mismatched state", c.name) },
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, sh.HangAfter)
		err = r.Run(rctx)
		cancel()
		var m *backends.StateMismatchError
		switch {
		case !errors.Is(err, backends.ErrStateMismatch) || !errors.As(err, &m):
			t.Errorf("%s: Run returned %v, want a StateMismatchError", c.name, err)
		case !c.named(m):
			t.Errorf("%s: the error does not name the difference: %v", c.name, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
			t.Errorf("%s: the state file was written", c.name)
		}
	}
	if after := runningIDs(t, be); !slices.Equal(after, before) {
		t.Errorf("the backend runs %v after the refused restores, %v before", after, before)
	}
}

// mismatch is one state that cannot be the backend's cluster: spec is the
// saved engine's cluster (nil: a state with none), named checks the error.
type mismatch struct {
	name  string
	spec  *topo.Spec
	named func(m *backends.StateMismatchError) bool
}

func mismatches(spec topo.Spec) []mismatch {
	clone := func() topo.Spec {
		c := spec
		c.Levels = slices.Clone(spec.Levels)
		c.Nodes = slices.Clone(spec.Nodes)
		for i := range c.Nodes {
			c.Nodes[i].Domains = slices.Clone(spec.Nodes[i].Domains)
			c.Nodes[i].State = topo.Ready
		}
		return c
	}
	levels := clone()
	if len(levels.Levels) > 0 {
		levels.Levels[0] += "-renamed"
	} else {
		levels.Levels = []string{"renamed"}
		for i := range levels.Nodes {
			levels.Nodes[i].Domains = []string{"d0"}
		}
	}
	gone := clone()
	for i := range gone.Nodes {
		gone.Nodes[i].Name = "gone-" + gone.Nodes[i].Name
	}
	gpus := clone()
	n := &gpus.Nodes[0]
	n.GPUs = max(1, n.GPUs/2)
	n.GPUModel, n.MIG, n.MIGLayout, n.GPUDomains = "changed-model", false, "", nil
	n.Sharing = mig.Sharing{}
	for range spec.GPULevels {
		n.GPUDomains = append(n.GPUDomains, make([]int, n.GPUs))
	}
	return []mismatch{
		{"empty", nil, func(m *backends.StateMismatchError) bool { return m.Empty }},
		{"levels-renamed", &levels, func(m *backends.StateMismatchError) bool {
			return slices.Equal(m.Levels, levels.Levels) && slices.Equal(m.BackendLevels, nonNil(spec.Levels))
		}},
		{"nodes-missing", &gone, func(m *backends.StateMismatchError) bool { return len(m.Missing) == len(gone.Nodes) }},
		{"gpus-changed", &gpus, func(m *backends.StateMismatchError) bool {
			return len(m.Changed) == 1 && bytes.HasPrefix([]byte(m.Changed[0]), []byte(spec.Nodes[0].Name+":"))
		}},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func runningIDs(t *testing.T, be Backend) []string {
	t.Helper()
	rs, err := be.Running(context.Background())
	if err != nil {
		t.Fatalf("Running: %v", err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.Job.ID)
	}
	slices.Sort(ids)
	return ids
}
