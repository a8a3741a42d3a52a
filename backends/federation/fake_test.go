package federation_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeMember is a member backend built on backends/sim with a NodeLender:
// a lent node refuses binds (as a drained SLURM node or a cordoned
// Kubernetes node would), Busy comes from the simulator's occupancy, and
// failures can be injected into every lender call.
type fakeMember struct {
	*sim.Sim
	name  string
	nodes []string

	mu       sync.Mutex
	lent     map[string]bool
	fail     map[string]int // "lend"/"reclaim"/"status" -> failures left (<0: always)
	partial  bool           // a failed reclaim still makes the node schedulable
	launched map[string]bool
	after    func(op, node string)
}

var errInjected = errors.New("injected failure")

// checking is set while a test checks the invariant: injected failures
// are for the federation's calls, not the check's.
var checking atomic.Bool

func newFake(t *testing.T, name string, n int, lent ...string) *fakeMember {
	t.Helper()
	spec := topo.Uniform(nil, nil, n, 8, "H100")
	s, err := sim.New(sim.Config{Cluster: spec, Start: t0})
	require.NoError(t, err)
	f := &fakeMember{Sim: s, name: name, lent: map[string]bool{}, fail: map[string]int{}}
	for _, nd := range spec.Nodes {
		f.nodes = append(f.nodes, nd.Name)
	}
	for _, l := range lent {
		f.lent[l] = true
	}
	return f
}

func (f *fakeMember) Cluster(ctx context.Context) (topo.Spec, error) {
	sp, err := f.Sim.Cluster(ctx)
	if err != nil {
		return sp, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range sp.Nodes {
		if f.lent[sp.Nodes[i].Name] {
			sp.Nodes[i].State = topo.Cordoned
		}
	}
	return sp, nil
}

func (f *fakeMember) failing(op string) bool {
	n := f.fail[op]
	if n == 0 {
		return false
	}
	if n > 0 {
		f.fail[op] = n - 1
	}
	return true
}

func (f *fakeMember) done(op, node string) {
	f.mu.Lock()
	hook := f.after
	f.mu.Unlock()
	if hook != nil {
		hook(f.name+":"+op, node)
	}
}

func (f *fakeMember) LendNode(_ context.Context, node string) error {
	defer f.done("lend", node)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing("lend") {
		return fmt.Errorf("%s: lend %s: %w", f.name, node, errInjected)
	}
	f.lent[node] = true
	return nil
}

func (f *fakeMember) ReclaimNode(_ context.Context, node string) error {
	defer f.done("reclaim", node)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing("reclaim") {
		if f.partial {
			delete(f.lent, node)
		}
		return fmt.Errorf("%s: reclaim %s: %w", f.name, node, errInjected)
	}
	delete(f.lent, node)
	return nil
}

func (f *fakeMember) NodeStatus(_ context.Context, node string) (federation.NodeStatus, error) {
	f.mu.Lock()
	if !checking.Load() && f.failing("status") {
		f.mu.Unlock()
		return federation.NodeStatus{}, fmt.Errorf("%s: status %s: %w", f.name, node, errInjected)
	}
	lent := f.lent[node]
	f.mu.Unlock()
	i := slices.Index(f.nodes, node)
	if i < 0 {
		return federation.NodeStatus{}, fmt.Errorf("%s: no node %s", f.name, node)
	}
	st := f.State(nil)
	return federation.NodeStatus{Schedulable: !lent, Busy: st.NodeFree[i] < 8}, nil
}

func (f *fakeMember) BindMember(ctx context.Context, job string, m engine.Member) error {
	f.mu.Lock()
	lent := f.lent[m.Node]
	f.mu.Unlock()
	if lent {
		return fmt.Errorf("%w: %s: node %s is lent", backends.ErrRefused, f.name, m.Node)
	}
	return f.Sim.BindMember(ctx, job, m)
}

// RequeueJob stops a running job (the simulator releases its GPUs, as a
// preemption does) and records it.
func (f *fakeMember) RequeueJob(ctx context.Context, job string) error {
	defer f.done("requeue", job)
	f.mu.Lock()
	fail := f.failing("requeue")
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("%s: requeue %s: %w", f.name, job, errInjected)
	}
	return f.Sim.Preempt(ctx, engine.Preemption{Victim: job})
}

// LaunchJob submits a job of the federation's to the simulator (one
// hour's run), once; WithdrawJob forgets that it did (the simulator keeps
// the job, never bound).
func (f *fakeMember) LaunchJob(_ context.Context, j *queue.Job) error {
	defer f.done("launch", j.ID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.launched == nil {
		f.launched = map[string]bool{}
	}
	if f.launched[j.ID] {
		return nil
	}
	c := *j
	c.Submit = f.Sim.Now()
	if err := f.Sim.Submit(&c, time.Hour); err != nil {
		return err
	}
	f.launched[j.ID] = true
	return nil
}

func (f *fakeMember) WithdrawJob(_ context.Context, job string) error {
	defer f.done("withdraw", job)
	return nil
}

var (
	_ federation.Launcher   = (*fakeMember)(nil)
	_ federation.NodeLender = (*fakeMember)(nil)
	_ federation.Requeuer   = (*fakeMember)(nil)
)
