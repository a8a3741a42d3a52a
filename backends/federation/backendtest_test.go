package federation_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/backendtest"
	"github.com/berthsched/berth/backends/federation"
	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/backends/nvml/nvmlmock"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// fedBoxes is a federation of two NVML backends, each one mock DGX H100
// box of its own pool ("a" and "b"), as the fault suite needs it: jobs
// run `sleep` for their runtime on the real clock, each submitted to one
// pool (by its ID's hash) and pinned there by the federation, and a bind a
// box refuses because another running job holds the GPU is a violation
// (the engine booked it twice).
type fedBoxes struct {
	*federation.Federation
	backends.RealClock

	boxes map[string]*nvml.Backend // by pool
	pools []string

	mu     sync.Mutex
	viol   []error
	timers []*time.Timer
}

// box is one pool's member: the NVML backend, with its double bookings
// recorded as violations.
type box struct {
	*nvml.Backend
	f *fedBoxes
}

func (b box) BindMember(ctx context.Context, job string, m engine.Member) error {
	err := b.Backend.BindMember(ctx, job, m)
	if errors.Is(err, backends.ErrRefused) && strings.Contains(err.Error(), "is used by") {
		b.f.violation(err)
	}
	return err
}

func (s *fedBoxes) violation(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.viol = append(s.viol, err)
}

func (s *fedBoxes) Shape() backendtest.Shape {
	return backendtest.Shape{
		Unit: 4 * time.Millisecond, Jobs: 30, Seeds: 1, CallTimeout: 2 * time.Second,
		// An unknown bind is settled from RunningNow (every pool's)
		// within a second, not the default (real) minute.
		ReconcileInterval: time.Second,
		Queues:            []string{nvml.DefaultHoldQueue},
		// A job is pinned to one pool, and a pool here is one box.
		OneNodeJobs: true,
		NoNodeLoss:  "each pool is one NVML box: losing its node is losing that berth host (the NVML suite says the same)",
		NoRestarts: "a restarted berth process builds a new federation over new member clients, which read their systems again; " +
			"the members' own suites restart their Runners (the NVML boxes here live in the test process)",
	}
}

func (s *fedBoxes) Submit(j *queue.Job, runtime time.Duration) error {
	h := fnv.New32a()
	_, _ = h.Write([]byte(j.ID))
	pool := s.pools[h.Sum32()%uint32(len(s.pools))]
	b := s.boxes[pool]
	cmd := nvml.Command{Args: []string{"sleep", fmt.Sprintf("%.3f", runtime.Seconds())}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timers = append(s.timers, time.AfterFunc(max(time.Until(j.Submit), 0), func() {
		if err := b.Submit(context.Background(), j, cmd); err != nil && !errors.Is(err, nvml.ErrClosed) {
			s.violation(fmt.Errorf("submit %s to pool %s: %w", j.ID, pool, err))
		}
	}))
	return nil
}

func (s *fedBoxes) FailNode(time.Time, string) error {
	return errors.New("federation of NVML boxes: a box cannot lose its node")
}

func (s *fedBoxes) RecoverNode(time.Time, string) error {
	return errors.New("federation of NVML boxes: a box cannot lose its node")
}

func (s *fedBoxes) Violations() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.viol...)
}

// The federation passes the fault suite over two NVML boxes: binds
// refused, failing, hanging, committing after their timeout and
// preemptions late or hung, routed to each pool; an unknown bind is
// settled and a ghost found through the federation's RunningNow (every
// pool's running list on the federation's node names).
func TestFaultSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: not in -short")
	}
	backendtest.Run(t, func(t *testing.T, _ backendtest.Setup) backendtest.Backend {
		s := &fedBoxes{boxes: map[string]*nvml.Backend{}, pools: []string{"a", "b"}}
		var pools []federation.Pool
		for _, p := range s.pools {
			mock, err := nvmlmock.New("dgxh100")
			if err != nil {
				t.Fatal(err)
			}
			b, err := nvml.Open(context.Background(), nvml.Config{NVML: mock, NodeName: "box-" + p, RunDir: t.TempDir(),
				KillGrace: 50 * time.Millisecond,
				Queues:    &queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}, {Name: nvml.DefaultHoldQueue}}}})
			if err != nil {
				t.Fatal(err)
			}
			s.boxes[p] = b
			pools = append(pools, federation.Pool{Name: p, Backend: box{Backend: b, f: s}})
		}
		f, err := federation.New(federation.Config{Pools: pools,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.Federation = f
		t.Cleanup(func() {
			s.mu.Lock()
			for _, tm := range s.timers {
				tm.Stop()
			}
			s.mu.Unlock()
			for _, b := range s.boxes {
				_ = b.Close()
			}
		})
		return s
	})
}

// RunningNow lists every pool's running jobs on the federation's node
// names, acting on nothing, and answers errors.ErrUnsupported when a pool
// cannot report (a partial list would make the Runner stop that pool's
// unknown binds).
func TestRunningNowEveryPool(t *testing.T) {
	f, sl, _ := fixture(t)
	ctx := context.Background()
	_, err := f.Cluster(ctx)
	require.NoError(t, err)
	rs, err := f.RunningNow(ctx)
	require.NoError(t, err)
	require.Empty(t, rs)
	require.NoError(t, sl.Submit(&queue.Job{ID: "train", Queue: "q", Submit: t0,
		Request: gang.Request{Groups: []gang.Group{{Members: 2, GPUsPerMember: 8}}}}, time.Hour))
	_, err = sl.Next(ctx, time.Time{}) // its submission
	require.NoError(t, err)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	require.NoError(t, f.BindGang(ctx, "train", []engine.Member{member("slurm/n0", all...), member("slurm/n1", all...)}))
	rs, err = f.RunningNow(ctx)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, "train", rs[0].Job.ID)
	var nodes []string
	for _, m := range rs[0].Members {
		nodes = append(nodes, m.Node)
	}
	assert.ElementsMatch(t, []string{"slurm/n0", "slurm/n1"}, nodes)
	// The member's own list keeps its own names: RunningNow copied.
	own, err := sl.RunningNow(ctx)
	require.NoError(t, err)
	require.Len(t, own, 1)
	assert.NotContains(t, own[0].Members[0].Node, "/")

	g, err := federation.New(federation.Config{Pools: []federation.Pool{
		{Name: "slurm", Backend: noRunningNow{newFake(t, "slurm", 1)}},
	}})
	require.NoError(t, err)
	_, err = g.RunningNow(ctx)
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// noRunningNow is a member that is not a backends.RunningReporter.
type noRunningNow struct{ backends.Backend }

var _ backendtest.Shaper = (*fedBoxes)(nil)
