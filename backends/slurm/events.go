package slurm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Next polls SLURM (squeue and sinfo every PollInterval, see read.go;
// backing off up to MaxBackoff after failures) until something changed,
// wake is reached or ctx is done. Changes become events stamped with the
// wall clock: new pending jobs of managed partitions (Submitted), the GPUs
// a started job got (DevicesReported), ends (Finished; Cancelled for
// scancel), requeues SLURM made itself (Cancelled, then Submitted again),
// and node states (NodeChanged for drain and resume, NodeFailed for down).
//
// A poll runs on a goroutine of its own, one at a time: Next may return
// (wake, ctx) while one is in flight, and its events come with a later
// call. With Config.EndLog, a job's end is confirmed by scontrol reading
// that job at once, on a goroutine of its own too, or starts the next
// poll at once (endlog.go).
func (b *Backend) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	for {
		grew, ids, known := b.readEndLog()
		pollNow := grew && !known
		if grew && known {
			b.mu.Lock()
			want, all := b.endsToConfirmLocked(ids)
			b.mu.Unlock()
			pollNow = !all
			for _, id := range want {
				b.hint(id)
			}
		}
		b.mu.Lock()
		if len(b.bindWait) > 0 {
			var still []string
			for _, sid := range b.bindWait {
				if t := b.jobs[b.berthIDLocked(sid)]; t != nil && t.binding {
					still = append(still, sid)
				} else {
					b.hint(sid)
				}
			}
			b.bindWait = still
		}
		if len(b.completing) > 0 && !time.Now().Before(b.completingAt) {
			for sid := range b.completing {
				b.hint(sid)
			}
			b.completingAt = time.Now().Add(completingRetry)
		}
		if len(b.queued) > 0 {
			evs := b.queued
			b.queued = nil
			b.mu.Unlock()
			return evs, nil
		}
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if pollNow && b.failures == 0 {
			// A job ended: poll now, or once the poll in flight is done
			// (it may have read squeue before the end).
			b.nextPoll = time.Time{}
			b.pollAgain = b.polling != nil
		}
		now := time.Now()
		if !wake.IsZero() && !now.Before(wake) {
			return []engine.Event{}, nil
		}
		if b.polling == nil && !now.Before(b.nextPoll) {
			ch := make(chan error, 1)
			b.polling = ch
			go func() { ch <- b.poll(b.life) }()
		}
		if b.confirm == nil && len(b.hints) > 0 {
			ch, sids := make(chan bool, 1), b.hints
			b.confirm, b.hints = ch, nil
			go func() { ch <- b.confirmEnds(b.life, sids) }()
		}
		var until time.Time
		if b.polling == nil {
			until = b.nextPoll
		}
		if !wake.IsZero() && (until.IsZero() || wake.Before(until)) {
			until = wake
		}
		if b.cfg.EndLog != "" {
			if at := now.Add(endLogCheck); until.IsZero() || at.Before(until) {
				until = at
			}
		}
		var tc <-chan time.Time
		var timer *time.Timer
		if !until.IsZero() {
			timer = time.NewTimer(time.Until(until))
			tc = timer.C
		}
		var (
			err    error
			polled bool
		)
		select {
		case <-ctx.Done():
		case err = <-b.polling:
			polled = true
		case again := <-b.confirm:
			b.confirm = nil
			if again && b.failures == 0 {
				// A named job was not shown ended: poll, as for a line
				// of unknown content.
				b.nextPoll = time.Time{}
				b.pollAgain = b.polling != nil
			}
		case <-tc:
		}
		if timer != nil {
			timer.Stop()
		}
		switch {
		case polled:
			b.polling = nil
			now = time.Now() // a poll of a busy controller takes a while
			if err != nil && b.life.Err() != nil {
				return nil, ErrClosed
			}
			if err != nil {
				b.failures++
				if b.failures >= b.cfg.MaxPollFailures {
					return nil, fmt.Errorf("slurm: %d polls failed in a row: %w", b.failures, err)
				}
				back := b.cfg.PollInterval << min(b.failures, 16)
				b.nextPoll = now.Add(min(back, b.cfg.MaxBackoff))
				b.skip("", fmt.Errorf("poll failed (retrying): %w", err))
			} else {
				b.failures = 0
				b.nextPoll = now.Add(b.cfg.PollInterval)
				if b.pollAgain {
					b.nextPoll, b.pollAgain = time.Time{}, false
				}
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
	}
}

// terminal job states of SLURM.
func terminal(st string) bool {
	switch st {
	case "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED":
		return false
	}
	return true
}

// poll reads SLURM once and queues the events of what changed.
func (b *Backend) poll(ctx context.Context) error {
	start := time.Now()
	// Jobs and nodes are read at once (two processes, one wait); nodes at
	// most every PollInterval (the polls a job's end starts read jobs only).
	b.mu.Lock()
	readNodes := start.Sub(b.nodesRead) >= b.cfg.PollInterval
	b.mu.Unlock()
	var nout []byte
	var nerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if readNodes {
			nout, nerr = b.cli.run(ctx, "sinfo", "--json")
		}
	}()
	recs, err := b.readJobs(ctx)
	<-done
	if err != nil {
		return err
	}
	if nerr != nil {
		return nerr
	}
	var nodes []nodeRec
	if readNodes {
		if nodes, err = parseSinfo(nout); err != nil {
			return err
		}
		b.mu.Lock()
		b.nodesRead = start
		b.setRunNodesLocked(nodes)
		b.mu.Unlock()
	}
	if b.nodeWentDown(nodes) {
		// Read the jobs again, after the nodes: a job of a node that went
		// down after the first read either ended before (COMPLETED) or was
		// requeued by SLURM (PENDING); read before, it shows RUNNING, and
		// taken for a job the node's loss stopped, one that had completed
		// would be requeued in the engine and then reported cancelled.
		if recs, err = b.readJobs(ctx); err != nil {
			return err
		}
	}
	now := time.Now()
	var evs []engine.Event
	var moves []move       // jobs to hand back to their managed partition
	var misplaced []string // jobs SLURM started off their bind's nodes
	var ghosts []string    // jobs SLURM started that berth did not bind

	b.mu.Lock()
	b.stats.Polls++
	b.stats.PollTime += now.Sub(start)

	// Nodes first: a node that went down requeues its gangs in the engine.
	// A gang of it that SLURM shows ended (it completed before the node
	// went down, or SLURM failed it) is reported ended first: the engine
	// would requeue it, and a pending job cannot finish.
	var byID map[string]*jobRec
	seen := map[string]bool{}
	lost := map[string]bool{} // jobs of a node that went down: the engine requeues them, SLURM too
	for _, n := range nodes {
		if !b.inSpec[n.Name] || seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		st := b.nodeStateAt(n, now)
		old := b.nodes[n.Name]
		if st == old {
			continue
		}
		b.nodes[n.Name] = st
		if st == topo.Down {
			if byID == nil {
				byID = b.recsByIDLocked(recs)
			}
			for id, t := range b.jobs {
				if t.state != inRunning || t.preempted || !slices.Contains(t.running, n.Name) {
					continue
				}
				if r := byID[id]; r != nil && terminal(r.State) && !t.actedAt.After(start) {
					_, managed := b.cfg.Partitions[r.Partition]
					evs = b.jobChanged(evs, now, id, taskIndex(r), r, managed, &moves)
					continue
				}
				t.state, t.bound = inPending, false // the engine requeues it whole
				lost[id] = true
			}
			evs = append(evs, engine.NodeFailed(now, n.Name))
		} else {
			evs = append(evs, engine.NodeChanged(now, n.Name, st, features(n.Features)))
		}
	}

	present := map[string]bool{}
	reps, orphans := map[string]bool{}, []string(nil)
	for i := range recs {
		r := &recs[i]
		if rid, ok := b.replicaRec(r); ok {
			evs = b.replicaChanged(evs, now, rid, r, reps, &orphans)
			continue
		}
		_, managed := b.cfg.Partitions[r.Partition]
		if !managed && r.Partition != b.cfg.RunPartition {
			continue // left to SLURM
		}
		ids, idx, err := b.recJobs(r)
		if err != nil {
			b.mu.Unlock()
			return err
		}
		for k, id := range ids {
			present[id] = true
			t := b.jobs[id]
			if t != nil && t.actedAt.After(start) {
				// Bound since squeue was read (a victim the engine
				// requeued and bound again while this poll ran): the
				// record is of the run before; the next poll reads it.
				continue
			}
			if t != nil && t.state == inPending && !managed && r.State == "RUNNING" && !t.binding && !t.doubt && !lost[id] {
				// Started by SLURM itself, on no bind of berth's (a
				// requeue SLURM made, left in RunPartition past its
				// BeginTime): the engine has it pending. Stopped and
				// handed back (ghosts below); it runs when berth binds it.
				b.skip(id, fmt.Errorf("started by SLURM on %s without a bind of berth's: requeued and handed back", r.Nodes))
				ghosts = append(ghosts, id)
				// The requeue counts one restart: a bind made before a
				// poll reads it again must not take it for a requeue of
				// the bound run (handBack).
				t.restarts = r.RestartCnt + 1
				continue
			}
			evs = b.jobChanged(evs, now, id, idx[k], r, managed, &moves)
			if t := b.jobs[id]; t != nil && t.misplaced {
				t.misplaced = false
				misplaced = append(misplaced, id)
			}
		}
	}
	// Jobs purged from slurmctld (MinJobAge) without being seen to end.
	for id, t := range b.jobs {
		if present[id] || t.state == inEnded || t.sbatched.After(start) {
			continue // (or launched after squeue was read)
		}
		switch t.state {
		case inRunning:
			evs = append(evs, engine.Finished(now, id))
		case inPending:
			evs = append(evs, engine.Cancelled(now, id))
		}
		t.state = inEnded
	}
	evs = b.replicasGone(evs, now, start, reps)
	b.mu.Unlock()
	b.cancelOrphans(ctx, orphans)
	b.requeueMisplaced(ctx, misplaced)
	kept := b.handBackAll(ctx, start, moves, ghosts)
	b.applyRejects(ctx)
	// The events go out once the jobs are back in their partitions: Next
	// returns queued events while a poll runs, and a job handed back
	// (Cancelled, Submitted) that the engine bound again before its move
	// back would have that bind undone by the move.
	b.mu.Lock()
	for _, ev := range evs {
		if kept[ev.JobID] && ev.Kind == engine.EventJobCancelled || ev.Job != nil && kept[ev.Job.ID] && ev.Kind == engine.EventJobSubmitted {
			continue // not handed back: it runs where berth bound it (handBackAll)
		}
		if ev.Kind == engine.EventDevicesReported {
			if t := b.jobs[ev.JobID]; t != nil && t.state == inEnded {
				continue // a confirmation (endlog.go) reported its end meanwhile
			}
		}
		b.queued = append(b.queued, ev)
	}
	b.mu.Unlock()
	return nil
}

// jobChanged compares one job record with what the engine was told.
// b.mu is held.
func (b *Backend) jobChanged(evs []engine.Event, now time.Time, id string, idx int, r *jobRec, managed bool, moves *[]move) []engine.Event {
	t := b.jobs[id]
	if t == nil {
		if b.skipped[id] || r.State != "PENDING" {
			return evs // ended before berth saw it, or started by someone else
		}
		if !managed {
			// In RunPartition but not berth's (a restart lost it): back.
			*moves = append(*moves, move{id: id, part: fromPartition(r.AdminComment, b.cfg)})
			return evs
		}
		if r.StateReason == "JobHeldUser" || r.StateReason == "JobHeldAdmin" {
			return evs // placed once released
		}
		if !r.detail {
			return evs // its fields are read by the next poll
		}
		j, err := b.toJob(id, r, r.Partition, idx)
		if err == nil {
			err = b.checkLevels(j.Request.Required, j.Request.Preferred)
		}
		if err != nil {
			b.rejectLocked(id, err) // held, with the reason
			return evs
		}
		b.jobs[id] = &tracked{state: inPending, partition: r.Partition, nodes: max(r.NodeCount, 1), restarts: r.RestartCnt, reqNodes: r.ReqNodes != ""}
		return append(evs, engine.Submitted(now, j))
	}
	switch t.state {
	case inEnded:
		return evs
	case inPending:
		if t.binding {
			// Its bind is in flight (the Runner binds while Next polls):
			// moved, perhaps, but not answered; the next poll decides.
			return evs
		}
		t.restarts = r.RestartCnt // a requeue from now on counts from here
		if managed {
			t.reqNodes = r.ReqNodes != ""
		}
		if t.doubt && !managed && r.State != "PENDING" {
			// Started (or already ended) in RunPartition by a bind whose
			// answer was lost: that bind came through, and the Runner
			// adopts the job (RunningNow) or keeps it booked until its
			// end. From here it runs as a bound job: its GPU indices and
			// its end are reported, and a start off the bind's nodes is
			// requeued (below).
			t.state, t.bound, t.running, t.devices = inRunning, true, t.doubtOn, ""
			t.preempted, t.actedAt = false, now
			break
		}
		switch {
		case terminal(r.State) && t.preempted:
			// Handed back by a preemption's stop, not yet seen pending:
			// requeuehold leaves COMPLETED / CANCELLED briefly.
			return evs
		case terminal(r.State):
			t.state = inEnded
			return append(evs, engine.Cancelled(now, id))
		case r.State == "PENDING" && !managed && !t.bound && !t.doubt:
			// Requeued by SLURM or by a preemption: hand it back. (One
			// moved by a bind in doubt waits: it starts, or the Runner
			// stops the bind, UnbindMember.)
			t.preempted = false
			*moves = append(*moves, move{id: id, part: t.partition})
		case r.State == "PENDING" && managed:
			t.preempted, t.doubt = false, false
		}
		return evs
	}
	// Running in the engine.
	switch {
	case r.State == "RUNNING" && t.bound && !b.onBoundNodes(t, r):
		// Started off the nodes of its bind (a bind by ExcNodeList, and a
		// node the exclusion did not name because sinfo had not shown it
		// yet in the run partition): requeued (poll's end), then handed
		// back and placed again, as a requeue by SLURM is.
		t.misplaced = true
		b.skip(id, fmt.Errorf("started on %s, bound to %v: requeued", r.Nodes, t.running))
		return evs
	case r.State == "RUNNING":
		t.bound = false
		dev := strings.Join(r.GresDetail, ";")
		if dev != t.devices && len(r.GresDetail) > 0 {
			ms, err := members(r)
			if err != nil {
				b.skip(id, err)
				return evs
			}
			if len(ms) != t.nodes || slices.ContainsFunc(ms, func(m engine.Member) bool { return len(m.GPUs) == 0 }) {
				// Not every node listed, or a node's GPUs already released
				// (the job is ending): read again.
				return evs
			}
			t.devices, t.running = dev, nodeNames(ms)
			t.restarts = r.RestartCnt
			return append(evs, engine.DevicesReported(now, id, ms))
		}
	case t.preempted:
		// berth stopped it; the engine requeues it at the deadline.
		if terminal(r.State) && r.State != "CANCELLED" {
			return evs // requeuehold leaves COMPLETED / CANCELLED briefly
		}
		if r.State == "PENDING" {
			t.state, t.restarts = inPending, r.RestartCnt
			if !managed {
				*moves = append(*moves, move{id: id, part: t.partition})
			}
		}
	case r.State == "PENDING" && b.handBack(t, r) && !r.detail:
		// Pending again: handed back once its fields are read (next poll).
	case r.State == "PENDING" && b.handBack(t, r):
		// SLURM requeued it (a node failure no poll saw: a node set DOWN
		// that ReturnToService brought back at once, or drained after;
		// an admin's scontrol requeue): its run was stopped, and the job
		// is pending again. It did not finish: Cancelled, then Submitted,
		// as the Runner's reconciliation requeues a job (a Finished would
		// count a completion that did not happen). A job bound and not yet
		// seen running is pending too, until it starts: its restart count
		// tells a requeue from that (a node that went down before a poll
		// saw the job run). A bound job that SLURM will not start, since a
		// node it was bound to went down or was drained before it started
		// (a bind that raced the node's change, a drain no poll saw in
		// time), is handed back the same way, to be placed again where it
		// can run: it would wait in the run partition for ever.
		t.state, t.devices, t.restarts = inPending, "", r.RestartCnt
		j, err := b.toJob(id, r, t.partition, idx)
		evs = append(evs, engine.Cancelled(now, id))
		if err != nil {
			t.state = inEnded
			b.skipped[id] = true
			b.skip(id, err)
			return evs
		}
		*moves = append(*moves, move{id: id, part: t.partition, ran: true})
		return append(evs, engine.Submitted(now, j))
	case terminal(r.State):
		t.state = inEnded
		if r.State == "CANCELLED" {
			return append(evs, engine.Cancelled(now, id))
		}
		return append(evs, engine.Finished(now, id))
	}
	return evs
}

// handBackAll makes a poll's moves back to the managed partitions, and
// stops the ghosts it found (requeue held, then moved back), under smu:
// no bind runs meanwhile. A job bound since the poll read squeue is left
// alone: the engine requeued it (a preemption's PreemptApplied comes
// from the Runner's call, not from a poll's events) and bound it again,
// and a move back would undo that bind (the job pending in its managed
// partition, the engine running it) or fail on the job SLURM started
// for it ("no longer pending"). So is a job no longer pending in the
// backend's record (ended meanwhile).
//
// A job berth ran that the poll found pending again and handed back
// (jobChanged: bound to a node that went down, or requeued) may have been
// started by SLURM before the move, where berth bound it (the node came
// back): the move is refused ("no longer pending"). The job was not handed
// back: its record is running again, and it is returned in kept, so that
// the poll's Cancelled and Submitted for it are not sent (the engine runs
// it there; a Cancelled sent for it made the engine forget a job that ran
// and ended, found by the fault suite's node-loss-mid-gang scenario).
func (b *Backend) handBackAll(ctx context.Context, start time.Time, moves []move, ghosts []string) (kept map[string]bool) {
	if len(moves)+len(ghosts) == 0 {
		return nil
	}
	b.smu.Lock()
	defer b.smu.Unlock()
	still := func(id string) (string, bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		t := b.jobs[id]
		if t == nil {
			return "", true // not berth's (a restart lost it)
		}
		return t.partition, t.state == inPending && !t.actedAt.After(start)
	}
	for _, id := range ghosts {
		part, ok := still(id)
		if !ok {
			continue
		}
		if _, err := b.cli.run(ctx, "scontrol", "requeuehold", b.slurmID(id)); err != nil && !strings.Contains(err.Error(), "pending") {
			// (pending: SLURM requeued it meanwhile; moved back below)
			b.skip(id, fmt.Errorf("stopping a job SLURM started without a bind of berth's: %w", err))
			continue
		}
		moves = append(moves, move{id: id, part: part})
	}
	for _, mv := range moves {
		if _, ok := still(mv.id); !ok {
			continue
		}
		if err := b.moveBack(ctx, mv.id, mv.part); err != nil {
			if mv.ran && started(err) && b.keepRunning(mv.id) {
				if kept == nil {
					kept = map[string]bool{}
				}
				kept[mv.id] = true
				continue
			}
			b.skip(mv.id, fmt.Errorf("handing a requeued job back to partition %s: %w", mv.part, err))
		}
	}
	return kept
}

// move is a job a poll hands back to its managed partition part; ran:
// the engine ran it (a poll found it pending again, jobChanged).
type move struct {
	id, part string
	ran      bool
}

// started reports whether SLURM refused a move back since the job is no
// longer pending (it started, or ended).
func started(err error) bool {
	return strings.Contains(err.Error(), "no longer pending") || strings.Contains(err.Error(), "already finished")
}

// keepRunning makes a job the engine ran that this poll was handing back
// (see handBackAll) running again, bound where it was; it reports whether
// the record was still pending.
func (b *Backend) keepRunning(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.jobs[id]
	if t == nil || t.state != inPending {
		return false
	}
	t.state, t.bound = inRunning, true
	return true
}

// handBack reports whether a job berth runs whose record shows it
// PENDING is to be handed back (see jobChanged).
func (b *Backend) handBack(t *tracked, r *jobRec) bool {
	return !t.bound || r.RestartCnt > t.restarts || r.StateReason == "NodeDown" ||
		strings.HasPrefix(r.StateReason, "ReqNodeNotAvail") && b.anyUnavailable(t.running)
}

// anyUnavailable reports whether a node of nodes is down or draining as
// sinfo last showed it: SLURM also says ReqNodeNotAvail, for a moment, of
// a job bound to a node whose last job is still completing; such a job
// starts once the node is free and must not be handed back. b.mu is held.
func (b *Backend) anyUnavailable(nodes []string) bool {
	for _, n := range nodes {
		if st, ok := b.nodes[n]; ok && st != topo.Ready {
			return true
		}
	}
	return false
}

// nodeWentDown reports whether nodes shows a node of the cluster down that
// the engine was not told is down.
func (b *Backend) nodeWentDown(nodes []nodeRec) bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range nodes {
		if b.inSpec[n.Name] && b.nodes[n.Name] != topo.Down && b.nodeStateAt(n, now) == topo.Down {
			return true
		}
	}
	return false
}

// recsByIDLocked maps berth's job IDs to the records of started jobs
// (replicas and pending array records left out). b.mu is held.
func (b *Backend) recsByIDLocked(recs []jobRec) map[string]*jobRec {
	m := make(map[string]*jobRec, len(recs))
	for i := range recs {
		r := &recs[i]
		if arrayMeta(r) {
			continue
		}
		if _, ok := b.replicaRec(r); ok {
			continue
		}
		m[b.berthIDLocked(recID(r))] = r
	}
	return m
}

// hint adds a SLURM job ID to the ends to confirm (Next's goroutine only).
func (b *Backend) hint(sid string) {
	if !slices.Contains(b.hints, sid) {
		b.hints = append(b.hints, sid)
	}
}
