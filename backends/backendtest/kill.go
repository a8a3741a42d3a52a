package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/backendtest/remote"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// KillSummary counts what RunKill did.
type KillSummary struct {
	Scenarios, Kills, Restarts, Jobs int
	// KilledAfter counts the kills that landed after the backend carried
	// out a call and before its reply reached the Runner (the rest landed
	// before the call was carried out).
	KilledAfter int
}

// killSaves are the save intervals (on the backend's clock) of the kill
// scenarios, one per seed: the state file lags the backend by up to this
// much when the process is killed.
var killSaves = []time.Duration{time.Minute, 30 * time.Minute, 2 * time.Hour, time.Minute, 30 * time.Minute, 2 * time.Hour}

// RunKill is the kill -9 scenario: the berth process itself dies. It
// builds the program in backends/backendtest/killchild (a Runner with a
// FileStore), serves the backend made by newBackend to it over a unix
// socket (package remote; the backend, and its own view of what is
// bound, live in this process), and kills the child with SIGKILL at
// random backend calls (before the call is carried out, or after it and
// before the reply), starting it again each time, until a run ends with
// the backend's event stream. Afterwards every job has finished exactly
// once, the backend found no impossible booking (Violations), no job was
// bound after it ended, and no job ever held more members than its gang
// has (a second start while it ran). Jobs are whole-GPU gangs (the wire
// carries no MIG instances); two nodes fail and recover on the way.
//
// It needs the go command (it builds the child); it skips in -short.
func RunKill(t *testing.T, newBackend func(t *testing.T, s Setup) Backend) KillSummary {
	if testing.Short() {
		t.Skip("kill -9 suite: not in -short")
	}
	bin := buildChild(t)
	var sum KillSummary
	for i, save := range killSaves {
		seed := uint64(i + 1)
		t.Run(fmt.Sprintf("seed=%d/save=%v", seed, save), func(t *testing.T) {
			k, ka, r, j := runKill(t, bin, seed, save, newBackend)
			sum.Scenarios++
			sum.Kills += k
			sum.KilledAfter += ka
			sum.Restarts += r
			sum.Jobs += j
		})
	}
	t.Logf("kill -9 suite: %d scenario runs, %d kills (%d after a call was carried out), %d restarts, %d jobs",
		sum.Scenarios, sum.Kills, sum.KilledAfter, sum.Restarts, sum.Jobs)
	return sum
}

func buildChild(t *testing.T) string {
	t.Helper()
	gobin := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			gobin = p
		}
	}
	bin := filepath.Join(t.TempDir(), "killchild")
	cmd := exec.Command(gobin, "build", "-o", bin, "github.com/berthsched/berth/backends/backendtest/killchild")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building killchild: %v\n%s", err, out)
	}
	return bin
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// killer kills the running child at a chosen call.
type killer struct {
	mu     sync.Mutex
	calls  int
	at     int  // kill at this call; 0: never
	after  bool // after the call is carried out (else before)
	proc   *os.Process
	exited chan struct{}
	killed bool
	nAfter int
}

func (k *killer) hook(method string, after bool) bool {
	k.mu.Lock()
	if !after {
		k.calls++
	}
	hit := k.at > 0 && k.calls == k.at && after == k.after && !k.killed && k.proc != nil
	if hit {
		k.killed = true
		if after {
			k.nAfter++
		}
		_ = k.proc.Kill() // SIGKILL
	}
	exited := k.exited
	k.mu.Unlock()
	if hit {
		select { // the reply must not reach the child: wait for it to die
		case <-exited:
		case <-time.After(time.Minute):
		}
		return after
	}
	return true
}

// watch wraps the backend (in this process) and checks what the children
// do to it.
type watch struct {
	Backend
	mu       sync.Mutex
	finished map[string]int
	ended    map[string]bool
	size     map[string]int // gang size by job
	errs     []string
}

func (w *watch) BindMember(ctx context.Context, job string, m engine.Member) error {
	w.mu.Lock()
	if w.ended[job] {
		w.errs = append(w.errs, fmt.Sprintf("job %s bound after it ended", job))
	}
	w.mu.Unlock()
	err := w.Backend.BindMember(ctx, job, m)
	if err != nil {
		return err
	}
	rs, rerr := w.Backend.Running(ctx)
	if rerr != nil {
		return err
	}
	for _, r := range rs {
		if r.Job.ID == job && len(r.Members) > w.size[job] {
			w.mu.Lock()
			w.errs = append(w.errs, fmt.Sprintf("job %s started twice: %d members bound, its gang has %d", job, len(r.Members), w.size[job]))
			w.mu.Unlock()
		}
	}
	return nil
}

func (w *watch) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	evs, err := w.Backend.Next(ctx, wake)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind == engine.EventJobFinished {
			w.finished[ev.JobID]++
			w.ended[ev.JobID] = true
		}
	}
	return evs, err
}

// Pending forwards to the backend's PendingReporter, if any.
func (w *watch) Pending(ctx context.Context) ([]*queue.Job, error) {
	pr, ok := w.Backend.(backends.PendingReporter)
	if !ok {
		return nil, errors.New("backendtest: the backend reports no pending jobs")
	}
	return pr.Pending(ctx)
}

func runKill(t *testing.T, bin string, seed uint64, save time.Duration, newBackend func(*testing.T, Setup) Backend) (kills, killedAfter, restarts, jobs int) {
	rng := rand.New(rand.NewPCG(seed, 0x9)) // kill -9
	spec := topo.Uniform([]string{"rack"}, []int{2}, 4, 8, "H100")
	be := newBackend(t, Setup{Cluster: spec, Start: t0})
	const n = 150
	ids, size := submitJobs(t, rng, be, n, spec, t0, time.Minute, false, false, false)
	w := &watch{Backend: be, finished: map[string]int{}, ended: map[string]bool{}, size: size}
	for range 2 {
		node := spec.Nodes[rng.IntN(len(spec.Nodes))].Name
		at := t0.Add(time.Duration(30+rng.IntN(300)) * time.Minute)
		if err := be.FailNode(at, node); err != nil {
			t.Fatalf("FailNode: %v", err)
		}
		if err := be.RecoverNode(at.Add(time.Duration(10+rng.IntN(60))*time.Minute), node); err != nil {
			t.Fatalf("RecoverNode: %v", err)
		}
	}

	// A short socket path (unix sockets are limited to ~100 bytes).
	dir, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "b.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := &killer{}
	go func() { _ = remote.Serve(l, w, k.hook) }()
	state := filepath.Join(t.TempDir(), "berth.state")

	const maxKills = 8
	for run := 0; ; run++ {
		if run > maxKills+3 {
			t.Fatalf("the child did not finish after %d runs", run)
		}
		cmd := exec.Command(bin, "-socket", sock, "-state", state, "-save", save.String())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		k.mu.Lock()
		k.calls, k.killed = 0, false
		k.at, k.after = 0, false
		if kills < maxKills {
			k.at, k.after = 1+rng.IntN(300), rng.IntN(2) == 0
		}
		k.exited = make(chan struct{})
		if err := cmd.Start(); err != nil {
			k.mu.Unlock()
			t.Fatal(err)
		}
		k.proc = cmd.Process
		exited := k.exited
		k.mu.Unlock()
		done := make(chan error, 1)
		go func() { err := cmd.Wait(); close(exited); done <- err }()
		var werr error
		select {
		case werr = <-done:
		case <-time.After(5 * time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("run %d: the child hung\n%s", run, stderr.String())
		}
		k.mu.Lock()
		killed, proc := k.killed, k.proc
		k.proc = nil
		k.mu.Unlock()
		_ = proc
		t.Logf("run %d: killed %v at call %d (after: %v)", run, killed, k.at, k.after)
		if os.Getenv("BERTH_KILL_VERBOSE") != "" {
			t.Logf("run %d stderr:\n%s", run, stderr.String())
		}
		if killed {
			kills++
			restarts++
			continue
		}
		if werr != nil {
			t.Fatalf("run %d: the child failed: %v\n%s", run, werr, stderr.String())
		}
		t.Logf("run %d ended the stream: %s", run, strings.TrimSpace(lastLine(stderr.String())))
		break
	}
	killedAfter = k.nAfter

	for _, v := range be.Violations() {
		t.Errorf("backend violation: %v", v)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.errs {
		t.Error(e)
	}
	checkFinishedOnce(t, ids, w.finished, nil)
	t.Logf("%d jobs, %d kills (%d after the call), %d restarts, save interval %v", n, kills, killedAfter, restarts, save)
	return kills, killedAfter, restarts, n
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
