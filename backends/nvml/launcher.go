package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
)

// Why a process ended (Exit.Reason).
const (
	ReasonCompleted   = "completed"     // exited by itself with status 0
	ReasonFailed      = "failed"        // exited by itself otherwise
	ReasonStartFailed = "start-failed"  // the command could not be started
	ReasonLimit       = "runtime-limit" // stopped at the job's RuntimeLimit
	ReasonPreempted   = "preempted"     // stopped by the engine's preemption
	ReasonGangFailed  = "gang-failed"   // stopped because another member failed
	ReasonGPUFailed   = "gpu-failed"    // stopped because its GPU had a critical error
	ReasonCancelled   = "cancelled"     // its job was cancelled (Cancel)
	ReasonShutdown    = "shutdown"      // the backend was closed
	ReasonRolledBack  = "rolled-back"   // unbound: its gang's bind rolled back, or an elastic shrink
)

// Exit is one process exit, also written as JSON to its .exit file.
type Exit struct {
	Job    string `json:"job"`
	Run    int    `json:"run"`
	Member int    `json:"member"`
	// GPUs are the node-local GPU indices; Visible what
	// CUDA_VISIBLE_DEVICES held.
	GPUs    []int  `json:"gpus"`
	Visible string `json:"visible"`
	PID     int    `json:"pid,omitempty"`
	// Code is the exit status, -1 when a signal ended the process
	// (Signal names it).
	Code   int       `json:"code"`
	Signal string    `json:"signal,omitempty"`
	Reason string    `json:"reason"`
	Error  string    `json:"error,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Stdout string    `json:"stdout"`
	Stderr string    `json:"stderr"`
}

// run is one run of a job: its bound members' processes.
type run struct {
	job       *queue.Job
	n         int
	dir       string
	procs     []*proc
	stopWhy   string // why it is being stopped; "" while running
	preempted bool   // stopped by Preempt: the engine requeues it
	requeued  bool   // stopped because its GPU failed: requeued by Next
	cancelled bool
	reported  bool // Finished pushed (or nothing to push)
	limit     *time.Timer
	deadline  time.Time // of a preemption
}

type proc struct {
	idx     int
	m       engine.Member
	visible string
	cmd     *exec.Cmd
	start   time.Time
	done    bool
	exiting bool          // the leader has exited (a zombie until reaped): no more signals from timers
	unbound bool          // stopped by UnbindMember
	gone    chan struct{} // closed when the member has exited (GPUs back)
	kill    *time.Timer
	killAt  time.Time
	exit    Exit
}

func (r *run) active() int {
	n := 0
	for _, p := range r.procs {
		if !p.done {
			n++
		}
	}
	return n
}

// usesGPU reports whether a live member of r is on GPU g.
func (r *run) usesGPU(g int) bool {
	for _, p := range r.procs {
		if !p.done && slices.Contains(p.m.GPUs, g) {
			return true
		}
	}
	return false
}

// stoppingOn reports whether a run being stopped, or a member unbound and
// killed, still has a process on GPU g: the GPU is free in the engine's
// books, and will be here within the kill grace.
func (b *Backend) stoppingOn(g int) bool {
	for _, r := range b.allRuns() {
		if r.stopWhy != "" && r.usesGPU(g) {
			return true
		}
		for _, p := range r.procs {
			if p.unbound && !p.done && slices.Contains(p.m.GPUs, g) {
				return true
			}
		}
	}
	return false
}

func (b *Backend) allRuns() []*run {
	out := slices.Clone(b.stopping)
	for _, r := range b.runs {
		out = append(out, r)
	}
	return out
}

// BindMember starts one member of a job submitted through Submit (or the
// spool): its command, with CUDA_VISIBLE_DEVICES set to the UUIDs of the
// member's GPUs or of its MIG instance (created first when m.Created).
// Refused (backends.ErrRefused): an unknown job or node, GPUs out of
// range or listed twice, failed (quarantined) or used by a running job,
// whole GPUs on a MIG box, a MIG instance that is missing, in use or not
// valid in berth's geometry next to the GPU's layout, and shares (time-slicing and MPS are not run by
// this backend). A command that cannot be started is not a refusal: the
// member exits at once (ReasonStartFailed) and the job is reported
// finished. A GPU (or instance) still held by the processes of a job being
// stopped (preempted, requeued, past its limit) is ErrBusy, which the
// Runner retries: they are gone within the kill grace.
func (b *Backend) BindMember(ctx context.Context, jobID string, m engine.Member) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Node != b.node {
		return refused("job %q: node %q is not this box (%s)", jobID, m.Node, b.node)
	}
	if len(m.GPUs) == 0 {
		return refused("job %q: member without GPUs", jobID)
	}
	for i, g := range m.GPUs {
		if g < 0 || g >= len(b.devs) {
			return refused("job %q: no GPU %d", jobID, g)
		}
		if slices.Contains(m.GPUs[:i], g) {
			return refused("job %q: GPU %d listed twice", jobID, g)
		}
	}
	if m.Fractional {
		// MIG changes and instance binds of one GPU are serialised.
		b.migMu[m.GPUs[0]].Lock()
		defer b.migMu[m.GPUs[0]].Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	je := b.jobs[jobID]
	if je == nil {
		return refused("unknown job %q", jobID)
	}
	if b.closed {
		return refused("backend closed")
	}
	for _, g := range m.GPUs {
		if bg := b.bad[g]; bg != nil {
			return refused("job %q: GPU %d (%s) is out of service: %s", jobID, g, b.devs[g].UUID, bg.reason)
		}
	}
	r := b.runs[jobID]
	if r != nil && !r.preempted && !r.requeued {
		for _, p := range r.procs {
			if sameMember(p.m, m) {
				return nil // bound already
			}
		}
	}
	var visible string
	switch {
	case !m.Fractional:
		if b.model.Valid() {
			return refused("job %q: whole GPUs %v on a box in MIG mode", jobID, m.GPUs)
		}
		var uu []string
		for _, g := range m.GPUs {
			if u := b.gpuUser[g]; u != "" {
				if b.stoppingOn(g) {
					return fmt.Errorf("%w: job %q: GPU %d is still held by %q, which is stopping", ErrBusy, jobID, g, u)
				}
				return refused("job %q: GPU %d is used by %q", jobID, g, u)
			}
			uu = append(uu, b.devs[g].UUID)
		}
		visible = strings.Join(uu, ",")
	case m.Share.ID != 0:
		return refused("job %q: GPU shares (time-slicing, MPS) are not run by the NVML backend", jobID)
	default:
		u, err := b.bindInstance(jobID, m)
		if err != nil {
			return err
		}
		visible = u
	}
	if r == nil || r.preempted || r.requeued {
		if r != nil {
			b.stopping = append(b.stopping, r)
		}
		b.seq++
		r = &run{job: je.job, n: b.seq}
		r.dir = filepath.Join(b.cfg.RunDir, jobID, "run-"+strconv.Itoa(r.n))
		b.runs[jobID] = r
	}
	p := &proc{idx: len(r.procs), m: cloneMember(m), visible: visible, gone: make(chan struct{})}
	r.procs = append(r.procs, p)
	b.hold(jobID, p.m)
	if r.stopWhy != "" || r.reported {
		// The gang has failed or ended already: this member does not start.
		b.exited(r, p, Exit{Code: -1, Reason: r.stopWhyOr(ReasonGangFailed), Error: "not started: the run is ending"})
		return nil
	}
	b.start(je, r, p)
	return nil
}

func (r *run) stopWhyOr(s string) string {
	if r.stopWhy != "" {
		return r.stopWhy
	}
	return s
}

func cloneMember(m engine.Member) engine.Member {
	m.GPUs = slices.Clone(m.GPUs)
	return m
}

func sameMember(a, b engine.Member) bool {
	return a.Node == b.Node && slices.Equal(a.GPUs, b.GPUs) && a.Fractional == b.Fractional &&
		a.Instance == b.Instance && a.Share.ID == b.Share.ID
}

// bindInstance checks (and creates) the MIG instance of m and returns its
// MIG device UUID. Called with migMu of the GPU and mu held.
func (b *Backend) bindInstance(jobID string, m engine.Member) (string, error) {
	if len(m.GPUs) != 1 {
		return "", refused("job %q: MIG member on %d GPUs", jobID, len(m.GPUs))
	}
	g, in := m.GPUs[0], m.Instance
	switch {
	case !b.model.Valid():
		return "", refused("job %q: MIG instance %v on GPU %d, which is not in MIG mode", jobID, in, g)
	case in.Profile.Model() != b.model:
		return "", refused("job %q: instance %v is not of this box's model %v", jobID, in, b.model)
	}
	if u := b.instUse[g][in]; u != "" {
		if b.stoppingOn(g) {
			return "", fmt.Errorf("%w: job %q: instance %v of GPU %d is still held by %q, which is stopping", ErrBusy, jobID, in, g, u)
		}
		return "", refused("job %q: instance %v of GPU %d is used by %q", jobID, in, g, u)
	}
	l := b.layouts[g]
	if !l.Has(in) {
		if !m.Created {
			return "", refused("job %q: instance %v does not exist on GPU %d (%v)", jobID, in, g, l)
		}
		nl, err := l.Place(in)
		if err != nil {
			return "", refused("job %q: cannot create %v on GPU %d (%v): %v", jobID, in, g, l, err)
		}
		if err := createInstance(b.devs[g].dev, in); err != nil {
			b.resyncLayout(g)
			return "", refused("job %q: creating %v on GPU %d: %v", jobID, in, g, err)
		}
		b.layouts[g] = nl
	}
	u, err := migUUID(b.devs[g].dev, in)
	if err != nil {
		return "", refused("job %q: %v on GPU %d: %v", jobID, in, g, err)
	}
	return u, nil
}

// resyncLayout re-reads GPU g's layout after a failed NVML step; a layout
// that cannot be read takes the GPU out of service.
func (b *Backend) resyncLayout(g int) {
	l, err := readLayout(b.devs[g].dev, b.model)
	if err != nil {
		b.quarantineLocked(g, "MIG layout unknown after a failed change: "+err.Error())
		return
	}
	b.layouts[g] = l
}

func (b *Backend) hold(jobID string, m engine.Member) {
	if m.Fractional {
		b.instUse[m.GPUs[0]][m.Instance] = jobID
		return
	}
	for _, g := range m.GPUs {
		b.gpuUser[g] = jobID
	}
}

func (b *Backend) unhold(jobID string, m engine.Member) {
	if m.Fractional {
		if b.instUse[m.GPUs[0]][m.Instance] == jobID {
			delete(b.instUse[m.GPUs[0]], m.Instance)
		}
		return
	}
	for _, g := range m.GPUs {
		if b.gpuUser[g] == jobID {
			b.gpuUser[g] = ""
		}
	}
}

// start launches p. Called with mu held.
func (b *Backend) start(je *jobEntry, r *run, p *proc) {
	now := time.Now()
	p.start = now
	fail := func(err error) {
		b.exited(r, p, Exit{Code: -1, Reason: ReasonStartFailed, Error: err.Error()})
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		fail(err)
		return
	}
	base := filepath.Join(r.dir, "member-"+strconv.Itoa(p.idx))
	stdout, err := os.Create(base + ".out")
	if err != nil {
		fail(err)
		return
	}
	stderr, err := os.Create(base + ".err")
	if err != nil {
		_ = stdout.Close()
		fail(err)
		return
	}
	env := b.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(slices.Clone(env), je.cmd.Env...)
	env = append(env, "CUDA_VISIBLE_DEVICES="+p.visible, "BERTH_JOB_ID="+r.job.ID, "BERTH_MEMBER="+strconv.Itoa(p.idx))
	cmd := exec.Command(je.cmd.Args[0], je.cmd.Args[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, je.cmd.Dir, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group, killed whole
	err = cmd.Start()
	_ = stdout.Close()
	_ = stderr.Close()
	if err != nil {
		fail(err)
		return
	}
	p.cmd = cmd
	if len(r.procs) == 1 && r.job.RuntimeLimit > 0 {
		grace := r.job.GracePeriod
		if grace <= 0 {
			grace = b.cfg.KillGrace
		}
		r.limit = time.AfterFunc(r.job.RuntimeLimit, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.stopLocked(r, ReasonLimit, grace)
		})
	}
	b.wg.Add(1)
	go b.wait(r, p)
}

// wait reaps p and records its exit.
func (b *Backend) wait(r *run, p *proc) {
	defer b.wg.Done()
	// Children left in its process group go with it. The group is killed
	// while the leader is a zombie (waitid with WNOWAIT), so its id cannot
	// have been reused by another process group yet.
	pid := p.cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	b.mu.Lock()
	p.exiting = true // from here on only this goroutine signals the group
	b.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	err := p.cmd.Wait()
	e := Exit{PID: p.cmd.Process.Pid, Code: p.cmd.ProcessState.ExitCode()}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = ws.Signal().String()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.Error = err.Error()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case p.unbound:
		e.Reason = ReasonRolledBack
	case r.stopWhy != "":
		e.Reason = r.stopWhy
	case e.Code == 0:
		e.Reason = ReasonCompleted
	default:
		e.Reason = ReasonFailed
	}
	b.exited(r, p, e)
}

// exited records p's exit: files, callback, GPUs back, the rest of a
// failed gang stopped, and the job's end reported when it was its last
// member. Called with mu held.
func (b *Backend) exited(r *run, p *proc, e Exit) {
	if p.done {
		return
	}
	p.done = true
	close(p.gone)
	if p.kill != nil {
		p.kill.Stop()
	}
	base := filepath.Join(r.dir, "member-"+strconv.Itoa(p.idx))
	e.Job, e.Run, e.Member, e.GPUs, e.Visible = r.job.ID, r.n, p.idx, slices.Clone(p.m.GPUs), p.visible
	e.Start, e.End = p.start, time.Now()
	if e.Start.IsZero() {
		e.Start = e.End
	}
	e.Stdout, e.Stderr = base+".out", base+".err"
	p.exit = e
	b.unhold(r.job.ID, p.m)
	if err := os.MkdirAll(r.dir, 0o755); err == nil {
		if data, err := json.MarshalIndent(e, "", "  "); err == nil {
			_ = os.WriteFile(base+".exit", append(data, '\n'), 0o644)
		}
	}
	if cb := b.cfg.OnExit; cb != nil {
		b.cb.add(func() { cb(e) })
	}
	if (e.Reason == ReasonFailed || e.Reason == ReasonStartFailed) && r.stopWhy == "" {
		b.stopLocked(r, ReasonGangFailed, b.cfg.KillGrace)
	}
	if r.active() > 0 {
		return
	}
	if r.limit != nil {
		r.limit.Stop()
	}
	b.stopping = slices.DeleteFunc(b.stopping, func(x *run) bool { return x == r })
	if r.reported || r.preempted || r.requeued || r.cancelled || r.stopWhy == ReasonShutdown || r.allUnbound() {
		// The engine requeues a preempted job itself; Next requeues one
		// whose GPU failed; a cancelled or rolled-back one needs nothing.
		if b.runs[r.job.ID] == r && !r.reported {
			delete(b.runs, r.job.ID)
		}
		return
	}
	// The ended run stays the job's current one: a member of the same
	// gang bound after this does not start, and a rollback of the gang
	// takes the Finished event back (see UnbindMember).
	r.reported = true
	b.push(engine.Finished(time.Now(), r.job.ID))
}

func (r *run) allUnbound() bool {
	for _, p := range r.procs {
		if !p.unbound {
			return false
		}
	}
	return true
}

// stopLocked stops every live member of r: SIGTERM to its process group,
// SIGKILL after grace. Called with mu held.
func (b *Backend) stopLocked(r *run, why string, grace time.Duration) {
	if r.stopWhy == "" || why == ReasonGPUFailed && !r.preempted || why == ReasonShutdown {
		r.stopWhy = why
	}
	for _, p := range r.procs {
		if p.done || p.exiting || p.cmd == nil {
			continue
		}
		if grace <= 0 {
			b.signalLocked(p, syscall.SIGKILL)
			continue
		}
		b.signalLocked(p, syscall.SIGTERM)
		at := time.Now().Add(grace)
		switch {
		case p.kill == nil:
			p.kill = time.AfterFunc(grace, func() {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.signalLocked(p, syscall.SIGKILL)
			})
			p.killAt = at
		case at.Before(p.killAt):
			p.kill.Reset(grace)
			p.killAt = at
		}
	}
}

// signalLocked signals p's process group while its leader has not
// exited: the group id cannot belong to anyone else then. Called with mu
// held.
func (b *Backend) signalLocked(p *proc, sig syscall.Signal) {
	if p.cmd == nil || p.done || p.exiting {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// UnbindMember stops one member (rollback of a half-bound gang, shrink
// of an elastic job, a bind the Runner gave up on) with SIGKILL and
// returns once its process has exited and its GPUs are free (or with
// ctx's error, the member still stopping); a MIG instance it created is
// destroyed again. No event is reported. A member not bound: nil.
func (b *Backend) UnbindMember(ctx context.Context, jobID string, m engine.Member) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Fractional && len(m.GPUs) == 1 && m.GPUs[0] >= 0 && m.GPUs[0] < len(b.devs) {
		b.migMu[m.GPUs[0]].Lock()
		defer b.migMu[m.GPUs[0]].Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.runs[jobID]
	if r == nil {
		return nil
	}
	i := slices.IndexFunc(r.procs, func(p *proc) bool { return sameMember(p.m, m) })
	if i < 0 {
		return nil
	}
	p := r.procs[i]
	p.unbound = true
	if !p.done {
		// The engine frees the member's GPUs when this returns: wait
		// for the process (SIGKILL takes moments), so that a bind on
		// them next is not refused as a double booking.
		b.signalLocked(p, syscall.SIGKILL)
		b.mu.Unlock()
		select {
		case <-p.gone:
		case <-ctx.Done():
		}
		b.mu.Lock()
		if !p.done {
			return fmt.Errorf("job %q: member %d still stopping: %w", jobID, p.idx, ctx.Err())
		}
	}
	if r.reported && r.allUnbound() && b.runs[jobID] == r {
		// The gang is rolled back after its members had all exited: the
		// engine puts the job back to pending, so the Finished event
		// queued for it is taken back.
		r.reported = false
		b.evs = slices.DeleteFunc(b.evs, func(e engine.Event) bool {
			return e.Kind == engine.EventJobFinished && e.JobID == jobID
		})
		delete(b.runs, jobID)
	}
	if m.Fractional && m.Created {
		g := m.GPUs[0]
		if b.instUse[g][m.Instance] == jobID {
			delete(b.instUse[g], m.Instance)
		}
		if b.layouts[g].Has(m.Instance) {
			if err := destroyInstance(b.devs[g].dev, m.Instance); err != nil {
				b.resyncLayout(g)
				return fmt.Errorf("job %q: destroying %v on GPU %d: %w", jobID, m.Instance, g, err)
			}
			b.layouts[g], _ = b.layouts[g].Remove(m.Instance)
		}
	}
	return nil
}

// Preempt stops a running job: SIGTERM to every member's process group,
// SIGKILL at p.Deadline. The job is not reported finished (the engine
// requeues it at the deadline). A job that is not running is refused.
func (b *Backend) Preempt(ctx context.Context, p engine.Preemption) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.runs[p.Victim]
	if r == nil || r.reported || r.preempted || r.requeued || r.active() == 0 {
		return refused("preemption of %q, which is not running", p.Victim)
	}
	r.preempted, r.deadline = true, p.Deadline
	for _, pr := range r.procs {
		for _, g := range pr.m.GPUs {
			if p.Deadline.After(b.busyTill[g]) {
				b.busyTill[g] = p.Deadline
			}
		}
	}
	r.stopWhy = ReasonPreempted
	grace := time.Until(p.Deadline)
	b.stopLocked(r, ReasonPreempted, grace)
	if grace > 0 {
		return nil
	}
	// Past its deadline already (the call came late: the Runner issues it
	// on a goroutine, after the job's earlier calls): the engine requeues
	// the victim, and may reuse its GPUs, as soon as this returns. Wait for
	// its processes (SIGKILL takes moments), as UnbindMember does.
	var gone []chan struct{}
	for _, pr := range r.procs {
		if !pr.done {
			gone = append(gone, pr.gone)
		}
	}
	b.mu.Unlock()
	defer b.mu.Lock()
	for _, g := range gone {
		select {
		case <-g:
		case <-ctx.Done():
			return fmt.Errorf("preemption of %q: still stopping: %w", p.Victim, ctx.Err())
		}
	}
	return nil
}

// MIGLayout reads GPU gpu's MIG layout from NVML now
// (backends.MIGReporter): the truth the Runner reads after an ApplyMIG
// call timed out, or after a restart with a change in flight. ApplyMIG is
// not idempotent (a change already made is refused as stale: the layout
// is not r.From), so the Runner never calls it again for a change whose
// outcome is unknown: it reads the layout instead (r.To: made; r.From:
// not). The read waits for an ApplyMIG of the same GPU in progress (a
// layout is never read half changed); the Runner bounds that wait by its
// CallTimeout. Refused: another node, or a GPU that is not a MIG GPU.
func (b *Backend) MIGLayout(ctx context.Context, node string, gpu int) (mig.Layout, error) {
	if err := ctx.Err(); err != nil {
		return mig.Layout{}, err
	}
	if node != b.node {
		return mig.Layout{}, refused("MIG layout of node %q, not this box (%s)", node, b.node)
	}
	if gpu < 0 || gpu >= len(b.devs) || !b.model.Valid() {
		return mig.Layout{}, refused("MIG layout of GPU %d, which is not a MIG GPU of %s", gpu, b.node)
	}
	b.migMu[gpu].Lock()
	defer b.migMu[gpu].Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, err := readLayout(b.devs[gpu].dev, b.model)
	if err != nil {
		return mig.Layout{}, fmt.Errorf("MIG layout of GPU %d: %w", gpu, err)
	}
	b.layouts[gpu] = cur
	return cur, nil
}

// ApplyMIG changes GPU r.GPU from r.From to r.To: destroy r.Destroy, then
// create r.Create with CreateGpuInstanceWithPlacement and one compute
// instance each. Every step is checked first against berth's geometry (the
// driver is never asked for a layout berth thinks invalid). Refused: the
// GPU is not in MIG mode, out of service, its layout is not r.From (read
// from NVML now), the steps do not lead to r.To, or an instance to destroy
// is in use. When an NVML step fails, the steps done are undone in reverse
// order so the GPU is back at r.From, and the change is refused; if even
// that fails, the GPU is taken out of service with its layout re-read.
func (b *Backend) ApplyMIG(ctx context.Context, r engine.MIGReconfiguration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.Node != b.node {
		return refused("MIG change on node %q, not this box (%s)", r.Node, b.node)
	}
	if r.GPU < 0 || r.GPU >= len(b.devs) || !b.model.Valid() {
		return refused("MIG change on GPU %d, which is not a MIG GPU of %s", r.GPU, b.node)
	}
	if r.NeedsReset {
		return refused("MIG change on GPU %d needs a reset (a MIG mode switch), which the NVML backend never does", r.GPU)
	}
	g := r.GPU
	b.migMu[g].Lock()
	defer b.migMu[g].Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if bg := b.bad[g]; bg != nil {
		return refused("MIG change on GPU %d, which is out of service: %s", g, bg.reason)
	}
	d := b.devs[g].dev
	cur, err := readLayout(d, b.model)
	if err != nil {
		return refused("MIG change on GPU %d: %v", g, err)
	}
	b.layouts[g] = cur
	if cur != r.From {
		return refused("MIG change on GPU %d from %v: the layout is %v", g, r.From, cur)
	}
	l := r.From
	for _, in := range r.Destroy {
		if u := b.instUse[g][in]; u != "" {
			return refused("MIG change on GPU %d destroys %v, in use by %q", g, in, u)
		}
		if l, err = l.Remove(in); err != nil {
			return refused("MIG change on GPU %d: destroy: %v", g, err)
		}
	}
	for _, in := range r.Create {
		if l, err = l.Place(in); err != nil {
			return refused("MIG change on GPU %d: create: %v", g, err)
		}
	}
	if l != r.To {
		return refused("MIG change on GPU %d: destroying and creating gives %v, not %v", g, l, r.To)
	}
	type step struct {
		in      mig.Instance
		created bool
	}
	var done []step
	fail := func(err error) error {
		for i := len(done) - 1; i >= 0; i-- {
			s := done[i]
			var uerr error
			if s.created {
				uerr = destroyInstance(d, s.in)
			} else {
				uerr = createInstance(d, s.in)
			}
			if uerr != nil {
				break
			}
		}
		back, rerr := readLayout(d, b.model)
		switch {
		case rerr != nil:
			b.quarantineLocked(g, "MIG layout unreadable after a failed change: "+rerr.Error())
		case back != r.From:
			b.layouts[g] = back
			b.quarantineLocked(g, fmt.Sprintf("MIG change failed and could not be undone: the layout is %v, the engine's %v", back, r.From))
		default:
			b.layouts[g] = back
		}
		return refused("MIG change on GPU %d (%v -> %v) failed, GPU left at %v: %v", g, r.From, r.To, b.layouts[g], err)
	}
	for _, in := range r.Destroy {
		if err := destroyInstance(d, in); err != nil {
			return fail(err)
		}
		done = append(done, step{in, false})
	}
	for _, in := range r.Create {
		if err := createInstance(d, in); err != nil {
			return fail(err)
		}
		done = append(done, step{in, true})
	}
	after, err := readLayout(d, b.model)
	if err != nil || after != r.To {
		return fail(fmt.Errorf("after the change the GPU reads %v (%v), not %v", after, err, r.To))
	}
	b.layouts[g] = after
	return nil
}
