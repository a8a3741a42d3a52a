package slurm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// Services (engine.Service) on SLURM: every replica is a SLURM job.
//
// A site declares a service with SetService (and scales or deletes it with
// ScaleService and DeleteService): the backend feeds the engine the event
// (engine.ServiceSet, ServiceScaled, ServiceDeleted) on its next Next, and
// keeps what a replica runs (ReplicaRun). The engine makes the replicas
// "<service>/<n>" and binds them like any gang. A replica has no SLURM job
// before it is bound: BindGang creates it with one sbatch straight into
// RunPartition, on exactly the nodes berth chose (--nodelist, -N, one
// --gres=gpu[:type]:K per node), named after the replica (-J) and tagged
// in its comment ("berth:replica=<service>/<n> berth:queue=<queue>"), with
// --no-requeue (a replica that loses its node ends and the engine replaces
// it). The poller reports the GPU indices SLURM gave (DevicesReported) and
// the replica's own end (Finished, Cancelled for scancel); StopReplica
// scancels it and reports nothing (the engine already removed it); a
// preempted replica gets SIGTERM, then scancel at its deadline, and is
// bound again later as a new SLURM job. After a restart, Running reports
// the running replica jobs (by their tag) so the engine adopts them;
// replica jobs not started yet are cancelled (the engine places their
// replicas again).

// ErrBadService: SetService, ScaleService or DeleteService got a service
// the backend cannot run (wrapped with the reason).
var ErrBadService = errors.New("slurm: bad service")

// ReplicaRun is what one replica of a service runs: Script (a batch
// script's path, readable where berth runs; sbatch copies it) with Args,
// or Wrap (a command line, sbatch --wrap). Exactly one of Script and Wrap
// is set.
type ReplicaRun struct {
	Script string
	Args   []string
	Wrap   string
	// Output is the replica's standard output and error file (sbatch -o;
	// SLURM's %j and %x patterns work). Empty: /dev/null.
	Output string
	// TimeLimit, if positive, is sbatch --time (whole minutes, rounded
	// up); zero leaves RunPartition's default. A replica that reaches it
	// ends and the engine replaces it.
	TimeLimit time.Duration
}

const (
	replicaTag = "berth:replica="
	queueTag   = "berth:queue="
)

var (
	serviceNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	replicaIDRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}/[1-9][0-9]{0,8}$`)
	queueNameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
)

// isReplicaJob says whether the engine's job ID names a replica of a
// service this backend knows (declared, or a replica job it tracks),
// rather than a SLURM job or a job LaunchJob submitted.
func (b *Backend) isReplicaJob(id string) bool {
	if !replicaIDRE.MatchString(id) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, launched := b.toSlurm[id]; launched || b.svc == nil {
		return false
	}
	return b.svc.specs[id[:strings.IndexByte(id, '/')]] != nil || b.svc.reps[id] != nil
}

// svcState is what the backend keeps of its services and replica jobs
// (under Backend.mu).
type svcState struct {
	specs map[string]*svcSpec
	reps  map[string]*repJob // by replica ID
}

type svcSpec struct {
	svc engine.Service // a copy; the engine owns the one it was given
	run ReplicaRun
}

// replica job states.
const (
	repBinding   = iota + 1 // sbatch in flight: its SLURM job ID is not known yet
	repRunning              // created (pending in RunPartition until SLURM starts it, or running)
	repPreempted            // stopped by a preemption: its end is not reported
)

type repJob struct {
	state   int
	slurmID string
	nodes   []string
	devices string           // the gres detail last reported
	booked  map[string][]int // the GPUs berth booked per node, until SLURM's are known
	created time.Time        // when its sbatch returned
}

// svcs returns the service state, creating it. b.mu is held.
func (b *Backend) svcs() *svcState {
	if b.svc == nil {
		b.svc = &svcState{specs: map[string]*svcSpec{}, reps: map[string]*repJob{}}
	}
	return b.svc
}

// SetService declares service svc (or replaces its spec) with what its
// replicas run; the engine gets engine.ServiceSet on the next Next. The
// backend keeps a copy of svc. Errors wrap ErrBadService: a nil service, a
// name or queue SLURM's commands cannot carry, a replica request other
// than one group of whole GPUs (no MIG profile or fraction on SLURM), a
// ReplicaRun without exactly one of Script and Wrap. The engine checks
// the rest (counts, queue, fit) when it steps the event; a spec it
// rejects is logged by the Runner (RunnerConfig.OnStepError).
func (b *Backend) SetService(svc *engine.Service, run ReplicaRun) error {
	if svc == nil {
		return fmt.Errorf("%w: nil service", ErrBadService)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: service %q: "+format, append([]any{ErrBadService, svc.Name}, args...)...)
	}
	if !serviceNameRE.MatchString(svc.Name) {
		return bad("name (want letters, digits, _ . -; at most 64)")
	}
	if !queueNameRE.MatchString(svc.Queue) {
		return bad("queue name %q", svc.Queue)
	}
	if a := svc.Replica.Account; a != "" && !queueNameRE.MatchString(a) {
		return bad("account %q", a)
	}
	gs := svc.Replica.Request.Groups
	if len(gs) != 1 || gs[0].Members < 1 || gs[0].GPUsPerMember < 1 || gs[0].MIGProfile != "" || gs[0].GPUMilli != 0 {
		return bad("a replica on SLURM is one group of whole GPUs per node (no MIG profile, no fraction)")
	}
	if m := gs[0].GPUModel; m != "" && !levelRE.MatchString(m) {
		return bad("GPU model %q", m)
	}
	if (run.Script == "") == (run.Wrap == "") {
		return bad("ReplicaRun needs exactly one of Script and Wrap")
	}
	if strings.HasPrefix(run.Script, "-") || strings.HasPrefix(run.Output, "-") || run.TimeLimit < 0 {
		return bad("ReplicaRun: bad Script, Output or TimeLimit")
	}
	mine := *svc
	mine.Replica.Request.Groups = slices.Clone(gs)
	run.Args = slices.Clone(run.Args)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.svcs().specs[svc.Name] = &svcSpec{svc: mine, run: run}
	b.queued = append(b.queued, engine.ServiceSet(time.Now(), svc))
	return nil
}

// ScaleService sets the desired replica count of service name: the engine
// gets engine.ServiceScaled on the next Next. ErrBadService for a service
// SetService never declared (the engine checks the count).
func (b *Backend) ScaleService(name string, desired int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	sp := b.svcs().specs[name]
	if sp == nil {
		return fmt.Errorf("%w: unknown service %q", ErrBadService, name)
	}
	b.queued = append(b.queued, engine.ServiceScaled(time.Now(), name, desired))
	return nil
}

// DeleteService deletes service name: the engine gets
// engine.ServiceDeleted on the next Next and stops its replicas
// (StopReplica). What a replica runs stays known until then, so binds
// still in flight find it.
func (b *Backend) DeleteService(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.svcs().specs[name] == nil {
		return fmt.Errorf("%w: unknown service %q", ErrBadService, name)
	}
	b.queued = append(b.queued, engine.ServiceDeleted(time.Now(), name))
	return nil
}

// bindReplica creates replica job's SLURM job on the nodes of ms (see the
// services comment above). Refusals wrap backends.ErrRefused.
func (b *Backend) bindReplica(ctx context.Context, job string, ms []engine.Member) error {
	if !replicaIDRE.MatchString(job) {
		return fmt.Errorf("%w: %w: replica ID %q", backends.ErrRefused, ErrBadArgument, job)
	}
	name := job[:strings.IndexByte(job, '/')]
	b.mu.Lock()
	st := b.svcs()
	sp := st.specs[name]
	if sp == nil {
		b.mu.Unlock()
		return fmt.Errorf("%w: replica %s: service %q was not declared with SetService", backends.ErrRefused, job, name)
	}
	if r := st.reps[job]; r != nil && r.state != repPreempted {
		b.mu.Unlock()
		return fmt.Errorf("%w: replica %s is already bound (SLURM job %s)", backends.ErrRefused, job, r.slurmID)
	}
	g := sp.svc.Replica.Request.Groups[0]
	run := sp.run
	account := sp.svc.Replica.Account
	qname := sp.svc.Queue
	b.mu.Unlock()

	per := map[string]int{}
	var order []string
	for _, m := range ms {
		if err := checkNode(m.Node); err != nil {
			return fmt.Errorf("%w: %w", backends.ErrRefused, err)
		}
		if m.Fractional {
			return fmt.Errorf("%w: replica %s: fractional and MIG GPUs are not supported on SLURM", backends.ErrRefused, job)
		}
		if _, seen := per[m.Node]; !seen {
			order = append(order, m.Node)
		}
		per[m.Node] += len(m.GPUs)
	}
	if len(order) != g.Members {
		return fmt.Errorf("%w: replica %s asks %d nodes, berth placed it on %d", backends.ErrRefused, job, g.Members, len(order))
	}
	for _, n := range order {
		if per[n] != g.GPUsPerMember {
			return fmt.Errorf("%w: replica %s: %d GPUs on %s, the template asks %d per node", backends.ErrRefused, job, per[n], n, g.GPUsPerMember)
		}
	}
	gres := "gpu:" + strconv.Itoa(g.GPUsPerMember)
	if g.GPUModel != "" {
		gres = "gpu:" + strings.ToLower(g.GPUModel) + ":" + strconv.Itoa(g.GPUsPerMember)
	}
	out := run.Output
	if out == "" {
		out = "/dev/null"
	}
	args := []string{"--parsable", "--no-requeue", "-o", out,
		"-p", b.cfg.RunPartition, "-N", strconv.Itoa(len(order)), "--nodelist=" + strings.Join(order, ","),
		"--gres=" + gres, "-J", job, "--comment=" + replicaTag + job + " " + queueTag + qname}
	if account != "" {
		args = append(args, "-A", account)
	}
	if run.TimeLimit > 0 {
		args = append(args, "--time="+strconv.FormatInt(int64((run.TimeLimit+time.Minute-1)/time.Minute), 10))
	}
	if run.Wrap != "" {
		args = append(args, "--wrap", run.Wrap)
	} else {
		args = append(append(args, run.Script), run.Args...)
	}

	b.mu.Lock()
	b.svcs().reps[job] = &repJob{state: repBinding}
	b.mu.Unlock()
	start := time.Now()
	outb, err := b.cli.run(context.WithoutCancel(ctx), "sbatch", args...)
	id := ""
	if err == nil {
		id, _, _ = strings.Cut(strings.TrimSpace(string(outb)), ";")
		if checkJobID(id) != nil {
			err = fmt.Errorf("%w: sbatch --parsable printed %q", ErrParse, outb)
		}
	}
	if err != nil && !errors.Is(err, ErrCommand) {
		// A timeout: the job may exist. Look it up by its name.
		id = b.findReplicaJob(ctx, job)
		if id != "" {
			err = nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Binds++
	b.stats.BindTime += time.Since(start)
	if err != nil {
		delete(b.svcs().reps, job)
		return refusal(err)
	}
	booked := map[string][]int{}
	for _, m := range ms {
		booked[m.Node] = append(booked[m.Node], m.GPUs...)
	}
	b.svcs().reps[job] = &repJob{state: repRunning, slurmID: id, nodes: order, booked: booked, created: time.Now()}
	return nil
}

// findReplicaJob returns the SLURM job ID of replica job in RunPartition,
// or "" when there is none or squeue fails.
func (b *Backend) findReplicaJob(ctx context.Context, job string) string {
	out, err := b.cli.run(ctx, "squeue", "-h", "-n", job, "-p", b.cfg.RunPartition, "-t", "PD,R,CF", "-o", "%i|%k")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		id, comment, ok := strings.Cut(strings.TrimSpace(line), "|")
		if ok && checkJobID(id) == nil {
			if rid, _ := replicaOf(comment); rid == job {
				return id
			}
		}
	}
	return ""
}

// replicaOf reads a replica job's comment: its replica ID and queue.
func replicaOf(comment string) (id, queueName string) {
	for _, f := range strings.Fields(comment) {
		if v, ok := strings.CutPrefix(f, replicaTag); ok && replicaIDRE.MatchString(v) {
			id = v
		} else if v, ok := strings.CutPrefix(f, queueTag); ok {
			queueName = v
		}
	}
	return id, queueName
}

// replicaRec says whether r is a replica job (in RunPartition, with the
// tag) and returns its replica ID.
func (b *Backend) replicaRec(r *jobRec) (string, bool) {
	if r.Partition != b.cfg.RunPartition {
		return "", false
	}
	if !r.detail {
		// Read without its comment (read.go): a replica berth created,
		// known by its SLURM ID (b.mu is held on this path).
		if b.svc != nil {
			sid := recID(r)
			for rid, rp := range b.svc.reps {
				if rp.slurmID == sid {
					return rid, true
				}
			}
		}
		return "", false
	}
	id, _ := replicaOf(r.Comment)
	return id, id != ""
}

// StopReplica cancels the SLURM job of a replica the engine removed
// (backends.ReplicaStopper), without reporting its end. A replica with no
// SLURM job is a no-op. When scancel fails the replica is forgotten all
// the same: the poller cancels the job it finds without a replica
// (an orphan).
func (b *Backend) StopReplica(ctx context.Context, st engine.Stop) error {
	b.mu.Lock()
	s := b.svcs()
	r := s.reps[st.Job]
	if r == nil {
		b.mu.Unlock()
		return nil
	}
	delete(s.reps, st.Job)
	if t := b.timers[st.Job]; t != nil {
		t.Stop()
		delete(b.timers, st.Job)
	}
	id := r.slurmID
	b.mu.Unlock()
	if id == "" {
		return nil // its sbatch is in flight: the poller cancels the orphan
	}
	return b.scancelReplica(ctx, id)
}

func (b *Backend) scancelReplica(ctx context.Context, id string) error {
	_, err := b.cli.run(ctx, "scancel", id)
	if err != nil && strings.Contains(err.Error(), "Invalid job id") {
		return nil // gone already
	}
	return err
}

// preemptReplica stops a running replica for a preemption: SIGTERM now,
// scancel at p.Deadline (at once when it has passed). Its end is not
// reported: the engine requeues the replica and binds it again (a new
// SLURM job).
func (b *Backend) preemptReplica(ctx context.Context, p engine.Preemption) error {
	job := p.Victim
	b.mu.Lock()
	r := b.svcs().reps[job]
	if r == nil || r.state != repRunning {
		b.mu.Unlock()
		return fmt.Errorf("%w: replica %s is not running under berth", backends.ErrRefused, job)
	}
	id := r.slurmID
	b.mu.Unlock()
	wait := time.Until(p.Deadline)
	if wait > 0 {
		if _, err := b.cli.run(ctx, "scancel", "--signal=TERM", "--full", id); err != nil {
			return refusal(err)
		}
	}
	b.mu.Lock()
	r.state = repPreempted
	b.stats.Preemptions++
	b.mu.Unlock()
	if wait <= 0 {
		return b.scancelReplica(ctx, id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if old := b.timers[job]; old != nil {
		old.Stop()
	}
	b.timers[job] = time.AfterFunc(wait, func() {
		b.mu.Lock()
		delete(b.timers, job)
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*b.cfg.CommandTimeout)
		defer cancel()
		if err := b.scancelReplica(ctx, id); err != nil {
			b.skip(job, fmt.Errorf("cancelling the preempted replica (SLURM job %s): %w", id, err))
		}
	})
	return nil
}

// replicaChanged compares a replica job's record with what the engine was
// told; SLURM jobs of no replica berth knows (orphans: a stopped replica
// whose scancel failed, a timed-out sbatch that created its job after
// all) are added to cancel. seen collects the replicas whose job is
// there. b.mu is held.
func (b *Backend) replicaChanged(evs []engine.Event, now time.Time, rid string, r *jobRec, seen map[string]bool, cancel *[]string) []engine.Event {
	id := recID(r)
	rp := b.svcs().reps[rid]
	if rp == nil || rp.slurmID != id {
		if rp != nil && rp.state == repBinding {
			return evs // its sbatch has not returned yet
		}
		if !terminal(r.State) {
			*cancel = append(*cancel, id)
		}
		return evs
	}
	seen[rid] = true
	switch {
	case rp.state == repPreempted:
		if terminal(r.State) {
			delete(b.svc.reps, rid)
		}
	case r.State == "RUNNING":
		dev := strings.Join(r.GresDetail, ";")
		// The GPUs of a SLURM job never change: they are reported once,
		// when SLURM lists them all (as many per node as berth booked).
		if rp.devices == "" && len(r.GresDetail) > 0 {
			ms, err := members(r)
			if err != nil {
				b.skip(rid, err)
				return evs
			}
			for _, m := range ms {
				if want, ok := rp.booked[m.Node]; !ok || len(m.GPUs) != len(want) {
					return evs // not all known yet
				}
			}
			rp.devices, rp.nodes = dev, nodeNames(ms)
			same := true
			for _, m := range ms {
				same = same && sameGPUs(rp.booked[m.Node], m.GPUs)
			}
			rp.booked = nil
			if same {
				// SLURM gave the GPUs berth booked: nothing to tell (and
				// no event that could cross a scale-down of the replica).
				return evs
			}
			return append(evs, engine.DevicesReported(now, rid, ms))
		}
	case terminal(r.State):
		// It ended on its own: the engine replaces it.
		delete(b.svc.reps, rid)
		if r.State == "CANCELLED" {
			return append(evs, engine.Cancelled(now, rid))
		}
		return append(evs, engine.Finished(now, rid))
	}
	return evs
}

// replicasGone reports the replicas whose jobs squeue no longer lists
// (purged before the poller saw them end); read is when the poll's squeue
// began (a job created after it is not in its output). b.mu is held.
func (b *Backend) replicasGone(evs []engine.Event, now, read time.Time, seen map[string]bool) []engine.Event {
	if b.svc == nil {
		return evs
	}
	for _, rid := range slices.Sorted(maps.Keys(b.svc.reps)) {
		rp := b.svc.reps[rid]
		if seen[rid] || rp.state == repBinding || !rp.created.Before(read) {
			continue
		}
		delete(b.svc.reps, rid)
		if rp.state == repRunning {
			evs = append(evs, engine.Finished(now, rid))
		}
	}
	return evs
}

// cancelOrphans scancels replica jobs no replica owns.
func (b *Backend) cancelOrphans(ctx context.Context, ids []string) {
	for _, id := range ids {
		if err := b.scancelReplica(ctx, id); err != nil {
			b.skip(id, fmt.Errorf("cancelling a replica job berth does not run: %w", err))
		}
	}
}

// runningReplica is Running for a replica job: a running one is reported
// for adoption (its job built from the service, when SetService declared
// it, else from the job's record); one not started is cancelled (the
// engine places its replica again) and nil comes back.
func (b *Backend) runningReplica(ctx context.Context, rid string, r *jobRec) (*backends.RunningJob, error) {
	id := recID(r)
	if r.State != "RUNNING" {
		if !terminal(r.State) {
			if err := b.scancelReplica(ctx, id); err != nil {
				return nil, fmt.Errorf("cancelling replica %s's unstarted job %s: %w", rid, id, err)
			}
		}
		return nil, nil
	}
	ms, err := members(r)
	if err != nil {
		return nil, fmt.Errorf("replica %s (job %s): %w", rid, id, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var j queue.Job
	if sp := b.svcs().specs[rid[:strings.IndexByte(rid, '/')]]; sp != nil {
		j = sp.svc.Replica
		j.Request.Groups = slices.Clone(j.Request.Groups)
		j.Queue, j.Priority, j.GracePeriod = sp.svc.Queue, sp.svc.Priority, sp.svc.GracePeriod
	} else {
		g, _, err := parseGPUGres(strings.TrimPrefix(r.TresPerNode, "gres:"))
		if err != nil {
			return nil, fmt.Errorf("replica %s (job %s): %w", rid, id, err)
		}
		_, j.Queue = replicaOf(r.Comment)
		if j.Queue == "" {
			j.Queue = b.cfg.DefaultQueue
		}
		j.Account = r.Account
		j.Request = gang.Request{Groups: []gang.Group{{Members: max(r.NodeCount, 1), GPUsPerMember: g.Count, GPUModel: g.Type}}}
	}
	j.ID, j.Submit, j.Class = rid, unix(r.SubmitTime), queue.ClassInference
	b.svc.reps[rid] = &repJob{state: repRunning, slurmID: id, nodes: nodeNames(ms), devices: strings.Join(r.GresDetail, ";")}
	return &backends.RunningJob{Job: &j, Members: ms, Start: unix(r.StartTime)}, nil
}

// ReplicaJob returns the SLURM job ID of a replica berth runs ("" for
// none) and whether the poller has seen it run with its GPUs (and told
// the engine, where they differ from berth's booking). For tools and
// tests.
func (b *Backend) ReplicaJob(replica string) (job string, running bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.svcs().reps[replica]; r != nil {
		return r.slurmID, r.state == repRunning && r.devices != ""
	}
	return "", false
}

var _ backends.ReplicaStopper = (*Backend)(nil)

func sameGPUs(a, b []int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
