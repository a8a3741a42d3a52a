package nvml_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/backendtest"
	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

// suiteBox is the NVML backend on a mock DGX H100 as the fault suite
// needs it: jobs run `sleep` for their runtime on the real clock (one
// scenario minute is 4ms), arrive at their Submit time, and a bind the
// backend refuses because another running job holds the GPU is a
// violation (the engine booked it twice).
type suiteBox struct {
	*nvml.Backend
	backends.RealClock

	mu     sync.Mutex
	viol   []error
	timers []*time.Timer
}

func (s *suiteBox) Shape() backendtest.Shape {
	return backendtest.Shape{
		Unit: 4 * time.Millisecond, Jobs: 30, Seeds: 1, CallTimeout: 2 * time.Second,
		// An unknown bind is settled from RunningNow within a second,
		// not the default minute (a real one here).
		ReconcileInterval: time.Second,
		Queues:            []string{nvml.DefaultHoldQueue},
		NoNodeLoss: "the NVML backend is one box, one node: losing it is losing berth's own host; " +
			"a failed GPU (critical XID) is covered by TestRunnerXIDRequeuesOffTheFailedGPU",
		NotApplicable: backendtest.NotApplicableMIG("the suite's mock box is not in MIG mode (the mocks switch every GPU of a box " +
			"at once, and a box in MIG mode has no whole GPU for the suite's whole-GPU jobs); MIGLayout, the truth after a timeout, " +
			"is tested by TestMIGLayoutReadsTheGPU, the asynchronous changes on the simulator's fault suite"),
	}
}

func (s *suiteBox) Submit(j *queue.Job, runtime time.Duration) error {
	cmd := nvml.Command{Args: []string{"sleep", fmt.Sprintf("%.3f", runtime.Seconds())}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timers = append(s.timers, time.AfterFunc(max(time.Until(j.Submit), 0), func() {
		if err := s.Backend.Submit(context.Background(), j, cmd); err != nil && !errors.Is(err, nvml.ErrClosed) {
			s.mu.Lock()
			s.viol = append(s.viol, fmt.Errorf("submit %s: %w", j.ID, err))
			s.mu.Unlock()
		}
	}))
	return nil
}

func (s *suiteBox) FailNode(time.Time, string) error {
	return errors.New("nvml: a box cannot lose a node")
}

func (s *suiteBox) RecoverNode(time.Time, string) error {
	return errors.New("nvml: a box cannot lose a node")
}

func (s *suiteBox) BindMember(ctx context.Context, job string, m engine.Member) error {
	err := s.Backend.BindMember(ctx, job, m)
	if errors.Is(err, backends.ErrRefused) && strings.Contains(err.Error(), "is used by") {
		s.mu.Lock()
		s.viol = append(s.viol, err)
		s.mu.Unlock()
	}
	return err
}

func (s *suiteBox) Violations() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.viol...)
}

// The NVML backend (on its mocks) passes the fault suite: binds refused,
// failing and hanging, and the Runner restarted, with real processes.
// Node loss does not apply (one box); the kill -9 scenario does not
// either: its wire (backendtest/remote) serves a backend on a virtual
// clock, and this one's processes would die with the test.
func TestFaultSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: not in -short")
	}
	backendtest.Run(t, func(t *testing.T, _ backendtest.Setup) backendtest.Backend {
		box := mustBox(t, "dgxh100")
		b, err := nvml.Open(context.Background(), nvml.Config{NVML: box, NodeName: "box", RunDir: t.TempDir(),
			KillGrace: 50 * time.Millisecond,
			Queues:    &queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}, {Name: nvml.DefaultHoldQueue}}}})
		if err != nil {
			t.Fatal(err)
		}
		s := &suiteBox{Backend: b}
		t.Cleanup(func() {
			s.mu.Lock()
			for _, tm := range s.timers {
				tm.Stop()
			}
			s.mu.Unlock()
			_ = b.Close()
		})
		return s
	})
}
