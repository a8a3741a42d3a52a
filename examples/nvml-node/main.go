// Command nvml-node is a single-box GPU scheduler: berth's engine on the
// local GPUs through NVML (or on one of NVIDIA's mock boxes with --mock),
// running queued jobs as processes with CUDA_VISIBLE_DEVICES set, and
// showing why waiting jobs wait.
//
//	go run ./examples/nvml-node --mock dgxh100 --demo
//	go run ./examples/nvml-node --spool /var/spool/berth --run-dir /var/lib/berth/runs
//
// Jobs come from a spool directory (one JSON file a job, see
// nvml.SpoolJob) and, with --demo, from a built-in set that fills the box
// and makes one job wait. On a real machine without the NVIDIA driver it
// stops with a clear error.
//
// With --mock it runs on a mock: NVIDIA's go-nvml mock of a DGX box, in
// this process, with no GPU and no driver; the jobs are real processes,
// but the GPUs their CUDA_VISIBLE_DEVICES name do not exist. It says so
// when it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/backends/nvml/nvmlmock"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nvml-node:", err)
		os.Exit(1)
	}
}

type options struct {
	mock    string
	migMode bool
	spool   string
	runDir  string
	queues  string
	demo    bool
	xid     string
	limit   time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.mock, "mock", "", "run on a mock box instead of the local GPUs: "+strings.Join(nvmlmock.Boxes(), ", "))
	flag.BoolVar(&o.migMode, "mig", false, "with --mock: put the mock box's GPUs in MIG mode (no instances yet)")
	flag.StringVar(&o.spool, "spool", "", "spool directory of job files (one JSON job a file)")
	flag.StringVar(&o.runDir, "run-dir", "", "where job output and exit files go (default: a new temporary directory)")
	flag.StringVar(&o.queues, "queues", "default", "comma-separated queue names jobs may use")
	flag.BoolVar(&o.demo, "demo", false, "submit a built-in set of short jobs and stop when they are done")
	flag.StringVar(&o.xid, "xid", "", "with --mock: inject XID on a GPU after a second and restore the GPU 5 s later, as GPU:XID (e.g. 3:79)")
	flag.DurationVar(&o.limit, "for", 0, "stop after this long (0: until interrupted, or with --demo until its jobs are done)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if !o.demo && o.spool == "" {
		return errors.New("nothing to run: give --spool DIR, --demo, or both")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.limit)
		defer cancel()
	}

	var lib nv.Interface
	var box *nvmlmock.Box
	if o.mock != "" {
		var err error
		if box, err = nvmlmock.New(o.mock); err != nil {
			return err
		}
		box.SetMIGMode(o.migMode)
		lib = box
	} else {
		if o.migMode || o.xid != "" {
			return errors.New("--mig and --xid need --mock (this program never changes a real GPU's settings)")
		}
		lib = nv.New()
	}
	if o.runDir == "" {
		d, err := os.MkdirTemp("", "nvml-node-")
		if err != nil {
			return err
		}
		o.runDir = d
	}

	qs := []queue.QueueSpec{{Name: nvml.DefaultHoldQueue}}
	var names []string
	for _, q := range strings.Split(o.queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			qs = append(qs, queue.QueueSpec{Name: q})
			names = append(names, q)
		}
	}
	if len(names) == 0 {
		return errors.New("--queues names no queue")
	}
	tree := queue.TreeSpec{Queues: qs}
	start := time.Now()
	say := newPrinter(start)
	say("%s", banner(o.mock, o.migMode))
	var pending sync.WaitGroup
	demoIDs := map[string]bool{}
	b, err := nvml.Open(ctx, nvml.Config{
		NVML: lib, NodeName: "box", RunDir: o.runDir, KillGrace: 2 * time.Second, Queues: &tree,
		OnExit: func(e nvml.Exit) {
			say("exit %s member %d: %s code %d%s on %s", e.Job, e.Member, e.Reason, e.Code, sig(e.Signal), e.Visible)
			if demoIDs[e.Job] && e.Reason != nvml.ReasonGPUFailed && e.Reason != nvml.ReasonPreempted {
				pending.Done()
			}
		},
		OnHealth: func(h nvml.Health) { say("health GPU %d: %s %s (critical %v)", h.GPU, h.Kind, h.Detail, h.Critical) },
	})
	if err != nil {
		return err
	}
	defer b.Close()
	show(say, b)

	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:     tree,
			Policy:     queue.StrictPriority(),
			Backfill:   engine.BackfillConfig{Mode: engine.BackfillEASY},
			Preemption: engine.PreemptionConfig{Priority: true},
		},
		Backend:      b,
		TickInterval: time.Second,
		Observe:      func(c backends.Cycle) { observe(say, c) },
	})
	if err != nil {
		return err
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	if o.spool != "" {
		if err := os.MkdirAll(o.spool, 0o755); err != nil {
			return err
		}
		say("watching spool %s", o.spool)
		go func() {
			if err := b.WatchSpool(runCtx, o.spool, time.Second); err != nil && runCtx.Err() == nil {
				say("spool: %v", err)
			}
		}()
	}
	if o.demo {
		n, err := submitDemo(ctx, b, names[0], o.migMode, demoIDs, &pending)
		if err != nil {
			return err
		}
		say("submitted %d demo jobs; output under %s", n, o.runDir)
		go func() { pending.Wait(); cancelRun() }()
	}
	if o.xid != "" {
		g, x, err := parseXID(o.xid)
		if err != nil {
			return err
		}
		time.AfterFunc(time.Second, func() { say("injecting XID %d on GPU %d", x, g); box.InjectXID(g, x) })
		// The operator's word brings the GPU back (a real one would first
		// check it, e.g. with a reset or a node reboot).
		time.AfterFunc(6*time.Second, func() {
			uuid := b.Devices()[g].UUID
			say("operator restores GPU %d (%s)", g, uuid)
			if err := b.Restore(ctx, uuid); err != nil {
				say("restore: %v", err)
			}
		})
	}
	err = <-done
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	if oos := b.OutOfService(); len(oos) > 0 {
		say("out of service until restored: %v", oos)
	}
	say("done")
	return err
}

func sig(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func parseXID(s string) (int, uint64, error) {
	gs, xs, ok := strings.Cut(s, ":")
	g, err1 := strconv.Atoi(gs)
	x, err2 := strconv.ParseUint(xs, 10, 64)
	if !ok || err1 != nil || err2 != nil || g < 0 || g > 7 {
		return 0, 0, fmt.Errorf("--xid %q: want GPU:XID, GPU 0..7", s)
	}
	return g, x, nil
}

func newPrinter(start time.Time) func(string, ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%6.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}

func show(say func(string, ...any), b *nvml.Backend) {
	for _, d := range b.Devices() {
		extra := ""
		if d.MIG {
			extra = fmt.Sprintf(" MIG %v", d.Layout)
		}
		say("GPU %d %s %s %d MiB bus %s NUMA %d NVLink peers %v%s", d.Index, d.UUID, d.Model, d.MemoryMiB, d.PCIBusID, d.NUMA, d.NVLinkPeers, extra)
	}
	sp, _ := b.Cluster(context.Background())
	say("topology: GPU levels %v, domains %v", sp.GPULevels, sp.Nodes[0].GPUDomains)
}

// banner is the first line printed: what the GPUs are.
func banner(mock string, mig bool) string {
	if mock == "" {
		return "running on this machine's GPUs through NVML (the NVIDIA driver's libnvidia-ml)"
	}
	s := "running on a MOCK: NVIDIA's go-nvml mock of a " + mock + " box, in this process; no real GPU or driver is used, " +
		"and the jobs' CUDA_VISIBLE_DEVICES name mock GPUs"
	if mig {
		s += " (in MIG mode)"
	}
	return s
}

// observe prints what a cycle did and why waiting jobs wait.
func observe(say func(string, ...any), c backends.Cycle) {
	for _, bd := range c.Ready.Binds {
		var parts []string
		for _, m := range bd.Members {
			if m.Fractional {
				parts = append(parts, fmt.Sprintf("GPU %d %v", m.GPUs[0], m.Instance))
			} else {
				parts = append(parts, fmt.Sprintf("GPUs %v", m.GPUs))
			}
		}
		refused := ""
		if slices.Contains(c.Outcome.RefusedBinds, bd.Job) {
			refused = " (refused)"
		}
		say("bind %s -> %s%s", bd.Job, strings.Join(parts, "; "), refused)
	}
	for _, p := range c.Ready.Preemptions {
		say("preempt %s for %s (%v), deadline in %v", p.Victim, p.For, p.Cause, time.Until(p.Deadline).Round(time.Millisecond))
	}
	for _, m := range c.Ready.MIG {
		say("MIG GPU %d: %v -> %v", m.GPU, m.From, m.To)
	}
	if len(c.Ready.Binds)+len(c.Ready.Preemptions) == 0 {
		return
	}
	for _, p := range c.Ready.Pending {
		why := p.Reason.String()
		if p.Reason == engine.ReasonCapacity || p.Reason == engine.ReasonReservedGPUs || p.Reason == engine.ReasonReconfiguring {
			why += ": " + p.Place.String()
		}
		if !p.Start.IsZero() {
			why += fmt.Sprintf(", expected start in %v", time.Until(p.Start).Round(time.Second))
		}
		say("waiting %s: %s", p.Job, why)
	}
}

// submitDemo queues a set of short jobs that fill the box and make one wait.
func submitDemo(ctx context.Context, b *nvml.Backend, q string, migMode bool, ids map[string]bool, wg *sync.WaitGroup) (int, error) {
	type demo struct {
		id      string
		members int
		gpus    int
		profile string
		secs    string
		prio    int32
	}
	jobs := []demo{
		{"train-a", 1, 4, "", "3", 0},
		{"train-b", 1, 4, "", "2", 0},
		{"big", 1, 8, "", "1", 0},
		{"pair", 2, 1, "", "1", 0},
	}
	if migMode {
		jobs = []demo{
			{"inf-1", 1, 0, "3g", "2", 0},
			{"inf-2", 1, 0, "3g", "2", 0},
			{"inf-3", 4, 0, "1g", "1", 0},
		}
	}
	now := time.Now()
	for i, d := range jobs {
		j := &queue.Job{
			ID: d.id, Queue: q, Priority: d.prio, Submit: now.Add(time.Duration(i) * time.Millisecond),
			Request:         gang.Request{Groups: []gang.Group{{Name: "member", Members: d.members, GPUsPerMember: d.gpus, MIGProfile: d.profile}}},
			RuntimeEstimate: 3 * time.Second, RuntimeLimit: time.Minute,
		}
		cmd := nvml.Command{Args: []string{"/bin/sh", "-c", `echo "$BERTH_JOB_ID/$BERTH_MEMBER on $CUDA_VISIBLE_DEVICES"; sleep ` + d.secs}}
		ids[d.id] = true
		wg.Add(d.members)
		if err := b.Submit(ctx, j, cmd); err != nil {
			return 0, err
		}
	}
	return len(jobs), nil
}
